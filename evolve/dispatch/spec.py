"""``EvaluatorSpec``: what a Ray actor builds a problem's evaluators from, in plain, picklable values;
and how many of its evaluations may compile ahead beside the memory plan's (``workers_beside``)."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from fitness import EvalSettings, Evaluator, PreparedProblem
from fitness.judge.lane import TimingLane


@dataclasses.dataclass(frozen=True, eq=True)
class EvaluatorSpec:
    """Everything an actor needs to build its ``Evaluator``: plain values only."""

    reference: str
    platform: str = "auto"
    shapes: dict[str, int] = dataclasses.field(default_factory=dict)
    max_abs_diff: float | None = None
    held_out: list[dict[str, int]] | None = None
    settings: EvalSettings = dataclasses.field(default_factory=EvalSettings)
    dtype: str | None = None

    def build(self, lane: TimingLane | None = None, prepared: PreparedProblem | None = None) -> Evaluator:
        """The evaluator (raises ``ProblemError``, ``CutoffError``, ``PlatformUnavailable``);
        ``prepared`` is the problem another evaluator of this device prepared for this spec."""
        return Evaluator(self.reference, platform=self.platform, shapes=self.shapes,
                         max_abs_diff=self.max_abs_diff, held_out=self.held_out, settings=self.settings,
                         lane=lane, dtype=self.dtype, prepared=prepared)

    def __hash__(self) -> int:
        return hash(json.dumps(dataclasses.asdict(self), sort_keys=True, default=str))


def workers_beside(platform: Any, room: int, fit: int, slots: int, need: int, on: bool = True) -> int:
    """How many evaluations beyond the memory plan's ``fit`` at once may hold an evaluator (its worker
    started, its context and flush buffer: ``process_overhead_bytes``) to compile the candidate's
    kernels ahead (``fitness.judge.ahead``): as many as the ``room`` the plan saw holds beside ``fit``
    evaluations of ``need`` bytes, up to the slots left (so that a few candidates slow to compile do not
    keep the others from the plan's places: on an H100, 2 of them held 2 of 4 evaluators for 10-40 s and
    the plan's 2 places were 0.72 full). None where memory does not bind
    (every slot fits), the platform compiles nothing ahead (the CPU's interpreter compiles nothing), or
    where it is not ``on`` (``fitness.compile_ahead: false``).

    >>> from types import SimpleNamespace as P
    >>> gpu = P(compiles_ahead=True, process_overhead_bytes=1)
    >>> workers_beside(gpu, room=80, fit=2, slots=6, need=37)  # 6 left beside two: the four slots left
    4
    >>> workers_beside(gpu, room=75, fit=2, slots=6, need=37), workers_beside(gpu, 80, 6, 6, 10)
    (1, 0)
    """
    if not on or fit >= slots or not getattr(platform, "compiles_ahead", False) or platform.process_overhead_bytes <= 0:
        return 0
    return max(0, min(slots - fit, (room - fit * need) // platform.process_overhead_bytes))
