"""The named choices a Triton kernel's text makes, as tunables.

Where a ``@triton.jit`` function writes them (``operators.space`` says which
calls, keywords and names, and which values each may take):

- a ``tl.dot``'s ``input_precision="ieee"`` (also when written as
  ``allow_tf32=False``/``True``, or ``allow_tf32=NAME`` with ``NAME`` a
  ``True``/``False`` the kernel fixes: the keyword is then replaced by
  ``input_precision=...``). A dot that names neither is left alone: whether
  its operands are fp32, the only case the precision changes, is not in the
  text (an ``fp16`` GEMM gains nothing), and Triton's default applies;
- a ``tl.load``'s ``eviction_policy`` and ``cache_modifier`` string literals;
- a GEMM's ``GROUP_M: tl.constexpr = 8`` fixed in the kernel's body (a
  launch keyword ``GROUP_M=8`` is found with the launch's other options).

Names: ``matmul_kernel.dot[0].input_precision``,
``matmul_kernel.load[2].eviction_policy`` (the third ``tl.load`` of the
kernel in source order, whether or not it has the keyword, so the name holds
whatever the values), ``triton_tem_fused_mm_0.GROUP_M``.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Mapping

from operators.literals import Kernel, Span, Tunable, dotted, int_literal, is_constexpr
from operators.space import CONSTEXPR_NAME_KINDS, KEYWORD_KINDS, Kind

_TRITON_LANGUAGE = ("tl", "triton.language")
_PRECISION_OF_TF32 = {True: "tf32", False: "ieee"}


def structural_tunables(source: str, kernels: Mapping[str, Kernel]) -> Iterator[Tunable]:
    """The structural choices of each kernel of ``source`` (in no particular order; the caller sorts)."""
    lines = source.encode().splitlines()
    for name, kernel in kernels.items():
        yield from _keyword_choices(name, kernel.node, lines)
        yield from _fixed_constexprs(name, kernel.node)


def _keyword_choices(kernel: str, function: ast.FunctionDef, lines: list[bytes]) -> Iterator[Tunable]:
    calls: dict[str, list[ast.Call]] = {}
    for node in ast.walk(function):
        if isinstance(node, ast.Call):
            module, _, op = dotted(node.func).rpartition(".")
            if module in _TRITON_LANGUAGE and any(op == f for f, _ in KEYWORD_KINDS):
                calls.setdefault(op, []).append(node)
    for op, found in calls.items():
        for index, call in enumerate(sorted(found, key=lambda c: (c.lineno, c.col_offset))):
            keywords = {k.arg: k for k in call.keywords if k.arg}
            for (function_name, keyword), kind in KEYWORD_KINDS.items():
                if function_name != op:
                    continue
                name = f"{kernel}.{op}[{index}].{keyword}"
                given = keywords.get(keyword)
                if given is not None:
                    if isinstance(given.value, ast.Constant) and isinstance(given.value.value, str):
                        quote = _quote(lines, given.value)
                        yield Tunable(name, given.value.value, kind, Span.of(given.value),
                                      written=f"{quote}{{}}{quote}")
                elif kind is Kind.INPUT_PRECISION and "allow_tf32" in keywords:
                    value = _fixed_bool(keywords["allow_tf32"].value, function)
                    if value is not None:  # the whole keyword becomes input_precision="..."
                        yield Tunable(name, _PRECISION_OF_TF32[value], kind, Span.of(keywords["allow_tf32"]),
                                      written=f'{keyword}="{{}}"')


def _fixed_constexprs(kernel: str, function: ast.FunctionDef) -> Iterator[Tunable]:
    """``GROUP_M: tl.constexpr = 8`` statements of the kernel's own body."""
    for statement in ast.walk(function):
        if (isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name)
                and statement.target.id in CONSTEXPR_NAME_KINDS and is_constexpr(statement.annotation)):
            value = int_literal(statement.value)
            if value is not None and value > 0:
                kind = CONSTEXPR_NAME_KINDS[statement.target.id]
                yield Tunable(f"{kernel}.{statement.target.id}", value, kind, Span.of(statement.value))


def _fixed_bool(node: ast.expr, function: ast.FunctionDef) -> bool | None:
    """``True``/``False``, or a name the kernel binds once to one (``ALLOW_TF32: tl.constexpr = False``)."""
    if isinstance(node, ast.Constant) and type(node.value) is bool:
        return node.value
    if not isinstance(node, ast.Name) or node.id in {a.arg for a in function.args.args}:
        return None
    values = []
    for statement in ast.walk(function):
        targets = (statement.targets if isinstance(statement, ast.Assign)
                   else [statement.target] if isinstance(statement, (ast.AnnAssign, ast.AugAssign, ast.For))
                   else [])
        if any(isinstance(t, ast.Name) and t.id == node.id for t in targets):
            value = getattr(statement, "value", None)
            values.append(value.value if isinstance(value, ast.Constant) and type(value.value) is bool else None)
    return values[0] if len(values) == 1 else None


def _quote(lines: list[bytes], node: ast.Constant) -> str:
    """The quote a one-line string literal was written with, so a new value keeps the file's style."""
    if node.lineno != node.end_lineno:
        return "'"
    text = lines[node.lineno - 1][node.col_offset:node.end_col_offset]
    return '"' if text.endswith(b'"') and not text.endswith(b'"""') else "'"
