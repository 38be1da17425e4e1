"""What runs in a Ray actor: warm evaluators of one device, built from ``EvaluatorSpec``s.

``EvaluatorSpec`` (``evolve.dispatch.spec``) is plain, picklable values (the problem, its shapes, the cutoff,
the evaluation settings). ``EvaluatorActor`` is the class each Ray actor instantiates (``evolve.dispatch.ray``
wraps it with ``ray.remote``); it imports nothing of Ray, so it also runs, and is tested, in-process. It is
the remote surface; it keeps its evaluators in ``WarmEvaluators`` (``evolve.dispatch.evaluators``) and lets
evaluations onto the device through ``Admissions`` (``evolve.dispatch.admission``).
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Iterator
from typing import Any

from evolve.dispatch.admission import Admission, Admissions
from evolve.dispatch.base import evaluator_info, plan_info
from evolve.dispatch.evaluators import WarmEvaluators
from evolve.dispatch.spec import EvaluatorSpec
from fitness import EvalResult, Evaluator, Incumbent, Job, NoRoomNow, Status
from fitness.judge.ahead import compile_ahead
from fitness.judge.lane import TimingLane


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
        self.admissions = Admissions(slots, keep_problems)
        self.evaluators = WarmEvaluators(self.lane, self.admissions)
        self._profiling = threading.Condition()  # held while counting the profiles in flight
        self._profiles = 0

    def prepare(self, spec: EvaluatorSpec) -> dict[str, Any]:
        """Build the evaluators of ``spec``, one per slot that fits and one per evaluation that may compile
        ahead, their workers started side by side (so that the first evaluations do not wait for them);
        where this actor evaluates (pid, platform, device, cutoff)."""
        admissions, evaluators = self.admissions, [self.evaluators.take(spec)]
        try:
            while len(evaluators) < admissions.limit.get(spec, 1) + admissions.extra.get(spec, 0):  # ahead too
                evaluators.append(self.evaluators.take(spec))
            starting = [threading.Thread(target=e.start_worker, daemon=True) for e in evaluators]
            for thread in starting:
                thread.start()
            for thread in starting:
                thread.join()
            at_once, ahead = admissions.at_once(spec)  # how many the memory plan lets run at once (of the slots)
            return {"pid": os.getpid(), **evaluator_info(evaluators[0]), "at_once": at_once, "ahead": ahead,
                    **plan_info(evaluators[0].prepared)}
        finally:
            for evaluator in evaluators:
                self.evaluators.give_back(spec, evaluator)

    def evaluate(self, spec: EvaluatorSpec, source: Job) -> tuple[int, EvalResult]:
        """(this actor's pid, the verdict on ``source``); its evaluator taken once admitted, or to compile ahead."""
        evaluator: Evaluator | None = None
        admissions, evaluators = self.admissions, self.evaluators
        try:
            if isinstance(source, Incumbent):  # torch.compile of the reference, with the device to itself
                with admissions.admitted(spec, alone=True):
                    evaluator = evaluators.taken(spec)
                    return os.getpid(), evaluator.time_incumbent(source)
            if spec not in evaluators.prepared:  # the problem's plan first (its limit, its room): the admission asks it
                evaluators.give_back(spec, evaluators.taken(spec))
            asked = time.monotonic()
            with admissions.holding(spec) as ahead:
                held = time.monotonic() - asked
                if ahead:  # the kernels compiled before the evaluation holds memory (fitness.judge.ahead)
                    evaluator = evaluators.taken(spec)
                    verdict = compile_ahead(evaluator, source)
                    if verdict is not None:
                        return os.getpid(), verdict
                asked = time.monotonic()
                with admissions.admitted(spec) as admission:
                    waited, admitted = time.monotonic() - asked, time.time()
                    evaluator = evaluator or evaluators.taken(spec)
                    result = evaluator.evaluate(source)
                result.admitted_s = [admitted, time.time()]
                # the waits before the evaluator's clock starts: for one of the problem's evaluators, then for room
                result.walls_s = {**(result.walls_s or {}), "wait: memory plan": held + waited,
                                  "wait: an evaluator": held}
                if result.status is Status.OUT_OF_MEMORY:
                    result = self._out_of_memory(spec, evaluator, source, admission, result)
                else:
                    admissions.rise_after_clean(spec)
            return os.getpid(), result
        except NoRoomNow as exc:  # out of memory as far as its run can tell; the problem is not refused for good
            return os.getpid(), EvalResult(status=Status.OUT_OF_MEMORY, reason=f"not evaluated: {exc}")
        finally:
            if evaluator is not None:
                evaluators.give_back(spec, evaluator)

    def _out_of_memory(self, spec: EvaluatorSpec, evaluator: Evaluator, source: str, admission: Admission,
                       result: EvalResult) -> EvalResult:
        """``result`` ran out of memory: the limit falls where others were in flight, and the
        evaluation is tried again alone where others' work may have been the cause."""
        # other problems' idle evaluators hold memory too (references, workers): given back, this one may fit
        forgotten = self.evaluators.forget_idle_others(spec, evaluator)
        if result.harness_failure or admission.peak > 1:  # others in flight at any time of it
            self.admissions.lower(spec, admission.peak)
        if result.harness_failure or admission.peak > 1 or forgotten:
            first_s = (result.walls_s or {}).get("total", 0.0)
            with self.admissions.admitted(spec, alone=True):
                result = evaluator.evaluate(source)
            # the first try's time, in the record: an evaluation that took twice is seen as such
            result.walls_s = {**(result.walls_s or {}), "out of memory: first try": first_s}
        return result

    def profile(self, spec: EvaluatorSpec, source: str, runtime_ms: float | None) -> dict[str, Any]:
        """The profile record of ``source`` on this actor's device (``Evaluator.profile``): always by the
        spec's first evaluator, so a profiler that failed once stays off for the actor."""
        with self._counted_profile():
            evaluator = self.evaluators.first(spec)
            # where memory limits the evaluations at once, the profiled program takes one's place while
            # it is on the device (not while the tool starts or reads its report: that holds no memory)
            room = (lambda: self.admissions.admitted(spec)) if self.admissions.memory_bound(spec) else None
            taken, evaluator = evaluator is None, evaluator or self.evaluators.take(spec)
            try:
                return evaluator.profile(source, runtime_ms, room=room)
            finally:
                if taken:
                    self.evaluators.give_back(spec, evaluator)

    @contextlib.contextmanager
    def _counted_profile(self) -> Iterator[None]:
        """A profile in flight, counted while it runs (``close`` waits for it)."""
        with self._profiling:
            self._profiles += 1
        try:
            yield
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
        self.evaluators.close()
        return os.getpid()
