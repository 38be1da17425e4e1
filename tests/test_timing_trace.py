"""The timing protocol says what the device trace itself cost (``Timing.trace_s``), so a
breakdown can tell the trace's start, stop and reading from the runs and their checks."""

import contextlib
import time

import pytest

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

    def runs(self, n_runs):  # what time_runs reads: each run's span and busy time (none here)
        time.sleep(0.05)
        return None

    def host_ops(self, n_runs):  # and each run's PyTorch operators (none here)
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


class _Event:
    """One event of a device trace as ``DeviceTimeline.spans`` reads it (kineto's accessors)."""

    def __init__(self, name: str, device: str, start_ns: int, end_ns: int) -> None:
        self._name, self._device, self._start, self._end = name, device, start_ns, end_ns

    def name(self) -> str:
        return self._name

    def device_type(self) -> str:
        return f"DeviceType.{self._device}"

    def start_ns(self) -> int:
        return self._start

    def end_ns(self) -> int:
        return self._end


def test_the_trace_gives_each_runs_span_and_the_devices_busy_time_in_it():
    from types import SimpleNamespace

    from platforms.timeline import DeviceTimeline
    from platforms.timing import Timing

    timeline = DeviceTimeline()
    ms = 1_000_000
    events = [
        _Event(f"{timeline._tag}0", "CPU", 0, 10 * ms),  # run 0: two kernels back to back
        _Event("k", "CUDA", 1 * ms, 3 * ms), _Event("k", "CUDA", 3 * ms, 5 * ms),
        _Event(f"{timeline._tag}1", "CPU", 20 * ms, 40 * ms),  # run 1: a 2 ms kernel, a gap of 6 ms, another
        _Event("k", "CUDA", 21 * ms, 23 * ms), _Event("k", "CUDA", 29 * ms, 31 * ms),
        _Event("copy", "CUDA", 30 * ms, 30 * ms + ms // 2),  # overlapping another: counted once
    ]
    timeline._profile = SimpleNamespace(profiler=SimpleNamespace(kineto_results=SimpleNamespace(events=lambda: events)))
    timeline._closed = True
    spans, busy = timeline.runs(2)
    assert spans == [4.0, 10.0] and busy == [4.0, 4.0] and timeline.spans(2) == spans
    timing = Timing([10.0, 20.0], [10.0, 20.0], 0.0, spans, (0.0, 0.0, 0.0), busy)
    assert timing.busy_share == pytest.approx((1.0 + 0.4) / 2)  # the median of 1 and 0.4
    assert Timing([10.0], [10.0], 0.0, None).busy_share is None  # no trace: not known


def test_the_record_gives_each_runs_outermost_pytorch_operators():
    """What the dispatch trace would refuse in a timed run, read from the profiler's record after
    the runs (``DeviceTimeline.host_ops``): each run's own operators, the outermost ones only
    (``zeros``, not the ``fill_`` inside it), whatever ran between the runs left out."""
    import torch

    from fitness.worker.trace import host_violations
    from platforms.timeline import DeviceTimeline

    timeline, x = DeviceTimeline(), torch.randn(1, 64)
    with pytest.warns(UserWarning, match="CUDA") if not torch.cuda.is_available() else contextlib.nullcontext():
        with timeline:
            for i in range(3):
                torch.ones(3)  # between runs: no run's
                with timeline.run(i):
                    torch.empty(5)
                    torch.zeros(10)
                    if i == 1:
                        torch.nn.functional.linear(x, x)
                    if i == 2:  # a user's range named like an allowed operator hides nothing inside it
                        with torch.profiler.record_function("aten::empty"):
                            torch.mm(x, x.T)
    ops = timeline.host_ops(3)
    assert ops == [["empty", "zeros"], ["empty", "zeros", "linear"], ["empty", "zeros", "numpy_T", "mm"]]
    assert host_violations(ops) == ["linear", "numpy_T", "mm"]
    assert timeline.host_ops(4) is None  # a run without its range: no record to trust
