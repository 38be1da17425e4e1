"""The timing protocol says what the device trace itself cost (``Timing.trace_s``), so a
breakdown can tell the trace's start, stop and reading from the runs and their checks."""

import contextlib
import time

from platforms import TimingSettings, get_platform, time_runs
from platforms.cpu import CpuPlatform


class SlowTrace:
    """A device trace that takes 50 ms to start, to stop and to read."""

    def __enter__(self):
        time.sleep(0.05)
        return self

    def __exit__(self, *exc):
        time.sleep(0.05)

    def run(self, index):
        return contextlib.nullcontext()

    def spans(self, n_runs):
        time.sleep(0.05)
        return None


class TracedCpu(CpuPlatform):
    def device_trace(self):
        return SlowTrace()


SETTINGS = TimingSettings(warmup_ms=0, window_ms=0, min_runs=3)


def test_the_trace_cost_is_counted_apart_from_the_runs():
    timing = time_runs(TracedCpu(), lambda i, args: time.sleep(0.01), SETTINGS)
    assert len(timing.runs_ms) == 3
    assert 0.15 <= timing.trace_s < 0.15 + 0.2  # start, stop, read; not the three 10 ms runs
    assert timing.device_ms is None


def test_without_a_trace_it_costs_nothing():
    timing = time_runs(get_platform("cpu"), lambda i, args: time.sleep(0.01), SETTINGS)
    assert timing.trace_s < 0.01
