"""Parametric mutation and crossover: new settings for a kernel's tunables.

Both operators only ever rewrite the literals ``find_tunables`` reports (the
numbers, and the structural choices such as a dot's input precision), only to
values of the search space, and draw every random choice from the
``random.Random`` they are given, so a seed reproduces an offspring exactly.

The space of a candidate is resolved per tunable: the space passed in (a run's
config) first, then the file's own ``KEVO_SPACE``, then the default of the
tunable's kind around its current value. A default space moves with the value
it is centred on; to keep one fixed space for a whole run, resolve it once from
the seed (``resolve_space(seed)``) and pass that to every call.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import math
import random
from collections.abc import Mapping, Sequence

from operators.literals import Tunable, replace_spans
from operators.space import SearchSpace, SpaceError, Value, read_declared_space
from operators.tunables import edit_tunables, find_tunables

MUTATION = "parametric_mutation"
CROSSOVER = "parametric_crossover"

SpaceLike = SearchSpace | Mapping[str, Sequence[Value]] | None


@dataclasses.dataclass(frozen=True)
class Offspring:
    """A new candidate: its source, the values of all its tunables, and how it was made."""

    source: str
    params: dict[str, Value]
    operator: str
    description: str  # e.g. "add_kernel.BLOCK_SIZE 1024→2048"


def resolve_space(source: str, space: SpaceLike = None) -> dict[str, tuple[Value, ...]]:
    """The allowed values of every tunable of ``source``, by name.

    ``space`` wins over the file's ``KEVO_SPACE``, which wins over the defaults.
    Names in ``space`` that ``source`` lacks are ignored (a run's space may
    cover candidates of other structures; ``check_space`` is the strict check);
    names in ``KEVO_SPACE`` that the file lacks raise ``SpaceError``.
    """
    tunables = find_tunables(source)
    return _resolve(source, tunables, space)


def check_space(source: str, space: SpaceLike) -> None:
    """Raise ``SpaceError`` if ``space`` names a tunable that ``source`` lacks, or allows an illegal value.

    Call it once per seed when a run starts, so that a misspelt name in a
    config is an error instead of a space that silently does nothing.
    """
    declared = _as_space(space)
    tunables = find_tunables(source)
    _require_known_names(declared, tunables)
    _resolve(source, tunables, declared)


def mutate(source: str, rng: random.Random, space: SpaceLike = None, n_changes: int = 1) -> Offspring | None:
    """Set 1 to ``n_changes`` tunables of ``source`` to other values of the space.

    Returns None when no tunable has another allowed value.

    >>> seed = "@triton.jit\\ndef k(x, B: tl.constexpr): pass\\ndef f(x):\\n    k[(1,)](x, B=64)\\n"
    >>> mutate(seed, random.Random(0), {"k.B": [64, 128]}).description
    'k.B 64→128'
    """
    if n_changes < 1:
        raise ValueError(f"n_changes must be at least 1, got {n_changes}")
    tunables = find_tunables(source)
    allowed = _resolve(source, tunables, space)
    options = {t.name: [v for v in allowed[t.name] if v != t.value] for t in tunables}
    mutable = [t for t in tunables if options[t.name]]
    if not mutable:
        return None
    count = rng.randint(1, min(n_changes, len(mutable)))
    chosen = sorted(rng.sample(mutable, count), key=tunables.index)
    changes = {t.name: rng.choice(options[t.name]) for t in chosen}
    description = "; ".join(f"{t.name} {t.value}→{changes[t.name]}" for t in chosen)
    params = {t.name: changes.get(t.name, t.value) for t in tunables}
    return Offspring(edit_tunables(source, tunables, changes), params, MUTATION, description)


def crossover(source_a: str, source_b: str, rng: random.Random, space: SpaceLike = None) -> Offspring | None:
    """Uniform crossover of two candidates that differ only in their tunables' values.

    Each tunable takes parent a's or parent b's value with equal chance; a
    parent's value outside the space is not passed on when the other parent's
    is inside it. The child is built on parent a's text and differs from both
    parents. Returns None when the parents' structures differ, or when no
    child can differ from both (they differ in fewer than two tunables).
    """
    tunables_a, tunables_b = find_tunables(source_a), find_tunables(source_b)
    if _skeleton(source_a, tunables_a) != _skeleton(source_b, tunables_b):
        return None
    allowed_a = _resolve(source_a, tunables_a, space)
    allowed_b = _resolve(source_b, tunables_b, space)
    values_a = {t.name: t.value for t in tunables_a}
    values_b = {t.name: t.value for t in tunables_b}
    options = {}
    for name in values_a:
        pair = tuple(dict.fromkeys((values_a[name], values_b[name])))  # one value when they agree
        inside = tuple(v for v in pair if v in allowed_a[name] or v in allowed_b[name])
        options[name] = inside or pair[:1]
    combinations = math.prod(len(o) for o in options.values())
    copies = sum(all(parent[n] in options[n] for n in options) for parent in (values_a, values_b))
    if combinations - copies < 1:
        return None
    child = values_a
    while child in (values_a, values_b):  # at least half of all draws differ from both parents
        child = {name: rng.choice(opts) for name, opts in options.items()}
    changes = {n: v for n, v in child.items() if v != values_a[n]}
    mixed = [n for n in child if values_a[n] != values_b[n]]
    description = "uniform crossover: " + ", ".join(
        f"{n}={child[n]} ({'a' if child[n] == values_a[n] else 'b'})" for n in mixed
    )
    return Offspring(edit_tunables(source_a, tunables_a, changes), child, CROSSOVER, description)


def _as_space(space: SpaceLike) -> SearchSpace:
    if space is None:
        return SearchSpace({}, "no declared space")
    if isinstance(space, SearchSpace):
        return space
    return SearchSpace.from_mapping(space)


def _resolve(source: str, tunables: list[Tunable], space: SpaceLike) -> dict[str, tuple[Value, ...]]:
    in_file = read_declared_space(source)
    _require_known_names(in_file, tunables)
    declared = _as_space(space).over(in_file)
    return {t.name: declared.choices(t.name, t.kind, t.value) for t in tunables}


def _require_known_names(space: SearchSpace, tunables: list[Tunable]) -> None:
    names = [t.name for t in tunables]
    unknown = space.unknown_names(names)
    if unknown:
        raise SpaceError(f"{space.origin}: {unknown} name no tunable; the candidate's tunables are {names}")


def _skeleton(source: str, tunables: list[Tunable]) -> tuple[tuple[str, ...], str]:
    """What two candidates must share to be crossed: tunable names, and the code around them."""
    return _skeleton_cached(source, tuple(tunables))


@functools.lru_cache(maxsize=4096)
def _skeleton_cached(source: str, tunables: tuple[Tunable, ...]) -> tuple[tuple[str, ...], str]:
    blanked = replace_spans(source, [(span, t.text(0)) for t in tunables for span in t.spans])
    return tuple(t.name for t in tunables), ast.dump(ast.parse(blanked))

