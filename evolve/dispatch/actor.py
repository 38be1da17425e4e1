"""What runs in a Ray actor: warm evaluators of one device, built from ``EvaluatorSpec``s.

``EvaluatorSpec`` (``evolve.dispatch.spec``) is plain, picklable values (the problem, its shapes, the cutoff,
the evaluation settings). ``EvaluatorActor`` is the class each Ray actor instantiates (``evolve.dispatch.ray``
wraps it with ``ray.remote``); it imports nothing of Ray, so it also runs, and is tested, in-process.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import logging
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from evolve.dispatch.base import evaluator_info, plan_info
from evolve.dispatch.spec import EvaluatorSpec, workers_beside
from fitness import CutoffError, EvalResult, Evaluator, Incumbent, Job, NoRoomNow, PreparedProblem, ProblemError, Status
from fitness.judge.ahead import compile_ahead
from fitness.judge.lane import TimingLane
from platforms import Platform, PlatformUnavailable, get_platform

log = logging.getLogger(__name__)

#: Evaluations in a row without running out of memory after which a lowered limit rises by one.
RISE_AFTER = 16


@dataclasses.dataclass(eq=False)
class _Admission:
    """One evaluation let onto the device: how many others were there as it came, and the most at once."""

    others: int
    peak: int = 0
    need: int = 0  # its problem's footprint, counted against the room while it is in flight


class EvaluatorActor:
    """What runs in each actor: warm ``Evaluator``s sharing the actor's device.

    The actor is threaded: up to ``slots`` candidates are evaluated at once, each by its own
    evaluator (its own sandboxed worker), so compiling and checking overlap while timing takes the
    device's one timing lane (``fitness.judge.lane``) and runs alone. Evaluators are kept per problem
    (``EvaluatorSpec``), so one pool of actors serves a sweep; only the ``keep_problems`` problems
    used most recently keep theirs (more than one when a sweep runs problems side by side), and the
    workers of the ones forgotten are reset and handed to the next problem's evaluators (a worker
    takes seconds to start). The evaluators of one problem share one ``PreparedProblem`` (its
    reference, held-out variants and memory plan).

    The memory plan decides how many evaluations run at once: as many slots as fit in the device's
    free memory (``PreparedProblem.slots_that_fit``); an evaluation takes its evaluator once
    admitted, so no more workers hold memory than that, except where memory binds and the room
    beside the plan's evaluations holds more workers: up to as many again take theirs before, and
    compile the candidate's kernels ahead (``fitness.judge.ahead``; with one problem at a time only). One
    that runs out on kevo's side, or while others are in flight, is tried again with the device to
    itself, and the limit falls to one fewer than the most in flight beside it; after ``RISE_AFTER``
    in a row that fit, it rises by one, up to the plan's, but not again to a level where it ran out
    after rising. Where memory limits the slots, a hardware profile counts as an evaluation while
    its program is on the device. With problems side by side, an evaluation also enters only where
    the footprints of all in flight, whatever their problem, and its own fit the room its plan saw
    (the memory free as it was prepared, and what the evaluations then in flight held), or where
    nothing else is in flight. One that runs out while other problems' evaluators sit idle is tried
    once more after those are closed and their memory given back.

    A problem the evaluator refuses (``ProblemError``, ...) is raised by ``prepare`` and
    ``evaluate``, so the driver sees the original error.
    """

    def __init__(self, home: str | None = None, slots: int = 1, keep_problems: int = 1) -> None:
        if home is not None:
            os.environ["HOME"] = home  # undo the bootstrap HOME the local head was started with
        self.lane = TimingLane()
        self.slots = slots
        # By default only the current problem keeps its evaluators: an idle worker of the last one holds device
        # memory the next one may need; handed over, it is reset first (Harness.reset), keeping only its context.
        self.keep_problems = keep_problems
        self._gate = threading.Condition()
        self._in_flight = 0  # evaluations (and, where memory binds, profiles) on the device
        self._bytes_in_flight = 0  # their problems' footprints
        # per problem: one evaluation's footprint, the room its plan saw (free memory as it was prepared, plus
        # what the evaluations in flight then held), and the evaluations beyond its limit that compile ahead
        self._need: dict[EvaluatorSpec, int] = {}
        self._room: dict[EvaluatorSpec, int] = {}
        self._extra: dict[EvaluatorSpec, int] = {}
        self._holders: collections.Counter[EvaluatorSpec] = collections.Counter()  # evaluations holding an evaluator
        self._admissions: set[_Admission] = set()
        self._turns: collections.deque[object] = collections.deque()  # waiters for admission, oldest first
        self._limit: dict[EvaluatorSpec, int] = {}  # evaluations at once, per problem
        # the most a lowered limit may rise back to (the plan's; less once a rise ran out of memory), and
        # the evaluations that ended without running out of memory since the limit last moved
        self._ceiling: dict[EvaluatorSpec, int] = {}
        self._clean: dict[EvaluatorSpec, int] = {}
        self._rose: set[EvaluatorSpec] = set()  # the limit rose since it was last lowered
        self._prepared: dict[EvaluatorSpec, PreparedProblem] = {}
        self._preparing = threading.Lock()  # one problem is prepared once, not once per slot
        self._lock = threading.Lock()
        self._free: dict[EvaluatorSpec, list[Evaluator]] = {}
        self._all: dict[EvaluatorSpec, list[Evaluator]] = {}
        self._errors: dict[EvaluatorSpec, Exception] = {}
        # Workers of a forgotten problem's evaluators, reset, for the next problem's (a worker takes seconds to start)
        self._spare: list[Any] = []
        self._profiling = threading.Condition()  # held while counting the profiles in flight
        self._profiles = 0

    def prepare(self, spec: EvaluatorSpec) -> dict[str, Any]:
        """Build the evaluators of ``spec``, one per slot that fits and one per evaluation that may compile
        ahead, their workers started side by side (so that the first evaluations do not wait for them);
        where this actor evaluates (pid, platform, device, cutoff)."""
        evaluators = [self._take(spec)]
        try:
            while len(evaluators) < self._limit.get(spec, 1) + self._extra.get(spec, 0):  # those compiling ahead too
                evaluators.append(self._take(spec))
            starting = [threading.Thread(target=e.start_worker, daemon=True) for e in evaluators]
            for thread in starting:
                thread.start()
            for thread in starting:
                thread.join()
            with self._lock:  # how many the memory plan lets run at once (of the slots)
                at_once, ahead = self._limit.get(spec, self.slots), self._extra.get(spec, 0)
            return {"pid": os.getpid(), **evaluator_info(evaluators[0]), "at_once": at_once, "ahead": ahead,
                    **plan_info(evaluators[0].prepared)}
        finally:
            for evaluator in evaluators:
                self._give_back(spec, evaluator)

    def evaluate(self, spec: EvaluatorSpec, source: Job) -> tuple[int, EvalResult]:
        """(this actor's pid, the verdict on ``source``); its evaluator taken once admitted, or to compile ahead."""
        evaluator: Evaluator | None = None
        try:
            if isinstance(source, Incumbent):  # torch.compile of the reference, with the device to itself
                with self._admitted(spec, alone=True):
                    evaluator = self._taken(spec)
                    return os.getpid(), evaluator.time_incumbent(source)
            if spec not in self._prepared:  # the problem's plan first (its limit, its room): the admission asks it
                self._give_back(spec, self._taken(spec))
            asked = time.monotonic()
            with self._holding(spec) as ahead:
                held = time.monotonic() - asked
                if ahead:  # the kernels compiled before the evaluation holds memory (fitness.judge.ahead)
                    evaluator = self._taken(spec)
                    verdict = compile_ahead(evaluator, source)
                    if verdict is not None:
                        return os.getpid(), verdict
                asked = time.monotonic()
                with self._admitted(spec) as admission:
                    waited, admitted = time.monotonic() - asked, time.time()
                    evaluator = evaluator or self._taken(spec)
                    result = evaluator.evaluate(source)
                result.admitted_s = [admitted, time.time()]
                # the waits before the evaluator's clock starts: for one of the problem's evaluators, then for room
                result.walls_s = {**(result.walls_s or {}), "wait: memory plan": held + waited,
                                  "wait: an evaluator": held}
                if result.status is Status.OUT_OF_MEMORY:
                    result = self._out_of_memory(spec, evaluator, source, admission, result)
                else:
                    self._rise_after_clean(spec)
            return os.getpid(), result
        except NoRoomNow as exc:  # out of memory as far as its run can tell; the problem is not refused for good
            return os.getpid(), EvalResult(status=Status.OUT_OF_MEMORY, reason=f"not evaluated: {exc}")
        finally:
            if evaluator is not None:
                self._give_back(spec, evaluator)

    def _out_of_memory(self, spec: EvaluatorSpec, evaluator: Evaluator, source: str, admission: "_Admission",
                       result: EvalResult) -> EvalResult:
        """``result`` ran out of memory: the limit falls where others were in flight, and the
        evaluation is tried again alone where others' work may have been the cause."""
        # other problems' idle evaluators hold memory too (references, workers): given back, this one may fit
        forgotten = self._forget_idle_others(spec, evaluator)
        if result.harness_failure or admission.peak > 1:  # others in flight at any time of it
            with self._lock:
                limit = self._limit.get(spec, self.slots)
                lowered = self._limit[spec] = max(1, min(limit, admission.peak - 1))
                self._clean[spec] = 0
                if spec in self._rose and lowered < limit:
                    self._ceiling[spec] = lowered  # it rose and ran out again: it stays here
                self._rose.discard(spec)
            if lowered < limit:
                log.warning("%s: out of memory with %d evaluation(s) and profile(s) in flight: %d at once "
                            "from now on", Path(spec.reference).name, admission.peak, lowered)
        if result.harness_failure or admission.peak > 1 or forgotten:
            first_s = (result.walls_s or {}).get("total", 0.0)
            with self._admitted(spec, alone=True):
                result = evaluator.evaluate(source)
            # the first try's time, in the record: an evaluation that took twice is seen as such
            result.walls_s = {**(result.walls_s or {}), "out of memory: first try": first_s}
        return result

    @contextlib.contextmanager
    def _holding(self, spec: EvaluatorSpec) -> Iterator[bool]:
        """A place among the evaluations of ``spec`` holding an evaluator: the limit's and ``_extra`` more
        (``workers_beside``); yields whether this one compiles ahead (``fitness.judge.ahead``) before its admission."""
        with self._gate:
            while self._holders[spec] >= self._limit.get(spec, self.slots) + self._extra.get(spec, 0):
                self._gate.wait()
            self._holders[spec] += 1
            ahead = self._extra.get(spec, 0) > 0  # only where memory binds: the limit is below the slots then
        try:
            yield ahead
        finally:
            with self._gate:
                self._holders[spec] -= 1
                self._gate.notify_all()

    def _taken(self, spec: EvaluatorSpec) -> Evaluator:
        """An evaluator of ``spec``, once more after others' idle ones go where none fits (``NoRoomNow``)."""
        try:
            return self._take(spec)
        except NoRoomNow:
            if not self._forget_idle_others(spec, get_platform(spec.platform)):
                raise
            return self._take(spec)

    @contextlib.contextmanager
    def _admitted(self, spec: EvaluatorSpec, alone: bool = False) -> Iterator["_Admission"]:
        """Wait for room under the problem's limit (``alone``: for the device to itself); yields
        how many others were in flight when this one started, and the most at once while it ran."""
        with self._gate:
            # in the order asked: under a limit below the slots, a woken waiter must not pass older ones
            ticket = object()
            self._turns.append(ticket)
            try:
                while self._turns[0] is not ticket or self._blocked(spec, alone):
                    self._gate.wait()
            finally:
                self._turns.remove(ticket)
                self._gate.notify_all()  # the next in line may fit too
            admission = _Admission(others=self._in_flight, need=self._need.get(spec, 0))
            self._in_flight += 1
            self._bytes_in_flight += admission.need
            self._admissions.add(admission)
            for each in self._admissions:
                each.peak = max(each.peak, self._in_flight)
        try:
            yield admission
        finally:
            with self._gate:
                self._in_flight -= 1
                self._bytes_in_flight -= admission.need
                self._admissions.discard(admission)
                self._gate.notify_all()

    def _blocked(self, spec: EvaluatorSpec, alone: bool) -> bool:
        """Whether an evaluation of ``spec`` must wait now (called with the gate held): its problem's
        limit is reached, or the footprints in flight and its own pass the room its plan saw."""
        if self._in_flight >= (1 if alone else self._limit.get(spec, self.slots)):
            return True
        room = self._room.get(spec)
        return self._in_flight > 0 and room is not None and self._bytes_in_flight + self._need[spec] > room

    def _rise_after_clean(self, spec: EvaluatorSpec) -> None:
        """A limit lowered for memory rises by one after ``RISE_AFTER`` evaluations in a row that did not
        run out (a crowd of profiles or of another problem's work may have been passing), up to the plan's."""
        with self._lock:
            limit, ceiling = self._limit.get(spec), self._ceiling.get(spec)
            if limit is None or ceiling is None or limit >= ceiling:
                return
            self._clean[spec] = self._clean.get(spec, 0) + 1
            if self._clean[spec] < RISE_AFTER:
                return
            self._limit[spec], self._clean[spec] = limit + 1, 0
            self._rose.add(spec)  # a rise that runs out of memory again fixes the ceiling
        log.warning("%s: %d evaluations without running out of memory: %d at once again",
                    Path(spec.reference).name, RISE_AFTER, limit + 1)
        with self._gate:
            self._gate.notify_all()

    def _memory_bound(self, spec: EvaluatorSpec) -> bool:
        """Whether the device's memory, not the slots, limits ``spec``'s evaluations at once."""
        with self._lock:
            return spec in self._limit and self._limit[spec] < self.slots

    def profile(self, spec: EvaluatorSpec, source: str, runtime_ms: float | None) -> dict[str, Any]:
        """The profile record of ``source`` on this actor's device (``Evaluator.profile``): always by the
        spec's first evaluator, so a profiler that failed once stays off for the actor."""
        with self._profiling:
            self._profiles += 1
        try:
            with self._lock:
                built = self._all.get(spec)
                evaluator = built[0] if built else None
            # where memory limits the evaluations at once, the profiled program takes one's place while
            # it is on the device (not while the tool starts or reads its report: that holds no memory)
            room = (lambda: self._admitted(spec)) if self._memory_bound(spec) else None
            taken, evaluator = evaluator is None, evaluator or self._take(spec)
            try:
                return evaluator.profile(source, runtime_ms, room=room)
            finally:
                if taken:
                    self._give_back(spec, evaluator)
        finally:
            with self._profiling:
                self._profiles -= 1
                self._profiling.notify_all()

    def lane_stats(self) -> dict[str, float]:
        """How busy this device's timing lane has been since the actor started."""
        return self.lane.stats()

    def close(self, wait_s: float = 10.0) -> int:
        """Stop the evaluators' workers; this process's id. A profile in flight has its tool stopped, and is waited
        for (up to ``wait_s``) while its temporary folder goes: the driver kills the actor next (and removes what a
        worker being started meanwhile left: ``Fleet.kill_all``)."""
        from platforms.profiling.runner import stop_tools

        deadline = time.monotonic() + wait_s
        with self._profiling:
            while self._profiles and (left := deadline - time.monotonic()) > 0:
                stop_tools()  # again each turn: a profile may start its tool after the last stop
                self._profiling.wait(timeout=min(left, 0.5))
        with self._lock:
            evaluators = [e for group in self._all.values() for e in group]
            self._all, self._free, (spare, self._spare) = {}, {}, (self._spare, [])
        for evaluator in evaluators:
            evaluator.close()
        for worker in spare:
            worker.stop()
        return os.getpid()

    def _take(self, spec: EvaluatorSpec) -> Evaluator:
        with self._lock:
            if spec in self._errors:
                raise self._errors[spec]
            if spec in self._all:  # most recently used last: _forget_old forgets from the front
                self._all[spec] = self._all.pop(spec)
            free = self._free.setdefault(spec, [])
            if free:
                return free.pop()
            self._all.setdefault(spec, [])
            self._forget_old(spec)
        try:
            with self._preparing:
                prepared = self._prepared.get(spec)
                evaluator = spec.build(self.lane, prepared)
                if prepared is None:
                    self._prepared[spec] = evaluator.prepared
                    fit = evaluator.prepared.slots_that_fit(self.slots)
                    with self._gate:
                        held = self._bytes_in_flight
                    with self._lock:
                        self._limit[spec] = self._ceiling[spec] = fit
                        self._need[spec] = need = evaluator.prepared.footprint()
                        room = self._room[spec] = evaluator.prepared.platform.free_memory() + held
                        # one problem at a time only: side by side, others' rooms would hold the extra workers
                        ahead = spec.settings.compile_ahead and self.keep_problems == 1
                        self._extra[spec] = workers_beside(evaluator.prepared.platform, room, fit, self.slots, need, on=ahead)
        except NoRoomNow:
            raise  # other work's memory, not the problem: another try may find room
        except (ProblemError, CutoffError, PlatformUnavailable) as exc:
            with self._lock:
                self._errors[spec] = exc
            raise
        with self._lock:
            self._all.setdefault(spec, []).append(evaluator)
            spare = self._spare.pop() if self._spare else None
        if spare is not None and not evaluator.adopt_worker(spare):
            spare.stop()
        return evaluator

    def _give_back(self, spec: EvaluatorSpec, evaluator: Evaluator) -> None:
        with self._lock:
            if evaluator in self._all.get(spec, []):
                self._free.setdefault(spec, []).append(evaluator)
                return
        evaluator.close()  # its problem was forgotten while it worked

    def _forget_idle_others(self, current: EvaluatorSpec, evaluator: Evaluator | Platform) -> int:
        """Forget the problems other than ``current`` that no evaluation uses now, as ``_forget_old``
        does, and give this process's cached device memory back (through ``evaluator``'s platform, or
        a platform); how many were forgotten."""
        with self._lock:
            idle = [spec for spec in self._all if spec != current
                    and len(self._free.get(spec, [])) == len(self._all[spec])]
            self._forget(idle)
        if idle:
            (evaluator if isinstance(evaluator, Platform) else evaluator.platform).release_memory()
        return len(idle)

    def _forget_old(self, current: EvaluatorSpec) -> None:
        """``_forget`` the idle evaluators of all but the most recent problems (called with the lock held)."""
        self._forget([spec for spec in list(self._all)[:-self.keep_problems] if spec != current])

    def _forget(self, specs: list[EvaluatorSpec]) -> None:
        """Close the idle evaluators of ``specs``, keeping their workers (reset) for the next
        problems, up to one per slot (called with the lock held)."""
        for spec in specs:
            for evaluator in self._free.pop(spec, []):
                worker = evaluator.hand_over_worker()
                if worker is not None and len(self._spare) < self.slots:
                    self._spare.append(worker)
                elif worker is not None:
                    worker.stop()
                evaluator.close()
            self._all.pop(spec)
            self._prepared.pop(spec, None)  # busy evaluators keep theirs until they are closed
            for kept in (self._limit, self._ceiling, self._clean, self._extra):
                kept.pop(spec, None)
            self._rose.discard(spec)
