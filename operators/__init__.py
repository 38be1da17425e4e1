"""What makes offspring: parametric mutation and crossover over a kernel's tunable numbers."""

from operators.parametric import (
    CROSSOVER,
    MUTATION,
    Offspring,
    check_space,
    crossover,
    mutate,
    resolve_space,
)
from operators.space import (
    KIND_RULES,
    SPACE_VARIABLE,
    Kind,
    KindRule,
    SearchSpace,
    SpaceError,
    default_choices,
    read_declared_space,
)
from operators.tunables import Span, Tunable, apply_params, find_tunables, params_of

__all__ = [
    "CROSSOVER",
    "KIND_RULES",
    "MUTATION",
    "SPACE_VARIABLE",
    "Kind",
    "KindRule",
    "Offspring",
    "SearchSpace",
    "SpaceError",
    "Span",
    "Tunable",
    "apply_params",
    "check_space",
    "crossover",
    "default_choices",
    "find_tunables",
    "mutate",
    "params_of",
    "read_declared_space",
    "resolve_space",
]
