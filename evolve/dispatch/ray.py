"""Evaluation on Ray: one actor per GPU of every node, each holding warm ``fitness.Evaluator``s.

``RayDispatcher`` implements ``Dispatcher``. Every actor (``evolve.dispatch.actor``) builds
its own ``Evaluator``s (reference outputs on its device, sandboxed workers kept warm, one per
slot) from an ``EvaluatorSpec`` of plain, picklable values. ``submit`` hands a candidate to a
free slot or queues it; ``next_result`` waits for whichever slot finishes first. Ray gives each
GPU actor its device through the platform's visibility variable (``CUDA_VISIBLE_DEVICES``, ...),
so inside the actor device 0 is the actor's GPU. Without a GPU, CPU actors run ``cpu``. Ray is
imported only when a ``RayDispatcher`` is made (``evolve.dispatch.connect``). The candidates in
flight and the actors' free slots are kept by ``Jobs`` and ``Slots`` (``evolve.dispatch.jobs``).

The actors live on the cluster's nodes (``evolve.dispatch.fleet``): a node that joins gets
actors; one that is lost takes its actors with it, and their candidates are evaluated elsewhere.

A candidate that crashes or hangs is already a result inside the evaluator. An actor that dies
on a live node (its process killed) sends its candidates back to the queue and is replaced; each
is evaluated again with an actor to itself, and one that takes that actor down too
(``jobs.MAX_ACTOR_DEATHS`` in all) is ``crashed``. A lost node is never a candidate's doing.

>>> with RayDispatcher(EvaluatorSpec("problems/elementwise/reference.py", platform="cpu"),
...                    num_actors=2) as dispatcher:  # doctest: +SKIP
...     dispatcher.submit(1, source)
...     dispatcher.next_result()
(1, EvalResult(status=<Status.ACCEPTED: 'accepted'>, ...))
"""

from __future__ import annotations

import logging
import os
import sys
import time
from typing import Any

from evolve.dispatch.actor import EvaluatorActor, EvaluatorSpec
from evolve.dispatch.base import Dispatcher, SlotUsage, at_once_note
from evolve.dispatch.connect import RayUnavailable, actor_errors, get_answer, import_ray, start_ray
from evolve.dispatch.fleet import NODE_CHECK_S, Fleet, actor_plan
from evolve.dispatch.jobs import Jobs, Slots
from fitness import EvalResult, Job
from platforms import get_platform

__all__ = ["EvaluatorActor", "EvaluatorSpec", "RayDispatcher", "RayUnavailable", "start_ray"]

log = logging.getLogger(__name__)

#: Candidates a GPU actor evaluates at once: one timed, the others compiling and checking.
DEFAULT_GPU_SLOTS = 3


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
        self._slots = Slots(self._fleet, self.slots)
        self._jobs = Jobs(ray, self._slots)
        self.pids: dict[Any, int] = self._slots.pids  # actor handle -> its process id, once known
        self.served_by: dict[Any, int] = self._jobs.served_by  # key -> pid of the actor whose result was returned
        self.served_on = self._jobs.served_on  # node id -> results returned
        self._slots.add(self._fleet.fill())
        try:
            self.retarget(spec)
        except BaseException:
            self._fleet.kill_all()
            raise
        self._slots.usage = SlotUsage(self.capacity)  # counted from here: start-up is not evaluators' idle time
        log.info("evaluating on %d Ray actor(s) with %d slot(s) each: %s%s", len(self._fleet.actors), self.slots,
                 self.info["device_name"], at_once_note(self.info, self.slots))

    def retarget(self, spec: EvaluatorSpec) -> dict[str, Any]:
        """Evaluate later submissions against ``spec``; returns where (as ``info``).

        Raises what the evaluator raises for a problem it refuses.
        """
        self.info = self._jobs.info = self._prepare(spec)
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
                    self._slots.lose(actor, exc)
                    continue
                self.pids[actor] = infos[-1]["pid"]
            if infos:
                return {k: v for k, v in infos[0].items() if k != "pid"}
            if time.monotonic() > deadline:
                raise RayUnavailable(f"no evaluator actor of the Ray cluster came up within "
                                     f"{self._ready_timeout_s:.0f} s (nodes: {self._fleet.nodes()})")
            time.sleep(min(self._fleet.check_s, max(0.0, deadline - time.monotonic())))
            self._slots.add(self._fleet.fill())

    @property
    def capacity(self) -> int:
        return self._slots.capacity

    @property
    def usage(self) -> SlotUsage:
        """How busy the slots have been (``SlotUsage``)."""
        return self._slots.usage

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
        self._jobs.submit(key, source, spec or self._spec)

    def next_result(self) -> tuple[Any, EvalResult]:
        key, outcome = self.next_outcome()
        if isinstance(outcome, BaseException):
            raise outcome
        return key, outcome

    def next_outcome(self) -> tuple[Any, EvalResult | BaseException]:
        """As ``next_result``, with a refusal (``REFUSALS``) returned as the outcome, not raised."""
        return self._jobs.next_outcome()

    def wait(self, timeout_s: float) -> bool:
        return self._jobs.wait(timeout_s)

    @property
    def in_flight(self) -> int:
        return self._jobs.in_flight

    def ready(self) -> int:
        self._jobs.pump(0)
        return len(self._jobs.verdicts)

    def cancel(self, keys: Any = None) -> list[Any]:
        """Drop every candidate in flight (or those of ``keys``, a set). Those running go on in their
        actors (an evaluation cannot be stopped halfway without losing its worker); their slots are
        free again when they end."""
        return self._jobs.cancel(keys)

    def close(self) -> None:
        """Stop every actor (and so its evaluator's worker); queued work is dropped."""
        actors = self._fleet.actors
        self._jobs.queue.clear()
        self._jobs.running.clear()
        self._slots.idle.clear()
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
        return {job.key: job.actor for job in self._jobs.running.values() if not job.dropped}

    def _get(self, ref: Any, timeout_s: float) -> Any:
        return get_answer(self._ray, ref, timeout_s, f"{self._ready_timeout_s:.0f} s (plan {self._fleet.plan})")
