"""Held-out shapes: drawn in secret, one of each group checked per evaluation.

Derived held-out shapes used to follow a fixed formula (dim 100 -> 73 and
127), so a kernel could hard-code the bred shape and those two and pass. They
are now drawn from ranges by a secret generator; the kernel below, written
against the old formula, is caught.
"""

from __future__ import annotations

import random

from tests.conftest import PROBLEMS

from fitness import Evaluator, Status
from fitness.problems.problem import held_out_shapes

REFERENCE = PROBLEMS / "elementwise" / "reference.py"
SHAPES = {"batch_size": 4, "dim": 100}

# Right at 4 x 100 and at the shapes the old formula derived from it (4 x 73,
# 4 x 127); at any other size it covers half the elements.
KNOWS_THE_FORMULA = """
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def gate_kernel(x_ptr, y_ptr, out_ptr, bound, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < bound
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    y = tl.load(y_ptr + offs, mask=mask, other=0.0)
    tl.store(out_ptr + offs, x * tl.sigmoid(y), mask=mask)


class ModelNew(nn.Module):
    def forward(self, x, y):
        out = torch.empty_like(x)
        n = x.numel()
        bound = n if n in (400, 292, 508) else n // 2
        gate_kernel[(triton.cdiv(n, 128),)](x, y, out, bound, BLOCK=128)
        return out
"""


def test_a_kernel_that_knows_a_fixed_derivation_is_caught():
    rng = random.Random(1)
    with Evaluator(REFERENCE, platform="cpu", shapes=SHAPES, held_out_rng=rng) as evaluator:
        drawn = [variant.shapes["dim"] for group in evaluator.prepared.held_out_groups for variant in group]
        assert drawn and not {73, 127} & set(drawn)  # this draw avoids the old formula's sizes
        result = evaluator.evaluate(KNOWS_THE_FORMULA)
        assert result.status in (Status.NAN, Status.WRONG), result.reason
        assert "held-out shapes" in result.reason


def test_each_evaluation_checks_one_shape_of_every_group():
    rng = random.Random(3)
    with Evaluator(REFERENCE, platform="cpu", shapes=SHAPES, held_out_rng=rng) as evaluator:
        groups = evaluator.prepared.held_out_groups
        assert len(groups) == 2 and all(len(group) >= 2 for group in groups)
        seen = set()
        source = (PROBLEMS / "elementwise" / "seed.py").read_text()
        for _ in range(3):
            assert evaluator.evaluate(source).status is Status.ACCEPTED
            assert [v in group for v, group in zip(evaluator.held_out, groups)] == [True, True]
            seen.add(tuple(v.shapes["dim"] for v in evaluator.held_out))
        assert len(seen) > 1  # the choice changes from one evaluation to the next


def test_the_secret_draw_differs_between_evaluators():
    a = held_out_shapes(REFERENCE, SHAPES, rng=random.SystemRandom())
    b = held_out_shapes(REFERENCE, SHAPES, rng=random.SystemRandom())
    c = held_out_shapes(REFERENCE, SHAPES, rng=random.SystemRandom())
    assert len({repr(a), repr(b), repr(c)}) > 1


NO_MASK = """
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def gate_kernel(x_ptr, y_ptr, out_ptr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs) * tl.sigmoid(tl.load(y_ptr + offs)))  # no mask


class ModelNew(nn.Module):
    def forward(self, x, y):
        out = torch.empty_like(x)
        gate_kernel[(triton.cdiv(x.numel(), 128),)](x, y, out, BLOCK=128)
        return out
"""


def test_a_kernel_that_fails_only_at_a_held_out_shape_says_which_and_how_large():
    # right at 4 x 128 (whole blocks); at an odd held-out size its last block reads past the tensor
    with Evaluator(REFERENCE, platform="cpu", shapes={"batch_size": 4, "dim": 128},
                   held_out_rng=random.Random(2)) as evaluator:
        result = evaluator.evaluate(NO_MASK)
        shown = evaluator.held_out[0]
    assert result.status is Status.OUT_OF_BOUNDS, result.reason
    shapes = ", ".join(f"{k}={v}" for k, v in shown.shapes.items())
    elements = shown.shapes["batch_size"] * shown.shapes["dim"]
    assert result.reason.startswith(f"at held-out shapes {shapes} (its largest tensor {elements:,} elements): ")


POOLING = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, kernel_size, norm_shape):
        super().__init__()
        self.pool = nn.MaxPool1d(kernel_size)
        self.norm = nn.LayerNorm(norm_shape)

    def forward(self, x):
        return self.norm(self.pool(x))


batch_size = 16
features = 12
length = 640
kernel_size = 8
pooled = length // kernel_size
norm_shape = (features, pooled)


def get_inputs():
    return [torch.rand(batch_size, features, length)]


def get_init_inputs():
    return [kernel_size, norm_shape]
"""


def test_derived_variants_keep_the_models_own_settings(tmp_path):
    # A pooling window is the model's, not its data's (only get_init_inputs reads it): a kernel
    # may specialise to it, as torch.compile does. So are the sizes its weights have: the
    # LayerNorm's weight is features x pooled, and an input of other sizes cannot meet it.
    problem = tmp_path / "pool_norm.py"
    problem.write_text(POOLING)
    variants = [variant for group in held_out_shapes(problem, rng=random.Random(5)) for variant in group]
    assert variants and all(set(variant) == {"batch_size"} for variant in variants)
    # A norm without weights: the normalised shape follows the input's sizes alone, which vary,
    # so a kernel that hard-codes them is caught.
    plain = POOLING.replace("nn.LayerNorm(norm_shape)", "nn.LayerNorm(norm_shape, elementwise_affine=False)")
    problem.write_text(plain)
    variants = [variant for group in held_out_shapes(problem, rng=random.Random(5)) for variant in group]
    assert variants and all(set(variant) == {"batch_size", "features", "length"} for variant in variants)
    assert all(variant["length"] != 640 for variant in variants)
    # what get_inputs reads through a helper of the module counts as read by it
    problem.write_text(plain.replace("    return [torch.rand(batch_size, features, length)]",
                                     "    return draw()\n\n\ndef draw():\n"
                                     "    return [torch.rand(batch_size, features, length * kernel_size)]"))
    variants = [variant for group in held_out_shapes(problem, rng=random.Random(5)) for variant in group]
    assert all(set(variant) == {"batch_size", "features", "length", "kernel_size"} for variant in variants)
    # without a get_init_inputs that reads them, the same knobs are data sizes and vary
    problem.write_text(plain.replace("return [kernel_size, norm_shape]", "return [8, (12, 80)]"))
    variants = [variant for group in held_out_shapes(problem, rng=random.Random(5)) for variant in group]
    assert all(set(variant) == {"batch_size", "features", "length", "kernel_size"} for variant in variants)


def test_a_model_that_cannot_be_built_on_meta_pins_nothing(tmp_path):
    # the weights' sizes are read from the model built on the meta device; a model that cannot be
    # built there (it computes with its weights in __init__) keeps every data size varying
    problem = tmp_path / "pool_norm.py"
    problem.write_text(POOLING.replace("        self.norm = nn.LayerNorm(norm_shape)",
                                       "        self.norm = nn.LayerNorm(norm_shape)\n"
                                       "        assert float(self.norm.weight.sum()) > 0"))
    variants = [variant for group in held_out_shapes(problem, rng=random.Random(5)) for variant in group]
    assert variants and all(set(variant) == {"batch_size", "features", "length"} for variant in variants)


def test_a_problem_with_nothing_to_vary_says_so(tmp_path):
    # every size of 8 or more is fixed by the weights, the batch is small: no held-out shape, and a note
    problem = tmp_path / "pool_norm.py"
    problem.write_text(POOLING.replace("batch_size = 16", "batch_size = 4").replace("length = 640", "length = 64"))
    with Evaluator(problem, platform="cpu") as evaluator:
        assert evaluator.held_out == []
        assert any(note.startswith("no held-out shapes") for note in evaluator.prepared.notes)
    with Evaluator(problem, platform="cpu", held_out=[]) as evaluator:  # turned off: nothing to say
        assert not any(note.startswith("no held-out shapes") for note in evaluator.prepared.notes)


# A region kevo extract wrote from 11_VGG16 on the H200 (conv -> relu -> max_pool): the channel count
# dim1 shapes both the input and the weight. Held-out shapes that varied it made every compile seed
# 'wrong' (Inductor's convolution template holds the weight's sizes as constants).
VGG_REGION = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, dim1, dim3):
        super().__init__()
        self.p0 = nn.Parameter(torch.empty((dim1, dim1, dim3, dim3)).uniform_(-0.04, 0.04))
        self.p1 = nn.Parameter(torch.empty((dim1,)).uniform_(-0.04, 0.03))

    def forward(self, x0):
        t0 = torch.conv2d(x0, self.p0, self.p1, (1, 1), (1, 1), (1, 1), 1)
        return torch.nn.functional.max_pool2d(torch.relu(t0), 2, 2, 0, 1)


batch_size = 10
dim1 = 64
dim2 = 224
dim3 = 3


def get_inputs():
    return [torch.randn(batch_size, dim1, dim2, dim2)]


def get_init_inputs():
    return [dim1, dim3]
"""


def test_an_extracted_convolution_keeps_its_channels_and_varies_batch_and_image(tmp_path):
    problem = tmp_path / "00_conv2d_relu_max_pool2d.py"
    problem.write_text(VGG_REGION)
    variants = [variant for group in held_out_shapes(problem, rng=random.Random(3)) for variant in group]
    assert variants and all(set(variant) == {"batch_size", "dim2"} for variant in variants)
