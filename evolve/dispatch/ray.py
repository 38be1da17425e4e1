"""Evaluation on Ray: one actor per GPU, each holding a warm ``fitness.Evaluator``.

``RayDispatcher`` implements ``Dispatcher``. Every actor (``evolve.dispatch.actor``)
builds its own ``Evaluator``s (reference outputs on its device, sandboxed
workers kept warm, one per slot) from an ``EvaluatorSpec`` of plain,
picklable values. ``submit`` hands a candidate to a free slot or queues it;
``next_result`` waits for whichever slot finishes first. Ray gives each GPU actor its device through the
platform's visibility variable (``CUDA_VISIBLE_DEVICES``, ...), so inside the
actor the platform's device 0 is the actor's GPU. Without a GPU, CPU actors run
the ``cpu`` platform.

A candidate that crashes or hangs is already a result inside the evaluator.
An actor that dies (its process killed, its node lost) sends the candidates it
held back to the queue and is replaced; each is evaluated again with an actor
to itself, and one that takes that actor down too (``MAX_ACTOR_DEATHS`` in
all) is recorded as ``crashed``.

>>> spec = EvaluatorSpec("problems/elementwise/reference.py", platform="cpu",
...                      shapes={"batch_size": 4, "dim": 100})  # doctest: +SKIP
>>> with RayDispatcher(spec, num_actors=2) as dispatcher:  # doctest: +SKIP
...     dispatcher.submit(1, source)
...     dispatcher.next_result()
(1, EvalResult(status=<Status.ACCEPTED: 'accepted'>, ...))

Ray is imported only when a ``RayDispatcher`` is made or ``start_ray`` is
called: the in-process path never needs it.
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import os
import tempfile
from pathlib import Path
from typing import Any

from evolve.dispatch.actor import EvaluatorActor, EvaluatorSpec
from evolve.dispatch.base import Dispatcher
from fitness import CutoffError, EvalResult, ProblemError, Status
from platforms import PlatformUnavailable

__all__ = ["EvaluatorActor", "EvaluatorSpec", "RayDispatcher", "RayUnavailable", "start_ray"]

log = logging.getLogger(__name__)

#: A candidate whose evaluation has killed this many actors is recorded as crashed.
MAX_ACTOR_DEATHS = 2
#: CPU actors when the platform is ``cpu`` and no count is given.
DEFAULT_CPU_ACTORS = 2
#: Candidates a GPU actor evaluates at once: one timed, the others compiling and checking.
DEFAULT_GPU_SLOTS = 3

# Environment of a local Ray instance that must reach nothing but loopback.
# RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 makes every Ray process take 127.0.0.1 as
# its node address instead of finding one with a UDP connect to a public
# resolver (Ray reads it when ``ray`` is imported). Token authentication is
# off: the instance listens on loopback only, and the sandboxed worker that
# runs candidates never sees Ray's environment anyway (fitness.sandbox drops
# *AUTH* and *TOKEN* names).
_LOCAL_ENV = {
    "RAY_USAGE_STATS_ENABLED": "0",
    "RAY_AUTH_MODE": "disabled",
    "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
}
# Ray's head asks the cloud metadata address (169.254.169.254) which cloud it
# runs on unless $HOME/ray_bootstrap_config.yaml exists, even with usage stats
# off. Rather than write into the user's home, the head processes are started
# with HOME pointing at a kevo directory that holds that file; actors get the
# real HOME back (see ``RayDispatcher``).
_BOOTSTRAP_FILE = "ray_bootstrap_config.yaml"
_BOOTSTRAP_TEXT = "# written by kevo: tells Ray's head it runs on a local cluster\nprovider: {type: local}\n"


class RayUnavailable(RuntimeError):
    """Ray is not installed, or the cluster cannot run the evaluators asked for."""


def _import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise RayUnavailable("Ray is not installed: pip install 'ray>=2.50' "
                             "(or set cluster.actors: 0 to evaluate in this process)") from None
    return ray


def start_ray(address: str | None = None, num_cpus: int | None = None, num_gpus: int | None = None) -> None:
    """Connect to Ray: join the cluster at ``address``, or start a loopback-only local instance.

    A local instance binds and connects to 127.0.0.1 only, sends no usage
    statistics, asks no cloud metadata service, runs no dashboard, and has
    ``num_cpus`` (default: this machine's cores) and ``num_gpus`` (default:
    what Ray detects). Does nothing when Ray is already initialised.
    """
    if address is None:
        # Before the import: Ray reads some of these when it is imported.
        os.environ.update(_LOCAL_ENV)
    ray = _import_ray()
    if ray.is_initialized():
        return
    if address is not None:
        os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
        try:
            ray.init(address=address, log_to_driver=False)
        except ConnectionError as exc:  # e.g. address "auto" with no cluster on this machine
            raise RayUnavailable(f"cannot join the Ray cluster at cluster.address {address!r}: {exc}") from None
        return
    home = os.environ.get("HOME")
    os.environ["HOME"] = _bootstrap_home()
    try:
        ray.init(num_cpus=num_cpus or os.cpu_count() or 1, num_gpus=num_gpus, include_dashboard=False,
                 _node_ip_address="127.0.0.1", log_to_driver=False)
    finally:
        if home is None:
            del os.environ["HOME"]
        else:
            os.environ["HOME"] = home


def _bootstrap_home() -> str:
    """A directory of kevo's holding Ray's local-cluster marker file."""
    home = Path(tempfile.gettempdir()) / f"kevo-ray-home-{os.getuid()}"
    home.mkdir(mode=0o700, exist_ok=True)
    marker = home / _BOOTSTRAP_FILE
    if not marker.is_file():
        marker.write_text(_BOOTSTRAP_TEXT, encoding="utf-8")
    return str(home)


@dataclasses.dataclass
class _Job:
    key: int
    source: str
    spec: EvaluatorSpec
    actor: Any = None
    solo: bool = False  # evaluated with its actor to itself (a retry after the actor died)
    held: int = 1  # slots of ``actor`` it holds


class RayDispatcher(Dispatcher):
    """Evaluates on Ray actors, one per GPU (or ``num_actors`` CPU actors without one).

    Each actor evaluates up to ``slots`` candidates at once (default: 3 on a
    GPU, where two compile and check while one is timed; 1 on the CPU).
    ``address`` joins an existing cluster; ``None`` starts (or reuses) a local,
    loopback-only instance. The constructor returns once every actor has built
    an evaluator, so a problem the evaluator refuses raises here.
    ``retarget(spec)`` points later submissions at another problem (sweeps).
    """

    def __init__(self, spec: EvaluatorSpec, num_actors: int | None = None, address: str | None = None,
                 ready_timeout_s: float = 600.0, slots: int | None = None, actor_class: type | None = None,
                 actor_options: dict[str, Any] | None = None) -> None:
        if num_actors is not None and num_actors < 1:
            raise ValueError(f"num_actors must be at least 1 (or None for one per GPU), got {num_actors}")
        if slots is not None and slots < 1:
            raise ValueError(f"slots must be at least 1, got {slots}")
        start_ray(address)
        self._ray = ray = _import_ray()
        gpus = int(ray.cluster_resources().get("GPU", 0))
        self._options, count = _actor_plan(spec.platform, gpus, num_actors)
        self.slots = slots or (DEFAULT_GPU_SLOTS if "num_gpus" in self._options else 1)
        # actor_class/actor_options: a stand-in actor with EvaluatorActor's methods (simulations, benchmarks)
        self._options = {**self._options, "max_concurrency": self.slots, **(actor_options or {})}
        self._remote = ray.remote(actor_class or EvaluatorActor)
        # kevo's own actor fits its slots to the device's memory (stand-ins take none)
        self._actor_kwargs = {"slots": self.slots} if actor_class is None else {}
        self._spec = spec
        self._ready_timeout_s = ready_timeout_s
        self._home = os.environ.get("HOME") if address is None else None
        self._queue: collections.deque[_Job] = collections.deque()
        self._idle: list[Any] = []
        self._running: dict[Any, _Job] = {}  # object ref -> the job it answers
        self._deaths: collections.Counter[int] = collections.Counter()
        self._verdicts: collections.deque[tuple[int, EvalResult]] = collections.deque()
        self.pids: dict[Any, int] = {}  # actor handle -> its process id, once known
        self.served_by: dict[int, int] = {}  # key -> pid of the actor whose result was returned
        self._actors = [self._new_actor() for _ in range(count)]
        try:
            self.info = self._prepare(spec)
        except BaseException:
            for actor in self._actors:
                ray.kill(actor)
            raise
        for actor in self._actors:
            self._idle.extend([actor] * self.slots)
        log.info("evaluating on %d Ray actor(s) with %d slot(s) each: %s", count, self.slots,
                 self.info["device_name"])

    def retarget(self, spec: EvaluatorSpec) -> dict[str, Any]:
        """Evaluate later submissions against ``spec``; returns where (as ``info``).

        Raises what the evaluator raises for a problem it refuses.
        """
        self.info = self._prepare(spec)
        self._spec = spec
        return self.info

    def _prepare(self, spec: EvaluatorSpec) -> dict[str, Any]:
        infos = self._get([a.prepare.remote(spec) for a in self._actors], self._ready_timeout_s)
        for actor, info in zip(self._actors, infos):
            self.pids[actor] = info["pid"]
        return {k: v for k, v in infos[0].items() if k != "pid"}

    @property
    def capacity(self) -> int:
        return len(self._actors) * self.slots

    def lane_stats(self) -> list[dict[str, float]]:
        """Per actor: how busy its device's timing lane has been (see ``fitness.lane``)."""
        return self._get([a.lane_stats.remote() for a in self._actors], 60)

    def profile(self, source: str, runtime_ms: float | None) -> dict[str, Any] | None:
        """The profile of ``source``, taken by the first actor, waited for; None when it was lost."""
        handle = self.profile_later(source, runtime_ms)
        if handle is not None:
            self._ray.wait([handle])
        return self.profile_result(handle)[1]

    def profile_later(self, source: str, runtime_ms: float | None) -> Any:
        method = getattr(self._actors[0], "profile", None)  # a stand-in actor may not profile
        return None if method is None else method.remote(self._spec, source, runtime_ms)

    def profile_result(self, handle: Any) -> tuple[bool, dict[str, Any] | None]:
        ray = self._ray
        if handle is None:
            return True, None
        if not ray.wait([handle], timeout=0)[0]:
            return False, None
        try:
            return True, ray.get(handle)
        except ray.exceptions.RayActorError as exc:
            log.warning("the Ray actor profiling a parent died (%s); it goes without a profile", type(exc).__name__)
            return True, None
        except ray.exceptions.RayTaskError as exc:  # ProblemError (a bad FLOPS), or a bug of kevo
            raise exc.as_instanceof_cause() from None

    # -- Dispatcher ------------------------------------------------------------

    def submit(self, key: int, source: str) -> None:
        self._queue.append(_Job(key, source, self._spec))
        self._hand_out()

    def next_result(self) -> tuple[int, EvalResult]:
        while not self._verdicts:
            if not self._running:
                raise LookupError("no candidate is in flight")
            pending = list(self._running)
            ready, rest = self._ray.wait(pending, num_returns=1)
            if rest:  # take every result that is in already, in one round trip
                more, _ = self._ray.wait(rest, num_returns=len(rest), timeout=0)
                ready += more
            self._collect_all(ready)
            self._hand_out()
        return self._verdicts.popleft()

    @property
    def in_flight(self) -> int:
        return len(self._queue) + len(self._running) + len(self._verdicts)

    def ready(self) -> int:
        if self._running:
            done, _ = self._ray.wait(list(self._running), num_returns=len(self._running), timeout=0)
            if done:
                self._collect_all(done)
                self._hand_out()
        return len(self._verdicts)

    def close(self) -> None:
        """Stop every actor (and so its evaluator's worker); queued work is dropped."""
        actors = list(self._actors)
        self._queue.clear()
        self._running.clear()
        self._idle.clear()
        for actor in actors:
            try:
                self._ray.get(actor.close.remote(), timeout=30)
            except Exception:  # a dead or stuck actor: killing it below is all that is left to do
                pass
            self._ray.kill(actor)

    # -- the actors ------------------------------------------------------------

    def actors(self) -> list[Any]:
        """Handles of the live actors (for inspection and tests)."""
        return list(self._actors)

    def running(self) -> dict[int, Any]:
        """Key -> handle of the actor evaluating it now."""
        return {job.key: job.actor for job in self._running.values()}

    def _new_actor(self) -> Any:
        return self._remote.options(**self._options).remote(self._home, **self._actor_kwargs)

    def _hand_out(self) -> None:
        while self._queue:
            job = self._queue[0]
            if job.solo:  # waits for an actor with every slot free; nothing is handed out meanwhile
                actor = next((a for a in self._actors if self._idle.count(a) == self.slots), None)
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
            job.actor = actor
            self._running[actor.evaluate.remote(job.spec, job.source)] = job

    def _collect_all(self, refs: list[Any]) -> None:
        """``_collect`` each of ``refs`` (all ready), fetching their values together."""
        ray = self._ray
        try:
            values = ray.get(refs)
        except (ray.exceptions.RayActorError, ray.exceptions.RayTaskError):
            for ref in refs:  # one of them failed: take them one by one
                self._collect(ref)
            return
        for ref, value in zip(refs, values):
            self._take(self._running.pop(ref), value)

    def _collect(self, ref: Any) -> None:
        ray = self._ray
        job = self._running.pop(ref)
        try:
            pid, result = ray.get(ref)
        except ray.exceptions.RayActorError as exc:
            self._lost(job, exc)
            return
        except ray.exceptions.RayTaskError as exc:  # a bug of kevo in the actor: raise it here
            raise exc.as_instanceof_cause() from None
        self._take(job, (pid, result))

    def _take(self, job: _Job, value: tuple[int, EvalResult]) -> None:
        pid, result = value
        self.pids[job.actor] = pid
        self.served_by[job.key] = pid
        self._idle.extend([job.actor] * job.held)
        self._verdicts.append((job.key, result))

    def _lost(self, job: _Job, exc: Exception) -> None:
        """``job``'s actor died: replace it, and retry the job unless it has killed too many.

        The actor's other running jobs fail the same way and come here too;
        the first of them replaces the actor (with all its slots). A job is
        retried with an actor to itself, so a second death is its own doing.
        """
        dead = job.actor
        if dead in self._actors:
            self._ray.kill(dead)
            self.pids.pop(dead, None)
            fresh = self._new_actor()  # its first evaluate call builds its evaluators
            self._actors[self._actors.index(dead)] = fresh
            self._idle = [a for a in self._idle if a is not dead] + [fresh] * self.slots
        self._deaths[job.key] += 1
        deaths = self._deaths[job.key]
        alone = job.solo or self.slots == 1  # nobody else's candidate could have done it
        cause = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        if deaths >= MAX_ACTOR_DEATHS and alone:
            log.warning("candidate %s: its evaluation killed %d actors; recorded as crashed", job.key, deaths)
            reason = (f"the evaluating Ray actor died {deaths} times while evaluating this candidate "
                      f"({type(exc).__name__}: {cause})")
            self._verdicts.append((job.key, EvalResult(Status.CRASHED, reason, platform=self.info["platform"],
                                                       device_name=self.info["device_name"])))
        else:
            log.warning("candidate %s: the Ray actor evaluating it died (%s); evaluating it again on a new actor",
                        job.key, type(exc).__name__)
            self._queue.appendleft(dataclasses.replace(job, actor=None, solo=True, held=1))

    def _get(self, refs: list[Any], timeout_s: float) -> list[Any]:
        ray = self._ray
        try:
            return ray.get(refs, timeout=timeout_s)
        except ray.exceptions.GetTimeoutError:
            raise RayUnavailable(f"the Ray evaluator actors were not ready within {timeout_s:.0f} s "
                                 f"(asked for {self._options}; cluster has {ray.available_resources()})") from None
        except ray.exceptions.RayTaskError as exc:
            if isinstance(exc.cause, (ProblemError, CutoffError, PlatformUnavailable)):
                raise exc.cause from None
            raise exc.as_instanceof_cause() from None


def _actor_plan(platform: str, gpus: int, num_actors: int | None) -> tuple[dict[str, Any], int]:
    """(actor options, actor count) for ``platform`` on a cluster with ``gpus`` GPUs."""
    if platform == "cpu" or (platform == "auto" and gpus == 0):
        return {"num_cpus": 1}, num_actors or DEFAULT_CPU_ACTORS
    if gpus == 0:
        raise PlatformUnavailable(f"platform {platform!r} needs GPUs, but the Ray cluster has none")
    count = num_actors or gpus
    if count > gpus:
        raise PlatformUnavailable(f"cluster.actors is {count}, but the Ray cluster has only {gpus} GPU(s)")
    return {"num_gpus": 1}, count
