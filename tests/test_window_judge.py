"""The checked timed runs judged after the timing lane is released (fitness.judge.window_judge)."""

from __future__ import annotations

import contextlib
import threading
import time
from pathlib import Path

import pytest

from fitness import EvalSettings
from fitness.boundary.protocol import Continue, Stop, TimedRun
from fitness.boundary.sandbox import WorkerGone
from fitness.judge import window_judge
from fitness.judge.compare import Comparison
from fitness.judge.evaluator import Evaluator
from fitness.judge.lane import TimingLane
from fitness.judge.window_judge import MAX_SET_ASIDE, SET_ASIDE_BYTES, WindowJudge, set_aside_runs
from platforms import TimingSettings
from tests.conftest import SMALL_SHAPES

ROOT = Path(__file__).resolve().parents[1]
ATTACKS = Path(__file__).parent / "attacks"
SHAPES = SMALL_SHAPES["elementwise"]
#: As the attack suite times a kernel that counts its calls: a window of exactly 12 runs.
TWELVE_RUNS = EvalSettings(timing=TimingSettings(warmup_ms=0, window_ms=0, min_runs=12, max_runs=12))


def judge_of(wrong: set[int], base: int, seen: list[int]):
    def judge(seed: int, outputs: list) -> Comparison:
        seen.append(seed - base)
        return Comparison("wrong", 9.0, "zeros") if seed - base in wrong else Comparison("accepted", 0.5)
    return judge


def test_runs_are_set_aside_up_to_keep_and_the_rest_judged_on_arrival():
    seen: list[int] = []
    window = WindowJudge(100, keep=2, judge=judge_of(set(), 100, seen))
    assert window.hand(TimedRun(0, 100), ["a"]) == Continue()
    assert window.hand(TimedRun(3, 103), ["b"]) == Continue()
    assert seen == [] and window.set_aside == 2  # nothing judged while the window runs
    assert window.hand(TimedRun(5, 105), ["c"]) == Continue()
    assert seen == [5]  # no room: judged there and then
    window.finish()
    assert seen == [5, 0, 3] and window.set_aside == 0 and window.checked == 3
    assert window.failure() is None and window.worst() == 0.5 and window.judged == [0, 3, 5]


def test_the_first_wrong_run_in_run_order_decides_whenever_it_was_judged():
    seen: list[int] = []
    window = WindowJudge(10, keep=1, judge=judge_of({2, 7}, 10, seen))
    assert window.hand(TimedRun(2, 12), []) == Continue()  # set aside: wrong, but not known yet
    assert window.hand(TimedRun(7, 17), []) == Stop()  # judged on arrival: wrong ends the window
    window.finish()
    run, verdict = window.failure()
    assert run == 2 and verdict.status == "wrong" and window.worst() == 9.0


def test_finish_stops_at_the_first_wrong_run_set_aside():
    seen: list[int] = []
    window = WindowJudge(0, keep=4, judge=judge_of({1}, 0, seen))
    for run in (0, 1, 2, 3):
        assert window.hand(TimedRun(run, run), []) == Continue()
    window.finish()
    assert seen == [0, 1] and window.failure()[0] == 1  # runs after the first failure are not judged


@pytest.mark.parametrize("handed", [TimedRun(3, 999), "not a run"])
def test_a_hand_over_on_inputs_it_was_not_given_is_forbidden(handed):
    window = WindowJudge(0, keep=4, judge=judge_of(set(), 0, []))
    with pytest.raises(WorkerGone):
        window.hand(handed, [])


def test_runs_must_come_in_order():
    window = WindowJudge(0, keep=4, judge=judge_of(set(), 0, []))
    window.hand(TimedRun(4, 4), [])
    with pytest.raises(WorkerGone):
        window.hand(TimedRun(4, 4), [])  # the same run twice


def test_keep_follows_the_outputs_size():
    assert set_aside_runs(1000) == MAX_SET_ASIDE
    assert set_aside_runs(SET_ASIDE_BYTES // 3) == 3
    assert set_aside_runs(6 << 30) == 0  # a 6 GB output: every run judged as it arrives, as before


class Watched(TimingLane):
    """A lane that records when it was held exclusively."""

    def __init__(self) -> None:
        super().__init__()
        self.spans: list[tuple[float, float]] = []

    @contextlib.contextmanager
    def exclusive(self):
        with super().exclusive() as held:
            began = time.monotonic()
            try:
                yield held
            finally:
                self.spans.append((began, time.monotonic()))


def evaluate_watched(source: str, monkeypatch) -> tuple:
    lane = Watched()
    with Evaluator(str(ROOT / "problems" / "elementwise" / "reference.py"), platform="cpu", shapes=SHAPES,
                   lane=lane, settings=TWELVE_RUNS) as evaluator:
        calls: list[float] = []
        original = evaluator.prepared.reference_outputs

        def reference_outputs(variant, seed, probe=None):
            calls.append(time.monotonic())
            return original(variant, seed, probe)

        monkeypatch.setattr(evaluator.prepared, "reference_outputs", reference_outputs)
        result = evaluator.evaluate(source)
    return result, lane.spans, calls


def test_the_timed_runs_are_judged_after_the_lane_is_released(monkeypatch):
    result, spans, calls = evaluate_watched((ROOT / "problems" / "elementwise" / "seed.py").read_text(), monkeypatch)
    assert result.status.value == "accepted", result.reason
    assert len(spans) == 1  # one timing
    began, ended = spans[0]
    during = [t for t in calls if began <= t <= ended]
    after = [t for t in calls if t > ended]
    assert during == []  # no reference computed while the candidate held the device to itself
    assert len(after) >= 2  # the checked timed runs (some drawn from the window, and the last)


@pytest.mark.parametrize("keep_bytes", [SET_ASIDE_BYTES, 0])
def test_a_kernel_that_turns_wrong_late_in_the_window_is_still_wrong(monkeypatch, keep_bytes):
    monkeypatch.setattr(window_judge, "SET_ASIDE_BYTES", keep_bytes)  # 0: every run judged on arrival
    source = (ATTACKS / "late_turn_wrong_in_timing_elementwise.py").read_text()
    result, spans, calls = evaluate_watched(source, monkeypatch)
    assert result.status.value == "wrong" and result.reason.startswith("timed run "), result.reason
    began, ended = spans[0]
    judged_in_window = [t for t in calls if began <= t <= ended]
    assert bool(judged_in_window) == (keep_bytes == 0)


def test_a_run_judged_as_it_ends_shares_the_lane_meanwhile(monkeypatch):
    """Outputs too large to set aside are judged in the window, but judging needs no timing: the
    reference and the comparison run with the lane shared, so other slots' checks go on, and the
    lane is the window's again before the worker's next run."""
    monkeypatch.setattr(window_judge, "SET_ASIDE_BYTES", 0)  # every run judged on arrival
    lane = TimingLane()
    seen: list[tuple[bool, int]] = []

    def enter_and_leave() -> None:
        with lane.shared():
            pass

    with Evaluator(str(ROOT / "problems" / "elementwise" / "reference.py"), platform="cpu", shapes=SHAPES,
                   lane=lane, settings=TWELVE_RUNS) as evaluator:
        original = evaluator.prepared.reference_outputs

        def reference_outputs(variant, seed, probe=None):
            seen.append((lane._writer, lane._readers))
            if lane._readers and not lane._writer:  # another slot's check can start now
                other = threading.Thread(target=enter_and_leave)
                other.start()
                other.join(5)
                assert not other.is_alive()
            return original(variant, seed, probe)

        monkeypatch.setattr(evaluator.prepared, "reference_outputs", reference_outputs)
        result = evaluator.evaluate((ROOT / "problems" / "elementwise" / "seed.py").read_text())
    assert result.status.value == "accepted", result.reason
    # one reference a check but the second run of the first fixed inputs (judged against the first), the
    # timed runs judged in the window (the last, and 10 drawn) among them: every one computed with the lane
    # shared, by this evaluation alone
    assert len(seen) == result.checks - 1 >= 10 and seen == [(False, 1)] * len(seen), seen
    assert lane.stats()["timings"] == 1 and not lane._writer and lane._readers == 0


class Counted(TimingLane):
    """A lane that counts the windows that asked for it, and can let a waiting window take it the
    moment a shared hold ends (``hand_over``), as a busy device's threads sometimes do."""

    def __init__(self) -> None:
        super().__init__()
        self.windows = self.taken = 0
        self.hand_over = False

    def exclusive(self):
        self.windows += 1
        return super().exclusive()

    def _take_exclusive(self) -> float:
        taken = super()._take_exclusive()
        self.taken += 1
        return taken

    def _release_shared(self) -> None:
        super()._release_shared()
        if self.hand_over:
            self.hand_over, before, waited = False, self.taken, time.monotonic()
            while self.taken == before and time.monotonic() - waited < 5:
                time.sleep(0.001)


def test_a_window_that_shares_the_lane_gives_the_device_lock_back_too(monkeypatch, tmp_path):
    """While a run is judged with the lane shared, another slot's window may take the lane; it then
    takes the device's lock (platforms.device_lock), which this window must not keep meanwhile, or
    each would wait for the other for ever (seen on an H100 with 23_Softmax at its own shapes)."""
    from platforms.cpu import CpuPlatform
    from platforms.device_lock import LOCK_DIR_ENV, DeviceLock
    from platforms.device_lock import window as device_window

    monkeypatch.setenv(LOCK_DIR_ENV, str(tmp_path))
    monkeypatch.setattr(CpuPlatform, "device_lock", lambda self: DeviceLock("gpu-test"))
    monkeypatch.setattr(window_judge, "SET_ASIDE_BYTES", 0)  # every run judged on arrival
    lane = Counted()
    others: list[threading.Thread] = []
    timed = threading.Event()

    def another_window(platform) -> None:  # another slot's timing, in the order every window takes them
        with lane.exclusive(), device_window(platform):
            timed.set()

    evaluator = Evaluator(str(ROOT / "problems" / "elementwise" / "reference.py"), platform="cpu", shapes=SHAPES,
                          lane=lane, settings=TWELVE_RUNS)
    original = evaluator.prepared.reference_outputs

    def reference_outputs(variant, seed, probe=None):
        if lane.windows == 1 and lane._readers and not lane._writer and not others:  # judged in the window
            others.append(threading.Thread(target=another_window, args=(evaluator.platform,), daemon=True))
            others[0].start()
            while not lane._writers_waiting:  # it waits for this judging to end, then takes the lane
                time.sleep(0.001)
            lane.hand_over = True
        return original(variant, seed, probe)

    monkeypatch.setattr(evaluator.prepared, "reference_outputs", reference_outputs)
    results: list = []
    run = threading.Thread(target=lambda: results.append(evaluator.evaluate(
        (ROOT / "problems" / "elementwise" / "seed.py").read_text())), daemon=True)
    run.start()
    run.join(60)
    assert not run.is_alive(), "the window and the other slot's window wait for each other"
    evaluator.close()
    assert others and timed.is_set()
    others[0].join(5)
    assert results[0].status.value == "accepted", results[0].reason
    assert lane.stats()["timings"] == 2 and not lane._writer and lane._readers == 0
