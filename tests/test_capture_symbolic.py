"""Ops traced so that their sizes stay symbolic while a capture compiles (evolve/seeding/symbolic.py).

``torch.max_pool1d``'s shape function turned the sequence length into a
constant as Dynamo traced it: 41_Max_Pooling_1D's seed, captured at one
length, computed that length's output at a held-out length and read past its
input (out of bounds under the CPU interpreter's checks). In a capture the op
is now a 2-D max pooling over a height of 1, which keeps the length symbolic.
``nn.InstanceNorm``'s channel check (a warning only, without affine weights)
fixed 34_InstanceNorm's channels the same way, and its seed read past its input
on an H200 at held-out channels (an illegal memory access).
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

from tests.conftest import ROOT, problem_path

from evolve.seeding.symbolic import attributes_replaced, symbolic_sizes

POOLS = [  # (input shape, kernel_size, stride, padding, dilation, ceil_mode)
    ((2, 3, 64), 8, 1, 4, 3, False),
    ((2, 3, 47), 8, None, 4, 3, False),
    ((3, 50), 4, 2, 1, 1, True),
    ((1, 2, 33), (5,), (2,), (2,), (2,), True),
    ((2, 3, 16), 3, (), 0, 1, False),
]


@pytest.mark.parametrize("shape, k, s, p, d, ceil", POOLS)
def test_the_stand_in_computes_what_max_pool1d_computes(shape, k, s, p, d, ceil):
    x = torch.randn(*shape)
    stride = () if s is None else s
    expected = torch.max_pool1d(x, k, stride, p, d, ceil)
    with symbolic_sizes():
        assert torch.max_pool1d is not torch.max_pool1d.kevo_original
        got = torch.max_pool1d(x, k, stride, p, d, ceil)
        via_module = torch.nn.MaxPool1d(k, s, p, d, ceil_mode=ceil)(x)  # F.max_pool1d calls torch.max_pool1d
    assert torch.equal(got, expected) and torch.equal(via_module, expected)
    assert not hasattr(torch.max_pool1d, "kevo_original")  # put back


CAPTURE = """
import os, sys
os.environ["TRITON_INTERPRET"] = "1"
sys.path.insert(0, {root!r})
from evolve.seeding.inductor import capture
from operators.seeds.convert import seed_source
from fitness import Evaluator
path = {path!r}
shapes = {shapes!r}
entry = capture(path, device="cpu", shapes=shapes, time_it=False)
source = seed_source(entry, open(path).read())
print("static_dims", entry["static_dims"])
print("length_baked", {baked!r} in source.split("def _inductor_call")[1])
with Evaluator(path, platform="cpu", shapes=shapes) as evaluator:
    result = evaluator.evaluate(source)
print("verdict", result.status.value, result.reason[:300])
"""


@pytest.mark.parametrize("affine", [False, True])
@pytest.mark.parametrize("layer, shape", [(torch.nn.InstanceNorm2d, (2, 5, 7, 6)),
                                          (torch.nn.InstanceNorm2d, (5, 7, 6)),  # no batch dimension
                                          (torch.nn.InstanceNorm1d, (3, 5, 11))])
def test_the_instance_norm_stand_in_computes_what_the_module_computes(layer, shape, affine):
    torch.manual_seed(0)
    x = torch.randn(*shape)
    norm = layer(5, affine=affine)
    if affine:
        torch.nn.init.normal_(norm.weight)
        torch.nn.init.normal_(norm.bias)
    original = torch.nn.modules.instancenorm._InstanceNorm.forward
    expected = norm(x)
    with symbolic_sizes():
        assert torch.nn.modules.instancenorm._InstanceNorm.forward.kevo_original is original
        got = norm(x)
        if affine:  # the check stays where the weights fix the channels
            with pytest.raises(ValueError, match="num_features"):
                norm(torch.randn(2, 4, 7, 6) if layer is torch.nn.InstanceNorm2d else torch.randn(2, 4, 9))
    assert torch.equal(got, expected)
    assert torch.nn.modules.instancenorm._InstanceNorm.forward is original  # put back


def test_a_max_pooling_seed_holds_at_a_held_out_length():
    """Captured live on the CPU (Inductor's Triton backend, its kernels interpreted), judged at its
    shapes and at held-out ones that change the sequence length."""
    _judged_at_held_out_shapes("41_Max_Pooling_1D", dict(batch_size=2, features=3, sequence_length=64,
                                                          kernel_size=8), "51")


def test_an_instance_norm_seed_holds_at_held_out_channels():
    """34_InstanceNorm (no affine weights): its channel count stays symbolic, so the seed holds where
    the held-out shapes change it."""
    _judged_at_held_out_shapes("34_InstanceNorm", dict(batch_size=2, features=9, dim1=12, dim2=10), "9 *")


def _judged_at_held_out_shapes(name, shapes, baked):
    path = problem_path(f"kernelbench/level1/{name}")
    code = CAPTURE.format(root=str(ROOT), path=str(path), shapes=shapes, baked=baked)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600,
                         env={**os.environ, "TRITON_INTERPRET": "1"})
    lines = dict(line.split(" ", 1) for line in out.stdout.splitlines() if " " in line)
    assert lines.get("static_dims") == "False", out.stdout + out.stderr[-3000:]
    assert lines.get("length_baked") == "False"
    assert lines.get("verdict", "").startswith("accepted"), out.stdout + out.stderr[-3000:]


def test_the_replaced_attributes_come_back_when_the_block_raises():
    original = torch.max_pool1d
    with pytest.raises(RuntimeError, match="inside"):
        with symbolic_sizes():
            assert torch.max_pool1d is not original and torch.max_pool1d.kevo_original is original
            raise RuntimeError("inside")
    assert torch.max_pool1d is original

    class Owner:
        a, b = 1, 2

    with attributes_replaced([(Owner, "a", 10), (Owner, "b", 20)]):
        assert (Owner.a, Owner.b) == (10, 20)
    assert (Owner.a, Owner.b) == (1, 2)
