"""The timing lane (fitness.lane): timing runs alone, checks overlap each other."""

from __future__ import annotations

import threading
import time

from fitness.lane import TimingLane


def test_timing_never_overlaps_a_check_and_checks_overlap_each_other():
    lane = TimingLane()
    active = {"shared": 0, "exclusive": 0}
    seen = {"max_shared": 0, "overlap": 0}
    guard = threading.Lock()

    def enter(kind: str) -> None:
        with guard:
            active[kind] += 1
            if active["exclusive"] and (active["shared"] or active["exclusive"] > 1):
                seen["overlap"] += 1
            seen["max_shared"] = max(seen["max_shared"], active["shared"])

    def leave(kind: str) -> None:
        with guard:
            active[kind] -= 1

    def worker(kind: str, rounds: int) -> None:
        for _ in range(rounds):
            with getattr(lane, kind)():
                enter(kind)
                time.sleep(0.002)
                leave(kind)

    threads = [threading.Thread(target=worker, args=(kind, 40)) for kind in ("shared",) * 3 + ("exclusive",) * 2]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not any(t.is_alive() for t in threads)
    assert seen["overlap"] == 0
    assert seen["max_shared"] >= 2  # checks did run side by side
    assert lane.stats()["timings"] == 80 and lane.stats()["timing_s"] > 0


def test_a_waiting_timing_holds_back_new_checks():
    lane = TimingLane()
    order: list[str] = []
    first = lane.shared()
    first.__enter__()  # a check is running
    held = []  # the contexts stay referenced: a collected one would let go of the lane

    def enter(context, name: str) -> None:
        held.append(context)
        context.__enter__()
        order.append(name)

    timer = threading.Thread(target=enter, args=(lane.exclusive(), "timing"), daemon=True)
    timer.start()
    deadline = time.monotonic() + 10
    while not lane._writers_waiting and time.monotonic() < deadline:
        time.sleep(0.001)
    checker = threading.Thread(target=enter, args=(lane.shared(), "check"), daemon=True)
    checker.start()
    time.sleep(0.05)
    assert order == []  # the timing waits for the running check; the new check waits for the timing
    first.__exit__(None, None, None)
    timer.join(10)
    assert order == ["timing"]
    assert checker.is_alive()  # the timing has not let go of the lane yet
