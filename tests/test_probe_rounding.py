"""A probe's cutoff covers the reference's own rounding there (fitness.judge.probe_rounding).

The problem here is ``cos(x @ w)`` (random Fourier features): on the scaled
probes the phases reach about 1e5, where float32 rounds them by a few
hundredths, so the reference itself (and any kernel that sums in another
order) is a few hundredths from the exact answer, above the cutoff that
follows the reference's scale alone (0.01). The probe's factor is pinned so
that the numbers below hold.
"""

from __future__ import annotations

import pytest
import torch

from tests.test_probes import write_problem

from fitness import EvalSettings, Evaluator, Status
from fitness.judge.memory_plan import Variant
from fitness.judge.probe_rounding import probe_cutoff
from fitness.problems.probes import Probe
from fitness.problems.problem import load_problem, make_inputs

FACTOR = 200.0

# x @ w as the sum of its two halves over K (another summation order than the reference's), then cos
HONEST = '''
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _partial_dot(x_ptr, w_ptr, rm, rn, M, N, K, lo, hi, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                 BLOCK_K: tl.constexpr):
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for k in range(lo, hi, BLOCK_K):
        rk = k + tl.arange(0, BLOCK_K)
        a = tl.load(x_ptr + rm[:, None] * K + rk[None, :], mask=(rm[:, None] < M) & (rk[None, :] < hi), other=0.0)
        b = tl.load(w_ptr + rk[:, None] * N + rn[None, :], mask=(rk[:, None] < hi) & (rn[None, :] < N), other=0.0)
        acc = tl.dot(a, b, acc, input_precision="ieee")
    return acc


@triton.jit
def phase_kernel(x_ptr, w_ptr, out_ptr, M, N, K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                 BLOCK_K: tl.constexpr):
    rm = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    half = K // 2
    acc = _partial_dot(x_ptr, w_ptr, rm, rn, M, N, K, 0, half, BLOCK_M, BLOCK_N, BLOCK_K)
    acc += _partial_dot(x_ptr, w_ptr, rm, rn, M, N, K, half, K, BLOCK_M, BLOCK_N, BLOCK_K)
    tl.store(out_ptr + rm[:, None] * N + rn[None, :], PHASE, mask=(rm[:, None] < M) & (rn[None, :] < N))


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, w):
        x, w = x.contiguous(), w.contiguous()
        M, K = x.shape
        N = w.shape[1]
        out = torch.empty((M, N), dtype=x.dtype, device=x.device)
        phase_kernel[(triton.cdiv(M, 32), triton.cdiv(N, 32))](x, w, out, M, N, K, BLOCK_M=32, BLOCK_N=32,
                                                                BLOCK_K=16)
        return out
'''


def candidate(phase: str) -> str:
    return HONEST.replace("PHASE", phase)


@pytest.fixture(scope="module")
def phase_problem(tmp_path_factory):
    """``cos(x @ w)`` for x 64 x 32 and w 32 x 64 from ``torch.rand``, prepared with the
    probe factor pinned to ``FACTOR``."""
    path = write_problem(tmp_path_factory.mktemp("phase"), "return torch.cos(xs[0] @ xs[1])",
                         "[torch.rand(batch_size, dim), torch.rand(dim, batch_size)]", "batch_size, dim = 64, 32")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("fitness.judge.prepared.FACTOR_RANGE", (FACTOR, FACTOR))
        evaluator = Evaluator(path, platform="cpu")
    yield evaluator
    evaluator.close()


def test_an_honest_kernel_in_another_summation_order_passes_where_the_reference_itself_rounds_far(phase_problem):
    # Measured on the CPU (200 draws of each probe): the reference is 0.032-0.071 from itself in
    # float64 on the signed scaled probe, 0.082-0.14 on the scaled one, and this kernel 0.031-0.086
    # and 0.093-0.16 from the reference: always past 0.01, never past 8 times the rounding on the
    # fixed draw (0.0345 and 0.107 there; 8 times 0.107 stays below the outputs' scale, 1).
    result = phase_problem.evaluate(candidate("tl.cos(acc)"))
    assert result.status is Status.ACCEPTED, result.reason
    signed, signed_scaled, scaled = phase_problem.prepared.probes
    assert (signed.factor, signed_scaled.factor, scaled.factor) == (1.0, FACTOR, FACTOR)
    assert signed.cutoff == phase_problem.cutoff  # well conditioned there: as before
    assert signed_scaled.cutoff > 10 * phase_problem.cutoff and scaled.cutoff > 30 * phase_problem.cutoff
    assert scaled.cutoff < 1  # below the outputs' own scale: the probe is kept
    notes = " ".join(phase_problem.prepared.notes)
    assert f"probe (inputs scaled by {FACTOR:.0f}) cutoff 0.01 -> " in notes
    assert "the reference's own rounding there is" in notes and "against itself in float64" in notes


def test_a_kernel_fitted_to_the_drawn_range_is_still_refused_at_the_wider_cutoff(phase_problem):
    # right while |x @ w| stays below 40, as it does for draws from [0, 1) with K = 32 and for the
    # signed probe; on the scaled probes the phases reach 1e5
    result = phase_problem.evaluate(candidate("tl.cos(tl.minimum(tl.maximum(acc, -40.0), 40.0))"))
    assert result.status is Status.WRONG_OFF_DISTRIBUTION, result.reason
    cutoff = phase_problem.prepared.probes[1].cutoff
    assert f"scaled by {FACTOR:.0f}; cutoff {cutoff:.3g} there" in result.reason and cutoff > 0.1


def test_a_probe_the_reference_rounds_past_its_own_scale_is_dropped(tmp_path, monkeypatch):
    # sin(1000 x.sum()): on the scaled probe the phases reach 6e6, where float32 rounds them
    # by more than a period (the reference is 0.48 from itself in float64 there, outputs within 1)
    monkeypatch.setattr("fitness.judge.prepared.FACTOR_RANGE", (FACTOR, FACTOR))
    path = write_problem(tmp_path, "return torch.sin(1000 * xs[0].sum(dim=1))", "[torch.rand(batch_size, dim)]",
                         "batch_size = 16")
    with Evaluator(path, platform="cpu") as evaluator:
        probes, notes = evaluator.prepared.probes, " ".join(evaluator.prepared.notes)
        assert f"probe (inputs scaled by {FACTOR:.0f}) dropped: the reference's own rounding there is" in notes
        assert "no cutoff tells right from wrong" in notes
        assert all(p.signs for p in probes)  # the scaled probe without signs is gone
        assert Probe(signs=True) in [Probe(p.signs, p.factor) for p in probes]
        assert probes[0].cutoff == evaluator.cutoff  # the signed probe is well conditioned: kept as it was


def test_a_reference_that_raises_in_float64_keeps_the_cutoff_from_its_scale_with_a_note(tmp_path, monkeypatch):
    monkeypatch.setattr("fitness.judge.prepared.FACTOR_RANGE", (FACTOR, FACTOR))
    # a float32 matrix made in forward: x in float64 cannot be multiplied by it
    path = write_problem(tmp_path, "return xs[0] @ torch.ones(dim, dim)", "[torch.rand(batch_size, dim)]")
    with Evaluator(path, platform="cpu") as evaluator:
        probes, notes = evaluator.prepared.probes, evaluator.prepared.notes
        assert len(probes) == 3
        problem, seed = load_problem(path), EvalSettings().fixed_seeds[0]
        model = problem.Model()
        main = model(*make_inputs(problem, seed, "cpu")).abs().max().item()
        for probe in probes:
            scale = model(*make_inputs(problem, seed, "cpu", probe)).abs().max().item()
            assert probe.cutoff == pytest.approx(evaluator.cutoff * max(1.0, scale / main), rel=1e-6)
            assert any(n.startswith(f"probe ({probe.describe()}): the reference's own rounding there was not "
                                    "measured (the reference in float64 raises: RuntimeError") for n in notes), notes


class _NoRoom:
    def free_memory(self) -> int:
        return 1 << 20

    def release_memory(self) -> None:
        raise AssertionError("nothing was allocated")


def test_the_rounding_is_not_measured_where_its_float64_copies_would_not_fit():
    x = torch.rand(1024, 1024)
    variant = Variant({}, None, torch.nn.Identity(), [x.numel() * 4], x.numel() * 4, 0)
    notes: list[str] = []
    cutoff = probe_cutoff(variant, lambda: [x], [x], 0.01, 1.0, _NoRoom(), "inputs with random signs", notes.append)
    assert cutoff == 0.01
    assert notes == ["probe (inputs with random signs): the reference's own rounding there was not measured (it "
                     "needs about 0.05 GB free, 0.00 GB is); its cutoff stays 0.01"]
