"""Individuals as DEAP's tools see them, and the selection steps of the loop.

Minimisation is stated once, in ``RuntimeFitness.weights``; everything else
compares fitnesses the DEAP way (greater is better). Only accepted kernels
have a fitness, and only they enter a population.
"""

from __future__ import annotations

import contextlib
import dataclasses
import random
from collections.abc import Iterator
from typing import Any

from deap import base, tools

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

    The ``elite`` fittest always survive; tournaments among the rest fill the
    remaining places. A pool no larger than ``size`` survives whole.
    """
    pool = list({c.id: c for c in pool}.values())  # a parent may sit in a population twice
    if len(pool) <= size:
        return tools.selBest(pool, len(pool))
    best = tools.selBest(pool, elite)
    rest = [c for c in pool if c not in best]
    with lend_random(rng):
        return best + tools.selTournament(rest, size - len(best), tournament_size)


def migrate(islands: list[list[Candidate]], migrants: int) -> None:
    """Ring migration: each island's best replace the worst of the next island (in place)."""
    k = min([migrants, *map(len, islands)])  # an island may hold fewer kernels than migrants
    if len(islands) > 1 and k > 0:
        tools.migRing(islands, k, selection=tools.selBest, replacement=tools.selWorst)
