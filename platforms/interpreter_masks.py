"""Boolean masks for Triton's interpreter, as a compiled kernel has them.

A compiled kernel's mask is ``i1`` whatever built it. Triton's interpreter
keeps the numpy dtype an expression happened to produce: ``&`` of a block of
comparisons with a scalar comparison (Inductor's batched matmul template
masks its store with ``(idx_m < M) & (idx_n < N) & (idx_q < BATCH)``) gives an
int32 array, and the interpreter's own load and store refuse it ("mask has
unsupported dtype") where a GPU runs the kernel. Every masked load, store and
atomic here takes its mask as booleans first (non-zero is on), so such
kernels run on the CPU platform as they do on a GPU.

Installed once per process by the CPU platform (``CpuPlatform.worker_setup``):
in a worker before its candidate is loaded, and in a CPU capture of
Inductor's code, whose template benchmarks run under the interpreter.
"""

from __future__ import annotations

from typing import Any

import numpy as np

#: InterpreterBuilder methods that take a mask, and the position of the mask among their arguments.
_MASKED = {"create_masked_load": 1, "create_masked_store": 2, "create_atomic_rmw": 3}


def _as_bool(handle: Any) -> Any:
    """``handle`` (a TensorHandle) with its data as booleans; itself when it holds booleans already."""
    from triton.runtime.interpreter import TensorHandle

    data = getattr(handle, "data", None)
    if not isinstance(data, np.ndarray) or data.dtype == np.bool_:
        return handle
    import triton.language as tl

    return TensorHandle(data != 0, tl.int1)


def _with_bool_mask(method: Any, position: int) -> Any:
    def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        if "mask" in kwargs:
            kwargs["mask"] = _as_bool(kwargs["mask"])
        elif len(args) > position:
            args = (*args[:position], _as_bool(args[position]), *args[position + 1:])
        return method(self, *args, **kwargs)

    call.__name__ = method.__name__
    call.kevo_bool_masks = True  # type: ignore[attr-defined]  (installed once)
    return call


def install() -> dict[str, tuple[Any, str]]:
    """Make the interpreter's masked accesses take boolean masks; what the tamper watch keeps an eye on."""
    from triton.runtime.interpreter import InterpreterBuilder

    watched = {}
    for name, position in _MASKED.items():
        method = getattr(InterpreterBuilder, name, None)
        if method is None:
            continue
        if not getattr(method, "kevo_bool_masks", False):
            setattr(InterpreterBuilder, name, _with_bool_mask(method, position))
        watched[f"triton InterpreterBuilder.{name}"] = (InterpreterBuilder, name)
    return watched
