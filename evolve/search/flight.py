"""What is in flight: candidates handed to the dispatcher, and LLM requests whose replies will make more.

``Flight.take`` is where the loop waits. It commits each result as it lands
(a failed LLM child goes back to its model from here, ``Breeder.judged``),
and turns each LLM reply into a stored, submitted child as it lands
(``Breeder.answer``), so evaluators work while the model writes. It waits
for a reply only while an evaluator is free: with one evaluator in this
process, for the oldest request (so a run takes its replies in the order
it asked them, and a resumed run replays it); with a pool of them, for
whichever lands first, looking for results every ``POLL_S`` meanwhile.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from evolve.dispatch.base import Dispatcher
from evolve.search.asking import Ask
from evolve.search.ledger import Ledger
from evolve.search.population import Candidate
from evolve.search.variation import Breeder
from population_store import RunStore

log = logging.getLogger(__name__)

POLL_S = 0.05  # how often a pool looks for results while it waits for an LLM reply


class Flight:
    """Candidates handed to the dispatcher whose results have not been taken yet, and the LLM's
    requests whose replies will make more."""

    def __init__(self, dispatcher: Dispatcher, store: RunStore, ledger: Ledger, breeder: Breeder,
                 max_evaluations: int, on_result: Callable[[Candidate], None] = lambda candidate: None) -> None:
        self.dispatcher, self.store, self.ledger, self.breeder = dispatcher, store, ledger, breeder
        self.max_evaluations, self.on_result = max_evaluations, on_result
        self.outstanding: dict[int, Candidate] = {}
        self._landed: list[Candidate] = []
        self.generation = 0  # the generation being made: a repair asked now belongs to it

    @property
    def busy(self) -> bool:
        """Whether anything is still to land: a result, or an LLM reply."""
        return bool(self.outstanding) or (self.breeder.llm is not None and self.breeder.llm.waiting > 0)

    def submit(self, candidates: list[Candidate]) -> None:
        for candidate in candidates:
            if candidate.result is not None:  # committed before a resume: it lands at once
                self._landed.append(candidate)
                self._judged(candidate)
            elif candidate.id not in self.outstanding:
                self.outstanding[candidate.id] = candidate
                self.dispatcher.submit(candidate.id, candidate.source)

    def resume(self, ids: list[int]) -> None:
        """Submit again what was in flight at the checkpoint (taking what was committed since)."""
        self.submit([Candidate.from_individual(self.store.get(i)) for i in ids])

    def take(self, until: int, deadline: float | None = None, asks_until: int | None = None) -> None:
        """Commit results and take LLM replies as they land, until at most ``until`` candidates are
        being evaluated, every result already in is taken, and at most ``asks_until`` LLM requests
        wait, none of them queued (default: one fewer than ``llm.concurrency``, room for the next
        generation's); or until ``deadline`` (``time.monotonic``).

        A reply is waited for only while an evaluator is free: with one evaluator in this process, the
        oldest request's (a run takes its replies in the order it asked, so a resume replays it); with
        a pool, whichever lands first, while results are taken as they come.
        """
        dispatcher, llm = self.dispatcher, self.breeder.llm
        pool = dispatcher.capacity > 1
        if llm is not None:
            asks_until = max(0, llm.concurrency - 1 if asks_until is None else asks_until)
        while True:
            if llm is not None and pool:
                self._replies(llm.landed())
            if dispatcher.ready():
                self._commit(*dispatcher.next_result())
                continue
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return
            asking = llm is not None and (llm.queued > 0 or llm.waiting > asks_until)
            if dispatcher.in_flight <= until and not asking:
                return
            if dispatcher.in_flight and (dispatcher.in_flight >= dispatcher.capacity or not llm or not llm.waiting):
                if left is not None and not dispatcher.wait(left):
                    continue  # the deadline passed first
                self._commit(*dispatcher.next_result())
            elif pool or left is not None:
                self._replies(llm.landed(min(POLL_S, left or POLL_S) if dispatcher.in_flight else left))
            else:
                self._replies([llm.next()])

    def take_one(self, deadline: float | None = None) -> None:
        """Take the next result, or, with none being evaluated, the next LLM reply."""
        waiting = self.breeder.llm.waiting if self.breeder.llm is not None else 0
        if self.outstanding:
            self.take(len(self.outstanding) - 1, deadline, asks_until=waiting)
        elif waiting:
            self.take(0, deadline, asks_until=waiting - 1)

    def _commit(self, key: int, result: Any) -> None:
        record = result.to_dict()
        self.store.set_result(key, record, record["status"], record["runtime_ms"])
        candidate = self.outstanding.pop(key)
        candidate.record(record)
        self._landed.append(candidate)
        self.on_result(candidate)
        self._judged(candidate)

    def _judged(self, candidate: Candidate) -> None:
        """A failed LLM child goes back to its model (``Breeder.judged``) while the budget has a place."""
        llm = self.breeder.llm
        if llm is not None and not candidate.accepted and self.max_evaluations - self.store.count() - llm.waiting > 0:
            self.breeder.judged(candidate, self.generation)

    def _replies(self, replies: list[tuple[Ask, Any]]) -> None:
        """Store and submit the children that LLM replies give (repairs are asked by the breeder)."""
        for ask, proposal in replies:
            child = self.breeder.answer(ask, proposal, self.ledger.seen)
            if child is not None:
                candidate = self.ledger.admit(child, ask.generation, ask.island)
                self.breeder.expect([(candidate, child)])
                self.submit([candidate])

    def landed(self) -> list[Candidate]:
        """Results taken since the last call."""
        landed, self._landed = self._landed, []
        return landed

    def cancel(self) -> list[int]:
        """Give up on the candidates in flight (the wall limit): they stay pending in the store and
        outstanding here, so the checkpoint lists them in flight and a resume evaluates them."""
        if self.outstanding:
            self.dispatcher.cancel()
            log.info("wall limit: %d candidate(s) in flight left pending for a resume", len(self.outstanding))
        return sorted(self.outstanding)
