"""libdevice for Triton's interpreter.

``triton.language.extra.libdevice`` holds stubs that a compiler backend
resolves to the vendor's device library (``libdevice`` on NVIDIA, ``ocml`` on
AMD). Triton's interpreter resolves nothing: under ``TRITON_INTERPRET=1`` a
call such as ``libdevice.erf(x)`` returns None and the kernel fails far from
the cause. Kernels torch.compile writes use libdevice throughout (erf for
GELU, tanh, exp, log1p, ...), so the CPU platform gives the stubs elementwise
implementations computed with numpy on the interpreter's arrays, in the
argument's own dtype. A function not listed here stays a stub and fails as
before; the table covers what Inductor's pointwise lowering emits.

Installed once per worker by the CPU platform (``CpuPlatform.worker_setup``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

#: libdevice name -> numpy's function computing it elementwise. numpy, not torch: a torch
#: call in a forward would be PyTorch doing the work (fitness.worker.trace), and the interpreter
#: computes everything else in numpy too.
_UNARY = {
    "abs": np.abs, "acos": np.arccos, "acosh": np.arccosh, "asin": np.arcsin, "asinh": np.arcsinh,
    "atan": np.arctan, "atanh": np.arctanh, "cbrt": np.cbrt, "ceil": np.ceil, "cos": np.cos, "cosh": np.cosh,
    "exp": np.exp, "exp2": np.exp2, "expm1": np.expm1, "floor": np.floor, "log": np.log, "log10": np.log10,
    "log1p": np.log1p, "log2": np.log2, "nearbyint": np.rint, "rint": np.rint, "rsqrt": lambda a: 1 / np.sqrt(a),
    "sin": np.sin, "sinh": np.sinh, "sqrt": np.sqrt, "tan": np.tan, "tanh": np.tanh, "trunc": np.trunc,
    "round": lambda a: np.sign(a) * np.floor(np.abs(a) + 0.5),  # half away from zero, as libdevice rounds
    "signbit": np.signbit, "isnan": np.isnan, "isinf": np.isinf, "isfinited": np.isfinite, "finitef": np.isfinite,
    # numpy has no erf, erfc or lgamma: the standard library's, element by element
    "erf": np.vectorize(math.erf, otypes=[np.float64]), "erfc": np.vectorize(math.erfc, otypes=[np.float64]),
    "lgamma": np.vectorize(math.lgamma, otypes=[np.float64]),
}
_BINARY = {"pow": np.power, "atan2": np.arctan2, "fmod": np.fmod, "hypot": np.hypot, "copysign": np.copysign,
           "nextafter": np.nextafter, "fmax": np.fmax, "fmin": np.fmin}
_PREDICATES = {"signbit", "isnan", "isinf", "isfinited", "finitef"}


def _elementwise(name: str, fn: Callable[..., Any], predicate: bool) -> Callable[..., Any]:
    def call(*args: Any, **_: Any) -> Any:
        import triton.language as tl
        from triton.runtime.interpreter import TensorHandle

        like = next((a for a in args if isinstance(a, tl.tensor)), None)
        if like is None:
            raise TypeError(f"libdevice.{name} needs a tensor argument under the interpreter")
        arrays = [np.asarray(a.handle.data) if isinstance(a, tl.tensor) else np.asarray(a) for a in args]
        dtype = like.handle.data.dtype
        out = np.asarray(fn(*arrays))
        if predicate:
            handle = TensorHandle(out.astype(np.bool_), tl.int1)
            return tl.core.tensor(handle, like.type.with_element_ty(tl.int1) if like.type.is_block() else tl.int1)
        return tl.core.tensor(TensorHandle(out.astype(dtype), like.handle.dtype), like.type)

    call.__name__ = name
    return call


def install() -> list[str]:
    """Give the libdevice stubs interpreter implementations; the names given (for the tamper watch)."""
    from triton.language.extra import libdevice

    done = []
    for table in (_UNARY, _BINARY):
        for name, fn in table.items():
            if hasattr(libdevice, name):
                setattr(libdevice, name, _elementwise(name, fn, name in _PREDICATES))
                done.append(name)
    return done
