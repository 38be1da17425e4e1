"""The values a kernel's tunables may take.

The space is data: each kind of tunable has a row in ``KIND_RULES`` that says
which values are legal for it and which of them make its default space. A
declared space (a run's config, or a ``KEVO_SPACE`` dict in the candidate file)
names the allowed values of single tunables and overrides the default.

Most tunables are numbers (block sizes, launch options). The structural ones
are named choices a kernel's text already makes (``operators.structural``): a
``tl.dot``'s ``input_precision``, a ``tl.load``'s ``eviction_policy`` and
``cache_modifier``, a GEMM's ``GROUP_M``. Which calls and names carry them is
data too (``KEYWORD_KINDS``, ``CONSTEXPR_NAME_KINDS``). A choice that changes
the result (TF32 products) is judged like any other child: if it misses the
cutoff it is ``wrong``.
"""

from __future__ import annotations

import ast
import dataclasses
import enum
import functools
from collections.abc import Mapping, Sequence

#: Name of the module-level dict literal through which a candidate declares its space.
SPACE_VARIABLE = "KEVO_SPACE"

#: A tunable's value: a number, or a named choice (``"evict_last"``).
Value = int | str


class Kind(str, enum.Enum):
    """What a tunable number means to Triton, which decides its legal values."""

    BLOCK = "block"  # a tl.constexpr tile or block size
    NUM_WARPS = "num_warps"
    NUM_STAGES = "num_stages"
    NUM_CTAS = "num_ctas"
    GROUP = "group"  # a GEMM's swizzle: how many row blocks share a column sweep (GROUP_M)
    INPUT_PRECISION = "input_precision"  # how tl.dot multiplies fp32 operands
    EVICTION_POLICY = "eviction_policy"  # a tl.load's L2 hint
    CACHE_MODIFIER = "cache_modifier"  # a tl.load's cache operator


@dataclasses.dataclass(frozen=True)
class KindRule:
    """Legal values of one kind, and the values its default space draws from.

    With ``window`` set, the default space of a tunable whose current value is
    ``cur`` keeps only the ``default`` values within ``cur / window`` and
    ``cur * window``.
    """

    legal: tuple[Value, ...]
    default: tuple[Value, ...]
    window: int | None = None


def _powers_of_two(low_exponent: int, high_exponent: int) -> tuple[int, ...]:
    return tuple(2**e for e in range(low_exponent, high_exponent + 1))


_PRECISIONS = ("ieee", "tf32x3", "tf32")
_EVICTIONS = ("", "evict_first", "evict_last")
_CACHE_MODIFIERS = ("", ".ca", ".cg")

KIND_RULES: Mapping[Kind, KindRule] = {
    # Triton needs power-of-two block shapes; a block may hold at most 2**20 elements.
    Kind.BLOCK: KindRule(legal=_powers_of_two(0, 20), default=_powers_of_two(4, 16), window=8),
    Kind.NUM_WARPS: KindRule(legal=_powers_of_two(0, 5), default=_powers_of_two(0, 4)),
    Kind.NUM_STAGES: KindRule(legal=tuple(range(1, 8)), default=tuple(range(1, 6))),
    Kind.NUM_CTAS: KindRule(legal=_powers_of_two(0, 4), default=(1, 2, 4)),
    # Any positive group is correct; powers of two are the usual sweep.
    Kind.GROUP: KindRule(legal=tuple(range(1, 65)), default=_powers_of_two(0, 5)),
    # fp32 products: exact, three TF32 products (about fp32), one TF32 product.
    Kind.INPUT_PRECISION: KindRule(legal=_PRECISIONS, default=_PRECISIONS),
    Kind.EVICTION_POLICY: KindRule(legal=_EVICTIONS, default=_EVICTIONS),
    # cache at all levels, cache in L2 only (the loads' operators both NVIDIA and AMD take)
    Kind.CACHE_MODIFIER: KindRule(legal=_CACHE_MODIFIERS, default=_CACHE_MODIFIERS),
}

#: Keywords of Triton calls that hold a structural choice: (function, keyword) -> kind.
#: Only where a kernel writes the keyword (a literal, or ``allow_tf32=`` for the precision):
#: an absent one is Triton's default, left alone (a dot's operand types, which decide whether
#: its precision matters, are not in the text).
KEYWORD_KINDS: Mapping[tuple[str, str], Kind] = {
    ("dot", "input_precision"): Kind.INPUT_PRECISION,
    ("load", "eviction_policy"): Kind.EVICTION_POLICY,
    ("load", "cache_modifier"): Kind.CACHE_MODIFIER,
}

#: ``tl.constexpr`` names whose value is a choice of a known kind rather than a block size,
#: whether a launch passes it (``GROUP_M=8``) or the kernel fixes it (``GROUP_M: tl.constexpr = 8``).
CONSTEXPR_NAME_KINDS: Mapping[str, Kind] = {
    "GROUP_M": Kind.GROUP,
    "GROUP_SIZE_M": Kind.GROUP,
    "GROUP_N": Kind.GROUP,
    "GROUP_SIZE_N": Kind.GROUP,
}


#: The kinds whose values are strings.
STRING_KINDS = frozenset(k for k, rule in KIND_RULES.items() if all(isinstance(v, str) for v in rule.legal))


class SpaceError(ValueError):
    """A declared space is malformed, names no tunable, or allows an illegal value."""


def default_choices(kind: Kind, current: Value) -> tuple[Value, ...]:
    """The default space of a tunable of ``kind`` whose value is now ``current``.

    The current value is always part of it when legal, so a seed's own
    settings lie inside its default space.

    >>> default_choices(Kind.BLOCK, 1024)
    (128, 256, 512, 1024, 2048, 4096, 8192)
    >>> default_choices(Kind.NUM_WARPS, 4)
    (1, 2, 4, 8, 16)
    >>> default_choices(Kind.EVICTION_POLICY, "evict_last")
    ('', 'evict_first', 'evict_last')
    """
    rule = KIND_RULES[kind]
    values = {
        v
        for v in rule.default
        if rule.window is None or (v * rule.window >= current and v <= current * rule.window)  # type: ignore[operator]
    }
    if current in rule.legal:
        values.add(current)
    return tuple(sorted(values))


@dataclasses.dataclass(frozen=True)
class SearchSpace:
    """Allowed values by tunable name; a name it does not declare gets its kind's default.

    >>> space = SearchSpace.from_mapping({"add_kernel.BLOCK_SIZE": [512, 256]})
    >>> space.choices("add_kernel.BLOCK_SIZE", Kind.BLOCK, 1024)
    (256, 512)
    >>> space.choices("add_kernel.num_warps", Kind.NUM_WARPS, 4)
    (1, 2, 4, 8, 16)
    """

    declared: Mapping[str, tuple[Value, ...]] = dataclasses.field(default_factory=dict)
    origin: str = "config"  # where the declaration came from, for error messages

    @classmethod
    def from_mapping(cls, mapping: Mapping[str, Sequence[Value]], origin: str = "config") -> SearchSpace:
        """Check and normalise ``{name: [values, ...]}`` (values sorted, duplicates dropped): ints, or
        strings for a structural choice (``{"k.load[0].eviction_policy": ["", "evict_last"]}``)."""
        if not isinstance(mapping, Mapping):
            kind = type(mapping).__name__
            raise SpaceError(f"{origin}: a search space must be a dict of name -> list of values, got a {kind}")
        declared = {}
        for name, values in mapping.items():
            if not isinstance(name, str):
                raise SpaceError(f"{origin}: tunable names must be strings, got {name!r}")
            if isinstance(values, (str, bytes)) or not isinstance(values, Sequence) or not values:
                raise SpaceError(f"{origin}: {name} must map to a non-empty list of values, got {values!r}")
            if not (all(type(v) is int for v in values) or all(type(v) is str for v in values)):
                raise SpaceError(f"{origin}: {name} allows {list(values)!r}; the values must be all ints "
                                 "(a size, a launch option) or all strings (a named choice)")
            declared[name] = tuple(sorted(set(values)))
        return cls(declared, origin)

    def over(self, fallback: SearchSpace) -> SearchSpace:
        """This space, with ``fallback``'s declarations for the names this one leaves out."""
        merged = {**fallback.declared, **self.declared}
        return SearchSpace(merged, f"{self.origin} over {fallback.origin}")

    def choices(self, name: str, kind: Kind, current: Value) -> tuple[Value, ...]:
        """Allowed values of the tunable ``name``, checked against the legal values of ``kind``."""
        if name not in self.declared:
            return default_choices(kind, current)
        values = self.declared[name]
        legal = KIND_RULES[kind].legal
        illegal = [v for v in values if v not in legal]
        if illegal:
            raise SpaceError(
                f"{self.origin}: {name} allows {illegal}, not legal for a {kind.value} "
                f"(legal: {', '.join(map(repr if kind in STRING_KINDS else str, legal))})"
            )
        return values

    def unknown_names(self, names: Sequence[str]) -> list[str]:
        """The declared names that are not among ``names``."""
        known = set(names)
        return sorted(n for n in self.declared if n not in known)


@functools.lru_cache(maxsize=4096)
def read_declared_space(source: str) -> SearchSpace:
    """The space a candidate declares in a module-level ``KEVO_SPACE = {...}`` literal.

    An empty space when the file declares none; ``SpaceError`` when the
    declaration is not a dict literal of name -> list of ints (or of strings,
    for a structural choice).
    """
    tree = ast.parse(source)
    origin = f"{SPACE_VARIABLE} in the candidate"
    found = None
    for node in tree.body:
        if isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            targets, value = [node.target], node.value
        else:
            continue
        if any(isinstance(t, ast.Name) and t.id == SPACE_VARIABLE for t in targets):
            if found is not None:
                raise SpaceError(f"{origin}: assigned twice (lines {found[0]} and {node.lineno}); keep one")
            found = (node.lineno, value)
    if found is None:
        return SearchSpace({}, origin)
    lineno, value = found
    try:
        literal = ast.literal_eval(value)
    except ValueError as error:
        message = f"{origin} (line {lineno}): must be a dict literal of name -> list of values ({error})"
        raise SpaceError(message) from None
    return SearchSpace.from_mapping(literal, origin)
