"""Seeds from several Inductor configurations: each one named, duplicates dropped.

``evolve.capture.seed.compile_seeds`` captures a problem under several
``torch._inductor.config`` settings (``evolve.capture.inductor.VARIANTS``) and
converts each capture. This module is the pure-text half:

- ``configuration_line(recording)``: the line of a seed's header that names the
  configuration it came from (``looped_reductions (triton.persistent_reductions=False)``);
- ``program_key(source)``: the seed as a program, up to its tunable numbers and
  named choices, its comments, docstring, ``KEVO_SPACE`` and whitespace. Two
  configurations that differ only in the blocks, warps or stages their
  autotuner picked (coordinate descent, most often) give one key;
- ``distinct(items, source_of)``: the items whose programs differ, in order, the
  first of equal programs kept, with the names of those dropped for it.
"""

from __future__ import annotations

import ast
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
