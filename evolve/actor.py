"""What runs in a Ray actor: warm evaluators of one device, and the spec they are built from.

``EvaluatorSpec`` is plain, picklable values (the problem, its shapes, the
cutoff, the evaluation settings). ``EvaluatorActor`` is the class each Ray
actor instantiates (``evolve.ray_dispatch`` wraps it with ``ray.remote``);
it imports nothing of Ray, so it also runs, and is tested, in-process.
"""

from __future__ import annotations

import dataclasses
import json
import os
import threading
from typing import Any

from evolve.dispatch import evaluator_info
from fitness import CutoffError, EvalResult, EvalSettings, Evaluator, ProblemError
from fitness.lane import TimingLane
from platforms import PlatformUnavailable


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

    def build(self, lane: TimingLane | None = None) -> Evaluator:
        """The evaluator (raises ``ProblemError``, ``CutoffError``, ``PlatformUnavailable``)."""
        return Evaluator(self.reference, platform=self.platform, shapes=self.shapes,
                         max_abs_diff=self.max_abs_diff, held_out=self.held_out, settings=self.settings,
                         lane=lane, dtype=self.dtype)

    def __hash__(self) -> int:
        return hash(json.dumps(dataclasses.asdict(self), sort_keys=True, default=str))


class EvaluatorActor:
    """What runs in each actor: warm ``Evaluator``s sharing the actor's device.

    The actor is threaded: up to ``slots`` candidates are evaluated at once,
    each by its own evaluator (its own sandboxed worker), so compiling and
    checking overlap while timing takes the device's one timing lane
    (``fitness.lane``) and runs alone. Evaluators are kept per problem
    (``EvaluatorSpec``), so one pool of actors serves a sweep; only the most
    recent problems keep theirs.

    A problem the evaluator refuses (``ProblemError``, ...) is raised by
    ``prepare`` and ``evaluate``, so the driver sees the original error.
    """

    KEEP_PROBLEMS = 2

    def __init__(self, home: str | None = None) -> None:
        if home is not None:
            os.environ["HOME"] = home  # undo the bootstrap HOME the local head was started with
        self.lane = TimingLane()
        self._lock = threading.Lock()
        self._free: dict[EvaluatorSpec, list[Evaluator]] = {}
        self._all: dict[EvaluatorSpec, list[Evaluator]] = {}
        self._errors: dict[EvaluatorSpec, Exception] = {}

    def prepare(self, spec: EvaluatorSpec) -> dict[str, Any]:
        """Build one evaluator for ``spec``; where this actor evaluates (pid, platform, device, cutoff)."""
        evaluator = self._take(spec)
        try:
            return {"pid": os.getpid(), **evaluator_info(evaluator)}
        finally:
            self._give_back(spec, evaluator)

    def evaluate(self, spec: EvaluatorSpec, source: str) -> tuple[int, EvalResult]:
        """(this actor's pid, the verdict on ``source``)."""
        evaluator = self._take(spec)
        try:
            return os.getpid(), evaluator.evaluate(source)
        finally:
            self._give_back(spec, evaluator)

    def profile(self, spec: EvaluatorSpec, source: str, runtime_ms: float | None) -> dict[str, Any]:
        """The profile record of ``source`` on this actor's device (``Evaluator.profile``).

        Always the spec's first evaluator profiles, so a profiler that failed
        once stays off for the actor.
        """
        with self._lock:
            built = self._all.get(spec)
            evaluator = built[0] if built else None
        if evaluator is not None:
            return evaluator.profile(source, runtime_ms)
        evaluator = self._take(spec)
        try:
            return evaluator.profile(source, runtime_ms)
        finally:
            self._give_back(spec, evaluator)

    def lane_stats(self) -> dict[str, float]:
        """How busy this device's timing lane has been since the actor started."""
        return self.lane.stats()

    def close(self) -> None:
        with self._lock:
            evaluators = [e for group in self._all.values() for e in group]
            self._all.clear()
            self._free.clear()
        for evaluator in evaluators:
            evaluator.close()

    def _take(self, spec: EvaluatorSpec) -> Evaluator:
        with self._lock:
            if spec in self._errors:
                raise self._errors[spec]
            free = self._free.setdefault(spec, [])
            if free:
                return free.pop()
            self._all.setdefault(spec, [])
            self._forget_old(spec)
        try:
            evaluator = spec.build(self.lane)
        except (ProblemError, CutoffError, PlatformUnavailable) as exc:
            with self._lock:
                self._errors[spec] = exc
            raise
        with self._lock:
            self._all.setdefault(spec, []).append(evaluator)
        return evaluator

    def _give_back(self, spec: EvaluatorSpec, evaluator: Evaluator) -> None:
        with self._lock:
            if evaluator in self._all.get(spec, []):
                self._free.setdefault(spec, []).append(evaluator)
                return
        evaluator.close()  # its problem was forgotten while it worked

    def _forget_old(self, current: EvaluatorSpec) -> None:
        """Close idle evaluators of all but the most recent problems (called with the lock held)."""
        for spec in list(self._all)[:-self.KEEP_PROBLEMS]:
            if spec == current:
                continue
            for evaluator in self._free.pop(spec, []):
                evaluator.close()
            self._all.pop(spec)
