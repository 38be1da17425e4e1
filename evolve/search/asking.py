"""The LLM's requests in flight: numbered, sent within ``llm.concurrency`` and the budget, taken as they land.

Variation plans an LLM child as an ``Ask`` (the request, and the place its
child fills: generation, island, lineage, what it is credited to) and hands
it to ``LlmOperators.add``. An ask is sent at once while fewer than
``concurrency`` requests are in flight and the budget allows one more (the
replies in flight, at the mean cost of a reply so far, must fit in what is
left of ``max_cost_usd``); else it queues. The loop evaluates meanwhile and
takes replies as they land: ``next()`` waits for the oldest request sent,
``landed(timeout)`` returns those in (waiting up to ``timeout`` for one).

Taking the oldest first is what keeps a run reproducible: with an
in-process dispatcher the loop waits for a reply only when it has nothing
to evaluate, and then for the oldest, so the same run takes its replies in
the same order whatever order they land in, and a resumed run replays it.
The asks still waiting are part of the loop's checkpoint (``state``), so a
resumed run asks the same questions, and the replies that had landed come
from the run's cache.
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Iterable, Sequence
from typing import Any, Protocol

from operators import Proposal, Request
from operators.llm import Ticket
from population_store import RunStore

#: The event a request that gave no new kernel leaves in the run.
FAILED_EVENT = "llm_proposal_failed"


class Proposes(Protocol):
    """What the LLM operators need: an ``operators.LlmProposer``."""

    @property
    def exhausted(self) -> bool: ...

    @property
    def spent_usd(self) -> float: ...

    def start(self, request: Request) -> Ticket: ...

    def finish(self, ticket: Ticket) -> Proposal: ...

    def wait(self, tickets: Iterable[Ticket], timeout: float | None = None) -> list[Ticket]: ...

    def propose(self, requests: Sequence[Request]) -> list[Proposal]: ...


@dataclasses.dataclass
class Ask:
    """A place of the search waiting for an LLM reply, and where the child it gives goes."""

    request: Request
    generation: int  # the generation the child is made in
    island: int
    parents: list[int]  # the child's lineage: the request's parents, or the failed attempt a repair fixes
    bottleneck: str  # the class of the kernel to improve
    target: int  # the kernel to improve (a repair's too): a reply without a kernel leaves a mutation of it
    credit: str  # the operator the child (or a reply without one) is credited to
    parent_ms: float | None = None  # the time to beat
    parent_spread: float | None = None
    turn: int = 0  # 0 for a first attempt, n for the n-th repair
    ticket: Ticket | None = dataclasses.field(default=None, compare=False, repr=False)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready, for the checkpoint (without the ticket: a resume sends it again)."""
        data = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "ticket"}
        return {**data, "request": self.request.to_dict()}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Ask":
        return cls(**{**data, "request": Request.from_dict(data["request"])})


class LlmOperators:
    """The run's LLM: its proposer, the request counter, the requests in flight, and whether its budget is spent.

    ``samples``, ``exhausted`` and the asks waiting (``state``) are part of the
    loop's checkpoint: a resumed run numbers its requests on from there,
    chooses LLM operators exactly when the run it continues did, and sends
    again what was in flight.
    """

    def __init__(self, proposer: Proposes, store: RunStore, concurrency: int = 1, max_cost_usd: float | None = None,
                 samples: int = 0, exhausted: bool = False, asks: Iterable[Ask] = ()) -> None:
        self.proposer, self.store = proposer, store
        self.concurrency, self.max_cost_usd = concurrency, max_cost_usd
        self.samples, self.exhausted = samples, exhausted
        self._queue: collections.deque[Ask] = collections.deque()
        self._sent: list[Ask] = []
        self._paid = (0, 0.0)  # replies paid for in this session, and their cost
        # a generation replayed after a resume asks again (from the cache): say each failure once
        self._told = {e["data"].get("sample") for e in store.events(FAILED_EVENT)}
        for ask in asks:
            self.add(ask)

    def number(self) -> int:
        """The next request's sample number."""
        self.samples += 1
        return self.samples - 1

    @property
    def waiting(self) -> int:
        """Asks whose reply has not been taken: those in flight and those queued."""
        return len(self._sent) + len(self._queue)

    @property
    def queued(self) -> int:
        """Asks not sent yet (``concurrency`` requests are in flight, or the budget holds them back)."""
        return len(self._queue)

    def add(self, ask: Ask) -> None:
        """Send ``ask``'s request now if there is room, else queue it."""
        self._queue.append(ask)
        self._send()

    def next(self) -> tuple[Ask, Proposal]:
        """The oldest request sent, and its proposal (waiting for it)."""
        if not self._sent:
            self._send()
        return self._take(self._sent[0])

    def landed(self, timeout: float | None = 0.0) -> list[tuple[Ask, Proposal]]:
        """The asks whose replies are in, oldest first, waiting up to ``timeout`` seconds (None: for ever) for one."""
        done = {id(t) for t in self.proposer.wait([a.ticket for a in self._sent if a.ticket], timeout)}
        return [self._take(ask) for ask in list(self._sent) if id(ask.ticket) in done]

    def propose(self, requests: Sequence[Request]) -> list[Proposal]:
        """Proposals for ``requests`` at once (the first kernels of a run without seeds)."""
        proposals = self.proposer.propose(requests) if requests else []
        self.exhausted = self.exhausted or self.proposer.exhausted
        return proposals

    def failed(self, proposal: Proposal, request: Request, reason: str | None = None) -> None:
        """Record in the run that ``request`` gave no new kernel (once per request)."""
        if request.sample in self._told:
            return
        self._told.add(request.sample)
        self.store.record_event(FAILED_EVENT, {
            "reason": reason or proposal.reason, "operator": proposal.operator, "parents": list(proposal.parents),
            "model": proposal.model, "focus": proposal.focus.value, "sample": request.sample,
            "repair": request.repair.turn if request.repair is not None else 0})

    def state(self) -> list[dict[str, Any]]:
        """The asks waiting, in the order they were made, for the checkpoint."""
        return [ask.to_dict() for ask in [*self._sent, *self._queue]]

    def _take(self, ask: Ask) -> tuple[Ask, Proposal]:
        assert ask.ticket is not None
        proposal = self.proposer.finish(ask.ticket)
        self._sent.remove(ask)
        if proposal.usage.cost_usd and not proposal.usage.cached:
            self._paid = (self._paid[0] + 1, self._paid[1] + proposal.usage.cost_usd)
        self.exhausted = self.exhausted or self.proposer.exhausted
        self._send()
        return ask, proposal

    def _send(self) -> None:
        while self._queue and len(self._sent) < self.concurrency and self._affordable():
            ask = self._queue.popleft()
            ask.ticket = self.proposer.start(ask.request)
            self._sent.append(ask)

    def _affordable(self) -> bool:
        """Whether one more request in flight fits the budget (at the mean cost of a reply so far)."""
        paid, cost = self._paid
        if self.max_cost_usd is None or not self._sent or not paid:
            return True  # the proposer refuses, without a request, once the budget is spent
        return self.proposer.spent_usd + (len(self._sent) + 1) * cost / paid <= self.max_cost_usd
