"""The interface every platform implements.

A platform owns what differs between vendors: which device a process sees,
how the whole device is synchronised, how a run is timed, how the L2 cache is
flushed between runs and what the hardware is. Code outside ``platforms/``
never asks which vendor it runs on.

Platforms import torch lazily: a worker process must be able to set its
environment (device visibility, Triton's interpreter) before torch loads.
"""

from __future__ import annotations

import abc
import dataclasses
import statistics
import time
from typing import Any, Callable


@dataclasses.dataclass(frozen=True)
class TimingSettings:
    """How a kernel is timed: warm-up, then a window of repeated runs."""

    warmup_ms: float = 25.0
    window_ms: float = 100.0
    min_runs: int = 10
    max_runs: int = 1000


@dataclasses.dataclass
class Timing:
    """Per-run times of one timed window (milliseconds) and the wall time per run."""

    runs_ms: list[float]
    wall_ms: list[float]
    overhead_ms: float = 0.0  # the timer's own cost: a run that does nothing

    @property
    def median_ms(self) -> float:
        """Median run, less the timer's own overhead (never more than half of it)."""
        median = statistics.median(self.runs_ms)
        return median - min(self.overhead_ms, 0.5 * median)

    @property
    def spread(self) -> float:
        """(p90 - p10) / median of the runs as measured."""
        runs = sorted(self.runs_ms)
        median = statistics.median(runs)
        lo = runs[int(0.1 * (len(runs) - 1))]
        hi = runs[int(round(0.9 * (len(runs) - 1)))]
        return (hi - lo) / median if median > 0 else 0.0


class Platform(abc.ABC):
    """One kind of device kevo can evaluate on."""

    name: str = ""
    #: Environment a worker process for this platform needs before torch loads.
    worker_env: dict[str, str] = {}
    #: Default timing for this platform.
    timing: TimingSettings = TimingSettings()

    def visibility_env(self, devices: list[int]) -> dict[str, str]:
        """Environment that makes a child process see only ``devices``."""
        return {}

    @abc.abstractmethod
    def available(self) -> bool:
        """True when this machine can run this platform."""

    @abc.abstractmethod
    def device(self) -> str:
        """torch device string for tensors on this platform."""

    @abc.abstractmethod
    def synchronize(self) -> None:
        """Wait for all work on the whole device, every stream included."""

    @abc.abstractmethod
    def device_name(self) -> str:
        """Human-readable name of the device."""

    @abc.abstractmethod
    def flush_cache(self) -> None:
        """Evict the last-level cache so a timed run starts cold."""

    @abc.abstractmethod
    def poison_memory(self, sizes: list[int]) -> None:
        """Fill free allocator blocks of each size in ``sizes`` (bytes) with NaN.

        Called with the sizes of the expected outputs before every call, so a
        kernel that leaves part of its output unwritten cannot pass by reusing
        a freed buffer that happened to hold the right answer.
        """

    def context_lost(self, exc: BaseException) -> bool:
        """True when ``exc`` leaves the process unable to use the device again."""
        return False

    @abc.abstractmethod
    def free_memory(self) -> int:
        """Bytes the device could still allocate."""

    @abc.abstractmethod
    def _start_stop(self) -> tuple[Callable[[], Any], Callable[[Any, Any], float]]:
        """(mark, elapsed_ms) pair: ``mark()`` stamps a point on the device timeline."""

    def specs(self) -> dict[str, Any]:
        """What is known of the hardware (see ``platforms.specs``)."""
        from platforms.specs import lookup

        return lookup(self.device_name())

    def time_runs(
        self,
        run: Callable[[int, Any], Any],
        settings: TimingSettings,
        prepare: Callable[[int], Any] = lambda i: None,
    ) -> Timing:
        """Time ``run(i, prepare(i))`` for successive run indices ``i``.

        Each run starts with a cold cache and ends when the whole device is
        idle, so work hidden on a side stream is counted. ``prepare`` (cloning
        inputs, say) runs outside the timed region. Warm-up runs get negative
        indices.
        """
        mark, elapsed = self._start_stop()
        clock = time.perf_counter
        overhead = self._timer_overhead(mark, elapsed)
        # Warm-up: at least one run, until the warm-up budget is spent.
        warm_start = clock()
        n_warm = 0
        while n_warm < 1 or (clock() - warm_start) * 1e3 < settings.warmup_ms:
            run(-1 - n_warm, prepare(-1 - n_warm))
            n_warm += 1
        self.synchronize()
        per_run = (clock() - warm_start) * 1e3 / n_warm
        n_runs = int(settings.window_ms / max(per_run, 1e-3))
        n_runs = max(settings.min_runs, min(settings.max_runs, n_runs))
        runs, walls = [], []
        for i in range(n_runs):
            args = prepare(i)
            self.flush_cache()
            self.synchronize()
            t0 = clock()
            start = mark()
            run(i, args)
            self.synchronize()
            stop = mark()
            runs.append(elapsed(start, stop))
            walls.append((clock() - t0) * 1e3)
        return Timing(runs, walls, overhead)

    def _timer_overhead(self, mark: Callable[[], Any], elapsed: Callable[[Any, Any], float]) -> float:
        """Median time the protocol of ``time_runs`` measures around no work at all."""
        samples = []
        for _ in range(20):
            self.synchronize()
            start = mark()
            self.synchronize()
            samples.append(elapsed(start, mark()))
        return statistics.median(samples)
