"""Bounds checks for Triton's interpreter: every access inside the launch's own tensors.

Under ``TRITON_INTERPRET=1`` a kernel's loads and stores are numpy reads and
writes at raw host addresses. An unmasked store past the end of an output does
not fault: it overwrites whatever the heap keeps there (malloc's own
bookkeeping included), the kernel's own answer stays right, and a later
candidate in the same worker dies of ``corrupted double-linked list``. The
interpreter itself checks nothing, so the worker checks for it: every address
a load, store or atomic touches (masked-in lanes only) must lie inside the
storage of one tensor argument of the launch that is running. An access that
does not is refused before it happens and recorded, so a kernel that catches
the error gains nothing.

Installed once per worker by the CPU platform (``CpuPlatform.memory_guard``);
a GPU has no such check here (see docs/EVALUATION.md).
"""

from __future__ import annotations

from typing import Any

import gc

import numpy as np


class OutOfBounds(RuntimeError):
    """Raised in place of an access outside the launch's tensors."""


class _CheckedAccess:
    """Stands in for Triton's ``_interpreter`` module: checks, then delegates."""

    def __init__(self, bounds: "InterpreterBounds", raw: Any) -> None:
        self._bounds = bounds
        self._raw = raw

    def __getattr__(self, name: str) -> Any:
        return getattr(self._raw, name)

    def load(self, ptrs, mask, other, dtype):
        self._bounds.check("load", ptrs, mask, np.dtype(dtype).itemsize)
        return self._raw.load(ptrs, mask, other, dtype)

    def store(self, ptrs, value, mask):
        self._bounds.check("store", ptrs, mask, value.dtype.itemsize)
        return self._raw.store(ptrs, value, mask)

    def atomic_cas(self, ptrs, cmp, val, sem):
        self._bounds.check("atomic", ptrs, None, val.dtype.itemsize)
        return self._raw.atomic_cas(ptrs, cmp, val, sem)

    def atomic_rmw(self, op, ptrs, val, mask, sem):
        self._bounds.check("atomic", ptrs, mask, val.dtype.itemsize)
        return self._raw.atomic_rmw(op, ptrs, val, mask, sem)


# A launch over this many bytes of tensors is followed by a collection (see __call__ below).
_COLLECT_BYTES = 32 << 20


class InterpreterBounds:
    """The tensors of the running launch, and the accesses refused so far."""

    def __init__(self) -> None:
        import triton.runtime.interpreter as interpreter

        self.violations: list[str] = []
        # (start, end) byte ranges of the running launch's tensor storages,
        # sorted by start; None outside a launch (then nothing may be accessed)
        self._starts: np.ndarray | None = None
        self._ends: np.ndarray | None = None
        self._interpreter = interpreter
        self.access = _CheckedAccess(self, interpreter._interpreter)
        interpreter._interpreter = self.access
        executor = interpreter.GridExecutor
        original_init, original_call = executor._init_args_hst, executor.__call__

        def _init_args_hst(self_, args_dev, kwargs):
            args_hst, kwargs_hst = original_init(self_, args_dev, kwargs)
            self._enter([*args_hst, *kwargs_hst.values()])
            return args_hst, kwargs_hst

        def __call__(self_, *args, **kwargs):
            try:
                return original_call(self_, *args, **kwargs)
            finally:
                large = self._ends is not None and int((self._ends - self._starts).sum()) >= _COLLECT_BYTES
                self._starts = self._ends = None
                if large:
                    # Triton's interpreter keeps a launch's tensors in a reference cycle
                    # (a recursive closure over a dict of their storages, in
                    # GridExecutor._init_args_hst) until the collector runs, which can
                    # be many launches later: gigabytes at KernelBench's sizes.
                    gc.collect()

        executor._init_args_hst = _init_args_hst
        executor.__call__ = __call__

    def watched(self) -> dict[str, tuple[Any, str]]:
        """What the worker's tamper watch must keep an eye on for these checks to hold."""
        executor = self._interpreter.GridExecutor
        return {
            "triton interpreter _interpreter": (self._interpreter, "_interpreter"),
            "triton GridExecutor._init_args_hst": (executor, "_init_args_hst"),
            "triton GridExecutor.__call__": (executor, "__call__"),
            "InterpreterBounds.check": (InterpreterBounds, "check"),
            "InterpreterBounds._enter": (InterpreterBounds, "_enter"),
            "InterpreterBounds._refuse": (InterpreterBounds, "_refuse"),
            **{f"interpreter checks .{name}": (_CheckedAccess, name)
               for name in ("load", "store", "atomic_cas", "atomic_rmw")},
            # the checked access object's own state: what it checks with, and what it delegates to
            "interpreter checks ._raw": (self.access, "_raw"),
            "interpreter checks ._bounds": (self.access, "_bounds"),
        }

    def _enter(self, args: list) -> None:
        if self._interpreter._interpreter is not self.access:
            # Swapped back for the raw module: launch nothing; the worker's
            # tamper watch names the swap after the step.
            raise OutOfBounds("kevo: Triton's interpreter module was replaced; the launch is refused")
        ranges: dict[int, int] = {}
        for storage in _storages(args):
            start = storage.data_ptr()
            ranges[start] = max(ranges.get(start, 0), start + storage.nbytes())
        starts = sorted(ranges)
        self._starts = np.array(starts, dtype=np.uint64)
        self._ends = np.array([ranges[s] for s in starts], dtype=np.uint64)

    def check(self, kind: str, ptrs: np.ndarray, mask: np.ndarray | None, itemsize: int) -> None:
        addresses = np.asarray(ptrs, dtype=np.uint64)
        if mask is not None:
            addresses = addresses[np.broadcast_to(np.asarray(mask, dtype=bool), addresses.shape)]
        addresses = addresses.reshape(-1)
        if addresses.size == 0:
            return
        starts, ends = self._starts, self._ends
        if starts is None or starts.size == 0:
            self._refuse(f"{kind} outside a kernel launch's tensors")
        low, high = addresses.min(), addresses.max()
        # the common case: the whole access inside one tensor
        i = int(np.searchsorted(starts, low, side="right")) - 1
        size = np.uint64(itemsize)
        if i >= 0 and high < ends[i] and high + size <= ends[i]:  # (the first: no wrap-around)
            return
        index = np.searchsorted(starts, addresses, side="right").astype(np.int64) - 1
        inside = index >= 0
        safe = np.where(inside, index, 0)
        inside &= (addresses < ends[safe]) & (addresses + size <= ends[safe])
        bad = int((~inside).sum())
        if bad:
            first = int(addresses[~inside][0])
            self._refuse(f"{kind} out of bounds: {bad} of {addresses.size} lanes outside every "
                         f"tensor argument (first at {_nearest(first, starts, ends)})")

    def _refuse(self, what: str) -> None:
        self.violations.append(what)
        raise OutOfBounds(f"kevo: {what}")


def _storages(args: list) -> list:
    """The untyped storages of the tensors among a launch's arguments."""
    found = []
    for arg in args:
        if isinstance(arg, tuple):
            found.extend(_storages(list(arg)))
        elif hasattr(arg, "base") and hasattr(arg, "block_shape"):  # a TensorDescriptor
            found.extend(_storages([arg.base]))
        elif hasattr(arg, "untyped_storage"):
            found.append(arg.untyped_storage())
    return found


def _nearest(address: int, starts: np.ndarray, ends: np.ndarray) -> str:
    """Where ``address`` lies relative to the nearest tensor, in bytes."""
    if starts.size == 0:
        return "no tensor argument"
    gaps = []
    for start, end in zip(starts.tolist(), ends.tolist()):
        if start <= address < end:
            gaps.append((0, f"an access straddling the end of a {end - start}-byte tensor"))
        elif address >= end:
            gaps.append((address - end, f"{address - end} bytes past the end of a {end - start}-byte tensor"))
        else:
            gaps.append((start - address, f"{start - address} bytes before the start of a {end - start}-byte tensor"))
    return min(gaps)[1]
