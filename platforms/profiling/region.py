"""The profiled region of a target program: only its measured runs, not its warm-up."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator


@contextlib.contextmanager
def profiled_region(enabled: bool) -> Iterator[None]:
    """Bracket the measured runs with the CUDA profiler API when ``enabled``.

    A tool started with ``--profile-from-start off`` (ncu) then sees only the
    launches inside: not the warm-up that compiles and autotunes, nor the
    kernels that draw the inputs. Tools without ``capture_region`` ignore it.
    """
    if not enabled:
        yield
        return
    import torch

    torch.cuda.profiler.start()
    try:
        yield
    finally:
        torch.cuda.profiler.stop()
