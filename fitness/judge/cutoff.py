"""The cutoff a problem is judged at where it names none: derived from its reference's outputs.

``fitness.judge.prepared`` derives it once, at the main shapes, on the first fixed
inputs, before the cutoff check (``fitness.judge.compare.check_cutoff``) makes sure
that trivial outputs would not pass it; ``kevo apply`` derives a whole model's.
"""

from __future__ import annotations

import math

from fitness.judge.compare import finite_abs_max
from fitness.settings import DEFAULT_MAX_ABS_DIFF


def derived_cutoff(references: list, scale: float, terms: float = 1.0) -> tuple[float, str]:
    """(the cutoff, the rule that gave it) for a problem that names none.

    KernelBench's 1e-2, widened to 8 ulps of 1.0 for a low-precision output
    dtype (bfloat16: 0.0625), and scaled down with the outputs when they stay
    below 1: ``max(1e-2, 8 eps) * min(1, max |ref|)``. So a softmax whose
    outputs sit near 1e-6 is judged at a cutoff that can tell it from zeros,
    and no output is judged looser than KernelBench would judge it at fp32.
    Outputs that are all zero keep 1e-2 (the cutoff check then refuses them).
    ``scale`` is their largest finite |element| (``output_scale``).

    Where each output sums ``terms`` products (a dot product's length: the
    reference's FLOPs over two per output element, ``fitness.judge.floor.reduction_terms``)
    and the outputs are large, that cutoff can lie below what a sum in another
    order rounds to: 1e-2 is a third of an fp32 ulp at 262144, a matrix-vector
    product over 2^20 terms of [0, 1) draws. The cutoff is then at least
    ``4 eps_acc max |ref| sqrt(terms)``, the typical rounding of such a sum in
    the accumulator's precision (fp32 for fp32 and half outputs), and never
    above KernelBench's own relative tolerance, ``1e-2 max |ref|``.
    """
    import torch

    floating = [r for r in references if r.is_floating_point()]
    eps = max((torch.finfo(r.dtype).eps for r in floating), default=0.0)
    base = max(DEFAULT_MAX_ABS_DIFF, 8 * eps)
    if scale <= 0:
        return base, f"{base:.3g} (no cutoff given; every output is zero)"
    cutoff = base * min(1.0, scale)
    rule = (f"{cutoff:.3g} = {base:.3g} x min(1, max |ref| {scale:.3g}) (no cutoff given: derived "
            f"from the reference's outputs)")
    # the accumulator: fp32 for half outputs, else the outputs' own precision
    eps_acc = max((torch.finfo(torch.promote_types(r.dtype, torch.float32)).eps for r in floating), default=0.0)
    rounding = min(4 * eps_acc * scale * math.sqrt(max(1.0, terms)), DEFAULT_MAX_ABS_DIFF * scale)
    if rounding > cutoff:
        cutoff = rounding
        rule = (f"{cutoff:.3g} = 4 x eps {eps_acc:.3g} x max |ref| {scale:.3g} x sqrt({terms:.4g} terms a "
                f"sum) (no cutoff given: derived from the reference's outputs; a sum in another order "
                f"rounds this far, where 1e-2 would be below it)")
    return cutoff, rule


def output_scale(references: list) -> float:
    """The largest finite |element| over all of ``references`` (0.0 for none)."""
    return max((finite_abs_max(r) for r in references), default=0.0)
