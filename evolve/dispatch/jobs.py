"""The candidates a ``RayDispatcher`` holds, and the slots of the actors that evaluate them.

``Slots`` knows which slots of the fleet's actors are free, the slots in use (``SlotUsage``) and each actor's
process id, and forgets a dead actor, starting its replacement. ``Jobs`` queues candidates, hands them to free
slots, takes their results from Ray as they complete, and evaluates again one whose actor died: with an actor
to itself, so that one that takes that actor down too (``MAX_ACTOR_DEATHS`` in all) is ``crashed``. A lost
node is never a candidate's doing: its candidates go back to the queue as they were.
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import time
from typing import Any

from evolve.dispatch.base import SlotUsage
from evolve.dispatch.connect import REFUSALS, actor_errors
from evolve.dispatch.fleet import Fleet
from evolve.dispatch.spec import EvaluatorSpec
from fitness import EvalResult, Job, Status

log = logging.getLogger(__name__)

#: A candidate whose evaluation has killed this many actors is recorded as crashed.
MAX_ACTOR_DEATHS = 2


@dataclasses.dataclass
class _Job:
    key: Any
    source: Job  # a candidate's text, or the incumbent (fitness.Incumbent)
    spec: EvaluatorSpec
    actor: Any = None
    solo: bool = False  # evaluated with its actor to itself (a retry after the actor died)
    held: int = 1  # slots of ``actor`` it holds
    node: str | None = None  # where ``actor`` lives
    dropped: bool = False  # cancelled while it ran: its result is not returned


class Slots:
    """The fleet's actors' slots: ``idle`` (one entry per free slot), ``usage``, and ``pids`` (actor -> process id)."""

    def __init__(self, fleet: Fleet, per_actor: int) -> None:
        self.fleet, self.per_actor = fleet, per_actor
        self.idle: list[Any] = []
        self.pids: dict[Any, int] = {}  # actor handle -> its process id, once known
        self.usage = SlotUsage()
        self._lost: dict[Any, bool] = {}  # a dead actor -> whether its node was still alive
        self._waiting_for_nodes = False

    @property
    def capacity(self) -> int:
        return len(self.fleet.actors) * self.per_actor

    def add(self, actors: list[Any]) -> None:
        if actors:
            self._waiting_for_nodes = False
        for actor in actors:
            self.idle.extend([actor] * self.per_actor)
        self.usage.resize(self.capacity)

    def claim(self, solo: bool) -> tuple[Any, int] | None:
        """(an actor, the slots of it taken): one free slot, or (``solo``) every slot of an actor with all of
        them free; None while there is none (a solo job waits, and nothing is handed out meanwhile)."""
        if solo:
            actor = next((a for a in self.fleet.actors if self.idle.count(a) == self.per_actor), None)
            if actor is None:
                return None
            self.idle = [a for a in self.idle if a is not actor]
            return actor, self.per_actor
        return (self.idle.pop(), 1) if self.idle else None

    def lose(self, actor: Any, exc: Exception | None) -> bool:
        """Forget a dead ``actor`` (once), starting its replacement where the plan has room;
        whether its node was still alive (the actor itself died)."""
        if actor not in self._lost:
            alive = self.fleet.drop(actor)
            self._lost[actor] = alive
            self.pids.pop(actor, None)
            self.idle = [a for a in self.idle if a is not actor]
            if exc is not None:
                log.warning("a Ray evaluator actor died (%s%s)", type(exc).__name__,
                            "" if alive else "; its node is gone")
            self.add(self.fleet.fill())
        return self._lost[actor]

    def wait_for_nodes(self, queued: int, timeout_s: float) -> None:
        """No evaluator is alive to take the ``queued`` candidates: wait ``timeout_s`` for a node to join."""
        if not self._waiting_for_nodes:
            log.warning("no evaluator actor is alive: %d candidate(s) wait for a node to join", queued)
        self._waiting_for_nodes = True
        time.sleep(timeout_s)


class Jobs:
    """The candidates in flight: ``queue``d, ``running`` (object ref -> job), or with their ``verdicts`` in."""

    def __init__(self, ray: Any, slots: Slots) -> None:
        self._ray, self._slots, self._fleet = ray, slots, slots.fleet
        self.queue: collections.deque[_Job] = collections.deque()
        self.running: dict[Any, _Job] = {}
        self.verdicts: collections.deque[tuple[Any, EvalResult | BaseException]] = collections.deque()
        self.deaths: collections.Counter = collections.Counter()
        self.served_by: dict[Any, int] = {}  # key -> pid of the actor whose result was returned
        self.served_on: collections.Counter[str] = collections.Counter()  # node id -> results returned
        self.info: dict[str, Any] = {}  # where the problem is evaluated: a crashed candidate's record says

    def submit(self, key: Any, source: Job, spec: EvaluatorSpec) -> None:
        self.queue.append(_Job(key, source, spec))
        self.hand_out()

    def next_outcome(self) -> tuple[Any, EvalResult | BaseException]:
        while not self.verdicts:
            if not self.in_flight:
                raise LookupError("no candidate is in flight")
            self.pump(self._fleet.check_s)
        return self.verdicts.popleft()

    def wait(self, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while not self.verdicts and self.in_flight and (left := deadline - time.monotonic()) > 0:
            self.pump(min(left, self._fleet.check_s))
        return bool(self.verdicts)

    @property
    def in_flight(self) -> int:
        running = sum(1 for job in self.running.values() if not job.dropped)
        return len(self.queue) + running + len(self.verdicts)

    def cancel(self, keys: Any = None) -> list[Any]:
        """Drop every candidate in flight (or those of ``keys``, a set); those running go on in their actors."""
        def hit(key: Any) -> bool:
            return keys is None or key in keys

        dropped = [job.key for job in self.queue if hit(job.key)] + [key for key, _ in self.verdicts if hit(key)]
        for job in self.running.values():
            if hit(job.key) and not job.dropped:
                job.dropped = True
                dropped.append(job.key)
        self.queue = collections.deque(job for job in self.queue if not hit(job.key))
        self.verdicts = collections.deque((key, r) for key, r in self.verdicts if not hit(key))
        return dropped

    def pump(self, timeout_s: float) -> None:
        """Take what finished within ``timeout_s``, follow the cluster's nodes, hand out queued work."""
        gone, fresh = self._fleet.follow()
        for actor in gone:
            self._slots.lose(actor, None)
        self._slots.add(fresh)
        if self.running:
            ready, rest = self._ray.wait(list(self.running), num_returns=1, timeout=timeout_s)
            if ready and rest:  # take every result that is in already, in one round trip
                ready += self._ray.wait(rest, num_returns=len(rest), timeout=0)[0]
            self._collect_all(ready)
        elif self.queue and timeout_s > 0:  # work, and no evaluator alive to take it
            self._slots.wait_for_nodes(len(self.queue), timeout_s)
        self.hand_out()

    def hand_out(self) -> None:
        while self.queue and (claimed := self._slots.claim(self.queue[0].solo)) is not None:
            job = self.queue.popleft()
            job.actor, job.held = claimed
            job.node = self._fleet.node_of.get(job.actor)
            self.running[job.actor.evaluate.remote(job.spec, job.source)] = job
            self._slots.usage.hold(job.held)

    def _collect_all(self, refs: list[Any]) -> None:
        """Take each of ``refs`` (all ready), fetching their values together."""
        ray = self._ray
        try:
            values = ray.get(refs)
        except (*actor_errors(ray), ray.exceptions.RayTaskError):
            for ref in refs:  # one of them failed: take them one by one
                self._collect(ref)
            return
        for ref, value in zip(refs, values):
            self._take(self.running.pop(ref), value)

    def _collect(self, ref: Any) -> None:
        ray = self._ray
        job = self.running.pop(ref)
        try:
            value = ray.get(ref)
        except actor_errors(ray) as exc:
            self._slots.usage.release(job.held)
            self._lost(job, exc)
            return
        except ray.exceptions.RayTaskError as exc:
            if not isinstance(exc.cause, REFUSALS):  # a bug of kevo in the actor: raise it here
                raise exc.as_instanceof_cause() from None
            # the actor's evaluator refused this job's problem: the job's outcome, raised where its result
            # is taken (``next_result``; a shared dispatcher raises it in that problem's run alone)
            self._take(job, (self._slots.pids.get(job.actor, 0), exc.cause))
            return
        self._take(job, value)

    def _take(self, job: _Job, value: tuple[int, EvalResult]) -> None:
        pid, result = value
        self._slots.usage.release(job.held)
        if pid:
            self._slots.pids[job.actor] = pid
        if job.actor in self._fleet.node_of:
            self._slots.idle.extend([job.actor] * job.held)
        if job.dropped:
            return
        self.served_by[job.key] = pid
        self.served_on[job.node or "?"] += 1
        self.deaths.pop(job.key, None)
        self.verdicts.append((job.key, result))

    def _lost(self, job: _Job, exc: Exception) -> None:
        """``job``'s actor died: retry the job elsewhere unless it has killed too many actors.

        A job whose node was lost goes back to the queue as it was. Otherwise
        it is retried with an actor to itself, so a second death is its own
        doing (the actor's other jobs fail the same way and come here too).
        """
        node_alive = self._slots.lose(job.actor, exc)
        if job.dropped:
            return
        if not node_alive:
            log.warning("candidate %s: its node was lost; it goes back to the queue", job.key)
            self.queue.appendleft(dataclasses.replace(job, actor=None, held=1))
            return
        self.deaths[job.key] += 1
        deaths = self.deaths[job.key]
        alone = job.solo or self._slots.per_actor == 1  # nobody else's candidate could have done it
        cause = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        if deaths >= MAX_ACTOR_DEATHS and alone:
            log.warning("candidate %s: its evaluation killed %d actors; recorded as crashed", job.key, deaths)
            reason = (f"the evaluating Ray actor died {deaths} times while evaluating this candidate "
                      f"({type(exc).__name__}: {cause})")
            self.deaths.pop(job.key, None)
            self.verdicts.append((job.key, EvalResult(Status.CRASHED, reason, platform=self.info["platform"],
                                                      device_name=self.info["device_name"])))
        else:
            log.warning("candidate %s: the Ray actor evaluating it died (%s); evaluating it again on a new actor",
                        job.key, type(exc).__name__)
            self.queue.appendleft(dataclasses.replace(job, actor=None, solo=True, held=1))
