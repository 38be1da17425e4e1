"""A kernel of kevo's own that a new worker compiles and launches once (``Platform.warm_up``).

A process's first Triton compile costs most: Triton hashes its own sources
for its cache key, and loads its backend and LLVM; the first launch creates
the device's context. Paid here, at the worker's start, these stay off the
first candidate's evaluation. Candidates never see this kernel.
"""

from __future__ import annotations

from typing import Any

import triton
import triton.language as tl


@triton.jit
def _add_one(x_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(x_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) + 1, mask=mask)


def touch(x: Any) -> None:
    """Add one to each element of the small tensor ``x`` (at most 16 elements) on its device."""
    _add_one[(1,)](x, x.numel(), BLOCK=16)
