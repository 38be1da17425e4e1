"""Seeds from several Inductor configurations: each one named, duplicates dropped.

``evolve.seeding.seed.compile_seeds`` captures a problem under several
``torch._inductor.config`` settings (``evolve.seeding.inductor.VARIANTS``) and
converts each capture. This module is the pure-text half:

- ``configuration_line(recording)``: the line of a seed's header that names the
  configuration it came from (``looped_reductions (triton.persistent_reductions=False)``);
- ``program_key(source)``: the seed as a program, up to its tunable numbers and
  named choices, its comments, docstring, ``KEVO_SPACE`` and whitespace. Two
  configurations that differ only in the blocks, warps or stages their
  autotuner picked (coordinate descent, most often) give one key;
- ``distinct(items, source_of)``: the items whose programs differ, in order, the
  first of equal programs kept, with the names of those dropped for it;
- ``with_variant_line(source, name, what)``: a seed kevo rewrote into another
  structure (``operators.seeds.split_k``) named in its header, after the
  configuration's line: ``kevo variant: NAME (what it changes)``;
  ``replace_statements(source, edits)``: the rewrite's top-level statements
  put in place, every other line kept.
"""

from __future__ import annotations

import ast
import textwrap
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from operators.literals import replace_spans
from operators.tunables import find_tunables

T = TypeVar("T")

#: The placeholder every tunable's literal becomes in a program key.
_TUNED = "0"


def configuration_line(recording: dict[str, Any]) -> str:
    """``Inductor configuration: NAME (settings)``, and where it was captured when not on a GPU."""
    name = recording.get("variant") or ("max_autotune" if recording.get("mode") else "default")
    settings = recording.get("inductor_config")
    if settings is None:  # a recording made before configurations were named
        settings = ({"max_autotune": True, "max_autotune_gemm_backends": "TRITON",
                     "max_autotune_conv_backends": "TRITON"} if recording.get("mode") else {})
    shown = ", ".join(f"{k}={v!r}" for k, v in settings.items()) or "torch's defaults"
    if recording.get("attention") == "math":
        shown += "; scaled_dot_product_attention decomposed by SDPBackend.MATH"
    line = f"Inductor configuration: {name} ({shown})"
    if recording.get("device") == "cpu":
        line += ("; captured on the CPU (Inductor's Triton backend for the CPU, run by Triton's interpreter: a "
                 "kernel's config is Inductor's first, a template's the one its benchmark picked there)")
    return line


def program_key(source: str) -> str:
    """``source`` as a program: every tunable's literal (and its ties) a placeholder, the module's
    docstring and ``KEVO_SPACE`` left out, unparsed (no comments, one way of spacing)."""
    tunables = find_tunables(source)
    spans = [(span, _TUNED if t.written == "{}" else t.text(_TUNED)) for t in tunables for span in t.spans]
    tree = ast.parse(replace_spans(source, spans) if spans else source)
    body = tree.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
            and isinstance(body[0].value.value, str):
        body = body[1:]
    body = [n for n in body if not (isinstance(n, ast.Assign) and any(
        isinstance(t, ast.Name) and t.id == "KEVO_SPACE" for t in n.targets))]
    return ast.unparse(ast.Module(body=body, type_ignores=[]))


def distinct(items: Sequence[T], source_of: Callable[[T], str],
             name_of: Callable[[T], str]) -> list[tuple[T, list[str]]]:
    """``(item, names of the items dropped as the same program)`` for each distinct program, in order."""
    kept: dict[str, tuple[T, list[str]]] = {}
    for item in items:
        key = program_key(source_of(item))
        if key in kept:
            kept[key][1].append(name_of(item))
        else:
            kept[key] = (item, [])
    return list(kept.values())


def with_variant_line(source: str, name: str, what: str) -> str:
    """``source`` with ``kevo variant: NAME (what)`` as the last paragraph of its module docstring
    (``ValueError`` where it has no plain triple-quoted one)."""
    body = ast.parse(source).body
    first = body[0] if body else None
    if not (isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)
            and isinstance(first.value.value, str)):
        raise ValueError("the seed has no module docstring to name its variant in")
    data = source.encode()  # ast's offsets count UTF-8 bytes
    lines = data.splitlines(keepends=True)
    start = sum(len(line) for line in lines[:first.lineno - 1]) + first.col_offset
    end = sum(len(line) for line in lines[:first.end_lineno - 1]) + first.end_col_offset
    quote = data[end - 3:end].decode()
    if data[start:start + 3].decode() != quote or quote not in ('"""', "'''"):
        raise ValueError("the seed's docstring is not a plain triple-quoted string")
    paragraph = textwrap.fill(f"kevo variant: {name} ({what})", 100).replace("\\", "/").replace(quote, "'")
    return (data[:end - 3].decode().rstrip("\n") + "\n\n" + paragraph + "\n" + data[end - 3:].decode())


def replace_statements(source: str, edits: dict[ast.stmt, str]) -> str:
    """``source`` with the lines of each top-level statement of ``edits`` (a function's decorators too)
    replaced by its text; every other line is kept as it was."""
    lines = source.splitlines(keepends=True)
    spans = [(min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", []))]), node.end_lineno, text)
             for node, text in edits.items()]
    for first, last, text in sorted(spans, key=lambda span: span[0], reverse=True):
        lines[first - 1:last] = [text + "\n"]
    return "".join(lines)
