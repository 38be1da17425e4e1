"""What a process may do only once at a time: a device trace (torch's profiler is the
process's, and two windows would count each other's kernels), and an Inductor capture
(its configuration is process-wide). Runs side by side in one sweep are threads of one
driver: on the H200 two of them timing their seeds at once crashed it in the profiler."""

from __future__ import annotations

import threading
import time

from tests.conftest import PROBLEMS


def _most_at_once(enter_twice) -> int:
    """Run ``enter_twice(record)`` from two threads; the most threads ever inside at once."""
    inside, most, lock = [0], [0], threading.Lock()

    def record() -> None:
        with lock:
            inside[0] += 1
            most[0] = max(most[0], inside[0])
        time.sleep(0.3)  # long enough for the other thread to try to come in
        with lock:
            inside[0] -= 1

    threads = [threading.Thread(target=enter_twice, args=(record,)) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert not any(t.is_alive() for t in threads)
    return most[0]


def test_one_device_trace_at_a_time_in_a_process():
    from platforms.timeline import DeviceTimeline

    def window(record) -> None:
        with DeviceTimeline():
            record()

    assert _most_at_once(window) == 1


def test_a_trace_that_fails_to_start_lets_the_next_one_in(monkeypatch):
    from platforms import timeline

    trace = timeline.DeviceTimeline()
    monkeypatch.setattr(trace._profile, "__enter__", lambda: (_ for _ in ()).throw(RuntimeError("no profiler")))
    try:
        with trace:
            raise AssertionError("entered a trace that did not start")
    except RuntimeError:
        pass
    assert timeline._ONE_WINDOW.acquire(timeout=1)
    timeline._ONE_WINDOW.release()


def test_one_capture_at_a_time_in_a_process(monkeypatch):
    from evolve.seeding import inductor

    inside: dict[int, object] = {}  # each thread's record, called from inside the capture

    def fake(path, device, mode, time_it, shapes, dtype, variant, strict, oblivious, static=False):
        inside[threading.get_ident()]()
        return {"variant": variant}

    def capture(record) -> None:
        inside[threading.get_ident()] = record
        inductor.capture(PROBLEMS / "softmax" / "reference.py", device="cuda", variant="default")

    monkeypatch.setattr(inductor, "_capture", fake)
    assert _most_at_once(capture) == 1
