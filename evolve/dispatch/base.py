"""Where candidates are evaluated: submit them, take results as they complete.

The search loop talks to a ``Dispatcher`` only: it submits every new candidate
of a generation under a key of its choosing (the store's individual id) and
then takes ``(key, result)`` pairs in whatever order they complete, committing
each as it arrives. ``InProcessDispatcher`` evaluates one candidate at a time
with one ``fitness.Evaluator`` in this process; a pool of GPU actors fits the
same three calls (``submit`` hands work to a free actor or queues it,
``next_result`` waits for whichever actor finishes first). ``profile`` takes
a parent's profile where it is evaluated, between evaluations' timings.

>>> dispatcher = InProcessDispatcher(evaluator)  # doctest: +SKIP
>>> dispatcher.submit(7, source)  # doctest: +SKIP
>>> dispatcher.next_result()  # doctest: +SKIP
(7, EvalResult(status=<Status.ACCEPTED: 'accepted'>, ...))
"""

from __future__ import annotations

import abc
import collections
import threading
import time
from collections.abc import Iterator
from typing import Any, Protocol

from fitness import EvalResult, Incumbent, Job


class Dispatcher(abc.ABC):
    """Evaluates submitted candidates; results come back in any order."""

    @abc.abstractmethod
    def submit(self, key: int, source: Job) -> None:
        """Queue ``source`` for evaluation; its result will come back under ``key``. ``source`` may be
        ``fitness.Incumbent`` instead of a candidate's text: torch.compile of the reference, timed."""

    @abc.abstractmethod
    def next_result(self) -> tuple[int, EvalResult]:
        """Block until some submitted candidate is done; return its key and result.

        Raises ``LookupError`` when nothing is in flight.
        """

    @property
    @abc.abstractmethod
    def in_flight(self) -> int:
        """How many submitted candidates have not been returned yet."""

    def wait(self, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` for a result ``next_result`` can return without waiting; True
        when there is one.

        One that evaluates on demand (in process) has one whenever anything is
        in flight: its ``next_result`` evaluates it then.
        """
        return self.in_flight > 0

    def cancel(self) -> list[int]:
        """Give up on every candidate in flight: their results will not be returned; their keys.

        Results already in are given up too (take them first). An evaluation
        already running may run on where it runs, but its result is dropped
        and its evaluator is free again once it ends. A search calls this at
        its wall limit and leaves the candidates not evaluated, for a resume.
        """
        return []

    def ready(self) -> int:
        """How many results ``next_result`` would return now without waiting.

        A pool looks for what has finished meanwhile (and hands freed
        evaluators the queued work); one that evaluates on demand has none.
        """
        return 0

    @property
    def capacity(self) -> int:
        """How many candidates it evaluates at once (evaluators times their slots)."""
        return 1

    def profile(self, source: str, runtime_ms: float | None) -> dict[str, Any] | None:
        """The profile record (``ProfileRecord.to_dict()``) of ``source``, an evaluated parent.

        ``runtime_ms`` is its measured median, for the analytic roofline. None
        when this dispatcher cannot profile (the default) or the profile was lost.
        """
        return None

    def profile_later(self, source: str, runtime_ms: float | None) -> Any:
        """Start profiling ``source``; ``profile_result`` of the handle tells when it is done.

        The default profiles at once; a pool profiles on an evaluator in the
        background, so the loop never waits for a profiler.
        """
        return _Done(self.profile(source, runtime_ms))

    def profile_result(self, handle: Any) -> tuple[bool, dict[str, Any] | None]:
        """(done, record) for a handle of ``profile_later``; the record is None when it was lost."""
        return handle.poll()

    def results(self) -> Iterator[tuple[int, EvalResult]]:
        """``next_result()`` until nothing is in flight."""
        while self.in_flight:
            yield self.next_result()

    def close(self) -> None:
        """Release what evaluates (workers, actors). Results not taken are lost."""

    def __enter__(self) -> "Dispatcher":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def evaluator_info(evaluator: Any) -> dict[str, Any]:
    """Where ``evaluator`` judges: its platform, device name and cutoff, and where the cutoff
    comes from (what a run records)."""
    return {"platform": evaluator.platform.name, "device_name": evaluator.platform.device_name(),
            "cutoff": evaluator.cutoff, "cutoff_rule": evaluator.cutoff_rule}


def plan_info(prepared: Any) -> dict[str, Any]:
    """What one evaluation of a ``PreparedProblem`` needs on the device (GB, as the plan's warnings
    say) and the phase that needs it (``fitness.judge.memory_plan.largest_phase``)."""
    from fitness.judge.memory_plan import largest_phase
    from fitness.judge.prepared import GB

    return {"footprint_gb": round(prepared.footprint() / GB, 2), "plan_phase": largest_phase(prepared)}


def at_once_note(info: dict[str, Any], slots: int) -> str:
    """What the log says of the memory plan, where it lets fewer than ``slots`` evaluations run at once
    (and how many more compile their candidates' kernels ahead meanwhile: ``fitness.judge.ahead``).

    >>> at_once_note({"at_once": 2, "footprint_gb": 30.5}, 6), at_once_note({"at_once": 6}, 6)
    ('; the memory plan lets 2 run at once (about 30.5 GB each)', '')
    >>> at_once_note({"at_once": 2, "footprint_gb": 36.6, "ahead": 2, "plan_phase": "hand-over at the main shapes"}, 6)
    '; the memory plan lets 2 run at once (about 36.6 GB each, the most in hand-over at the main shapes), 2 more compile ahead'
    """
    at_once = info.get("at_once")
    if at_once is None or at_once >= slots:
        return ""
    ahead = f", {info['ahead']} more compile ahead" if info.get("ahead") else ""
    phase = f", the most in {info['plan_phase']}" if info.get("plan_phase") else ""
    return (f"; the memory plan lets {at_once} run at once (about {info.get('footprint_gb', '?')} GB "
            f"each{phase}){ahead}")


class Evaluates(Protocol):
    """What ``InProcessDispatcher`` needs: a ``fitness.Evaluator``, or a test's fake."""

    def evaluate(self, source: str) -> EvalResult: ...

    def time_incumbent(self, job: Incumbent) -> EvalResult: ...


def run_job(evaluator: Evaluates, job: Job) -> EvalResult:
    """``job``'s record from ``evaluator``: a candidate's verdict, or the incumbent's timing."""
    return evaluator.time_incumbent(job) if isinstance(job, Incumbent) else evaluator.evaluate(job)


class InProcessDispatcher(Dispatcher):
    """Evaluates in this process, one candidate at a time, in submission order.

    The evaluator stays its creator's to close.
    """

    def __init__(self, evaluator: Evaluates) -> None:
        self.evaluator = evaluator
        self._queue: collections.deque[tuple[int, Job]] = collections.deque()
        self.usage = SlotUsage(1)
        self._profiling: list[_Background] = []

    def submit(self, key: int, source: Job) -> None:
        self._queue.append((key, source))

    def next_result(self) -> tuple[int, EvalResult]:
        if not self._queue:
            raise LookupError("no candidate is in flight")
        key, source = self._queue.popleft()
        self.usage.hold(1)
        try:
            return key, run_job(self.evaluator, source)
        finally:
            self.usage.release(1)

    @property
    def in_flight(self) -> int:
        return len(self._queue)

    def cancel(self) -> list[int]:
        keys = [key for key, _ in self._queue]
        self._queue.clear()
        return keys

    def profile(self, source: str, runtime_ms: float | None) -> dict[str, Any] | None:
        profile = getattr(self.evaluator, "profile", None)  # a test's fake evaluator may not profile
        return None if profile is None else profile(source, runtime_ms)

    def profile_later(self, source: str, runtime_ms: float | None) -> Any:
        """A hardware profile runs in a thread, beside the evaluations (the evaluator's timing lane
        keeps it off their timings); the analytic roofline, milliseconds on no device, at once."""
        profiler = getattr(self.evaluator, "profiler", None)
        if profiler is None or profiler.disabled_reason is not None:
            return _Done(self.profile(source, runtime_ms))
        handle = _Background(self.profile, source, runtime_ms)
        self._profiling = [h for h in self._profiling if h.thread.is_alive()] + [handle]
        return handle

    def close(self) -> None:
        self._queue.clear()
        for handle in self._profiling:  # a profiler's process is not left behind
            handle.thread.join()


class _Done:
    """A profile that was taken at once."""

    def __init__(self, record: dict[str, Any] | None) -> None:
        self.record = record

    def poll(self) -> tuple[bool, dict[str, Any] | None]:
        return True, self.record


class _Background:
    """A profile taken in a thread; what it raised is raised where it is polled."""

    def __init__(self, profile: Any, source: str, runtime_ms: float | None) -> None:
        self.record: dict[str, Any] | None = None
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, args=(profile, source, runtime_ms),
                                       name="kevo-profile", daemon=True)
        self.thread.start()

    def _run(self, profile: Any, source: str, runtime_ms: float | None) -> None:
        try:
            self.record = profile(source, runtime_ms)
        except BaseException as exc:  # noqa: BLE001 - handed to the loop's thread by poll()
            self.error = exc

    def poll(self) -> tuple[bool, dict[str, Any] | None]:
        if self.thread.is_alive():
            return False, None
        if self.error is not None:
            raise self.error
        return True, self.record


class SlotUsage:
    """How busy a dispatcher's evaluation slots have been: slot-seconds a candidate held over
    slot-seconds there were, from its creation (or ``SlotUsage(capacity)``) on.

    >>> usage = SlotUsage(capacity=2)
    >>> usage.hold(1); usage.release(1)  # doctest: +SKIP
    >>> usage.stats()["busy_share"]  # doctest: +SKIP
    0.5
    """

    def __init__(self, capacity: int = 0) -> None:
        self.busy_s = self.slot_s = 0.0
        self._capacity, self._held, self._mark = capacity, 0, time.monotonic()

    def resize(self, capacity: int) -> None:
        """The pool now has ``capacity`` slots (actors came or went)."""
        self._advance()
        self._capacity = capacity

    def hold(self, slots: int) -> None:
        self._advance()
        self._held += slots

    def release(self, slots: int) -> None:
        self._advance()
        self._held -= slots

    def stats(self) -> dict[str, float | None]:
        """``busy_s`` (slot-seconds held), ``slot_s`` (slot-seconds there were) and their ratio."""
        self._advance()
        share = self.busy_s / self.slot_s if self.slot_s > 0 else None
        return {"busy_s": self.busy_s, "slot_s": self.slot_s, "busy_share": share}

    def _advance(self) -> None:
        now = time.monotonic()
        elapsed, self._mark = now - self._mark, now
        self.slot_s += self._capacity * elapsed
        self.busy_s += min(self._held, self._capacity) * elapsed
