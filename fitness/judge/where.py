"""Where a check ran, as a verdict's reason says it: the inputs (fixed or fresh) and the shapes
(the main ones, or which held-out shape), and, where the worker refused a check (a crash, a read
out of bounds), how large its largest tensor was."""

from __future__ import annotations

from fitness.judge.memory_plan import Variant


def refused_at(variant: Variant, main: Variant) -> str:
    """Where a check the worker refused (a crash, say) ran, for its reason: at a held-out shape,
    which one and its largest tensor's elements; at the main shapes, only past 2**31 elements,
    where 32-bit index arithmetic wraps ("" otherwise: the reason is the worker's own).

    >>> main = Variant({"n": 4}, None, None, [16], 16, 0, largest_elements=4)
    >>> refused_at(Variant({"n": 2**31 + 1}, None, None, [0], 0, 0, largest_elements=2**31 + 1), main)
    'at held-out shapes n=2147483649 (its largest tensor 2,147,483,649 elements, past 2^31): '
    >>> refused_at(main, main)
    ''
    """
    n = variant.largest_elements
    past = ", past 2^31" if n >= 2**31 else ""
    if variant is main:
        return f"at the main shapes (its largest tensor {n:,} elements{past}): " if past else ""
    return f"at held-out shapes {_shapes(variant)} (its largest tensor {n:,} elements{past}): "


def inputs_at(variant: Variant, main: Variant, fixed: bool) -> str:
    """The inputs a check ran on: "fixed inputs", or "fresh inputs at held-out shapes n=7"."""
    kind = "fixed" if fixed else "fresh"
    if variant is main:
        return f"{kind} inputs"
    return f"{kind} inputs at held-out shapes {_shapes(variant)}"


def _shapes(variant: Variant) -> str:
    return ", ".join(f"{k}={v}" for k, v in variant.shapes.items())
