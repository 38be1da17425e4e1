"""The evaluators a config describes: built for one run, or one pool shared by a sweep's runs.

``make_dispatcher(config)`` is the dispatcher factory of a run: in this
process (``InProcessDispatcher``) or on Ray actors (``RayDispatcher``), as
``uses_ray`` decides. ``SharedPool`` is called the same way but hands every
run of a sweep the same Ray actors, pointed at the run's problem, so the
actors and their warm workers outlive each run. ``check_can_evaluate`` says at
once, before anything starts, when this machine cannot evaluate a config's
candidates at all (no such GPU, no Ray cluster at the address); a dispatcher
that joins a cluster checks its address the same way first.

>>> with make_dispatcher(config) as (dispatcher, where):  # doctest: +SKIP
...     dispatcher.submit(1, source)
"""

from __future__ import annotations

import collections
import contextlib
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from typing import Any

from evolve.config import Config, ConfigError, PlatformName
from evolve.dispatch.base import Dispatcher, InProcessDispatcher, evaluator_info
from evolve.dispatch.connect import start_ray
from evolve.dispatch.ray import EvaluatorSpec, RayDispatcher, RayUnavailable
from evolve.dispatch.share import SharedDispatcher
from fitness import EvalSettings, Evaluator
from fitness.judge.lane import TimingLane
from platforms import get_platform
from platforms.profiling import ProfilerConfigError

#: Builds the dispatcher for a config, and says where it evaluates: ``make_dispatcher``, or a ``SharedPool``.
Dispatchers = Callable[[Config], AbstractContextManager[tuple[Dispatcher, dict[str, Any]]]]


def evaluator_spec(config: Config) -> EvaluatorSpec:
    """What builds the config's evaluator, in this process or in a Ray actor."""
    problem = config.problem
    return EvaluatorSpec(str(problem.reference), platform=config.platform.value, shapes=dict(problem.shapes),
                         max_abs_diff=config.fitness.max_abs_diff, held_out=problem.held_out_shapes,
                         settings=eval_settings(config), dtype=problem.dtype)


def eval_settings(config: Config) -> EvalSettings:
    """The evaluator's settings from the config: its timeout and how parents are profiled."""
    profiler = config.profiler
    return EvalSettings(timeout_s=config.fitness.timeout_s, compile_timeout_s=config.fitness.compile_timeout_s,
                        probes=config.fitness.probes, compile_ahead=config.fitness.compile_ahead,
                        profiler_enabled=profiler.enabled,
                        ncu_bin_path=None if profiler.ncu_bin_path is None else str(profiler.ncu_bin_path),
                        rocprof_bin_path=None if profiler.rocprof_bin_path is None else str(profiler.rocprof_bin_path),
                        profile_timeout_s=profiler.timeout_s)


def make_evaluator(config: Config) -> Evaluator:
    """The evaluator the config describes (raises ``ProblemError``, ``CutoffError``, ``PlatformUnavailable``),
    with a timing lane of its own: a parent's profile, taken in the background, never overlaps a timing."""
    return evaluator_spec(config).build(TimingLane())


def uses_ray(config: Config) -> bool:
    """Whether the config's candidates are evaluated on Ray actors rather than in this process.

    ``cluster.actors`` decides when it is set (0: in process); left out, Ray
    is used when a cluster address is given or the platform is a GPU.
    """
    actors = config.cluster.actors
    if actors is not None:
        return actors > 0
    if config.cluster.address is not None:
        return True
    if config.platform is PlatformName.AUTO:
        return get_platform("auto").name != PlatformName.CPU.value
    return config.platform is not PlatformName.CPU


def check_can_evaluate(config: Config) -> None:
    """Raise at once when the config's candidates cannot be evaluated from this machine.

    Joining a Ray cluster (``cluster.address``): ``RayUnavailable`` when
    nothing answers at the address (its GPUs are the cluster's, counted when
    its actors start). Otherwise the evaluators run here: ``PlatformUnavailable``
    for ``platform: cuda`` or ``rocm`` without such a GPU. Cheap: it starts
    nothing and builds no evaluator.
    """
    if config.cluster.address is not None and uses_ray(config):
        check_address(config.cluster.address)
    elif config.platform in (PlatformName.CUDA, PlatformName.ROCM):
        get_platform(config.platform.value)


def check_address(address: str, timeout_s: float = 5.0) -> None:
    """``RayUnavailable`` at once when nothing accepts a connection at a cluster's ``address``.

    ``address`` is ``host:port`` (a cluster's head) or ``ray://host:port`` (Ray
    Client); ``auto`` and ``local`` are left to Ray, which finds the cluster
    itself. One TCP connect and nothing sent, where ``ray.init`` would retry
    for minutes before it gave up.

    >>> check_address("127.0.0.1:1")  # doctest: +SKIP
    RayUnavailable: cluster.address '127.0.0.1:1': nothing answers there (Connection refused); ...
    """
    if address in ("auto", "local"):
        return
    host, sep, port = address.removeprefix("ray://").rpartition(":")
    if not sep or not host or not port.isdigit():
        raise RayUnavailable(f"cluster.address {address!r}: expected host:port (a Ray head), "
                             "ray://host:port (Ray Client) or auto")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s):
            pass
    except OSError as exc:
        raise RayUnavailable(f"cluster.address {address!r}: nothing answers there ({exc.strerror or exc}); "
                             "start the cluster ('ray start --head'), correct the address, or leave it out "
                             "to start a local Ray instance") from None


@contextlib.contextmanager
def make_dispatcher(config: Config) -> Iterator[tuple[Dispatcher, dict[str, Any]]]:
    """The dispatcher the config describes, and where it evaluates (platform, device_name, cutoff).

    Raises what ``make_evaluator`` raises, ``RayUnavailable``, and ``ConfigError``
    for a profiler path that is not an executable.
    """
    with _profiler_paths_are_config():
        if not uses_ray(config):
            with make_evaluator(config) as evaluator, InProcessDispatcher(evaluator) as dispatcher:
                yield dispatcher, evaluator_info(evaluator)
            return
        with _ray_dispatcher(config) as dispatcher:
            yield dispatcher, dict(dispatcher.info)


class SharedPool:
    """Hands every run of a sweep the same Ray actors, pointed at the run's problem.

    Called like ``make_dispatcher(config)``. Runs that evaluate in process
    (no Ray) get their own evaluator each, as usual. With ``side_by_side`` > 1
    up to that many runs use the pool at once, from their own threads, each
    through a view of one ``SharedDispatcher`` (every actor keeps the
    evaluators of that many problems). ``close`` stops the actors; the next
    run that needs them starts fresh ones (a sweep of runs one after another
    closes the pool after a run that raised).

    >>> with SharedPool() as pool:  # doctest: +SKIP
    ...     for config in configs:
    ...         with pool(config) as (dispatcher, where):
    ...             ...
    """

    def __init__(self, side_by_side: int = 1) -> None:
        self.side_by_side = side_by_side
        self.dispatcher: RayDispatcher | None = None
        self._shared: SharedDispatcher | None = None
        self._lock = threading.Lock()  # runs side by side start the actors once
        self._started = time.monotonic()
        self._busy_s = self._slot_s = 0.0
        self._nodes: collections.Counter[str] = collections.Counter()

    @contextlib.contextmanager
    def __call__(self, config: Config) -> Iterator[tuple[Dispatcher, dict[str, Any]]]:
        if not uses_ray(config):
            with make_dispatcher(config) as made:
                try:
                    yield made
                finally:
                    self._count(made[0])
            return
        with _profiler_paths_are_config(), self._lock:
            if self.dispatcher is None:
                self.dispatcher = _ray_dispatcher(config, keep_problems=self.side_by_side)
            elif self.side_by_side == 1:
                self.dispatcher.retarget(evaluator_spec(config))
            if self.side_by_side > 1 and self._shared is None:
                self._shared = SharedDispatcher(self.dispatcher)
            shared = self._shared
        if shared is not None:
            with _profiler_paths_are_config():
                view = shared.view(evaluator_spec(config))
            with view:
                yield view, dict(view.info)
            return
        try:
            yield self.dispatcher, dict(self.dispatcher.info)
        finally:
            for _ in self.dispatcher.results():  # a run that raised may leave work in flight:
                pass  # its keys would mean other individuals in the next run's store

    def connect(self, config: Config) -> None:
        """Join (or start) Ray for ``config`` now, in this thread, when its runs use Ray.

        A local instance must be started by a thread that outlives it: Ray's
        processes die with the thread that started them (Linux's parent-death
        signal follows the thread), so a sweep whose runs go side by side, each
        in a thread that ends with its run, connects from its own thread first.
        """
        if uses_ray(config):
            start_ray(config.cluster.address)

    def after_failure(self) -> None:
        """A run raised: the next run starts on fresh evaluators, unless others share them now."""
        if self.side_by_side == 1:
            self.close()

    def usage(self) -> dict[str, Any] | None:
        """How busy the evaluators were (``SlotUsage``) over every run so far, from the moment each
        pool of evaluators was ready, with the wall since the pool was made and the results returned
        per Ray node; None before any run evaluated."""
        with self._lock:
            busy_s, slot_s = self._busy_s, self._slot_s
            nodes = collections.Counter(self._nodes)
            if self.dispatcher is not None:
                stats = self.dispatcher.usage.stats()
                busy_s, slot_s = busy_s + stats["busy_s"], slot_s + stats["slot_s"]
                nodes.update(self.dispatcher.served_on)
        if slot_s <= 0:
            return None
        return {"busy_share": busy_s / slot_s, "busy_s": busy_s, "slot_s": slot_s,
                "wall_s": time.monotonic() - self._started, "results_by_node": dict(nodes)}

    def close(self) -> None:
        """Stop the actors, if any were started (runs still using them raise ``PoolClosed``)."""
        if self._shared is not None:
            self._shared.close()
            self._shared = None
        if self.dispatcher is not None:
            self.dispatcher.close()
            self._count(self.dispatcher)
            self.dispatcher = None

    def _count(self, dispatcher: Dispatcher) -> None:
        usage = getattr(dispatcher, "usage", None)  # a test's stand-in dispatcher may not count
        stats = usage.stats() if usage is not None else {"busy_s": 0.0, "slot_s": 0.0}
        with self._lock:
            self._busy_s, self._slot_s = self._busy_s + stats["busy_s"], self._slot_s + stats["slot_s"]
            self._nodes.update(getattr(dispatcher, "served_on", {}))

    def __enter__(self) -> "SharedPool":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _ray_dispatcher(config: Config, keep_problems: int = 1) -> RayDispatcher:
    cluster = config.cluster
    if cluster.address is not None:
        check_address(cluster.address)
    return RayDispatcher(evaluator_spec(config), num_actors=cluster.actors, address=cluster.address,
                         slots=cluster.slots, keep_problems=keep_problems, node_check_s=cluster.node_check_s)


@contextlib.contextmanager
def _profiler_paths_are_config() -> Iterator[None]:
    """A profiler path that is not an executable is the config's error (``ConfigError``)."""
    try:
        yield
    except ProfilerConfigError as exc:
        raise ConfigError(str(exc)) from None
