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
import contextlib
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
    device_trace: bool = True  # time from the device's activity trace where the platform has one


@dataclasses.dataclass
class Timing:
    """Per-run times of one timed window (milliseconds) and the wall time per run."""

    runs_ms: list[float]  # timer events around each run, host time before the first kernel included
    wall_ms: list[float]
    overhead_ms: float = 0.0  # the timer's own cost: a run that does nothing
    device_ms: list[float] | None = None  # first to last device activity of each run (platforms.timeline)

    @property
    def from_device(self) -> bool:
        """True when the device trace is complete and consistent with the events.

        A run's device span lies inside its event interval; a trace that says
        otherwise is not used, and the event times (which count everything)
        stand.
        """
        spans = self.device_ms
        if not spans or len(spans) != len(self.runs_ms):
            return False
        return all(0 < d <= r * 1.05 + 0.02 for d, r in zip(spans, self.runs_ms))

    @property
    def median_ms(self) -> float:
        """Median device span; without one, the median event interval less the
        timer's own overhead (never more than half of it)."""
        if self.from_device:
            return statistics.median(self.device_ms)
        median = statistics.median(self.runs_ms)
        return median - min(self.overhead_ms, 0.5 * median)

    @property
    def spread(self) -> float:
        """(p90 - p10) / median of the runs as measured."""
        runs = sorted(self.device_ms if self.from_device else self.runs_ms)
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

    def worker_setup(self) -> dict[str, tuple[Any, str]]:
        """Run once in a worker before any candidate: what the platform installs there (the
        CPU platform gives the interpreter libdevice), as tamper-watch entries
        (readable name -> (object, attribute))."""
        return {}

    def memory_guard(self) -> Any:
        """Checks on the memory a kernel touches, installed once in a worker, or None.

        The object returned has ``violations`` (a list of what was refused,
        cleared by the worker per step) and ``watched()`` (objects the tamper
        watch must keep). Where the platform has no such check, None.
        """
        return None

    def export_tensor(self, tensor: Any) -> dict[str, Any] | None:
        """What another process needs to open contiguous device ``tensor`` where it lies, or None.

        Plain values only (they travel as JSON). The exporting process keeps
        ``tensor`` alive until the other one has its copy. None (the
        default): the tensor travels as bytes, through shared memory.
        """
        return None

    def import_tensor(self, shared: dict[str, Any], dtype: Any, shape: list[int], producer_pid: int) -> Any:
        """This process's own copy, on the device, of a tensor that process
        ``producer_pid`` described with ``export_tensor``.

        ``shared`` comes from an untrusted process: anything in it that does
        not check out raises ``ValueError`` before the device is touched.
        """
        raise ValueError(f"the {self.name} platform opens no device memory of another process")

    def witness(self, tensor: Any) -> Any:
        """What tells later whether ``tensor`` was changed (``unchanged``): here a copy of it."""
        return tensor.clone()

    def unchanged(self, witness: Any, tensor: Any) -> bool:
        """True when ``tensor`` holds, bit for bit, what it held when ``witness`` was taken."""
        import torch

        if witness.shape != tensor.shape or witness.dtype != tensor.dtype:
            return False
        a8 = witness.contiguous().reshape(-1).view(torch.uint8)
        b8 = tensor.contiguous().reshape(-1).view(torch.uint8)
        return bool(torch.equal(a8, b8))

    def release_memory(self, keep_bytes: int = 0) -> None:
        """Give cached, unused device memory back when more than ``keep_bytes`` of it is
        cached (after running out of it, or between steps, so that the other processes
        evaluating on the device can have it)."""

    #: Device memory a process that evaluates holds besides its tensors (its context,
    #: the cache-flush buffer): counted once per evaluation in flight by the memory plan.
    process_overhead_bytes: int = 0

    def track_peak(self) -> Any:
        """Start watching this process's peak device allocation; ``peak_since`` reads it."""
        return None

    def peak_since(self, mark: Any) -> int | None:
        """Bytes allocated at the peak since ``track_peak`` returned ``mark``, beyond what
        was allocated then; None where the platform cannot tell."""
        return None

    def context_lost(self, exc: BaseException) -> bool:
        """True when ``exc`` leaves the process unable to use the device again."""
        return False

    @abc.abstractmethod
    def free_memory(self) -> int:
        """Bytes the device could still allocate."""

    @abc.abstractmethod
    def _start_stop(self) -> tuple[Callable[[], Any], Callable[[Any, Any], float]]:
        """(mark, elapsed_ms) pair: ``mark()`` stamps a point on the device timeline."""

    def _timeline(self) -> Any:
        """A ``platforms.timeline.DeviceTimeline`` for one window, or None if the platform has none."""
        return None

    def specs(self) -> dict[str, Any]:
        """What is known of the hardware (see ``platforms.specs``)."""
        from platforms.specs import lookup

        return lookup(self.device_name())

    def time_runs(
        self,
        run: Callable[[int, Any], Any],
        settings: TimingSettings,
        prepare: Callable[[int], Any] = lambda i: None,
        finish: Callable[[int, Any, Any], None] = lambda i, args, out: None,
        window: Callable[[int], None] = lambda n_runs: None,
    ) -> Timing:
        """Time ``run(i, prepare(i))`` for successive run indices ``i``.

        ``finish(i, args, out)`` gets each run's arguments and what it
        returned, once the run's timing is over (checks of a run belong
        there: they are not the kernel's time).

        Each run starts with a cold cache on an idle device and ends when the
        whole device is idle again, so work hidden on a side stream is
        counted. ``prepare`` (cloning inputs, say) runs outside the timed
        region. Warm-up runs get negative indices. ``window(n_runs)`` is told
        how many runs the window has once the warm-up has decided it, before
        the first of them. Where the platform has a
        device trace, each run's device span is recorded too (see
        ``Timing.from_device``).
        """
        mark, elapsed = self._start_stop()
        clock = time.perf_counter
        overhead = self._timer_overhead(mark, elapsed)
        # Warm-up: at least one run, until the warm-up budget is spent.
        warm_start = clock()
        n_warm = 0
        while n_warm < 1 or (clock() - warm_start) * 1e3 < settings.warmup_ms:
            args = prepare(-1 - n_warm)
            finish(-1 - n_warm, args, run(-1 - n_warm, args))
            del args
            n_warm += 1
        self.synchronize()
        per_run = (clock() - warm_start) * 1e3 / n_warm
        n_runs = int(settings.window_ms / max(per_run, 1e-3))
        n_runs = max(settings.min_runs, min(settings.max_runs, n_runs))
        window(n_runs)
        timeline = self._timeline() if settings.device_trace else None
        marks, walls = [], []
        with timeline or contextlib.nullcontext():
            for i in range(n_runs):
                args = prepare(i)
                self.flush_cache()
                self.synchronize()
                with timeline.run(i) if timeline else contextlib.nullcontext():
                    t0 = clock()
                    start = mark()
                    out = run(i, args)
                    self.synchronize()
                    stop = mark()
                    walls.append((clock() - t0) * 1e3)
                marks.append((start, stop))
                finish(i, args, out)
                del out, args  # before the next run's inputs are made: one run's memory at a time
        runs = [elapsed(start, stop) for start, stop in marks]
        spans = timeline.spans(n_runs) if timeline else None
        return Timing(runs, walls, overhead, spans)

    def _timer_overhead(self, mark: Callable[[], Any], elapsed: Callable[[Any, Any], float]) -> float:
        """Median time the protocol of ``time_runs`` measures around no work at all."""
        samples = []
        for _ in range(20):
            self.synchronize()
            start = mark()
            self.synchronize()
            samples.append(elapsed(start, mark()))
        return statistics.median(samples)
