"""How kevo times a kernel: one protocol, the same on every platform.

Triton's ``do_bench`` keeps its timer vendor-neutral and asks the driver only
for events and synchronisation; so does ``time_runs``. What it asks of a
platform is ``Timed``: a pair of events, a whole-device synchronisation, a
cache flush, and the device's activity trace where there is one
(``platforms.timeline``). Everything else (the warm-up, the window of runs, the
order of flush, synchronisation and marks, the timer's own overhead) is here.

The evaluator's worker runs untrusted code beside this timer: it watches every
name of this module, and the platform's methods, for replacement
(``fitness.worker.instrument.watched_objects``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import statistics
import time
from typing import Any, Callable, Protocol

#: ``mark()`` stamps a point on the device's timeline; ``elapsed_ms(start, stop)`` reads
#: the milliseconds between two stamps (waiting for them where it has to).
Events = tuple[Callable[[], Any], Callable[[Any, Any], float]]


@dataclasses.dataclass(frozen=True)
class TimingSettings:
    """How a kernel is timed: warm-up, then a window of repeated runs."""

    warmup_ms: float = 25.0
    window_ms: float = 100.0
    min_runs: int = 10
    max_runs: int = 1000
    device_trace: bool = True  # time from the device's activity trace where the platform has one
    # ``min_runs`` holds while that many runs, each with its preparation and checks as the warm-up
    # measured them, fit in ``min_runs_ms``; past it, as many as fit, but never fewer than
    # ``least_runs`` (0: ``min_runs`` always holds). Runs of kernels on gigabytes, each drawing
    # fresh inputs and judged as it ends, take tens of ms where the kernel takes a few.
    min_runs_ms: float = 0.0
    least_runs: int = 5

    def window_runs(self, per_run_ms: float) -> int:
        """Runs in the window, given one run's wall time (preparation and checks included).

        >>> s = TimingSettings(window_ms=10, min_runs=12, min_runs_ms=60, least_runs=5)
        >>> s.window_runs(0.1), s.window_runs(2.0), s.window_runs(10.0), s.window_runs(30.0)
        (100, 12, 6, 5)
        """
        least = self.min_runs
        if self.min_runs_ms > 0 and per_run_ms * least > self.min_runs_ms:
            least = min(least, max(self.least_runs, math.ceil(self.min_runs_ms / per_run_ms)))
        return max(least, min(self.max_runs, int(self.window_ms / max(per_run_ms, 1e-3))))


@dataclasses.dataclass
class Timing:
    """Per-run times of one timed window (milliseconds) and the wall time per run."""

    runs_ms: list[float]  # timer events around each run, host time before the first kernel included
    wall_ms: list[float]
    overhead_ms: float = 0.0  # the timer's own cost: a run that does nothing
    device_ms: list[float] | None = None  # first to last device activity of each run (platforms.timeline)
    trace_parts_s: tuple[float, float, float] = (0.0, 0.0, 0.0)  # the device trace's host cost: start, stop, read
    device_busy_ms: list[float] | None = None  # each run's span less its gaps (platforms.timeline.busy_ms)
    host_ops: list[list[str]] | None = None  # each run's outermost PyTorch operators (platforms.timeline.host_ops)

    @property
    def busy_share(self) -> float | None:
        """The device's busy time over its span, median over the runs (None without a trace): well
        under 1, the run waits for the host between its kernels (launch-bound)."""
        if not self.from_device or not self.device_busy_ms or len(self.device_busy_ms) != len(self.device_ms):
            return None
        return statistics.median(b / d for b, d in zip(self.device_busy_ms, self.device_ms))

    @property
    def trace_s(self) -> float:
        """Host seconds the device trace cost: starting, stopping and reading it."""
        return sum(self.trace_parts_s)

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


#: The least gain that counts as faster, whatever the spreads say: clocks drift between two windows
#: on one device by about this much (0.2-1.7% "improvements" timed once turned out to be noise).
MIN_GAIN = 0.01


def faster_beyond_noise(ms: float, spread: float | None, other_ms: float, other_spread: float | None) -> bool:
    """Whether a kernel timed at median ``ms`` is faster than one at ``other_ms`` beyond the noise of both.

    Two medians of one kernel, timed in two windows, differ by about their
    runs' spread (``Timing.spread``, a verdict's ``runtime_spread``). So each
    time is taken as median x (1 +- spread / 2), a missing spread as 0, and
    the kernel is faster only when its range lies wholly below the other's,
    and by at least ``MIN_GAIN``:

        ms * (1 + spread / 2) < other_ms * (1 - other_spread / 2)  and  ms < other_ms * (1 - MIN_GAIN)

    The one rule for "faster": the search's elite and best
    (``evolve.search.population.faster``) and the operator selector's credit
    (``operators.selector.improved``) both ask it.

    >>> faster_beyond_noise(0.97, 0.05, 1.0, 0.05), faster_beyond_noise(0.9, 0.05, 1.0, 0.05)
    (False, True)
    >>> faster_beyond_noise(0.995, 0.0, 1.0, None), faster_beyond_noise(0.9, None, 1.0, None)
    (False, True)
    """
    return (ms * (1 + (spread or 0.0) / 2) < other_ms * (1 - (other_spread or 0.0) / 2)
            and ms < other_ms * (1 - MIN_GAIN))


class Timed(Protocol):
    """What ``time_runs`` asks of a platform (``platforms.base.Platform`` provides it)."""

    def events(self) -> Events:
        """A fresh (mark, elapsed_ms) pair."""

    def synchronize(self) -> None:
        """Wait for all work on the whole device, every stream included."""

    def flush_cache(self) -> None:
        """Evict the last-level cache."""

    def device_trace(self) -> Any:
        """A ``platforms.timeline.DeviceTimeline`` for one window, or None."""


def time_runs(
    platform: Timed,
    run: Callable[[int, Any], Any],
    settings: TimingSettings,
    prepare: Callable[[int], Any] | None = None,
    finish: Callable[[int, Any, Any], None] | None = None,
    window: Callable[[int], None] | None = None,
) -> Timing:
    """Time ``run(i, prepare(i))`` on ``platform`` for successive run indices ``i``.

    ``finish(i, args, out)`` gets each run's arguments and what it
    returned, once the run's timing is over (checks of a run belong
    there: they are not the kernel's time).

    Each run starts with a cold cache on an idle device and ends when the
    whole device is idle again, so work hidden on a side stream is
    counted. ``prepare`` (cloning inputs, say) runs outside the timed
    region. Warm-up runs get negative indices. ``window(n_runs)`` is told
    how many runs the window has once the warm-up has decided it, before
    the first of them. Where the platform has a device trace, each run's
    device span is recorded too (see ``Timing.from_device``).

    >>> from platforms import get_platform
    >>> cpu = get_platform("cpu")
    >>> timing = time_runs(cpu, lambda i, args: None, TimingSettings(warmup_ms=0, window_ms=0, min_runs=3))
    >>> len(timing.runs_ms)
    3
    """
    prepare, finish, window = (f if f is not None else _nothing for f in (prepare, finish, window))
    mark, elapsed = platform.events()
    clock = time.perf_counter
    overhead = _timer_overhead(platform, mark, elapsed)
    # Warm-up: at least one run, until the warm-up budget is spent.
    warm_start = clock()
    n_warm = 0
    while n_warm < 1 or (clock() - warm_start) * 1e3 < settings.warmup_ms:
        args = prepare(-1 - n_warm)
        finish(-1 - n_warm, args, run(-1 - n_warm, args))
        del args
        n_warm += 1
    platform.synchronize()
    n_runs = settings.window_runs((clock() - warm_start) * 1e3 / n_warm)
    window(n_runs)
    timeline = platform.device_trace() if settings.device_trace else None
    marks, walls = [], []
    entered = clock()
    with timeline or contextlib.nullcontext():
        started_s = clock() - entered
        for i in range(n_runs):
            args = prepare(i)
            platform.flush_cache()
            platform.synchronize()
            with timeline.run(i) if timeline else contextlib.nullcontext():
                t0 = clock()
                start = mark()
                out = run(i, args)
                platform.synchronize()
                stop = mark()
                walls.append((clock() - t0) * 1e3)
            marks.append((start, stop))
            finish(i, args, out)
            del out, args  # before the next run's inputs are made: one run's memory at a time
        leaving = clock()
    stopped_s = clock() - leaving  # the trace stopped
    runs = [elapsed(start, stop) for start, stop in marks]
    reading = clock()
    spans, busy = (timeline.runs(n_runs) if timeline else None) or (None, None)
    host_ops = timeline.host_ops(n_runs) if timeline else None
    parts = (started_s, stopped_s, clock() - reading)
    return Timing(runs, walls, overhead, spans, parts, busy, host_ops)


def _nothing(*args: Any) -> None:
    """The default ``prepare``, ``finish`` and ``window``: no inputs, no checks, nothing to tell."""


def _timer_overhead(platform: Timed, mark: Callable[[], Any], elapsed: Callable[[Any, Any], float]) -> float:
    """Median time the protocol of ``time_runs`` measures around no work at all."""
    samples = []
    for _ in range(20):
        platform.synchronize()
        start = mark()
        platform.synchronize()
        samples.append(elapsed(start, mark()))
    return statistics.median(samples)
