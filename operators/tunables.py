"""Find the tunables a Triton candidate exposes, and rewrite them.

A tunable is one value in the source that can change without changing what
the kernel computes, given a correct kernel (or whose change the cutoff
polices). The numbers are found here:

- ``num_warps``, ``num_stages`` and ``num_ctas`` given to a launch
  ``kernel[grid](...)`` of a module-level ``@triton.jit`` function;
- a launch keyword that names a ``tl.constexpr`` parameter of the launched
  kernel and holds a power of two (``BLOCK_SIZE=1024``);
- for either of those, when the keyword holds a local name instead of a
  literal (``BLOCK_SIZE=BLOCK``), the one assignment ``BLOCK = 1024`` in the
  same function, so that a grid computed from ``BLOCK`` follows the change;
- the same numbers in the literal ``triton.Config({...}, num_warps=...)``
  entries of ``@triton.autotune(configs=[...])``.

The named choices a kernel's text makes (a dot's ``input_precision``, a
load's ``eviction_policy``, a GEMM's ``GROUP_M`` fixed in its body) are found
by ``operators.structural``; ``find_tunables`` reports both, in source order.

A block size is often repeated as a literal in the launch's grid
(``k[(triton.cdiv(n, 1024),)](x, n, BLOCK=1024)``, or a ``grid = ...`` of the
same function that the launch names): changing one without the other leaves
part of the output unwritten. Such a literal, equal to the keyword's value,
is *tied* to the tunable and moves with it. Where a grid literal could belong
to two tunables (``BLOCK_M=64, BLOCK_N=64`` with a ``64`` in the grid), or
two launches share one, which is which cannot be told, and those tunables are
left out (logged once per source).

Values are rewritten by replacing the literal's own characters, so comments and
formatting survive (``operators.literals``).
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import logging
from collections.abc import Iterator, Mapping

from operators.literals import (Kernel, Span, Tunable, check_values, decorator_name, dotted, int_literal,
                                jit_kernels, replace_spans)
from operators.space import CONSTEXPR_NAME_KINDS, Kind, Value
from operators.structural import structural_tunables

__all__ = ["LAUNCH_OPTION_KINDS", "Span", "Tunable", "apply_params", "edit_tunables", "find_tunables",
           "params_of", "replace_spans"]

log = logging.getLogger(__name__)

#: Launch options of every Triton kernel, and the kind of each.
LAUNCH_OPTION_KINDS: Mapping[str, Kind] = {
    "num_warps": Kind.NUM_WARPS,
    "num_stages": Kind.NUM_STAGES,
    "num_ctas": Kind.NUM_CTAS,
}

_SCOPE_NODES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)


def find_tunables(source: str) -> list[Tunable]:
    """The tunables of ``source``, in source order. Raises ``SyntaxError`` if it does not parse.

    >>> src = "@triton.jit\\ndef k(x, B: tl.constexpr): pass\\ndef f(x):\\n    k[(1,)](x, B=64, num_warps=4)\\n"
    >>> [(t.name, t.value) for t in find_tunables(src)]
    [('k.B', 64), ('k.num_warps', 4)]

    Cached by source (the search asks about the same parents again and
    again); each call gets its own list.
    """
    return list(_find_tunables(source))


@functools.lru_cache(maxsize=4096)
def _find_tunables(source: str) -> tuple[Tunable, ...]:
    tree = ast.parse(source)
    kernels = jit_kernels(tree)
    found = list(_autotune_tunables(kernels))
    found.extend(structural_tunables(source, kernels))
    launches_seen: dict[str, int] = {}
    for scope in [tree, *(n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)))]:
        found.extend(_launch_tunables(scope, kernels, launches_seen))
    found = _without_shared_ties(found)
    found.sort(key=lambda t: (t.span.lineno, t.span.col))
    taken: dict[str, int] = {}
    unique = []
    for tunable in found:
        count = taken[tunable.name] = taken.get(tunable.name, 0) + 1
        unique.append(tunable if count == 1 else dataclasses.replace(tunable, name=f"{tunable.name}@{count}"))
    return tuple(unique)


def params_of(source: str) -> dict[str, Value]:
    """The current value of every tunable of ``source``, by name."""
    return {t.name: t.value for t in find_tunables(source)}


def apply_params(source: str, params: Mapping[str, Value]) -> str:
    """``source`` with the named tunables set to the given values; every other byte is kept.

    Raises ``KeyError`` for a name that is not a tunable of ``source``.
    """
    tunables = {t.name: t for t in find_tunables(source)}
    unknown = sorted(set(params) - set(tunables))
    if unknown:
        raise KeyError(f"not tunables of this candidate: {unknown}; its tunables are {sorted(tunables)}")
    return edit_tunables(source, list(tunables.values()), params)


def edit_tunables(source: str, tunables: list[Tunable], values: Mapping[str, Value]) -> str:
    """``apply_params`` for tunables already found in ``source``."""
    check_values({t.name: t for t in tunables}, values)
    if not values:
        return source
    # Each span is a literal (or a keyword) and becomes another one of its kind, so the
    # syntax holds (every offspring is parsed again by the screen before it is evaluated).
    return replace_spans(source, [(span, t.text(values[t.name])) for t in tunables if t.name in values
                                  for span in t.spans])


# --- discovery helpers ------------------------------------------------------


def _is_power_of_two(value: int) -> bool:
    return value > 0 and value & (value - 1) == 0


def _kind_of(option: str, kernel: Kernel, value: int | None) -> Kind | None:
    """The kind of a launch or config keyword, or None when it is not tunable."""
    if option in LAUNCH_OPTION_KINDS:
        return LAUNCH_OPTION_KINDS[option]
    if option in kernel.constexprs and option in CONSTEXPR_NAME_KINDS:
        return CONSTEXPR_NAME_KINDS[option]
    if option in kernel.constexprs and (value is None or _is_power_of_two(value)):
        return Kind.BLOCK  # a constexpr holding a flag or a count is not a size: leave it alone
    return None


def _autotune_tunables(kernels: Mapping[str, Kernel]) -> Iterator[Tunable]:
    for name, kernel in kernels.items():
        for decorator in kernel.node.decorator_list:
            if not (isinstance(decorator, ast.Call) and decorator_name(decorator) in ("triton.autotune", "autotune")):
                continue
            configs = next((k.value for k in decorator.keywords if k.arg == "configs"), None)
            if configs is None and decorator.args:
                configs = decorator.args[0]
            if not isinstance(configs, (ast.List, ast.Tuple)):
                continue  # configs built by code: not ours to edit
            for index, config in enumerate(configs.elts):
                yield from _config_tunables(f"{name}.configs[{index}]", config, kernel)


def _config_tunables(prefix: str, config: ast.expr, kernel: Kernel) -> Iterator[Tunable]:
    if not (isinstance(config, ast.Call) and dotted(config.func) in ("triton.Config", "Config")):
        return
    options: list[tuple[str, ast.expr]] = [(k.arg, k.value) for k in config.keywords if k.arg]
    meta = config.args[0] if config.args else next((k.value for k in config.keywords if k.arg == "kwargs"), None)
    if isinstance(meta, ast.Dict):
        options += [
            (key.value, value)
            for key, value in zip(meta.keys, meta.values)
            if isinstance(key, ast.Constant) and isinstance(key.value, str)
        ]
    for option, node in options:
        value = int_literal(node)
        kind = _kind_of(option, kernel, value) if value is not None else None
        if kind is not None:
            yield Tunable(f"{prefix}.{option}", value, kind, Span.of(node))


def _scope_nodes(scope: ast.AST) -> Iterator[ast.AST]:
    """Every node of ``scope``'s own body, not those of the functions, classes and lambdas inside it."""
    stack = list(reversed(getattr(scope, "body", [])))
    while stack:
        node = stack.pop()
        yield node
        if not isinstance(node, _SCOPE_NODES):
            stack.extend(reversed(list(ast.iter_child_nodes(node))))


def _launch_tunables(
    scope: ast.AST, kernels: Mapping[str, Kernel], launches_seen: dict[str, int]
) -> Iterator[Tunable]:
    """Tunables of the launches written directly in ``scope`` (a module or a function)."""
    nodes = list(_scope_nodes(scope))
    launches = sorted(
        (
            n
            for n in nodes
            if isinstance(n, ast.Call)
            and isinstance(n.func, ast.Subscript)
            and isinstance(n.func.value, ast.Name)
            and n.func.value.id in kernels
        ),
        key=lambda n: (n.lineno, n.col_offset),
    )
    variable_kinds: dict[str, set[Kind]] = {}
    for call in launches:
        kernel_name = call.func.value.id
        launches_seen[kernel_name] = launches_seen.get(kernel_name, 0) + 1
        count = launches_seen[kernel_name]
        label = kernel_name if count == 1 else f"{kernel_name}@{count}"
        grid_literals = _grid_literals(scope, nodes, call.func.slice)
        launch: list[Tunable] = []
        for keyword in call.keywords:
            if keyword.arg is None:
                continue
            value = int_literal(keyword.value)
            kind = _kind_of(keyword.arg, kernels[kernel_name], value)
            if kind is None:
                continue
            if value is not None:
                ties = tuple(Span.of(c) for c in grid_literals if c.value == value) if kind is Kind.BLOCK else ()
                launch.append(Tunable(f"{label}.{keyword.arg}", value, kind, Span.of(keyword.value), ties))
            elif isinstance(keyword.value, ast.Name):
                variable_kinds.setdefault(keyword.value.id, set()).add(kind)
        yield from launch
    scope_name = getattr(scope, "name", "module")
    for variable, kinds in variable_kinds.items():
        literal = _sole_int_assignment(scope, nodes, variable)
        if literal is None or len(kinds) != 1:
            continue  # not a constant of this function, or feeding options of different kinds
        (kind,) = kinds
        if kind is Kind.BLOCK and not _is_power_of_two(literal.value):
            continue
        yield Tunable(f"{scope_name}.{variable}", literal.value, kind, Span.of(literal))


def _grid_literals(scope: ast.AST, nodes: list[ast.AST], grid: ast.expr) -> list[ast.Constant]:
    """The int literals of a launch's grid: the subscript itself, or the one assignment of
    the name it gives (``grid = (triton.cdiv(n, 1024),)``). A lambda's body is the
    launcher's business (``meta["BLOCK"]``), not a literal to tie."""
    if isinstance(grid, ast.Name):
        grid = _sole_assignment(scope, nodes, grid.id)
        if grid is None:
            return []
    found, stack = [], [grid]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Lambda):
            continue
        if int_literal(node) is not None:
            found.append(node)
        stack.extend(ast.iter_child_nodes(node))
    return found


def _without_shared_ties(found: list[Tunable]) -> list[Tunable]:
    """``found`` less the tunables whose grid literal another tunable claims too."""
    claims: dict[Span, int] = {}
    for tunable in found:
        for span in tunable.ties:
            claims[span] = claims.get(span, 0) + 1
    kept = [t for t in found if all(claims[span] == 1 for span in t.ties)]
    dropped = sorted({t.name for t in found} - {t.name for t in kept})
    if dropped:
        log.info("tunables left out: %s (a grid literal holds the value of more than one of them, so "
                 "changing one alone would break the launch)", ", ".join(dropped))
    return kept


def _sole_assignment(scope: ast.AST, nodes: list[ast.AST], variable: str) -> ast.expr | None:
    """The value of ``variable = <expr>`` when that is the name's only binding in ``scope``."""
    bindings = _bindings(scope, nodes, variable)
    if len(bindings) != 1:
        return None
    for node in nodes:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and node.targets[0] is bindings[0]:
            return node.value
    return None


def _sole_int_assignment(scope: ast.AST, nodes: list[ast.AST], variable: str) -> ast.Constant | None:
    """The int literal of ``variable = <int>`` when that is the name's only binding in ``scope``."""
    bindings = _bindings(scope, nodes, variable)
    if len(bindings) != 1:
        return None
    target = bindings[0]
    for node in nodes:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and node.targets[0] is target:
            return node.value if int_literal(node.value) is not None else None
        if isinstance(node, ast.AnnAssign) and node.target is target:
            return node.value if int_literal(node.value) is not None else None
    return None


def _bindings(scope: ast.AST, nodes: list[ast.AST], variable: str) -> list[ast.AST]:
    """Every binding of ``variable`` in ``scope``; a ``global`` or ``nonlocal`` makes it two
    (the name is not the function's own)."""
    bindings: list[ast.AST] = []
    if isinstance(scope, (ast.FunctionDef, ast.AsyncFunctionDef)):
        args = scope.args
        every_arg = args.posonlyargs + args.args + args.kwonlyargs + [a for a in (args.vararg, args.kwarg) if a]
        bindings += [a for a in every_arg if a.arg == variable]
    for node in nodes:
        if isinstance(node, ast.Name) and node.id == variable and not isinstance(node.ctx, ast.Load):
            bindings.append(node)
        elif isinstance(node, (ast.Global, ast.Nonlocal)) and variable in node.names:
            return [node, node]
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == variable:
            bindings.append(node)
        elif isinstance(node, (ast.Import, ast.ImportFrom)) and any(
            (a.asname or a.name.split(".")[0]) == variable for a in node.names
        ):
            bindings.append(node)
        elif isinstance(node, ast.ExceptHandler) and node.name == variable:
            bindings.append(node)
    return bindings
