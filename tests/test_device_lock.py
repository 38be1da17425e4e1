"""Timed windows on one GPU take turns across processes (platforms.device_lock): another kevo
run, or a capture timing a seed's eager and compiled code, never times inside a candidate's
window. Checked here with the CPU platform lent a device lock."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from platforms.device_lock import LOCK_DIR_ENV, DeviceLock

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def locks(tmp_path, monkeypatch):
    monkeypatch.setenv(LOCK_DIR_ENV, str(tmp_path / "locks"))
    return tmp_path / "locks"


def hold_elsewhere(seconds: float, name: str = "gpu-test") -> subprocess.Popen:
    """Another process holding the device's lock for ``seconds`` (started once it holds it)."""
    script = (f"import sys, time; sys.path.insert(0, {str(ROOT)!r})\n"
              f"from platforms.device_lock import DeviceLock\n"
              f"with DeviceLock({name!r}).exclusive():\n"
              f"    print('held', flush=True); time.sleep({seconds})\n")
    child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert child.stdout.readline().strip() == "held"
    return child


def test_a_window_waits_for_another_processs_window(locks):
    child = hold_elsewhere(1.5)
    started = time.monotonic()
    with DeviceLock("gpu-test").exclusive():
        waited = time.monotonic() - started
    child.wait(timeout=10)
    assert waited > 1.0
    started = time.monotonic()
    with DeviceLock("gpu-test").exclusive():  # nobody else now: at once
        assert time.monotonic() - started < 0.5
    with DeviceLock("another-gpu").exclusive():  # another device's lock is not this one's
        pass


def test_a_process_takes_turns_between_its_threads_and_never_waits_on_itself(locks):
    lock = DeviceLock("gpu-test")
    inside, most, guard = [0], [0], threading.Lock()

    def window() -> None:
        with lock.exclusive():
            with DeviceLock("gpu-test").exclusive():  # again, inside: a reference timed in a window
                with guard:
                    inside[0] += 1
                    most[0] = max(most[0], inside[0])
                time.sleep(0.2)
                with guard:
                    inside[0] -= 1

    threads = [threading.Thread(target=window) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=10)
    assert not any(t.is_alive() for t in threads) and most[0] == 1


def test_where_no_lock_can_be_made_the_window_goes_unlocked(tmp_path, monkeypatch):
    blocked = tmp_path / "file"
    blocked.write_text("not a folder")
    monkeypatch.setenv(LOCK_DIR_ENV, str(blocked / "locks"))
    with DeviceLock("gpu-test").exclusive():
        pass


def test_the_evaluator_times_a_candidate_only_when_no_other_process_times(locks, monkeypatch):
    from fitness import Evaluator, Status
    from platforms.cpu import CpuPlatform

    monkeypatch.setattr(CpuPlatform, "device_lock", lambda self: DeviceLock("gpu-test"))
    softmax = ROOT / "problems" / "softmax"
    with Evaluator(softmax / "reference.py", platform="cpu", shapes={"batch_size": 4, "dim": 64}) as evaluator:
        seed = (softmax / "seed.py").read_text()
        assert evaluator.evaluate(seed).status is Status.ACCEPTED  # the worker warm, its kernels compiled
        child = hold_elsewhere(6.0)
        held_at = time.monotonic()
        result = evaluator.evaluate(seed)
        with_other = time.monotonic() - held_at
        child.wait(timeout=10)
        started = time.monotonic()
        assert evaluator.evaluate(seed).status is Status.ACCEPTED
        alone = time.monotonic() - started
    assert result.status is Status.ACCEPTED, result.reason
    assert with_other > 5.8  # its window began only once the other process let go
    assert alone < with_other - 2.0  # what it takes otherwise


def test_the_devices_peaks_are_measured_with_no_other_processs_window_beside(locks, monkeypatch):
    """The peaks (the speed-of-light floor's measured bandwidth and compute) are cached for the device
    once measured: measured beside another process's timed window they would read low for good."""
    import fitness.judge.evaluator as evaluator_module
    from fitness.judge.lane import TimingLane
    from platforms.cpu import CpuPlatform
    from platforms.device_lock import _HELD

    lock = DeviceLock("gpu-test")
    monkeypatch.setattr(CpuPlatform, "device_lock", lambda self: lock)
    seen: list[tuple[float, int]] = []

    def measure(platform, alone) -> None:  # as fitness.judge.floor.measure_peaks_alone, with nothing cached yet
        with alone():
            seen.append((time.monotonic(), _HELD.get(str(lock.path), (None, [None, 0]))[1][1]))

    monkeypatch.setattr(evaluator_module, "measure_peaks_alone", measure)
    child = hold_elsewhere(2.0)
    held_at = time.monotonic()
    softmax = ROOT / "problems" / "softmax"
    with evaluator_module.Evaluator(softmax / "reference.py", platform="cpu", shapes={"batch_size": 4, "dim": 64},
                                    lane=TimingLane()):
        pass
    child.wait(timeout=10)
    (at, depth), = seen
    assert depth == 1 and at - held_at > 1.5  # the device's lock held, once the other process let go
