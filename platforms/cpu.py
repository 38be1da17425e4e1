"""CPU platform: Triton's interpreter on CPU tensors.

Slow, but every path of the evaluation protocol runs, so CI and a laptop
exercise the real code. Runtimes measured here are CPU figures.
"""

from __future__ import annotations

import hashlib
import os
import time
from typing import Any

from platforms.base import Platform
from platforms.timing import Events, TimingSettings

# A buffer larger than the last-level cache of common CPUs.
_FLUSH_BYTES = 64 << 20


class CpuPlatform(Platform):
    name = "cpu"
    # MALLOC_PERTURB_ makes glibc fill every fresh allocation with 0x7f bytes
    # (not zeros): unwritten float16 output reads as NaN, float32/bfloat16 as
    # 3.4e38, so output a kernel never wrote cannot pass as correct.
    worker_env = {"TRITON_INTERPRET": "1", "MALLOC_PERTURB_": "128"}
    # Interpreted kernels take milliseconds a run: a short window, a few runs.
    timing = TimingSettings(warmup_ms=0.0, window_ms=30.0, min_runs=3, max_runs=20)

    def __init__(self) -> None:
        self._flush_buffer = None

    def available(self) -> bool:
        return True

    def cannot_run_kernels(self) -> str | None:
        return interpreter_problem()

    def device(self) -> str:
        return "cpu"

    def device_name(self) -> str:
        name = "cpu"
        try:
            with open("/proc/cpuinfo", encoding="utf-8") as f:
                for line in f:
                    if line.startswith("model name"):
                        name = line.split(":", 1)[1].strip()
                        break
        except OSError:
            pass
        return f"{name} ({os.cpu_count()} cores, Triton interpreter)"

    def synchronize(self) -> None:
        return None

    def flush_cache(self) -> None:
        import torch

        if self._flush_buffer is None:
            self._flush_buffer = torch.empty(_FLUSH_BYTES // 4, dtype=torch.float32)
        self._flush_buffer.fill_(1.0)

    def poison_memory(self, sizes: list[int]) -> None:
        import torch

        # Blocks freed here go back to malloc, which hands them out again for
        # allocations of the same size class; fresh pages are perturbed (see
        # worker_env).
        buffers = [torch.full((max(n, 4) // 4,), float("nan")) for n in sizes]
        del buffers

    def witness(self, tensor: Any) -> Any:
        # A digest instead of a copy: inputs of a KernelBench problem at a size the
        # interpreter can still run would otherwise double the worker's memory.
        return (tuple(tensor.shape), tensor.dtype, tuple(tensor.stride()), _digest(tensor))

    def unchanged(self, witness: Any, tensor: Any) -> bool:
        return witness == (tuple(tensor.shape), tensor.dtype, tuple(tensor.stride()), _digest(tensor))

    def witness_bytes(self, tensor_bytes: int) -> int:
        return 0  # a digest in host memory

    def worker_setup(self) -> dict[str, tuple[Any, str]]:
        # Kernels torch.compile writes call libdevice, which the interpreter lacks
        # (platforms.interpreter_libdevice), and mask with whatever dtype an expression
        # gave the interpreter (platforms.interpreter_masks).
        from triton.language.extra import libdevice

        from platforms import interpreter_masks
        from platforms.interpreter_libdevice import install

        return {**{f"libdevice.{name}": (libdevice, name) for name in install()}, **interpreter_masks.install()}

    def memory_guard(self) -> Any:
        # The interpreter turns loads and stores into raw host memory accesses:
        # check each against the launch's tensors (platforms.interpreter_bounds).
        from platforms.interpreter_bounds import InterpreterBounds

        return InterpreterBounds()

    def free_memory(self) -> int:
        try:
            with open("/proc/meminfo", encoding="utf-8") as f:
                for line in f:
                    if line.startswith("MemAvailable:"):
                        return int(line.split()[1]) * 1024
        except OSError:
            pass
        return 8 << 30

    def events(self) -> Events:
        clock = time.perf_counter_ns
        return clock, lambda start, stop: (stop - start) / 1e6


def _digest(tensor: Any) -> bytes:
    """BLAKE2b of the bytes ``tensor`` covers (its own storage span, no copy when contiguous)."""
    import torch

    flat = tensor.detach().contiguous().reshape(-1).view(torch.uint8)
    return hashlib.blake2b(memoryview(flat.numpy()), digest_size=32).digest()


def interpreter_problem() -> str | None:
    """Why Triton's interpreter cannot run kernels with loops or reductions here, or None.

    NumPy 2.4 made ``int()`` of a one-element array an error, and Triton's
    interpreter before the fix of triton-lang/triton#9171 (Triton 3.6 has
    it not) turns a loop bound into an index that way: every such kernel
    fails with ``TypeError('only 0-dimensional arrays can be converted to
    Python scalars')``, honest ones included. Told by the interpreter's own
    code, not by version numbers."""
    import inspect

    import numpy
    import triton
    import triton.runtime.interpreter as interpreter

    major, minor = (int(part) for part in numpy.__version__.split(".")[:2])
    if (major, minor) < (2, 4):
        return None
    try:
        unfixed = "int(self.handle.data))" in inspect.getsource(interpreter._patch_lang_tensor)
    except (AttributeError, OSError, TypeError):
        return None  # an interpreter laid out otherwise: nothing known against it
    if not unfixed:
        return None
    return (f"Triton {triton.__version__}'s interpreter cannot run kernels with loops under numpy "
            f"{numpy.__version__} (triton-lang/triton#9171): install numpy<2.4 (pip install 'numpy<2.4'), "
            f"or a Triton with the fix")
