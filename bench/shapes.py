"""``--shape NAME=VALUE`` options of the benchmarks, applied to a problem's shape knobs."""

from __future__ import annotations

from pathlib import Path

from fitness import shape_knobs


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
