"""NaN-safe comparison of outputs against the reference, and the cutoff check.

Runs in the trusted process that holds the reference outputs, on tensors the
worker sent back. Differences are computed in float64.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Sequence

import torch


class CutoffError(ValueError):
    """The cutoff cannot tell a right output from a trivially wrong one."""


@dataclasses.dataclass
class Comparison:
    status: str  # "accepted", "wrong" or "nan"
    max_abs_diff: float
    reason: str = ""


def _as_list(outputs) -> list:
    if isinstance(outputs, (tuple, list)):
        return list(outputs)
    return [outputs]


def compare(outputs: Sequence[torch.Tensor], references: Sequence[torch.Tensor], cutoff: float) -> Comparison:
    """Check every output against its reference.

    Same shape and dtype; wherever the reference is finite the output is
    finite and within ``cutoff``; wherever the reference is NaN or infinite
    the output is the same non-finite value.
    """
    outputs, references = _as_list(outputs), _as_list(references)
    if len(outputs) != len(references):
        return Comparison("wrong", math.inf, f"returned {len(outputs)} outputs, expected {len(references)}")
    worst = 0.0
    for i, (out, ref) in enumerate(zip(outputs, references)):
        label = f"output {i}" if len(references) > 1 else "output"
        if not isinstance(out, torch.Tensor):
            return Comparison("wrong", math.inf, f"{label} is {type(out).__name__}, expected a tensor")
        if out.shape != ref.shape:
            return Comparison("wrong", math.inf, f"{label} has shape {tuple(out.shape)}, expected {tuple(ref.shape)}")
        if out.dtype != ref.dtype:
            return Comparison("wrong", math.inf, f"{label} has dtype {out.dtype}, expected {ref.dtype}")
        o, r = out.to(device=ref.device, dtype=torch.float64), ref.to(torch.float64)
        finite = torch.isfinite(r)
        bad = finite & ~torch.isfinite(o)
        if bool(bad.any()):
            count = int(bad.sum())
            return Comparison("nan", math.inf, f"{label} has {count} non-finite values where the reference is finite")
        special = ~finite
        if bool(special.any()):
            same_nan = torch.isnan(r) & torch.isnan(o)
            same_inf = torch.isinf(r) & (o == r)
            mismatch = special & ~(same_nan | same_inf)
            if bool(mismatch.any()):
                return Comparison("wrong", math.inf, f"{label} differs where the reference is NaN or infinite")
        if bool(finite.any()):
            diff = float((o[finite] - r[finite]).abs().max())
            worst = max(worst, diff)
            if not diff <= cutoff:
                return Comparison("wrong", worst, f"{label}: max |out - ref| = {diff:.3g} > cutoff {cutoff:.3g}")
    return Comparison("accepted", worst)


def _trivial_outputs(ref: torch.Tensor, inputs: Sequence) -> dict[str, torch.Tensor]:
    trivial = {"zeros": torch.zeros_like(ref)}
    finite = ref[torch.isfinite(ref)]
    if finite.numel():
        trivial["a constant (the mean)"] = torch.full_like(ref, float(finite.to(torch.float64).mean()))
    for j, x in enumerate(inputs):
        if isinstance(x, torch.Tensor) and x.shape == ref.shape:
            trivial[f"input {j}"] = x.to(device=ref.device, dtype=ref.dtype)
    return trivial


#: A trivial output that lands within the cutoff on this share of the
#: elements makes the cutoff useless (a kernel could get almost everything
#: wrong and pass wherever the data happens to be extreme).
TRIVIAL_MATCH_LIMIT = 0.95


def check_cutoff(references: Sequence[torch.Tensor], inputs: Sequence, cutoff: float) -> None:
    """Refuse a cutoff that a trivial output (zeros, a constant, an input) passes.

    A trivial output "passes" when it is within the cutoff on at least 95% of
    the elements: wide-row softmax outputs sit near 1/dim, so zeros match
    nearly all of them under a loose cutoff even if a few large values do
    not. Raises ``CutoffError`` naming the output scale and a cutoff that
    would work.
    """
    if not (cutoff > 0 and math.isfinite(cutoff)):
        raise CutoffError(f"the cutoff must be a positive finite number, got {cutoff}")
    for i, ref in enumerate(_as_list(references)):
        finite = torch.isfinite(ref)
        if not bool(finite.any()):
            continue
        r = ref.to(torch.float64)[finite]
        for name, trivial in _trivial_outputs(ref, inputs).items():
            gaps = (trivial.to(torch.float64)[finite] - r).abs()
            share = float((gaps <= cutoff).to(torch.float64).mean())
            if share >= TRIVIAL_MATCH_LIMIT:
                typical = float(r.abs().median())
                scale = float(r.abs().max())
                gap = float(gaps.median())
                hint = f"; choose a cutoff well below the typical gap {gap:.3g}, e.g. {gap / 100:.2g}" if gap > 0 else ""
                raise CutoffError(
                    f"max-abs-diff cutoff {cutoff:.3g} cannot tell right from wrong: output {i} "
                    f"(shape {tuple(ref.shape)}, median |ref| = {typical:.3g}, max |ref| = {scale:.3g}) "
                    f"is matched by {name} on {100 * share:.1f}% of its elements{hint}"
                )
