"""NaN-safe comparison of outputs against the reference, and the cutoff check.

Runs in the trusted process that holds the reference outputs, on its own
copies of what the worker produced, on the device where they were made.
Both walk the outputs in chunks of ``CHUNK`` elements, each widened to
float64 on its own, so judging an output of any size needs a few chunks of
memory besides the output and its reference: no full-size float64 copy, no
mask, no sort. The figures a message quotes (a median) come from a sample.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator
from typing import Sequence

import torch

#: Elements per chunk in host memory: 32 MB of float64 per operand.
CHUNK = 1 << 22
#: Elements per chunk on a GPU: 256 MB of float64 per operand.
DEVICE_CHUNK = 1 << 25
#: Elements sampled (evenly spaced) for the medians a refusal quotes.
SAMPLE = 1 << 16


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


def _flat(t: torch.Tensor) -> torch.Tensor:
    """``t`` as one dimension, without a copy when it is contiguous."""
    return t.reshape(-1) if t.is_contiguous() else t.contiguous().reshape(-1)


def chunks(n: int, size: int | None = None) -> Iterator[slice]:
    """Slices covering ``range(n)`` in pieces of at most ``size`` (default ``CHUNK``)."""
    size = size or CHUNK
    for start in range(0, n, size):
        yield slice(start, min(n, start + size))


def compare(outputs: Sequence[torch.Tensor], references: Sequence[torch.Tensor], cutoff: float) -> Comparison:
    """Check every output against its reference.

    Same shape and dtype; wherever the reference is finite the output is
    finite and within ``cutoff``; wherever the reference is NaN or infinite
    the output is the same non-finite value. Outputs on another device than
    their reference are compared on the reference's device, chunk by chunk.
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
        verdict = _compare_one(_flat(out), _flat(ref), cutoff, label)
        if verdict.status != "accepted":
            return Comparison(verdict.status, max(worst, verdict.max_abs_diff), verdict.reason)
        worst = max(worst, verdict.max_abs_diff)
    return Comparison("accepted", worst)


#: Outputs whose first pass takes the difference in float32 (half types widened to it first).
_SINGLE = (torch.float32, torch.float16, torch.bfloat16)


def _largest_difference(out: torch.Tensor, ref: torch.Tensor) -> float:
    """The largest |out - ref| over the flat pair, chunk by chunk; NaN or infinite where either
    side has a NaN or an infinity anywhere (or where the difference overflows).

    float32 and half outputs: the difference in float32 and its smallest and largest values,
    three passes over the chunk's bytes, not the eight that widening to float64 takes (this runs
    for every check, on outputs of gigabytes at real sizes). The rounding of one float32
    subtraction is within 2^-24 of the difference: nothing a cutoff can tell. A difference
    that overflows float32 is infinite, and the full check in float64 decides then. Other
    dtypes: in float64.
    """
    device = ref.device
    single = ref.dtype in _SINGLE
    worst = torch.zeros((), dtype=torch.float32 if single else torch.float64, device=device)
    for part in chunks(ref.numel(), _chunk(device)):
        if part.stop == part.start:
            continue
        if single:
            o = out[part].to(device=device)
            r = ref[part]
            if ref.dtype != torch.float32:  # exact: every half value is a float32 value
                o, r = o.float(), r.float()
            low, high = torch.aminmax(torch.sub(o, r))
            worst = torch.maximum(worst, torch.maximum(high, low.neg()))  # NaN stays NaN
        else:
            # copy=True: a float64 output must not be changed in place
            diff = out[part].to(device=device, dtype=torch.float64, copy=True).sub_(ref[part]).abs_()
            worst = torch.maximum(worst, diff.max())
    return float(worst)


def _compare_one(out: torch.Tensor, ref: torch.Tensor, cutoff: float, label: str) -> Comparison:
    """One flat output against its flat reference, chunk by chunk.

    The common case first: the largest |out - ref| (``_largest_difference``).
    A finite largest difference proves every element of both finite (a NaN or
    an infinity on either side makes it NaN or infinite), and then it is the
    answer. Otherwise the full check says what is wrong.
    """
    diff = _largest_difference(out, ref)
    if math.isfinite(diff):
        if not diff <= cutoff:
            return Comparison("wrong", diff, f"{label}: max |out - ref| = {diff:.3g} > cutoff {cutoff:.3g}")
        return Comparison("accepted", diff)
    return _compare_special(out, ref, cutoff, label)


def _compare_special(out: torch.Tensor, ref: torch.Tensor, cutoff: float, label: str) -> Comparison:
    """The full check, for outputs or references with NaN or infinite values; the
    figures stay on the device until the end, so the chunks run without waiting."""
    device = ref.device
    nonfinite = torch.zeros((), dtype=torch.int64, device=device)
    mismatch = torch.zeros((), dtype=torch.bool, device=device)
    worst = torch.zeros((), dtype=torch.float64, device=device)
    for part in chunks(ref.numel(), _chunk(device)):
        r = ref[part].to(torch.float64)
        o = out[part].to(device=device, dtype=torch.float64)
        finite = torch.isfinite(r)
        nonfinite += (finite & ~torch.isfinite(o)).sum()
        # NaN where the reference is NaN, the same infinity where it is infinite
        same = (torch.isnan(r) & torch.isnan(o)) | (torch.isinf(r) & (o == r))
        mismatch |= (~finite & ~same).any()
        if r.numel():
            worst = torch.maximum(worst, (o - r).abs_().masked_fill_(~finite, 0.0).max())
    count, differs, diff = int(nonfinite), bool(mismatch), float(worst)
    if count:
        return Comparison("nan", math.inf, f"{label} has {count} non-finite values where the reference is finite")
    if differs:
        return Comparison("wrong", math.inf, f"{label} differs where the reference is NaN or infinite")
    if not diff <= cutoff:
        return Comparison("wrong", diff, f"{label}: max |out - ref| = {diff:.3g} > cutoff {cutoff:.3g}")
    return Comparison("accepted", diff)


def _chunk(device: torch.device) -> int:
    """Elements per chunk: ``CHUNK`` in host memory, ``DEVICE_CHUNK`` on a GPU (fewer, larger launches)."""
    return CHUNK if device.type == "cpu" else DEVICE_CHUNK


def sample(t: torch.Tensor, size: int = SAMPLE) -> torch.Tensor:
    """About ``size`` evenly spaced elements of flat ``t`` (all of it when smaller)."""
    flat = _flat(t)
    step = max(1, flat.numel() // size)
    return flat[::step]


#: A trivial output that lands within the cutoff on this share of the
#: elements makes the cutoff useless (a kernel could get almost everything
#: wrong and pass wherever the data happens to be extreme).
TRIVIAL_MATCH_LIMIT = 0.95


def _finite_mean(ref: torch.Tensor) -> float | None:
    total, count = 0.0, 0
    for part in chunks(ref.numel()):
        r = ref[part].to(torch.float64, copy=True)  # copy: a float64 reference stays as it is
        finite = torch.isfinite(r)
        total += float(r.masked_fill_(~finite, 0.0).sum())
        count += int(finite.sum())
    return total / count if count else None


def _trivial_outputs(ref: torch.Tensor, inputs: Sequence, constant: float | None,
                     constant_name: str) -> list[tuple[str, torch.Tensor | float, int | None]]:
    """Trivial outputs: (name, a flat tensor of the reference's shape or a constant, the
    input's index for an input)."""
    trivial: list[tuple[str, torch.Tensor | float, int | None]] = [("zeros", 0.0, None)]
    if constant is not None:
        # the constant as the output's dtype would hold it
        trivial.append((constant_name, float(torch.tensor(constant, dtype=torch.float64).to(ref.dtype)), None))
    for j, x in enumerate(inputs):
        if isinstance(x, torch.Tensor) and x.shape == ref.shape:
            trivial.append((f"input {j}", _flat(x), j))
    return trivial


def _match(ref: torch.Tensor, trivial: torch.Tensor | float, cutoff: float) -> tuple[float, torch.Tensor]:
    """(share of the reference's finite elements the trivial output is within ``cutoff`` of,
    a sample of the gaps)."""
    within, finite_count, gaps = 0, 0, []
    step = max(1, ref.numel() // SAMPLE)
    for part in chunks(ref.numel(), max(step, CHUNK - CHUNK % step)):
        r = ref[part].to(torch.float64)
        if isinstance(trivial, torch.Tensor):
            t = trivial[part].to(device=r.device, dtype=ref.dtype).to(torch.float64)
        else:
            t = torch.full_like(r, trivial)
        finite = torch.isfinite(r)
        gap = (t - r).abs_()
        within += int(((gap <= cutoff) & finite).sum())
        finite_count += int(finite.sum())
        picked = gap[::step]
        gaps.append(picked[torch.isfinite(r[::step])])
    return within / max(finite_count, 1), torch.cat(gaps)


def output_means(references: Sequence[torch.Tensor]) -> list[float | None]:
    """The mean of each output's finite elements (None where there is none): the constant a
    trivial kernel would return, as ``check_cutoff(constants=...)`` takes it from another draw."""
    return [_finite_mean(_flat(ref)) for ref in _as_list(references)]


@dataclasses.dataclass
class Trivial:
    """A trivial output that a cutoff cannot tell from the reference on some inputs."""

    output: int  # which output
    name: str  # "zeros", "a constant (...)", "input 1"
    constant: float | None  # the value it returns everywhere (zeros: 0.0); None: an input
    input_index: int | None  # the input it returns, for an input
    message: str  # the refusal, naming the output's scale and a cutoff that would work

    def value(self, inputs: Sequence) -> torch.Tensor | float:
        """This trivial output for ``inputs`` (the same constant, or that input of these inputs)."""
        return self.constant if self.input_index is None else _flat(inputs[self.input_index])

    def matches(self, references: Sequence[torch.Tensor], inputs: Sequence, cutoff: float) -> bool:
        """Whether it passes ``cutoff`` against ``references`` (on ``inputs``) too."""
        ref = _as_list(references)[self.output]
        value = self.value(inputs)
        if isinstance(value, torch.Tensor) and value.shape != _flat(ref).shape:
            return False
        share, _ = _match(_flat(ref), value, cutoff)
        return share >= TRIVIAL_MATCH_LIMIT


def trivial_passes(references: Sequence[torch.Tensor], inputs: Sequence, cutoff: float,
                   constants: Sequence[float | None] | None = None) -> list[Trivial]:
    """The trivial outputs (zeros, a constant, an input) that ``cutoff`` cannot tell
    from ``references``, each with the refusal it would make; see ``check_cutoff``."""
    if not (cutoff > 0 and math.isfinite(cutoff)):
        raise CutoffError(f"the cutoff must be a positive finite number, got {cutoff}")
    references = _as_list(references)
    own = constants is None
    constants = output_means(references) if own else list(constants)
    constant_name = "a constant (the mean)" if own else "a constant (the mean of another draw's output)"
    found = []
    for i, ref in enumerate(references):
        flat = _flat(ref)
        for name, trivial, index in _trivial_outputs(ref, inputs, constants[i], constant_name):
            share, gaps = _match(flat, trivial, cutoff)
            if share >= TRIVIAL_MATCH_LIMIT:
                picked = sample(flat).to(torch.float64)
                picked = picked[torch.isfinite(picked)].abs()
                typical = float(picked.median()) if picked.numel() else 0.0
                scale = finite_abs_max(flat)
                gap = float(gaps.median()) if gaps.numel() else 0.0
                hint = f"; choose a cutoff well below the typical gap {gap:.3g}, e.g. {gap / 100:.2g}" if gap > 0 else ""
                message = (f"max-abs-diff cutoff {cutoff:.3g} cannot tell right from wrong: output {i} "
                           f"(shape {tuple(ref.shape)}, median |ref| = {typical:.3g}, max |ref| = {scale:.3g}) "
                           f"is matched by {name} on {100 * share:.1f}% of its elements{hint}")
                found.append(Trivial(i, name, None if index is not None else float(trivial), index, message))
    return found


def check_cutoff(references: Sequence[torch.Tensor], inputs: Sequence, cutoff: float,
                 constants: Sequence[float | None] | None = None) -> None:
    """Refuse a cutoff that a trivial output (zeros, a constant, an input) passes.

    A trivial output "passes" when it is within the cutoff on at least 95% of
    the elements: wide-row softmax outputs sit near 1/dim, so zeros match
    nearly all of them under a loose cutoff even if a few large values do
    not. Raises ``CutoffError`` naming the output scale and a cutoff that
    would work.

    ``constants`` are the constants to try, one per output, taken from
    another draw of the inputs (``output_means`` of its references; None: no
    constant for that output). A constant taken from these references
    themselves always matches a scalar output, so it is evidence only when it
    comes from elsewhere; without ``constants``, it is these references' own
    mean (for a caller with one draw only).
    """
    found = trivial_passes(references, inputs, cutoff, constants)
    if found:
        raise CutoffError(found[0].message)


def all_finite(ref: torch.Tensor) -> bool:
    """Whether every element of ``ref`` is finite (integer tensors always are)."""
    ref = _flat(ref)
    if not ref.is_floating_point():
        return True
    bad = torch.zeros((), dtype=torch.bool, device=ref.device)
    for part in chunks(ref.numel(), _chunk(ref.device)):
        bad |= ~torch.isfinite(ref[part]).all()
    return not bool(bad)


def finite_abs_max(ref: torch.Tensor) -> float:
    """The largest |element| of ``ref`` among its finite ones (0.0 when there is none)."""
    ref = _flat(ref)
    # the running maximum stays on the device, so the chunks run without waiting (as in compare)
    worst = torch.zeros((), dtype=torch.float64, device=ref.device)
    for part in chunks(ref.numel(), _chunk(ref.device)):
        if part.stop > part.start:
            r = ref[part].to(torch.float64, copy=True).abs_()  # copy: a float64 reference stays as it is
            worst = torch.maximum(worst, r.masked_fill_(~torch.isfinite(r), 0.0).max())
    return float(worst)
