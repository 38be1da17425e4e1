"""The benchmarks' problems and shapes: the suite, and ``--shape NAME=VALUE``
options applied to a problem's shape knobs."""

from __future__ import annotations

import argparse
from pathlib import Path

from fitness import shape_knobs

#: The suite problems under problems/, in the order the benchmarks' tables list them.
SUITE = ["elementwise", "softmax", "rmsnorm", "sum_middle", "matmul", "matvec"]


def apply_shapes(reference: str | Path, items: list[str], base: dict[str, int] | None = None,
                 ignore_unknown: bool = True) -> dict[str, int]:
    """``base`` with the overrides in ``items``.

    With ``ignore_unknown`` (one option for several problems) an item that
    names no knob of ``reference`` is skipped; without it, it is kept, and
    the problem refuses it when it is loaded. ``ValueError`` for an item
    that is not NAME=INTEGER.
    """
    knobs = {k.name for k in shape_knobs(reference)} if ignore_unknown else None
    shapes = dict(base or {})
    for item in items:
        name, _, value = item.partition("=")
        if knobs is not None and name not in knobs:
            continue
        try:
            shapes[name] = int(value)
        except ValueError:
            raise ValueError(f"--shape {item}: expected NAME=INTEGER") from None
    return shapes


def add_suite_options(parser: argparse.ArgumentParser, repeats: int) -> None:
    """--device, --problems, --shape, --repeats and --out, as the per-seed benchmarks take them."""
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--problems", nargs="*", default=SUITE)
    parser.add_argument("--shape", action="append", default=[], metavar="NAME=VALUE",
                        help="override a shape knob of every problem that has it (repeatable)")
    parser.add_argument("--repeats", type=int, default=repeats)
    parser.add_argument("--out", type=Path)
