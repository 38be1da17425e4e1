"""Admission under the memory plan: how many evaluations of each problem an actor lets onto its device at once.

``Admissions`` (owned by ``evolve.dispatch.actor.EvaluatorActor``) holds each problem's limit, the footprint
of one of its evaluations and the room its plan saw; evaluations wait their turn for room, in the order asked.
The limit falls when an evaluation runs out of memory with others in flight, and rises again after
``RISE_AFTER`` in a row that fit.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import logging
import threading
from collections.abc import Iterator
from pathlib import Path

from evolve.dispatch.spec import EvaluatorSpec, workers_beside
from fitness import PreparedProblem

log = logging.getLogger(__name__)

#: Evaluations in a row without running out of memory after which a lowered limit rises by one.
RISE_AFTER = 16


@dataclasses.dataclass(eq=False)
class Admission:
    """One evaluation let onto the device: how many others were there as it came, and the most at once."""

    others: int
    peak: int = 0
    need: int = 0  # its problem's footprint, counted against the room while it is in flight


class Admissions:
    """The evaluations on one device, and each problem's limit of them at once (see ``EvaluatorActor``)."""

    def __init__(self, slots: int, keep_problems: int) -> None:
        self.slots, self.keep_problems = slots, keep_problems
        self.gate = threading.Condition()
        self.in_flight = 0  # evaluations (and, where memory binds, profiles) on the device
        self.bytes_in_flight = 0  # their problems' footprints
        # per problem: one evaluation's footprint, the room its plan saw (free memory as it was prepared, plus
        # what the evaluations in flight then held), and the evaluations beyond its limit that compile ahead
        self.need: dict[EvaluatorSpec, int] = {}
        self.room: dict[EvaluatorSpec, int] = {}
        self.extra: dict[EvaluatorSpec, int] = {}
        self._holders: collections.Counter[EvaluatorSpec] = collections.Counter()  # evaluations holding an evaluator
        self._admissions: set[Admission] = set()
        self.turns: collections.deque[object] = collections.deque()  # waiters for admission, oldest first
        self.limit: dict[EvaluatorSpec, int] = {}  # evaluations at once, per problem
        # the most a lowered limit may rise back to (the plan's; less once a rise ran out of memory), and
        # the evaluations that ended without running out of memory since the limit last moved
        self._ceiling: dict[EvaluatorSpec, int] = {}
        self._clean: dict[EvaluatorSpec, int] = {}
        self._rose: set[EvaluatorSpec] = set()  # the limit rose since it was last lowered
        self._lock = threading.Lock()

    def plan(self, spec: EvaluatorSpec, prepared: PreparedProblem) -> None:
        """``spec``'s limit, footprint, room and evaluations compiling ahead, from its freshly ``prepared`` problem."""
        fit = prepared.slots_that_fit(self.slots)
        with self.gate:
            held = self.bytes_in_flight
        with self._lock:
            self.limit[spec] = self._ceiling[spec] = fit
            self.need[spec] = need = prepared.footprint()
            room = self.room[spec] = prepared.platform.free_memory() + held
            # one problem at a time only: side by side, others' rooms would hold the extra workers
            ahead = spec.settings.compile_ahead and self.keep_problems == 1
            self.extra[spec] = workers_beside(prepared.platform, room, fit, self.slots, need, on=ahead)

    def at_once(self, spec: EvaluatorSpec) -> tuple[int, int]:
        """(how many evaluations of ``spec`` the memory plan lets run at once, how many more compile ahead)."""
        with self._lock:
            return self.limit.get(spec, self.slots), self.extra.get(spec, 0)

    def forget(self, spec: EvaluatorSpec) -> None:
        """Drop ``spec``'s limit and what moves it: a problem prepared again is planned again."""
        with self._lock:
            for kept in (self.limit, self._ceiling, self._clean, self.extra):
                kept.pop(spec, None)
            self._rose.discard(spec)

    @contextlib.contextmanager
    def holding(self, spec: EvaluatorSpec) -> Iterator[bool]:
        """A place among the evaluations of ``spec`` holding an evaluator: the limit's and ``extra`` more
        (``workers_beside``); yields whether this one compiles ahead (``fitness.judge.ahead``) before its admission."""
        with self.gate:
            while self._holders[spec] >= self.limit.get(spec, self.slots) + self.extra.get(spec, 0):
                self.gate.wait()
            self._holders[spec] += 1
            ahead = self.extra.get(spec, 0) > 0  # only where memory binds: the limit is below the slots then
        try:
            yield ahead
        finally:
            with self.gate:
                self._holders[spec] -= 1
                self.gate.notify_all()

    @contextlib.contextmanager
    def admitted(self, spec: EvaluatorSpec, alone: bool = False) -> Iterator[Admission]:
        """Wait for room under the problem's limit (``alone``: for the device to itself); yields
        how many others were in flight when this one started, and the most at once while it ran."""
        with self.gate:
            # in the order asked: under a limit below the slots, a woken waiter must not pass older ones
            ticket = object()
            self.turns.append(ticket)
            try:
                while self.turns[0] is not ticket or self._blocked(spec, alone):
                    self.gate.wait()
            finally:
                self.turns.remove(ticket)
                self.gate.notify_all()  # the next in line may fit too
            admission = Admission(others=self.in_flight, need=self.need.get(spec, 0))
            self.in_flight += 1
            self.bytes_in_flight += admission.need
            self._admissions.add(admission)
            for each in self._admissions:
                each.peak = max(each.peak, self.in_flight)
        try:
            yield admission
        finally:
            with self.gate:
                self.in_flight -= 1
                self.bytes_in_flight -= admission.need
                self._admissions.discard(admission)
                self.gate.notify_all()

    def _blocked(self, spec: EvaluatorSpec, alone: bool) -> bool:
        """Whether an evaluation of ``spec`` must wait now (called with the gate held): its problem's
        limit is reached, or the footprints in flight and its own pass the room its plan saw."""
        if self.in_flight >= (1 if alone else self.limit.get(spec, self.slots)):
            return True
        room = self.room.get(spec)
        return self.in_flight > 0 and room is not None and self.bytes_in_flight + self.need[spec] > room

    def lower(self, spec: EvaluatorSpec, peak: int) -> None:
        """An evaluation of ``spec`` ran out of memory with ``peak`` in flight at most: the limit falls below that."""
        with self._lock:
            limit = self.limit.get(spec, self.slots)
            lowered = self.limit[spec] = max(1, min(limit, peak - 1))
            self._clean[spec] = 0
            if spec in self._rose and lowered < limit:
                self._ceiling[spec] = lowered  # it rose and ran out again: it stays here
            self._rose.discard(spec)
        if lowered < limit:
            log.warning("%s: out of memory with %d evaluation(s) and profile(s) in flight: %d at once "
                        "from now on", Path(spec.reference).name, peak, lowered)

    def rise_after_clean(self, spec: EvaluatorSpec) -> None:
        """A limit lowered for memory rises by one after ``RISE_AFTER`` evaluations in a row that did not
        run out (a crowd of profiles or of another problem's work may have been passing), up to the plan's."""
        with self._lock:
            limit, ceiling = self.limit.get(spec), self._ceiling.get(spec)
            if limit is None or ceiling is None or limit >= ceiling:
                return
            self._clean[spec] = self._clean.get(spec, 0) + 1
            if self._clean[spec] < RISE_AFTER:
                return
            self.limit[spec], self._clean[spec] = limit + 1, 0
            self._rose.add(spec)  # a rise that runs out of memory again fixes the ceiling
        log.warning("%s: %d evaluations without running out of memory: %d at once again",
                    Path(spec.reference).name, RISE_AFTER, limit + 1)
        with self.gate:
            self.gate.notify_all()

    def memory_bound(self, spec: EvaluatorSpec) -> bool:
        """Whether the device's memory, not the slots, limits ``spec``'s evaluations at once."""
        with self._lock:
            return spec in self.limit and self.limit[spec] < self.slots
