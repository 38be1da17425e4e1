"""Find the integer literals a Triton candidate exposes as tunables, and rewrite them.

A tunable is one integer literal in the source whose value can change without
changing what the kernel computes, given a correct kernel:

- ``num_warps``, ``num_stages`` and ``num_ctas`` given to a launch
  ``kernel[grid](...)`` of a module-level ``@triton.jit`` function;
- a launch keyword that names a ``tl.constexpr`` parameter of the launched
  kernel and holds a power of two (``BLOCK_SIZE=1024``);
- for either of those, when the keyword holds a local name instead of a
  literal (``BLOCK_SIZE=BLOCK``), the one assignment ``BLOCK = 1024`` in the
  same function, so that a grid computed from ``BLOCK`` follows the change;
- the same numbers in the literal ``triton.Config({...}, num_warps=...)``
  entries of ``@triton.autotune(configs=[...])``.

A block size is often repeated as a literal in the launch's grid
(``k[(triton.cdiv(n, 1024),)](x, n, BLOCK=1024)``, or a ``grid = ...`` of the
same function that the launch names): changing one without the other leaves
part of the output unwritten. Such a literal, equal to the keyword's value,
is *tied* to the tunable and moves with it. Where a grid literal could belong
to two tunables (``BLOCK_M=64, BLOCK_N=64`` with a ``64`` in the grid), or
two launches share one, which is which cannot be told, and those tunables are
left out (logged once per source).

Values are rewritten by replacing the literal's own characters, so comments and
formatting survive.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import re
from collections.abc import Iterator, Mapping

import logging

from operators.space import Kind

log = logging.getLogger(__name__)

#: Launch options of every Triton kernel, and the kind of each.
LAUNCH_OPTION_KINDS: Mapping[str, Kind] = {
    "num_warps": Kind.NUM_WARPS,
    "num_stages": Kind.NUM_STAGES,
    "num_ctas": Kind.NUM_CTAS,
}

_SCOPE_NODES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)
_NEWLINE = re.compile(rb"\r\n|\r|\n")


@dataclasses.dataclass(frozen=True)
class Span:
    """Where a literal sits, in ``ast`` terms: 1-based lines, UTF-8 byte columns."""

    lineno: int
    col: int
    end_lineno: int
    end_col: int

    @classmethod
    def of(cls, node: ast.expr) -> Span:
        return cls(node.lineno, node.col_offset, node.end_lineno, node.end_col_offset)


@dataclasses.dataclass(frozen=True)
class Tunable:
    """One integer literal of a candidate that a parametric operator may change.

    ``name`` is stable across values: ``add_kernel.BLOCK_SIZE`` and
    ``add_kernel.num_warps`` for literals of a launch (``add_kernel@2.…`` for
    the kernel's second launch), ``forward.BLOCK`` for an assignment in
    ``forward``, ``add_kernel.configs[0].BLOCK_SIZE`` for an autotune config.
    """

    name: str
    value: int
    kind: Kind
    span: Span
    ties: tuple[Span, ...] = ()  # literals elsewhere (the launch's grid) that hold the same number

    @property
    def spans(self) -> tuple[Span, ...]:
        """Every literal that is rewritten when this tunable changes."""
        return (self.span, *self.ties)


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
    kernels = _jit_kernels(tree)
    found = list(_autotune_tunables(kernels))
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


def params_of(source: str) -> dict[str, int]:
    """The current value of every tunable of ``source``, by name."""
    return {t.name: t.value for t in find_tunables(source)}


def apply_params(source: str, params: Mapping[str, int]) -> str:
    """``source`` with the named tunables set to the given values; every other byte is kept.

    Raises ``KeyError`` for a name that is not a tunable of ``source``.
    """
    tunables = {t.name: t for t in find_tunables(source)}
    unknown = sorted(set(params) - set(tunables))
    if unknown:
        raise KeyError(f"not tunables of this candidate: {unknown}; its tunables are {sorted(tunables)}")
    return edit_tunables(source, list(tunables.values()), params)


def edit_tunables(source: str, tunables: list[Tunable], values: Mapping[str, int]) -> str:
    """``apply_params`` for tunables already found in ``source``."""
    for name, value in values.items():
        if type(value) is not int:
            raise TypeError(f"{name} must be set to an int, got {value!r}")
    if not values:
        return source
    # Each span is an integer literal and becomes another one, so the syntax holds
    # (every offspring is parsed again by the screen before it is evaluated).
    return replace_spans(source, [(span, str(values[t.name])) for t in tunables if t.name in values
                                  for span in t.spans])


def replace_spans(source: str, edits: list[tuple[Span, str]]) -> str:
    """``source`` with the text at each (non-overlapping) span replaced."""
    data = source.encode()
    line_starts = [0] + [m.end() for m in _NEWLINE.finditer(data)]
    pieces = []
    cursor = 0
    offsets = sorted(
        (line_starts[s.lineno - 1] + s.col, line_starts[s.end_lineno - 1] + s.end_col, text) for s, text in edits
    )
    for start, end, text in offsets:
        if start < cursor:
            raise ValueError(f"overlapping edits at byte {start}")
        pieces += [data[cursor:start], text.encode()]
        cursor = end
    pieces.append(data[cursor:])
    return b"".join(pieces).decode()


# --- discovery helpers ------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class _Kernel:
    node: ast.FunctionDef
    constexprs: frozenset[str]


def _dotted(node: ast.expr) -> str:
    """``triton.language.constexpr`` for that attribute chain; '' for anything else."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value)
        return f"{base}.{node.attr}" if base else ""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):  # a string annotation
        return node.value
    return ""


def _decorator_name(node: ast.expr) -> str:
    return _dotted(node.func if isinstance(node, ast.Call) else node)


def _jit_kernels(tree: ast.Module) -> dict[str, _Kernel]:
    kernels = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and any(
            _decorator_name(d) in ("triton.jit", "jit") for d in node.decorator_list
        ):
            params = node.args.posonlyargs + node.args.args + node.args.kwonlyargs
            constexprs = frozenset(p.arg for p in params if p.annotation is not None and _is_constexpr(p.annotation))
            kernels[node.name] = _Kernel(node, constexprs)
    return kernels


def _is_constexpr(annotation: ast.expr) -> bool:
    return _dotted(annotation).split(".")[-1] == "constexpr"


def _int_literal(node: ast.expr | None) -> int | None:
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    return None


def _is_power_of_two(value: int) -> bool:
    return value > 0 and value & (value - 1) == 0


def _kind_of(option: str, kernel: _Kernel, value: int | None) -> Kind | None:
    """The kind of a launch or config keyword, or None when it is not tunable."""
    if option in LAUNCH_OPTION_KINDS:
        return LAUNCH_OPTION_KINDS[option]
    if option in kernel.constexprs and (value is None or _is_power_of_two(value)):
        return Kind.BLOCK  # a constexpr holding a flag or a count is not a size: leave it alone
    return None


def _autotune_tunables(kernels: Mapping[str, _Kernel]) -> Iterator[Tunable]:
    for name, kernel in kernels.items():
        for decorator in kernel.node.decorator_list:
            if not (isinstance(decorator, ast.Call) and _decorator_name(decorator) in ("triton.autotune", "autotune")):
                continue
            configs = next((k.value for k in decorator.keywords if k.arg == "configs"), None)
            if configs is None and decorator.args:
                configs = decorator.args[0]
            if not isinstance(configs, (ast.List, ast.Tuple)):
                continue  # configs built by code: not ours to edit
            for index, config in enumerate(configs.elts):
                yield from _config_tunables(f"{name}.configs[{index}]", config, kernel)


def _config_tunables(prefix: str, config: ast.expr, kernel: _Kernel) -> Iterator[Tunable]:
    if not (isinstance(config, ast.Call) and _dotted(config.func) in ("triton.Config", "Config")):
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
        value = _int_literal(node)
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
    scope: ast.AST, kernels: Mapping[str, _Kernel], launches_seen: dict[str, int]
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
            value = _int_literal(keyword.value)
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
        if _int_literal(node) is not None:
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
            return node.value if _int_literal(node.value) is not None else None
        if isinstance(node, ast.AnnAssign) and node.target is target:
            return node.value if _int_literal(node.value) is not None else None
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
