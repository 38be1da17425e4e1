"""NaN-safe comparison and the check that refuses a cutoff trivial outputs pass."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from fitness.judge.compare import CutoffError, check_cutoff, compare


def test_within_and_beyond_cutoff():
    ref = torch.tensor([1.0, 2.0, 3.0])
    assert compare([ref + 1e-4], [ref], 1e-3).status == "accepted"
    result = compare([ref + 1e-2], [ref], 1e-3)
    assert result.status == "wrong" and result.max_abs_diff == pytest.approx(1e-2, rel=1e-3)


def test_nan_where_reference_is_finite_is_never_close():
    ref = torch.tensor([1.0, 2.0])
    out = torch.tensor([1.0, float("nan")])
    result = compare([out], [ref], 1e9)
    assert result.status == "nan" and math.isinf(result.max_abs_diff)
    assert compare([torch.tensor([1.0, float("inf")])], [ref], 1e9).status == "nan"


def test_nan_in_reference_must_be_matched():
    ref = torch.tensor([1.0, float("nan"), float("-inf")])
    assert compare([ref.clone()], [ref], 1e-6).status == "accepted"
    assert compare([torch.tensor([1.0, 0.0, float("-inf")])], [ref], 1e9).status == "wrong"
    assert compare([torch.tensor([1.0, float("nan"), float("inf")])], [ref], 1e9).status == "wrong"


def test_shape_dtype_and_count_mismatches():
    ref = torch.zeros(2, 3)
    assert "shape" in compare([torch.zeros(3, 2)], [ref], 1.0).reason
    assert "dtype" in compare([torch.zeros(2, 3, dtype=torch.float64)], [ref], 1.0).reason
    assert compare([ref, ref], [ref], 1.0).status == "wrong"


def test_cutoff_that_zeros_pass_is_refused_with_the_output_scale():
    torch.manual_seed(0)
    x = torch.randn(4, 16384)
    ref = torch.softmax(x, dim=1)
    with pytest.raises(CutoffError, match=r"max \|ref\| = .*zeros"):
        check_cutoff([ref], [x], 1e-2)
    check_cutoff([ref], [x], 1e-6)


def test_cutoff_that_a_constant_or_the_input_passes_is_refused():
    ref = torch.full((64,), 5.0) + 1e-4 * torch.randn(64)
    with pytest.raises(CutoffError, match="constant"):
        check_cutoff([ref], [], 1e-2)
    x = torch.randn(64)
    with pytest.raises(CutoffError, match="input 0"):
        check_cutoff([x + 1e-5], [x], 1e-3)


def test_cutoff_must_be_positive():
    with pytest.raises(CutoffError):
        check_cutoff([torch.ones(3)], [], 0.0)


def test_a_constant_counts_against_the_cutoff_only_when_it_passes_on_another_draw():
    from fitness.judge.compare import output_means

    torch.manual_seed(0)
    first, second = torch.rand(()) * 0.3, torch.rand(()) * 0.3 + 0.5  # a scalar loss over two draws
    check_cutoff([second], [], 1e-2, constants=output_means([first]))  # the first draw's constant misses
    with pytest.raises(CutoffError, match="another draw"):  # a constant that does follow every draw
        check_cutoff([torch.tensor(0.25)], [], 1e-2, constants=output_means([torch.tensor(0.251)]))
    with pytest.raises(CutoffError, match=r"a constant \(the mean\)"):  # one draw only: its own mean
        check_cutoff([second], [], 1e-2)


MSE_CONSTANT = '''
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def fill_kernel(out_ptr, value):
    tl.store(out_ptr, value)


class ModelNew(nn.Module):
    def forward(self, predictions, targets):
        out = torch.empty((), device=predictions.device)
        fill_kernel[(1,)](out, 0.08)  # about the loss of one draw
        return out
'''


MSE_HONEST = '''
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def mse_kernel(p_ptr, t_ptr, out_ptr, n, BLOCK: tl.constexpr):
    total = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, n, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        mask = offs < n
        d = tl.load(p_ptr + offs, mask=mask, other=0.0) - tl.load(t_ptr + offs, mask=mask, other=0.0)
        total += d * d
    tl.store(out_ptr, tl.sum(total, axis=0) / n)


class ModelNew(nn.Module):
    def forward(self, predictions, targets):
        p, t = predictions.contiguous(), targets.contiguous()
        out = torch.empty((), device=p.device)
        mse_kernel[(1,)](p, t, out, p.numel(), BLOCK=8192)
        return out
'''


def test_kernelbench_mse_loss_runs_and_a_constant_kernel_is_wrong():
    """94_MSELoss draws a new scale each call: its scalar output is no constant, and kevo runs it."""
    from fitness import Evaluator, Status

    problem = Path(__file__).resolve().parents[2] / "shared" / "kernelbench" / "level1" / "94_MSELoss.py"
    if not problem.is_file():
        pytest.skip(f"KernelBench's problem files are not at {problem.parent}")
    with Evaluator(problem, platform="cpu", shapes={"batch_size": 16}) as evaluator:
        honest = evaluator.evaluate(MSE_HONEST)
        constant = evaluator.evaluate(MSE_CONSTANT)
    assert honest.status is Status.ACCEPTED, honest.reason
    assert constant.status is Status.WRONG, constant.reason


def test_a_problem_without_a_cutoff_gets_one_from_its_outputs():
    """KernelBench's 23_Softmax names no cutoff and its outputs sit near 1/dim: under 1e-2
    zeros would pass; the derived cutoff follows the outputs and tells them apart."""
    from fitness import Evaluator, Status

    problem = Path(__file__).resolve().parents[2] / "shared" / "kernelbench" / "level1" / "23_Softmax.py"
    if not problem.is_file():
        pytest.skip(f"KernelBench's problem files are not at {problem.parent}")
    seed = (Path(__file__).resolve().parents[1] / "problems" / "softmax" / "seed.py").read_text()
    with Evaluator(problem, platform="cpu", shapes={"batch_size": 4, "dim": 1000}) as evaluator:
        assert evaluator.cutoff < 1e-4 and "derived" in evaluator.cutoff_rule
        honest = evaluator.evaluate(seed)
    assert honest.status is Status.ACCEPTED, honest.reason
    with pytest.raises(CutoffError):  # the default it replaces cannot tell zeros from the answer
        Evaluator(problem, platform="cpu", shapes={"batch_size": 4, "dim": 1000}, max_abs_diff=1e-2)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64])
def test_the_largest_difference_is_the_float64_one_to_float32_rounding(dtype, monkeypatch):
    """float32 and half outputs take the difference in float32: within 2^-24 of it in float64,
    over several chunks, and a NaN or an infinity in any chunk is still seen."""
    import fitness.judge.compare as cmp

    monkeypatch.setattr(cmp, "CHUNK", 1000)  # several chunks, the last one short
    torch.manual_seed(0)
    ref = (torch.randn(4321) * 100).to(dtype)
    out = (ref.double() + torch.randn(4321, dtype=torch.float64) * 0.5).to(dtype)
    exact = float((out.double() - ref.double()).abs().max())
    got = compare([out], [ref], 1e9)
    assert got.status == "accepted" and got.max_abs_diff == pytest.approx(exact, rel=2 ** -23)
    assert compare([out], [ref], exact * (1 - 1e-5)).status == "wrong"
    for bad in (float("nan"), float("inf")):
        spoiled = out.clone()
        spoiled[3999] = bad  # in the last chunk
        assert compare([spoiled], [ref], 1e9).status == "nan"


def test_a_difference_that_overflows_float32_is_judged_in_float64():
    ref = torch.tensor([3e38, 1.0])
    result = compare([-ref], [ref], 1e39)  # |out - ref| = 6e38: beyond float32, within this cutoff
    assert result.status == "accepted" and result.max_abs_diff == pytest.approx(6e38, rel=1e-6)
    assert compare([-ref], [ref], 1.0).status == "wrong"
    half = torch.tensor([65504.0, 1.0], dtype=torch.float16)
    assert compare([-half], [half], 1.0).max_abs_diff == 131008.0
