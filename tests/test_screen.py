"""The static screen: what a candidate may not even contain. Every rule also
has a runtime counterpart (trace, guard, tamper check) tested in test_attacks."""

from __future__ import annotations

import pytest

from tests.conftest import PROBLEMS

from fitness.boundary.screen import screen

KERNEL = """
import torch
import triton
import triton.language as tl

@triton.jit
def copy(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)

class ModelNew(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self._calls = 0

    def forward(self, x):
        out = torch.empty_like(x)
        self._calls += 1
        copy[(triton.cdiv(x.numel(), 128),)](x, out, x.numel(), BLOCK=128)
        {extra}
        return out
"""


def with_line(line: str) -> str:
    return KERNEL.replace("{extra}", line)


def test_honest_kernels_pass():
    assert screen(with_line("pass")).ok
    for seed in PROBLEMS.glob("*/seed.py"):
        assert screen(seed.read_text()).ok, seed


@pytest.mark.parametrize("line, words", [
    ("import os", "imports os"),
    ("import typing", "import typing"),
    ("from typing import get_type_hints", "typing.get_type_hints"),
    ("torch.os.environ", "environ"),
    ("torch.ctypes", "attribute ctypes"),
    ("torch.threading", "attribute threading"),
    ("eval('1')", "uses eval"),
    ("type(x)", "uses type"),
    ("x.tolist()", "tolist"),
    ("torch._C", "private attribute _C"),
    ("self._C", "private attribute _C"),
    ("x.__class__", "attribute __class__"),
    ("torch.cuda.Event.elapsed_time = None", "does not own"),
    ("self = torch", "rebinds self"),
    ("ModelNew.forward(torch, x)", "methods are called on the instance"),
    ("torch.save(x, 'f')", "save"),
    ("torch.load('f')", "only tl.load"),
    ("torch.cuda.CUDAGraph()", "CUDAGraph"),
    # of triton.language.core's private functions only _unwrap_if_constexpr, and only there
    ("tl.core._semantic", "private attribute _semantic"),
    ("torch.core._unwrap_if_constexpr(x)", "private attribute _unwrap_if_constexpr"),
    ("tl._unwrap_if_constexpr(x)", "private attribute _unwrap_if_constexpr"),
])
def test_rule(line, words):
    verdict = screen(with_line(line))
    assert not verdict.ok and verdict.status == "forbidden"
    assert words in verdict.reason, verdict.reason


def test_self_outside_a_method_is_an_ordinary_name():
    source = with_line("pass") + "\ndef helper(self):\n    return self._C\n"
    assert "private attribute _C" in screen(source).reason
    source = with_line("pass") + "\ndef patch(self):\n    self.elapsed_time = 0\n"
    assert "does not own" in screen(source).reason


def test_structure_is_required():
    assert screen("def (:").status == "compile_error"
    assert "ModelNew" in screen("import torch\n").reason
    no_launch = KERNEL.replace("copy[(triton.cdiv(x.numel(), 128),)](x, out, x.numel(), BLOCK=128)", "pass")
    assert "never launches" in screen(no_launch.replace("{extra}", "pass")).reason


def test_a_tensor_descriptor_may_load_inside_a_jit_function_nothing_else_may():
    kernel = """
import torch
import triton
import triton.language as tl


@triton.jit
def k(x_ptr, n, B: tl.constexpr):
    d = tl.make_tensor_descriptor(x_ptr, [n], [1], [B])
    v = d.load([0])
    d.store([0], v)
    {extra}


class ModelNew(torch.nn.Module):
    def forward(self, x):
        k[(1,)](x, x.numel(), B=16)
        return x
"""
    assert screen(kernel.format(extra="")).ok
    rebound = screen(kernel.format(extra="d = x_ptr\n    d.load([0])"))
    assert not rebound.ok and "load" in rebound.reason  # bound to something else too: not a descriptor
    other = screen(kernel.format(extra="x_ptr.load([0])"))
    assert not other.ok and "load" in other.reason
    # a parameter rebound to a descriptor was something else first (a module passed in, say)
    parameter = screen(kernel.replace("d = tl.make_tensor_descriptor(x_ptr", "n = tl.make_tensor_descriptor(x_ptr")
                       .replace("v = d.load([0])\n    d.store([0], v)", "v = n.load([0])").format(extra=""))
    assert not parameter.ok and "load" in parameter.reason
    looped = screen(kernel.format(extra="for d in (x_ptr,):\n        d.load([0])"))
    assert not looped.ok and "load" in looped.reason


def test_the_one_private_function_of_tritons_language_core_a_kernel_may_call():
    """Inductor's split-scan helpers (copied into seeds) unwrap their dtype arguments with it."""
    assert screen(with_line("y = tl.core._unwrap_if_constexpr(x)")).ok
    assert screen(with_line("y = triton.language.core._unwrap_if_constexpr(x)")).ok
