"""The warm evaluators of one actor's device, per problem (``EvaluatorSpec``).

``WarmEvaluators`` (owned by ``evolve.dispatch.actor.EvaluatorActor``) builds a problem's evaluators as
they are asked for, lends them out and takes them back. Only the ``keep_problems`` problems used most
recently keep theirs; the workers of the ones forgotten are reset and handed to the next problem's
evaluators (a worker takes seconds to start). The evaluators of one problem share one ``PreparedProblem``,
whose memory plan ``Admissions.plan`` reads as it is first prepared.
"""

from __future__ import annotations

import threading
from typing import Any

from evolve.dispatch.admission import Admissions
from evolve.dispatch.spec import EvaluatorSpec
from fitness import CutoffError, Evaluator, NoRoomNow, PreparedProblem, ProblemError
from fitness.judge.lane import TimingLane
from platforms import Platform, PlatformUnavailable, get_platform


class WarmEvaluators:
    """The evaluators of each problem: all built (``all``), those idle (``free``), a problem's refusal (``errors``)."""

    def __init__(self, lane: TimingLane, admissions: Admissions) -> None:
        self.lane, self.admissions = lane, admissions
        self.slots, self.keep_problems = admissions.slots, admissions.keep_problems
        self.prepared: dict[EvaluatorSpec, PreparedProblem] = {}
        self._preparing = threading.Lock()  # one problem is prepared once, not once per slot
        self._lock = threading.Lock()
        self.free: dict[EvaluatorSpec, list[Evaluator]] = {}
        self.all: dict[EvaluatorSpec, list[Evaluator]] = {}
        self.errors: dict[EvaluatorSpec, Exception] = {}
        # Workers of a forgotten problem's evaluators, reset, for the next problem's (a worker takes seconds to start)
        self.spare: list[Any] = []

    def take(self, spec: EvaluatorSpec) -> Evaluator:
        """An idle evaluator of ``spec``, or a new one (its problem prepared and planned the first time)."""
        with self._lock:
            if spec in self.errors:
                raise self.errors[spec]
            if spec in self.all:  # most recently used last: _forget_old forgets from the front
                self.all[spec] = self.all.pop(spec)
            free = self.free.setdefault(spec, [])
            if free:
                return free.pop()
            self.all.setdefault(spec, [])
            self._forget_old(spec)
        try:
            with self._preparing:
                prepared = self.prepared.get(spec)
                evaluator = spec.build(self.lane, prepared)
                if prepared is None:
                    self.prepared[spec] = evaluator.prepared
                    self.admissions.plan(spec, evaluator.prepared)
        except NoRoomNow:
            raise  # other work's memory, not the problem: another try may find room
        except (ProblemError, CutoffError, PlatformUnavailable) as exc:
            with self._lock:
                self.errors[spec] = exc
            raise
        with self._lock:
            self.all.setdefault(spec, []).append(evaluator)
            spare = self.spare.pop() if self.spare else None
        if spare is not None and not evaluator.adopt_worker(spare):
            spare.stop()
        return evaluator

    def taken(self, spec: EvaluatorSpec) -> Evaluator:
        """An evaluator of ``spec``, once more after others' idle ones go where none fits (``NoRoomNow``)."""
        try:
            return self.take(spec)
        except NoRoomNow:
            if not self.forget_idle_others(spec, get_platform(spec.platform)):
                raise
            return self.take(spec)

    def first(self, spec: EvaluatorSpec) -> Evaluator | None:
        """The first evaluator built for ``spec``, if any (it profiles: a profiler that failed once stays off)."""
        with self._lock:
            built = self.all.get(spec)
            return built[0] if built else None

    def give_back(self, spec: EvaluatorSpec, evaluator: Evaluator) -> None:
        with self._lock:
            if evaluator in self.all.get(spec, []):
                self.free.setdefault(spec, []).append(evaluator)
                return
        evaluator.close()  # its problem was forgotten while it worked

    def forget_idle_others(self, current: EvaluatorSpec, evaluator: Evaluator | Platform) -> int:
        """Forget the problems other than ``current`` that no evaluation uses now, as ``_forget_old``
        does, and give this process's cached device memory back (through ``evaluator``'s platform, or
        a platform); how many were forgotten."""
        with self._lock:
            idle = [spec for spec in self.all if spec != current
                    and len(self.free.get(spec, [])) == len(self.all[spec])]
            self.forget(idle)
        if idle:
            (evaluator if isinstance(evaluator, Platform) else evaluator.platform).release_memory()
        return len(idle)

    def _forget_old(self, current: EvaluatorSpec) -> None:
        """``forget`` the idle evaluators of all but the most recent problems (called with the lock held)."""
        self.forget([spec for spec in list(self.all)[:-self.keep_problems] if spec != current])

    def forget(self, specs: list[EvaluatorSpec]) -> None:
        """Close the idle evaluators of ``specs``, keeping their workers (reset) for the next
        problems, up to one per slot (called with the lock held)."""
        for spec in specs:
            for evaluator in self.free.pop(spec, []):
                worker = evaluator.hand_over_worker()
                if worker is not None and len(self.spare) < self.slots:
                    self.spare.append(worker)
                elif worker is not None:
                    worker.stop()
                evaluator.close()
            self.all.pop(spec)
            self.prepared.pop(spec, None)  # busy evaluators keep theirs until they are closed
            self.admissions.forget(spec)

    def close(self) -> None:
        """Close every evaluator and stop the spare workers."""
        with self._lock:
            evaluators = [e for group in self.all.values() for e in group]
            self.all, self.free, (spare, self.spare) = {}, {}, (self.spare, [])
        for evaluator in evaluators:
            evaluator.close()
        for worker in spare:
            worker.stop()
