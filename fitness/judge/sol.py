"""Speed of light on a verdict: the problem's floor beside the kernel's runtime.

Every accepted verdict carries its problem's floor on the device
(``fitness.judge.floor``, computed once when the problem is prepared): ``floor_ms``,
``sol = floor_ms / runtime_ms`` (0..1), the ``bound`` and how the floor was
obtained (``with_floor``).

Faster than physics is never a plain speedup. A kernel whose runtime reads
below the floor beyond ``fitness.judge.floor.BELOW_FLOOR_MARGIN``
(``fitness.judge.floor.below_floor``) is judged again, its time step with every
timed run checked instead of a sample (``Evaluator``), before it may become a
parent or the best. ``judged_again`` makes the verdict from the two: wrong on
a run it is refused like any wrong kernel; right on every run and below the
floor still, it is ``below_floor``, with the floor and why the floor may not
hold for it (``why_below``); right and above the floor this time (the first
window was a glitch of the clock), a plain verdict that says it was judged again.
"""

from __future__ import annotations

from fitness.judge.floor import BELOW_FLOOR_MARGIN, Floor, below_floor, sol
from fitness.result import EvalResult


def with_floor(result: EvalResult, floor: Floor | None) -> EvalResult:
    """``result`` (in place, and returned) with ``floor``'s figures, if it is accepted and there is a floor."""
    if result.accepted and floor is not None and result.runtime_ms:
        result.floor_ms, result.sol, result.bound = floor.floor_ms, sol(floor.floor_ms, result.runtime_ms), floor.bound
        result.floor = floor.to_dict()
    return result


def needs_second_judgement(result: EvalResult, floor: Floor | None) -> bool:
    """Whether ``result`` reads below ``floor`` beyond the margin: judge it again, every timed run checked."""
    return result.accepted and floor is not None and bool(result.runtime_ms) and below_floor(floor, result.runtime_ms)


def judged_again(first: EvalResult, again: EvalResult, floor: Floor) -> EvalResult:
    """The verdict on a kernel that read below ``floor`` (``first``), from its second judgement
    with every timed run checked (``again``)."""
    said = (f"it read {first.runtime_ms:.4g} ms, below the floor ({floor.cached_floor_ms:.4g} ms less "
            f"{BELOW_FLOOR_MARGIN:.0%}), so it was judged again with every timed run checked")
    if not again.accepted:
        again.reason = f"{said}: {again.reason}"
    elif below_floor(floor, again.runtime_ms):
        again.below_floor, again.below_floor_reason = True, why_below(floor, again.runtime_ms)
    else:
        again.reason = f"{said}, and read {again.runtime_ms:.4g} ms then"
    return again


def why_below(floor: Floor, runtime_ms: float) -> str:
    """Why a kernel right on every timed run can still read below ``floor``: what to look at.

    >>> f = Floor(1.0, "memory", 1000, 0.0, 1.0, None, "measured", cached_floor_ms=0.8)
    >>> why_below(f, 0.5).split(":")[0]
    'right on every timed run, yet 0.5 ms is 1.6x below the floor (0.8 ms with cached outputs left out)'
    """
    reasons = [
        "the floor moves every input, parameter and output once: a reference that does not need all of its "
        "inputs (or computes more than its outputs need) has a lower true floor",
        "or the kernel skips work on inputs the checks do not cover (a wrong kernel the checks missed)",
    ]
    if floor.source == "measured":
        reasons.append("or the measured peaks are below what this kernel reaches (measure them again)")
    if floor.note:
        reasons.append(f"note: {floor.note}")
    return (f"right on every timed run, yet {runtime_ms:.4g} ms is {floor.cached_floor_ms / runtime_ms:.2g}x below "
            f"the floor ({floor.cached_floor_ms:.4g} ms with cached outputs left out): " + "; ".join(reasons))
