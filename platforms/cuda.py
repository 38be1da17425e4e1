"""NVIDIA GPUs through torch's CUDA API."""

from __future__ import annotations

from typing import Any, Callable

from platforms.base import Platform, TimingSettings

# Larger than the L2 of every supported GPU (H200: 60 MB, MI300X: 256 MB
# Infinity Cache), so zeroing it evicts everything a kernel left there.
_FLUSH_BYTES = 512 << 20


class CudaPlatform(Platform):
    name = "cuda"
    worker_env: dict[str, str] = {}
    timing = TimingSettings(warmup_ms=25.0, window_ms=100.0, min_runs=10, max_runs=1000)

    def __init__(self, index: int = 0) -> None:
        self.index = index
        self._flush_buffer = None

    visibility_variable = "CUDA_VISIBLE_DEVICES"

    def visibility_env(self, devices: list[int]) -> dict[str, str]:
        return {self.visibility_variable: ",".join(str(d) for d in devices)}

    @staticmethod
    def _is_vendor() -> bool:
        import torch

        return torch.version.hip is None

    def available(self) -> bool:
        import torch

        return torch.cuda.is_available() and self._is_vendor()

    def device(self) -> str:
        return f"cuda:{self.index}"

    def device_name(self) -> str:
        import torch

        return torch.cuda.get_device_name(self.index)

    def synchronize(self) -> None:
        import torch

        torch.cuda.synchronize(self.index)

    def flush_cache(self) -> None:
        import torch

        if self._flush_buffer is None:
            self._flush_buffer = torch.empty(
                _FLUSH_BYTES // 4, dtype=torch.float32, device=self.device()
            )
        self._flush_buffer.zero_()

    def poison_memory(self, sizes: list[int]) -> None:
        import torch

        # The caching allocator keeps freed blocks and hands them out again,
        # so output allocated after this reads NaN wherever it is not written.
        budget = self.free_memory() // 2
        blocks = []
        for n in sizes:
            n = min(max(n, 4), budget)
            budget -= n
            if n >= 4:
                blocks.append(torch.full((n // 4,), float("nan"), device=self.device()))
        del blocks

    def context_lost(self, exc: BaseException) -> bool:
        try:
            text = str(exc)
        except BaseException:  # a candidate's exception may refuse to print
            return False
        return any(
            marker in text
            for marker in ("illegal memory access", "CUDA error", "HIP error", "device-side assert",
                           "unspecified launch failure", "misaligned address", "illegal instruction")
        )

    def free_memory(self) -> int:
        import torch

        free, _total = torch.cuda.mem_get_info(self.index)
        return free + torch.cuda.memory_reserved(self.index) - torch.cuda.memory_allocated(self.index)

    def _timeline(self) -> Any:
        from platforms.timeline import DeviceTimeline

        return DeviceTimeline()

    def _start_stop(self) -> tuple[Callable[[], Any], Callable[[Any, Any], float]]:
        import torch

        event = torch.cuda.Event

        def mark():
            e = event(enable_timing=True)
            e.record()
            return e

        def elapsed(start, stop) -> float:
            stop.synchronize()
            return start.elapsed_time(stop)

        return mark, elapsed
