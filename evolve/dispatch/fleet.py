"""The evaluator actors of a Ray cluster, and the nodes they live on.

Every actor is pinned to its node (Ray's node affinity, not soft), one per
GPU of every node (one per CPU for the ``cpu`` platform), up to the number of
actors asked for. The nodes may change while a sweep runs: ``follow`` drops
the actors of a node that is gone, puts actors on a node that joined, and
replaces on its own node an actor that died on a node still alive. A pinned
actor never moves: when its node dies it dies too, and the dispatcher sends
its candidates back to the queue (``evolve.dispatch.ray``).

>>> plan = actor_plan("cuda", {"GPU": 8.0, "CPU": 64.0}, None, local=False)  # doctest: +SKIP
>>> Fleet(ray, ray.remote(EvaluatorActor), plan).fill()  # doctest: +SKIP
[Actor(EvaluatorActor, ...), ...]
"""

from __future__ import annotations

import dataclasses
import logging
import time
from typing import Any

from platforms import PlatformUnavailable

log = logging.getLogger(__name__)

#: CPU actors of a local instance on the ``cpu`` platform when no count is given.
DEFAULT_CPU_ACTORS = 2
#: How often (seconds) the nodes of the cluster are looked at for ones that joined or left.
NODE_CHECK_S = 5.0


@dataclasses.dataclass(frozen=True)
class Plan:
    """What each actor takes of a node, and how many actors in all."""

    options: dict[str, Any]  # Ray's resources for one actor: {"num_gpus": 1} or {"num_cpus": 1}
    resource: str  # the resource an actor takes one unit of: "GPU" or "CPU"
    total: int | None  # actors in all; None: one per unit of ``resource`` on every node


def actor_plan(platform: str, resources: dict[str, float], num_actors: int | None, local: bool) -> Plan:
    """The plan for ``platform`` on a cluster with ``resources`` in all (``ray.cluster_resources()``).

    GPU platforms: one actor per GPU (``num_actors`` caps it). The ``cpu``
    platform (or ``auto`` without GPUs): ``num_actors`` CPU actors, by
    default ``DEFAULT_CPU_ACTORS`` on a local instance and one per CPU of
    every node of a cluster joined at an address. More actors than the
    cluster has GPUs (or CPUs) is ``PlatformUnavailable``.
    """
    gpus, cpus = int(resources.get("GPU", 0)), int(resources.get("CPU", 0))
    if platform == "cpu" or (platform == "auto" and gpus == 0):
        total = num_actors or (DEFAULT_CPU_ACTORS if local else None)
        if total is not None and not local and total > cpus:
            raise PlatformUnavailable(f"cluster.actors is {total}, but the Ray cluster has only {cpus} CPU(s)")
        return Plan({"num_cpus": 1}, "CPU", total)
    if gpus == 0:
        raise PlatformUnavailable(f"platform {platform!r} needs GPUs, but the Ray cluster has none")
    if num_actors is not None and num_actors > gpus:
        raise PlatformUnavailable(f"cluster.actors is {num_actors}, but the Ray cluster has only {gpus} GPU(s)")
    return Plan({"num_gpus": 1}, "GPU", num_actors)


def placement(capacity: dict[str, int], placed: dict[str, int], total: int | None) -> dict[str, int]:
    """New actors per node: one per free unit of each node's ``capacity`` (``placed`` are there
    already), at most ``total`` actors in all, spread over the nodes in turn.

    >>> placement({"a": 2, "b": 2}, {"a": 1}, total=3)
    {'b': 2}
    >>> placement({"a": 2, "b": 2}, {}, total=3)
    {'a': 2, 'b': 1}
    """
    left = None if total is None else total - sum(placed.values())
    free = {node: units - placed.get(node, 0) for node, units in sorted(capacity.items())}
    new: dict[str, int] = {}
    while (left is None or left > 0) and any(n > 0 for n in free.values()):
        for node in free:
            if free[node] > 0 and (left is None or left > 0):
                free[node] -= 1
                new[node] = new.get(node, 0) + 1
                left = None if left is None else left - 1
    return new


class Fleet:
    """The live actors and the node each is pinned to.

    ``actor_class`` is a Ray actor class whose actors are made with Ray's
    ``options`` and ``args`` and ``kwargs``; each builds its evaluators at its
    first call. The fleet only starts actors and forgets dead ones; the dispatcher
    decides what they evaluate.
    """

    def __init__(self, ray: Any, actor_class: Any, plan: Plan, options: dict[str, Any] | None = None,
                 args: tuple = (), kwargs: dict[str, Any] | None = None, check_s: float = NODE_CHECK_S) -> None:
        self._ray = ray
        self.check_s = check_s
        self._actor_class, self._options = actor_class, options or plan.options
        self._args, self._kwargs = args, kwargs or {}
        self.plan = plan
        self.node_of: dict[Any, str] = {}  # actor handle -> the node it is pinned to
        self._checked = 0.0

    @property
    def actors(self) -> list[Any]:
        return list(self.node_of)

    def nodes(self) -> dict[str, int]:
        """The live nodes, each with its units of the plan's resource (0 for a node without any)."""
        return {n["NodeID"]: int(n.get("Resources", {}).get(self.plan.resource, 0))
                for n in self._ray.nodes() if n.get("Alive")}

    def fill(self) -> list[Any]:
        """Start actors where the plan wants more than there are; the new actors."""
        self._checked = time.monotonic()
        placed: dict[str, int] = {}
        for node in self.node_of.values():
            placed[node] = placed.get(node, 0) + 1
        fresh = []
        for node, count in placement(self.nodes(), placed, self.plan.total).items():
            for _ in range(count):
                actor = self._pinned(node)
                self.node_of[actor] = node
                fresh.append(actor)
        return fresh

    def follow(self) -> tuple[list[Any], list[Any]]:
        """At most every ``check_s``: (actors of nodes that are gone, dropped; actors started on
        nodes with room, such as one that joined)."""
        if time.monotonic() - self._checked < self.check_s:
            return [], []
        alive = self.nodes()
        gone = [actor for actor, node in self.node_of.items() if node not in alive]
        for actor in gone:
            self.drop(actor)
        if gone:
            log.warning("%d evaluator actor(s) lost with their node(s)", len(gone))
        fresh = self.fill()
        if fresh:
            log.info("%d evaluator actor(s) started on node(s) with room (a node joined, or an actor was lost)",
                     len(fresh))
        return gone, fresh

    def drop(self, actor: Any) -> bool:
        """Forget (and kill) ``actor``, which died or whose node is gone; whether its node is still alive."""
        node = self.node_of.pop(actor, None)
        try:
            self._ray.kill(actor)
        except Exception:  # already dead, or its node gone: nothing is left to kill
            pass
        return node is not None and node in self.nodes()

    def _pinned(self, node: str) -> Any:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        pin = NodeAffinitySchedulingStrategy(node, soft=False)  # never moved: it dies with its node
        return self._actor_class.options(**self._options, scheduling_strategy=pin).remote(*self._args, **self._kwargs)

    def kill_all(self, closed: dict[Any, int] | None = None) -> None:
        """Kill every actor. ``closed``: the process ids the actors that closed gave; for those on
        this node, once they are gone (up to 5 s), kevo's folders they still owned go (a worker
        being started as the actor closed is not among the ones it stopped)."""
        here = None
        try:
            here = self._ray.get_runtime_context().get_node_id()
        except Exception:  # Ray gone already: nothing to compare the nodes with
            pass
        local = [pid for actor, pid in (closed or {}).items() if here is not None and self.node_of.get(actor) == here]
        for actor in self.actors:
            self.drop(actor)
        if not local:
            return
        from fitness.boundary.sandbox import remove_orphaned_folders

        remove_orphaned_folders(owners=local, wait_s=5.0)
