"""Evaluation on Ray: one actor per GPU of every node, each holding warm ``fitness.Evaluator``s.

``RayDispatcher`` implements ``Dispatcher``. Every actor (``evolve.dispatch.actor``) builds
its own ``Evaluator``s (reference outputs on its device, sandboxed workers kept warm, one per
slot) from an ``EvaluatorSpec`` of plain, picklable values. ``submit`` hands a candidate to a
free slot or queues it; ``next_result`` waits for whichever slot finishes first. Ray gives each
GPU actor its device through the platform's visibility variable (``CUDA_VISIBLE_DEVICES``, ...),
so inside the actor device 0 is the actor's GPU. Without a GPU, CPU actors run ``cpu``. Ray is
imported only when a ``RayDispatcher`` is made (``evolve.dispatch.connect``).

The actors live on the cluster's nodes (``evolve.dispatch.fleet``): a node that joins gets
actors; one that is lost takes its actors with it, and their candidates are evaluated elsewhere.

A candidate that crashes or hangs is already a result inside the evaluator. An actor that dies
on a live node (its process killed) sends its candidates back to the queue and is replaced; each
is evaluated again with an actor to itself, and one that takes that actor down too
(``MAX_ACTOR_DEATHS`` in all) is ``crashed``. A lost node is never a candidate's doing.

>>> with RayDispatcher(EvaluatorSpec("problems/elementwise/reference.py", platform="cpu"),
...                    num_actors=2) as dispatcher:  # doctest: +SKIP
...     dispatcher.submit(1, source)
...     dispatcher.next_result()
(1, EvalResult(status=<Status.ACCEPTED: 'accepted'>, ...))
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import os
import sys
import time
from typing import Any

from evolve.dispatch.actor import EvaluatorActor, EvaluatorSpec
from evolve.dispatch.base import Dispatcher, SlotUsage, at_once_note
from evolve.dispatch.connect import REFUSALS, RayUnavailable, actor_errors, get_answer, import_ray, start_ray
from evolve.dispatch.fleet import NODE_CHECK_S, Fleet, actor_plan
from fitness import EvalResult, Job, Status
from platforms import get_platform

__all__ = ["EvaluatorActor", "EvaluatorSpec", "RayDispatcher", "RayUnavailable", "start_ray"]

log = logging.getLogger(__name__)

#: A candidate whose evaluation has killed this many actors is recorded as crashed.
MAX_ACTOR_DEATHS = 2
#: Candidates a GPU actor evaluates at once: one timed, the others compiling and checking.
DEFAULT_GPU_SLOTS = 3


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


class RayDispatcher(Dispatcher):
    """Evaluates on Ray actors, one per GPU of every node (or ``num_actors`` CPU actors without one).

    Each actor evaluates up to ``slots`` candidates at once (default: 3 on a
    GPU, where two compile and check while one is timed; 1 on the CPU).
    ``address`` joins an existing cluster; ``None`` starts (or reuses) a local,
    loopback-only instance. The constructor returns once every actor has built
    an evaluator, so a problem the evaluator refuses raises here.
    ``retarget(spec)`` points later submissions at another problem (sweeps);
    ``submit(..., spec=)`` sends one candidate to another problem's evaluators.
    """

    def __init__(self, spec: EvaluatorSpec, num_actors: int | None = None, address: str | None = None,
                 ready_timeout_s: float = 600.0, slots: int | None = None, actor_class: type | None = None,
                 actor_options: dict[str, Any] | None = None, keep_problems: int = 1,
                 node_check_s: float = NODE_CHECK_S) -> None:
        if num_actors is not None and num_actors < 1:
            raise ValueError(f"num_actors must be at least 1 (or None for one per GPU), got {num_actors}")
        if slots is not None and slots < 1:
            raise ValueError(f"slots must be at least 1, got {slots}")
        started = sys.modules.get("ray") is not None and sys.modules["ray"].is_initialized()
        if address is None and not started and spec.platform not in ("auto", "cpu"):
            get_platform(spec.platform)  # a GPU platform on a machine without one: said before Ray starts
        start_ray(address)
        self._ray = ray = import_ray()
        plan = actor_plan(spec.platform, ray.cluster_resources(), num_actors, local=address is None)
        self.slots = slots or (DEFAULT_GPU_SLOTS if plan.resource == "GPU" else 1)
        # actor_class/actor_options: a stand-in actor with EvaluatorActor's methods (simulations, benchmarks)
        # one thread more than slots: a parent's profile (EvaluatorActor.profile) never takes an evaluation's
        options = {**plan.options, "max_concurrency": self.slots + 1, **(actor_options or {})}
        # kevo's own actor fits its slots to the device's memory, and keeps the evaluators of the
        # problems of a sweep that go side by side (stand-ins take neither)
        kwargs = {"slots": self.slots, "keep_problems": keep_problems} if actor_class is None else {}
        home = os.environ.get("HOME") if address is None else None  # see connect.bootstrap_home
        self._fleet = Fleet(ray, ray.remote(actor_class or EvaluatorActor), plan, options, (home,), kwargs,
                            check_s=node_check_s)
        self._spec = spec
        self._ready_timeout_s = ready_timeout_s
        self._queue: collections.deque[_Job] = collections.deque()
        self._idle: list[Any] = []
        self._running: dict[Any, _Job] = {}  # object ref -> the job it answers
        self._deaths: collections.Counter = collections.Counter()
        self._lost_actors: dict[Any, bool] = {}  # a dead actor -> whether its node was still alive
        self._verdicts: collections.deque[tuple[Any, EvalResult | BaseException]] = collections.deque()
        self._waiting_for_nodes = False
        self.pids: dict[Any, int] = {}  # actor handle -> its process id, once known
        self.served_by: dict[Any, int] = {}  # key -> pid of the actor whose result was returned
        self.served_on: collections.Counter[str] = collections.Counter()  # node id -> results returned
        self.usage = SlotUsage()
        self._add(self._fleet.fill())
        try:
            self.info = self._prepare(spec)
        except BaseException:
            self._fleet.kill_all()
            raise
        self.usage = SlotUsage(self.capacity)  # counted from here: start-up is not evaluators' idle time
        log.info("evaluating on %d Ray actor(s) with %d slot(s) each: %s%s", len(self._fleet.actors), self.slots,
                 self.info["device_name"], at_once_note(self.info, self.slots))

    def retarget(self, spec: EvaluatorSpec) -> dict[str, Any]:
        """Evaluate later submissions against ``spec``; returns where (as ``info``).

        Raises what the evaluator raises for a problem it refuses.
        """
        self.info = self._prepare(spec)
        self._spec = spec
        return self.info

    def _prepare(self, spec: EvaluatorSpec) -> dict[str, Any]:
        """Every live actor builds ``spec``'s evaluators; where the first of them evaluates.

        An actor lost meanwhile is left out (its node's replacement builds its
        own at its first call); with none left, waits for a node to join.
        """
        deadline = time.monotonic() + self._ready_timeout_s
        while True:
            asked = {actor: actor.prepare.remote(spec) for actor in self._fleet.actors}
            infos = []
            for actor, ref in asked.items():
                try:
                    infos.append(self._get(ref, max(0.0, deadline - time.monotonic())))
                except actor_errors(self._ray) as exc:
                    self._actor_lost(actor, exc)
                    continue
                self.pids[actor] = infos[-1]["pid"]
            if infos:
                return {k: v for k, v in infos[0].items() if k != "pid"}
            if time.monotonic() > deadline:
                raise RayUnavailable(f"no evaluator actor of the Ray cluster came up within "
                                     f"{self._ready_timeout_s:.0f} s (nodes: {self._fleet.nodes()})")
            time.sleep(min(self._fleet.check_s, max(0.0, deadline - time.monotonic())))
            self._add(self._fleet.fill())

    @property
    def capacity(self) -> int:
        return len(self._fleet.actors) * self.slots

    def lane_stats(self) -> list[dict[str, float]]:
        """Per actor: how busy its device's timing lane has been (see ``fitness.judge.lane``)."""
        return [self._get(ref, 60) for ref in [a.lane_stats.remote() for a in self._fleet.actors]]

    def profile(self, source: str, runtime_ms: float | None) -> dict[str, Any] | None:
        """The profile of ``source``, taken by the first actor, waited for; None when it was lost."""
        handle = self.profile_later(source, runtime_ms)
        if handle is not None:
            self._ray.wait([handle])
        return self.profile_result(handle)[1]

    def profile_later(self, source: str, runtime_ms: float | None) -> Any:
        actors = self._fleet.actors
        method = getattr(actors[0], "profile", None) if actors else None  # a stand-in actor may not profile
        return None if method is None else method.remote(self._spec, source, runtime_ms)

    def profile_result(self, handle: Any) -> tuple[bool, dict[str, Any] | None]:
        ray = self._ray
        if handle is None:
            return True, None
        if not ray.wait([handle], timeout=0)[0]:
            return False, None
        try:
            return True, ray.get(handle)
        except actor_errors(self._ray) as exc:
            log.warning("the Ray actor profiling a parent died (%s); it goes without a profile", type(exc).__name__)
            return True, None
        except ray.exceptions.RayTaskError as exc:  # ProblemError (a bad FLOPS), or a bug of kevo
            raise exc.as_instanceof_cause() from None

    # -- Dispatcher ------------------------------------------------------------

    def submit(self, key: Any, source: Job, spec: EvaluatorSpec | None = None) -> None:
        self._queue.append(_Job(key, source, spec or self._spec))
        self._hand_out()

    def next_result(self) -> tuple[Any, EvalResult]:
        key, outcome = self.next_outcome()
        if isinstance(outcome, BaseException):
            raise outcome
        return key, outcome

    def next_outcome(self) -> tuple[Any, EvalResult | BaseException]:
        """As ``next_result``, with a refusal (``REFUSALS``) returned as the outcome, not raised."""
        while not self._verdicts:
            if not self.in_flight:
                raise LookupError("no candidate is in flight")
            self._pump(self._fleet.check_s)
        return self._verdicts.popleft()

    def wait(self, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while not self._verdicts and self.in_flight and (left := deadline - time.monotonic()) > 0:
            self._pump(min(left, self._fleet.check_s))
        return bool(self._verdicts)

    @property
    def in_flight(self) -> int:
        running = sum(1 for job in self._running.values() if not job.dropped)
        return len(self._queue) + running + len(self._verdicts)

    def ready(self) -> int:
        self._pump(0)
        return len(self._verdicts)

    def cancel(self, keys: Any = None) -> list[Any]:
        """Drop every candidate in flight (or those of ``keys``, a set). Those running go on in their
        actors (an evaluation cannot be stopped halfway without losing its worker); their slots are
        free again when they end."""
        def hit(key: Any) -> bool:
            return keys is None or key in keys

        dropped = [job.key for job in self._queue if hit(job.key)] + [key for key, _ in self._verdicts if hit(key)]
        for job in self._running.values():
            if hit(job.key) and not job.dropped:
                job.dropped = True
                dropped.append(job.key)
        self._queue = collections.deque(job for job in self._queue if not hit(job.key))
        self._verdicts = collections.deque((key, r) for key, r in self._verdicts if not hit(key))
        return dropped

    def close(self) -> None:
        """Stop every actor (and so its evaluator's worker); queued work is dropped."""
        actors = self._fleet.actors
        self._queue.clear()
        self._running.clear()
        self._idle.clear()
        closed = {}
        for actor in actors:
            try:
                closed[actor] = self._ray.get(actor.close.remote(), timeout=30)
            except Exception:  # a dead or stuck actor: killing it below is all that is left to do
                pass
        self._fleet.kill_all({a: pid for a, pid in closed.items() if isinstance(pid, int)})
        self.usage.resize(0)

    # -- the actors ------------------------------------------------------------

    def actors(self) -> list[Any]:
        """Handles of the live actors (for inspection and tests)."""
        return self._fleet.actors

    def node_of(self, actor: Any) -> str | None:
        """The id of the node ``actor`` is pinned to."""
        return self._fleet.node_of.get(actor)

    def running(self) -> dict[Any, Any]:
        """Key -> handle of the actor evaluating it now."""
        return {job.key: job.actor for job in self._running.values() if not job.dropped}

    def _pump(self, timeout_s: float) -> None:
        """Take what finished within ``timeout_s``, follow the cluster's nodes, hand out queued work."""
        gone, fresh = self._fleet.follow()
        for actor in gone:
            self._actor_lost(actor, None)
        self._add(fresh)
        if self._running:
            ready, rest = self._ray.wait(list(self._running), num_returns=1, timeout=timeout_s)
            if ready and rest:  # take every result that is in already, in one round trip
                ready += self._ray.wait(rest, num_returns=len(rest), timeout=0)[0]
            self._collect_all(ready)
        elif self._queue and timeout_s > 0:  # work, and no evaluator alive to take it
            if not self._waiting_for_nodes:
                log.warning("no evaluator actor is alive: %d candidate(s) wait for a node to join", len(self._queue))
            self._waiting_for_nodes = True
            time.sleep(timeout_s)
        self._hand_out()

    def _add(self, actors: list[Any]) -> None:
        if actors:
            self._waiting_for_nodes = False
        for actor in actors:
            self._idle.extend([actor] * self.slots)
        self.usage.resize(self.capacity)

    def _hand_out(self) -> None:
        while self._queue:
            job = self._queue[0]
            if job.solo:  # waits for an actor with every slot free; nothing is handed out meanwhile
                actor = next((a for a in self._fleet.actors if self._idle.count(a) == self.slots), None)
                if actor is None:
                    return
                self._idle = [a for a in self._idle if a is not actor]
                job.held = self.slots
            elif self._idle:
                actor = self._idle.pop()
                job.held = 1
            else:
                return
            self._queue.popleft()
            job.actor, job.node = actor, self._fleet.node_of.get(actor)
            self._running[actor.evaluate.remote(job.spec, job.source)] = job
            self.usage.hold(job.held)

    def _collect_all(self, refs: list[Any]) -> None:
        """Take each of ``refs`` (all ready), fetching their values together."""
        ray = self._ray
        try:
            values = ray.get(refs)
        except (*actor_errors(self._ray), ray.exceptions.RayTaskError):
            for ref in refs:  # one of them failed: take them one by one
                self._collect(ref)
            return
        for ref, value in zip(refs, values):
            self._take(self._running.pop(ref), value)

    def _collect(self, ref: Any) -> None:
        ray = self._ray
        job = self._running.pop(ref)
        try:
            value = ray.get(ref)
        except actor_errors(self._ray) as exc:
            self.usage.release(job.held)
            self._lost(job, exc)
            return
        except ray.exceptions.RayTaskError as exc:
            if not isinstance(exc.cause, REFUSALS):  # a bug of kevo in the actor: raise it here
                raise exc.as_instanceof_cause() from None
            # the actor's evaluator refused this job's problem: the job's outcome, raised where its result
            # is taken (``next_result``; a shared dispatcher raises it in that problem's run alone)
            self._take(job, (self.pids.get(job.actor, 0), exc.cause))
            return
        self._take(job, value)

    def _take(self, job: _Job, value: tuple[int, EvalResult]) -> None:
        pid, result = value
        self.usage.release(job.held)
        if pid:
            self.pids[job.actor] = pid
        if job.actor in self._fleet.node_of:
            self._idle.extend([job.actor] * job.held)
        if job.dropped:
            return
        self.served_by[job.key] = pid
        self.served_on[job.node or "?"] += 1
        self._deaths.pop(job.key, None)
        self._verdicts.append((job.key, result))

    def _actor_lost(self, actor: Any, exc: Exception | None) -> bool:
        """Forget a dead ``actor`` (once), starting its replacement where the plan has room;
        whether its node was still alive (the actor itself died)."""
        if actor not in self._lost_actors:
            alive = self._fleet.drop(actor)
            self._lost_actors[actor] = alive
            self.pids.pop(actor, None)
            self._idle = [a for a in self._idle if a is not actor]
            if exc is not None:
                log.warning("a Ray evaluator actor died (%s%s)", type(exc).__name__,
                            "" if alive else "; its node is gone")
            self._add(self._fleet.fill())
        return self._lost_actors[actor]

    def _lost(self, job: _Job, exc: Exception) -> None:
        """``job``'s actor died: retry the job elsewhere unless it has killed too many actors.

        A job whose node was lost goes back to the queue as it was. Otherwise
        it is retried with an actor to itself, so a second death is its own
        doing (the actor's other jobs fail the same way and come here too).
        """
        node_alive = self._actor_lost(job.actor, exc)
        if job.dropped:
            return
        if not node_alive:
            log.warning("candidate %s: its node was lost; it goes back to the queue", job.key)
            self._queue.appendleft(dataclasses.replace(job, actor=None, held=1))
            return
        self._deaths[job.key] += 1
        deaths = self._deaths[job.key]
        alone = job.solo or self.slots == 1  # nobody else's candidate could have done it
        cause = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        if deaths >= MAX_ACTOR_DEATHS and alone:
            log.warning("candidate %s: its evaluation killed %d actors; recorded as crashed", job.key, deaths)
            reason = (f"the evaluating Ray actor died {deaths} times while evaluating this candidate "
                      f"({type(exc).__name__}: {cause})")
            self._deaths.pop(job.key, None)
            self._verdicts.append((job.key, EvalResult(Status.CRASHED, reason, platform=self.info["platform"],
                                                       device_name=self.info["device_name"])))
        else:
            log.warning("candidate %s: the Ray actor evaluating it died (%s); evaluating it again on a new actor",
                        job.key, type(exc).__name__)
            self._queue.appendleft(dataclasses.replace(job, actor=None, solo=True, held=1))

    def _get(self, ref: Any, timeout_s: float) -> Any:
        return get_answer(self._ray, ref, timeout_s, f"{self._ready_timeout_s:.0f} s (plan {self._fleet.plan})")
