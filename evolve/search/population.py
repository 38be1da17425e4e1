"""Individuals as DEAP's tools see them, and the selection steps of the loop.

Minimisation is stated once, in ``RuntimeFitness.weights``. Only accepted
kernels have a fitness, and only they enter a population.

Faster only beyond noise. One kernel counts as faster than another
(``faster``) only when its time, taken with its verdict's ``runtime_spread``,
lies wholly below the other's, and by at least 1%: the rule of
``platforms.timing.faster_beyond_noise``, the same by which the steering
learns what paid off (``operators.selector.improved``). The elite and the
run's best (``evolve.search.loop``) follow it (``ranked``): a newer kernel
goes ahead of an older one only when it is faster, so a child no faster than
its parent beyond noise never displaces it there. Tournaments compare medians as they
are: a child as fast as its parent within noise may still be drawn as a
parent, which keeps the search moving across plateaus.
"""

from __future__ import annotations

import contextlib
import dataclasses
import random
from collections.abc import Iterator
from typing import Any

from deap import base, tools

from platforms.timing import faster_beyond_noise
from population_store import ACCEPTED, Individual


class RuntimeFitness(base.Fitness):
    """A kernel's median runtime in milliseconds: lower is better."""

    weights = (-1.0,)


@dataclasses.dataclass(eq=False)  # identity, not value: DEAP's migration finds individuals with index()
class Candidate:
    """One stored individual of the run, with a fitness DEAP can compare."""

    id: int
    source: str
    source_hash: str
    params: dict[str, int]
    generation: int
    island: int
    result: dict[str, Any] | None = None  # the evaluation record; None while pending
    fitness: RuntimeFitness = dataclasses.field(default_factory=RuntimeFitness)

    @classmethod
    def from_individual(cls, ind: Individual) -> "Candidate":
        candidate = cls(ind.id, ind.source, ind.source_hash, ind.params, ind.generation, ind.island)
        if ind.result is not None:
            candidate.record(ind.result)
        return candidate

    def record(self, result: dict[str, Any]) -> None:
        """Take the evaluation record; an accepted kernel gets its runtime as fitness."""
        self.result = result
        if result["status"] == ACCEPTED:
            self.fitness.values = (result["runtime_ms"],)

    @property
    def accepted(self) -> bool:
        return self.fitness.valid

    @property
    def runtime_ms(self) -> float | None:
        return self.fitness.values[0] if self.accepted else None

    @property
    def speedup(self) -> float | None:
        return self.result.get("speedup") if self.result else None

    @property
    def spread(self) -> float:
        """The relative spread of its timed runs (0 where unknown)."""
        return (self.result or {}).get("runtime_spread") or 0.0


def faster(ms: float, spread: float | None, other_ms: float | None, other_spread: float | None) -> bool:
    """Whether a kernel timed at ``ms`` is faster than one at ``other_ms`` beyond the noise of
    both (``platforms.timing.faster_beyond_noise``); anything is faster than no time at all.

    >>> faster(0.97, 0.05, 1.0, 0.05), faster(0.9, 0.05, 1.0, 0.05), faster(0.995, 0.0, 1.0, 0.0)
    (False, True, False)
    """
    return other_ms is None or faster_beyond_noise(ms, spread, other_ms, other_spread)


def beats(a: Candidate, b: Candidate) -> bool:
    """Whether accepted ``a`` is faster than accepted ``b`` beyond noise (``faster``)."""
    return faster(a.runtime_ms, a.spread, b.runtime_ms, b.spread)  # type: ignore[arg-type]


def ranked(pool: list[Candidate]) -> list[Candidate]:
    """``pool``'s kernels (accepted, each once), best first: taken oldest first (by id), each goes
    ahead of the first one it ``beats``, else last. The first is the incumbent no later kernel
    beat beyond noise.

    >>> def c(i, ms, spread):
    ...     k = Candidate(i, "", str(i), {}, 0, 0, {"status": ACCEPTED, "runtime_ms": ms, "runtime_spread": spread})
    ...     k.fitness.values = (ms,)
    ...     return k
    >>> [k.id for k in ranked([c(1, 1.0, 0.05), c(2, 0.97, 0.05), c(3, 1.2, 0.0), c(4, 1.1, 0.0)])]
    [1, 2, 4, 3]
    """
    order: list[Candidate] = []
    for candidate in sorted({c.id: c for c in pool}.values(), key=lambda c: c.id):
        place = next((i for i, other in enumerate(order) if beats(candidate, other)), len(order))
        order.insert(place, candidate)
    return order


@contextlib.contextmanager
def lend_random(rng: random.Random) -> Iterator[None]:
    """Run DEAP's selection on ``rng``.

    DEAP's selection draws from the ``random`` module's global generator; lend
    it ``rng``'s state for the call and take the advanced state back, so the
    run has one random stream, which a checkpoint saves and a resume restores.
    """
    outside = random.getstate()
    random.setstate(rng.getstate())
    try:
        yield
    finally:
        rng.setstate(random.getstate())
        random.setstate(outside)


def select_parents(population: list[Candidate], k: int, tournament_size: int,
                   rng: random.Random) -> list[Candidate]:
    """``k`` parents, each the fittest of ``tournament_size`` drawn at random."""
    with lend_random(rng):
        return tools.selTournament(population, k, tournament_size)


def survivors(pool: list[Candidate], size: int, elite: int, tournament_size: int,
              rng: random.Random) -> list[Candidate]:
    """The next population from ``pool`` (parents and accepted offspring): (mu + lambda).

    The ``elite`` best (``ranked``: a child no faster than its parent beyond
    noise stays behind it) always survive; tournaments among the rest fill the
    remaining places. A pool no larger than ``size`` survives whole, best first.
    """
    order = ranked(pool)  # a parent may sit in a population twice: once here
    if len(order) <= size:
        return order
    best = order[:elite]
    rest = order[elite:]
    with lend_random(rng):
        return best + tools.selTournament(rest, size - len(best), tournament_size)


def migrate(islands: list[list[Candidate]], migrants: int) -> None:
    """Ring migration: each island's best replace the worst of the next island (in place)."""
    k = min([migrants, *map(len, islands)])  # an island may hold fewer kernels than migrants
    if len(islands) > 1 and k > 0:
        tools.migRing(islands, k, selection=lambda pop, n: ranked(pop)[:n],
                      replacement=lambda pop, n: ranked(pop)[-n:])
