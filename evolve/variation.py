"""Variation: new, never-seen candidates from selected parents.

Each child's operator is drawn with the config's weights; a crossover that
cannot make a child (parents of different structures, or too alike) falls back
to mutating the first parent. A child whose normalised source was seen before
in the run is drawn again, a few times, so no source is evaluated twice.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Mapping

from evolve.config import OperatorName, OperatorsConfig
from evolve.population import Candidate
from operators import crossover, mutate, params_of
from population_store import source_hash

#: Draws per child before its place in the generation is given up.
ATTEMPTS = 20
SEED_OPERATOR = "seed"


@dataclasses.dataclass(frozen=True)
class Child:
    """A candidate made but not stored yet."""

    source: str
    source_hash: str
    params: dict[str, int]
    operator: str
    parents: list[int]


def seed_children(sources: list[str]) -> list[Child]:
    """The seed kernels as children of no one."""
    return [Child(s, source_hash(s), params_of(s), SEED_OPERATOR, []) for s in sources]


def vary(parents: list[Candidate], count: int, rng: random.Random, operators: OperatorsConfig,
         space: Mapping[str, tuple[int, ...]], seen: set[str]) -> list[Child]:
    """Up to ``count`` children whose hashes are not in ``seen``, from pairs of ``parents``.

    ``parents`` holds two per child (``2 * count``). The hashes of the children
    are added to ``seen``. Fewer children come back when the space around the
    parents holds no unseen candidate.
    """
    names = list(operators.weights)
    weights = [operators.weights[n] for n in names]
    children = []
    for a, b in zip(parents[0:2 * count:2], parents[1:2 * count:2]):
        for _ in range(ATTEMPTS):
            operator = rng.choices(names, weights)[0]
            child = _make(operator, a, b, rng, operators.max_changes, space)
            if child is not None and child.source_hash not in seen:
                seen.add(child.source_hash)
                children.append(child)
                break
    return children


def _make(operator: OperatorName, a: Candidate, b: Candidate, rng: random.Random, max_changes: int,
          space: Mapping[str, tuple[int, ...]]) -> Child | None:
    if operator is OperatorName.PARAMETRIC_CROSSOVER:
        made = crossover(a.source, b.source, rng, space)
        if made is not None:
            return Child(made.source, source_hash(made.source), made.params, made.operator, [a.id, b.id])
    made = mutate(a.source, rng, space, max_changes)
    if made is None:
        return None
    return Child(made.source, source_hash(made.source), made.params, made.operator, [a.id])
