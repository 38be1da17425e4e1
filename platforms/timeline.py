"""The device's own record of a timed window: when each run's work started and ended.

CUDA events bracket a run from the host: the interval also holds the time the
host spends in Python before the first kernel reaches the device, which for a
kernel of a few microseconds is most of what gets measured, and it varies with
the host's load. The profiler's activity trace (CUPTI on NVIDIA, roctracer on
AMD, through torch.profiler) stamps every kernel, copy and fill of this
process on the device clock, whatever stream or launch path it took. A run's
device time is the span from the first such activity to the last one inside
the run's range; runs are separated by whole-device synchronisations, so
nothing of one run can spill into the next.

A window whose trace is incomplete (a run with no device activity, say,
because the trace dropped records or someone stopped the profiler) yields
no spans, and the caller keeps the event times, which count everything.

The trace is the whole process's: one window at a time per process
(``_ONE_WINDOW``). Two threads tracing at once would each count the other's
kernels inside their runs, and torch's profiler does not survive being
started from two threads (a segfault in kineto, seen on the H200 when two
runs of a sweep timed their torch.compile seeds at once).
"""

from __future__ import annotations

import bisect
import contextlib
import secrets
import threading
import warnings
from typing import Any


#: Held from a window's start to its end: one device trace at a time in this process.
_ONE_WINDOW = threading.Lock()


class DeviceTimeline:
    """Collects device activity for a window; ``spans()`` after it closed."""

    def __init__(self) -> None:
        import torch.profiler as tp

        self._tp = tp
        with warnings.catch_warnings():  # its note on events cleared between cycles: one window, one cycle
            warnings.simplefilter("ignore")
            self._profile = tp.profile(activities=[tp.ProfilerActivity.CPU, tp.ProfilerActivity.CUDA],
                                       record_shapes=False, with_stack=False, profile_memory=False)
        # A run's range is named with a secret, so nobody else's range can pass for it.
        self._tag = f"kevo-run-{secrets.token_hex(8)}:"
        self._closed = False
        self._read: tuple | None = None  # the record, once read (_record)

    def __enter__(self) -> "DeviceTimeline":
        _ONE_WINDOW.acquire()
        try:
            self._profile.__enter__()
        except BaseException:
            _ONE_WINDOW.release()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self._profile.__exit__(None, None, None)
        finally:
            self._closed = True
            _ONE_WINDOW.release()

    def run(self, index: int) -> contextlib.AbstractContextManager[Any]:
        """Context that marks run ``index`` on the host timeline."""
        return self._tp.record_function(f"{self._tag}{index}")

    def spans(self, n_runs: int) -> list[float] | None:
        """Milliseconds from the first to the last device activity of each run, or None."""
        measured = self.runs(n_runs)
        return None if measured is None else measured[0]

    def runs(self, n_runs: int) -> tuple[list[float], list[float]] | None:
        """Each run's span (``spans``) and the milliseconds of it with some device activity
        (``busy_ms``: the span less the gaps between kernels), or None."""
        record = self._record(n_runs)
        if record is None:
            return None
        ranges, activity, _ = record
        starts = [start for start, _ in activity]
        spans, busy = [], []
        for lo, hi in ranges:
            # the activities starting inside the run's range: one slice of the sorted list
            inside = activity[bisect.bisect_left(starts, lo):bisect.bisect_right(starts, hi)]
            if not inside:
                return None
            spans.append((max(end for _, end in inside) - inside[0][0]) / 1e6)
            busy.append(busy_ms(inside))
        return spans, busy

    def host_ops(self, n_runs: int) -> list[list[str]] | None:
        """The operators PyTorch dispatched on the host inside each run, outermost only (an
        ``aten::zeros`` and not the ``aten::fill_`` it calls), as the profiler recorded them
        (``aten::`` left off); None where a run's range is missing. What the dispatch trace
        (``fitness.worker.trace``) would have seen, read after the runs instead of intercepted
        during them: a Python dispatch mode costs microseconds on every operator, inside the
        timed region, and the profiler that times the runs records the operators anyway."""
        record = self._record(n_runs)
        if record is None:
            return None
        ranges, _, ops = record
        starts = [start for start, *_ in ops]
        found = []
        for lo, hi in ranges:
            outer, reach = [], {}  # each thread's outermost operator's end so far
            for start, neg_end, thread, name in ops[bisect.bisect_left(starts, lo):bisect.bisect_right(starts, hi)]:
                if start >= reach.get(thread, -1):
                    outer.append(name.removeprefix("aten::"))
                    reach[thread] = -neg_end
            found.append(outer)
        return found

    def _record(self, n_runs: int) -> tuple[list[tuple[int, int]], list[tuple[int, int]],
                                            list[tuple[int, int, int, str]]] | None:
        """The closed window's record, read once: each run's range (nanoseconds), the device's
        activities and the host's operators (start, minus end, thread, name), each sorted by
        start; None without a trace, or unless runs 0 to ``n_runs`` - 1 each have one range."""
        if not self._closed:
            raise RuntimeError("the window's record read before the window closed")
        if self._read is None:
            self._read = self._read_events()
        if self._read is None:
            return None
        ranges, activity, ops = self._read
        if sorted(ranges) != list(range(n_runs)):
            return None
        return [ranges[index] for index in range(n_runs)], activity, ops

    def _read_events(self) -> tuple[dict[int, tuple[int, int]], list, list] | None:
        try:
            events = self._profile.profiler.kineto_results.events()
        except Exception:  # no trace at all
            return None
        ranges: dict[int, tuple[int, int]] = {}
        activity: list[tuple[int, int]] = []
        ops: list[tuple[int, int, int, str]] = []
        for event in events:
            name = event.name()
            if not str(event.device_type()).endswith("CPU"):
                activity.append((event.start_ns(), event.end_ns()))
            elif name.startswith(self._tag):
                index = int(name[len(self._tag):])
                if index in ranges:  # a second range under a secret name: not ours to trust
                    return None
                ranges[index] = (event.start_ns(), event.end_ns())
            elif "::" in name and not event.is_user_annotation():  # an operator (aten::empty), not a user's range
                # nor a call of the runtime or driver (cudaLaunchKernel): Kineto's "cpu_op" (torch 2.13 says so
                # in activity_type(), which torch 2.11 lacks)
                ops.append((event.start_ns(), -event.end_ns(), event.start_thread_id(), name))
        activity.sort()
        ops.sort()  # by start, the enclosing operator (the later end) first
        return ranges, activity, ops


def busy_ms(intervals: list[tuple[int, int]]) -> float:
    """Milliseconds covered by at least one of ``intervals`` (nanoseconds, sorted by start): a span
    less its gaps, where the device waited for the host to launch the next kernel.

    >>> busy_ms([(0, 2_000_000), (1_000_000, 3_000_000), (5_000_000, 6_000_000)])
    4.0
    """
    total, reach = 0, None
    for start, end in intervals:
        if reach is None or start > reach:
            total += end - start
            reach = end
        elif end > reach:
            total += end - reach
            reach = end
    return total / 1e6
