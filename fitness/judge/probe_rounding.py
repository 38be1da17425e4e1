"""How far the reference's own rounding goes on a probe: the reference against itself in float64.

A probe can make the reference ill-conditioned. Scaling an attention's
queries and keys by f scales its logits by f^2: the softmax becomes so sharp
that rounding the logits in float32 (in any summation order) moves the
outputs by several units, and the reference itself is that far from the
exact answer. A probe's cutoff that follows only the reference's scale
(``cutoff * max(1, ratio)``) would then refuse every honest kernel.

So the reference runs once more on the probe's inputs with a float64 copy of
the model and float64 copies of its floating-point inputs, and
``e = max |ref_fp64 - ref|`` over the finite elements of its floating-point
outputs is how far its own rounding goes there. The probe's cutoff is at
least ``8 e`` (``ROUNDING_MARGIN``): a kernel computing in another order whose own
rounding goes up to seven times as far from the exact answer lands within
``8 e`` of the reference (an attention's math decomposition, scaled query and
key, float32 matmul, softmax, matmul, is 4 to 6 times as far from the fused
reference as that is from float64 at 97_ScaledDotProductAttention's sizes).
``e`` is measured once, on the fixed draw the probe's
cutoff is set on. Where ``8 e`` reaches the reference's own
scale on the probe, no cutoff there tells right from wrong (all zeros would
pass): the probe is dropped. Where the float64 run cannot be done (the model
raises in float64, memory runs out or would not suffice), the cutoff stays
as it was, with a note.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from fitness.judge.cutoff import output_scale
from fitness.judge.memory_plan import Variant
from fitness.refusal import out_of_memory

#: A probe's cutoff is at least this many times the reference's own rounding there.
ROUNDING_MARGIN = 8.0


def scaled_cutoff(cutoff: float, scale: float, main_scale: float) -> float:
    """The problem's ``cutoff`` on a probe whose reference outputs reach ``scale`` where the problem's
    own reach ``main_scale``: ``cutoff * max(1, scale / main_scale)``."""
    return cutoff * max(1.0, scale / main_scale if main_scale > 0 else 1.0)


def probe_cutoff(variant: Variant, inputs: Callable[[], list], references: list, cutoff: float, main_scale: float,
                 platform: Any, what: str, note: Callable[[str], None]) -> float | str:
    """A probe's cutoff, or why the probe is dropped (a string).

    ``references`` are the reference's outputs on the probe's inputs (which
    ``inputs`` draws afresh) at ``variant``'s shapes, ``cutoff`` and ``main_scale``
    the problem's cutoff and the reference's scale on its own inputs, ``what``
    the probe in words; ``note`` is told where the cutoff widens for the
    reference's rounding, or where that rounding was not measured.
    The cutoff follows the reference's scale there, ``cutoff * max(1, max |ref
    on probe| / main_scale)``, and is at least ``ROUNDING_MARGIN`` times its
    own rounding there (``own_rounding``).
    """
    scale = output_scale(references)
    cutoff = scaled_cutoff(cutoff, scale, main_scale)
    i, o = variant.input_bytes, sum(variant.output_bytes)
    # float64 copies of the inputs and outputs (twice the bytes), with room for the forward's
    # own scratch; and the float64 model beside the reference's
    need = 3 * 2 * (i + o) + 2 * variant.scratch_bytes + 3 * variant.param_bytes
    free = platform.free_memory()
    if need > free:
        why = f"it needs about {need / 2**30:.2f} GB free, {free / 2**30:.2f} GB is"
    else:
        try:
            rounding, why = own_rounding(variant.model, inputs, references, platform), ""
        except Exception as exc:  # the reference is user input
            failed = "runs out of memory" if out_of_memory(exc) else "raises"
            why = f"the reference in float64 {failed}: {type(exc).__name__}: {str(exc).strip()[:200]}"
        finally:
            platform.release_memory()
    if why:
        note(f"probe ({what}): the reference's own rounding there was not measured ({why}); "
             f"its cutoff stays {cutoff:.3g}")
        return cutoff
    wide = ROUNDING_MARGIN * rounding
    if rounding > 0 and wide >= scale:
        return (f"the reference's own rounding there is {rounding:.3g} (against itself in float64): "
                f"{ROUNDING_MARGIN:g} times that reaches its outputs' own scale there, {scale:.3g}, so no "
                "cutoff tells right from wrong")
    if wide > cutoff:
        note(f"probe ({what}) cutoff {cutoff:.3g} -> {wide:.3g}: the reference's own rounding there is "
             f"{rounding:.3g} (against itself in float64)")
    return max(cutoff, wide)


def own_rounding(model: Any, inputs: Callable[[], list], references: list, platform: Any) -> float:
    """``max |ref_fp64 - ref|`` over the elements of the floating-point ``references``
    that are finite on both sides, with ``model`` run in float64 on ``inputs()`` cast
    to float64 (inputs that are not floating-point as they are). Raises what the
    float64 run raises."""
    import torch

    wide = copy.deepcopy(model).double()
    args = inputs()
    for j, x in enumerate(args):  # one input at a time, so that at most one is held twice
        if isinstance(x, torch.Tensor) and x.is_floating_point():
            args[j] = x.double()
        del x
    with torch.no_grad():
        out = wide(*args)
    platform.synchronize()
    del args, wide
    outs = list(out) if isinstance(out, (tuple, list)) else [out]
    del out
    worst = 0.0
    for ref, exact in zip(references, outs):
        if not (isinstance(ref, torch.Tensor) and ref.is_floating_point() and isinstance(exact, torch.Tensor)
                and exact.is_floating_point() and exact.shape == ref.shape):
            continue
        # in float64; an element not finite on either side is not rounding (its check is the finiteness one)
        diff = torch.sub(exact.detach().double(), ref).abs_().nan_to_num_(nan=0.0, posinf=0.0, neginf=0.0)
        if diff.numel():
            worst = max(worst, float(diff.max()))
        del diff
    return worst
