"""Where a tunable sits in a candidate's text, and how a new value is written there.

The record both finders share: ``operators.tunables`` finds the numbers a
kernel exposes (block sizes, launch options), ``operators.structural`` the
named choices (a dot's input precision, a load's cache policy, a GEMM's
swizzle group). Either way a tunable is a span of the source whose text is
replaced, byte for byte, so comments and formatting survive.
"""

from __future__ import annotations

import ast
import dataclasses
import re
from collections.abc import Mapping

from operators.space import Kind, Value

_NEWLINE = re.compile(rb"\r\n|\r|\n")


@dataclasses.dataclass(frozen=True)
class Span:
    """Where a literal sits, in ``ast`` terms: 1-based lines, UTF-8 byte columns."""

    lineno: int
    col: int
    end_lineno: int
    end_col: int

    @classmethod
    def of(cls, node: ast.AST) -> Span:
        return cls(node.lineno, node.col_offset, node.end_lineno, node.end_col_offset)


@dataclasses.dataclass(frozen=True)
class Tunable:
    """One value of a candidate that a parametric operator may change.

    ``name`` is stable across values: ``add_kernel.BLOCK_SIZE`` and
    ``add_kernel.num_warps`` for literals of a launch (``add_kernel@2.…`` for
    the kernel's second launch), ``forward.BLOCK`` for an assignment in
    ``forward``, ``add_kernel.configs[0].BLOCK_SIZE`` for an autotune config,
    ``matmul_kernel.load[1].eviction_policy`` for a keyword of the second
    ``tl.load`` in ``matmul_kernel``.

    ``written`` says how a value is written at ``span``: ``{}`` for a number,
    ``'{}'`` for a string literal, ``input_precision="{}"`` where the span is a
    whole keyword the choice replaces (a dot's ``allow_tf32=False``).
    """

    name: str
    value: Value
    kind: Kind
    span: Span
    ties: tuple[Span, ...] = ()  # literals elsewhere (the launch's grid) that hold the same number
    written: str = "{}"

    @property
    def spans(self) -> tuple[Span, ...]:
        """Every literal that is rewritten when this tunable changes."""
        return (self.span, *self.ties)

    def text(self, value: Value) -> str:
        """The source text of ``value`` at this tunable's spans."""
        return self.written.format(value)


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


@dataclasses.dataclass(frozen=True)
class Kernel:
    """A module-level ``@triton.jit`` function and its ``tl.constexpr`` parameters."""

    node: ast.FunctionDef
    constexprs: frozenset[str]


def jit_kernels(tree: ast.Module) -> dict[str, Kernel]:
    """The module-level ``@triton.jit`` functions of ``tree``, by name."""
    kernels = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and any(
            decorator_name(d) in ("triton.jit", "jit") for d in node.decorator_list
        ):
            params = node.args.posonlyargs + node.args.args + node.args.kwonlyargs
            constexprs = frozenset(p.arg for p in params if p.annotation is not None and is_constexpr(p.annotation))
            kernels[node.name] = Kernel(node, constexprs)
    return kernels


def dotted(node: ast.expr) -> str:
    """``triton.language.constexpr`` for that attribute chain; '' for anything else."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = dotted(node.value)
        return f"{base}.{node.attr}" if base else ""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):  # a string annotation
        return node.value
    return ""


def decorator_name(node: ast.expr) -> str:
    return dotted(node.func if isinstance(node, ast.Call) else node)


def is_constexpr(annotation: ast.expr) -> bool:
    return dotted(annotation).split(".")[-1] == "constexpr"


def int_literal(node: ast.expr | None) -> int | None:
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    return None


def check_values(tunables: Mapping[str, Tunable], values: Mapping[str, Value]) -> None:
    """``TypeError`` where a value is not of its tunable's type (a number for a number, text for a choice)."""
    for name, value in values.items():
        expected = type(tunables[name].value) if name in tunables else int
        if type(value) is not expected:
            raise TypeError(f"{name} must be set to a{'n int' if expected is int else ' str'}, got {value!r}")
