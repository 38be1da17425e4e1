"""Where an evaluation's time goes: each verdict's walls_s (fitness.judge.evaluator) and the report's
median of them and pace (evolve.report_time)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from evolve.report_time import evaluation_time, time_line
from fitness import Evaluator, Status
from population_store import Individual

ROOT = Path(__file__).resolve().parents[1]
SOFTMAX = ROOT / "problems" / "softmax"


def test_a_verdict_says_where_its_wall_time_went():
    with Evaluator(SOFTMAX / "reference.py", platform="cpu", shapes={"batch_size": 4, "dim": 64}) as evaluator:
        started = time.monotonic()
        result = evaluator.evaluate((SOFTMAX / "seed.py").read_text())
        wall = time.monotonic() - started
    assert result.status is Status.ACCEPTED, result.reason
    walls = result.walls_s
    assert {"total", "step load", "step call", "step time", "window", "reference outputs", "compare",
            "wait: lane", "wait: device lock"} <= set(walls)
    assert all(seconds >= 0 for seconds in walls.values())
    assert walls["total"] == pytest.approx(wall, abs=0.05)
    # the steps run one after another inside the evaluation, so together they fit in its total
    steps = walls["step load"] + walls["step call"] + walls["step time"]
    assert 0 < steps <= walls["total"] + 1e-3
    assert walls["window"] <= walls["step time"] + 1e-3  # the window is the time step, waited for
    # the worker's own account of its calls: drawing inputs, witnessing them, poisoning free memory
    # (nothing to do on the CPU), the forward, the input check
    calls = [walls[f"call: {part}"] for part in ("inputs", "witness", "forward", "input check")]
    assert all(seconds > 0 for seconds in calls) and walls["call: poison"] >= 0
    assert sum(calls) + walls["call: poison"] <= walls["step call"] + 1e-3
    assert result.to_dict()["walls_s"] == walls  # stored with the verdict


def _individual(n: int, walls: dict | None, finished_at: float, status: str = "accepted") -> Individual:
    result = {"status": status, **({"walls_s": walls} if walls is not None else {})}
    return Individual(n, "", str(n), 0, 0, "seed", [], {}, status, 1.0, result, 0.0, finished_at)


def test_the_report_gives_the_median_of_each_part_and_the_pace():
    run = [_individual(1, {"total": 3.0, "step call": 1.0, "wait: lane": 1.5}, 100.0),
           _individual(2, {"total": 5.0, "step call": 2.0, "wait: lane": 0.5}, 104.0, "wrong"),
           _individual(3, {"total": 4.0, "step call": 3.0}, 108.0),
           Individual(4, "", "4", 0, 0, "seed", [], {})]  # pending: not counted
    figures = evaluation_time(run)
    assert figures["evaluations"] == 3
    assert figures["median_s"] == {"total": 4.0, "step call": 2.0, "wait: lane": 0.5}  # a part missing counts 0
    assert figures["pace_per_s"] == pytest.approx(2 / 8.0)
    line = time_line(figures)
    assert line.startswith("time       4.00 s an evaluation (median of 3): step call 2.00, wait: lane 0.50")
    assert "0.25 results/s" in line
    assert figures["in_flight"] == pytest.approx((3.0 + 5.0 + 4.0) / 8.0) and "1.5 in flight on average" in line


def test_the_wait_for_the_memory_plan_counts_as_in_flight_and_as_a_part():
    """Six slots, but the memory plan lets two run: what the report shows is the wait and two in flight."""
    run = [_individual(n, {"total": 2.0, "wait: memory plan": 2.0 * (n // 2)}, 100.0 + n) for n in range(6)]
    figures = evaluation_time(run)
    assert figures["median_s"]["wait: memory plan"] == 2.0
    assert figures["in_flight"] == pytest.approx((12.0 + 2.0 * (0 + 0 + 1 + 1 + 2 + 2)) / 5.0)
    assert figures["evaluating"] == pytest.approx(12.0 / 5.0)  # the memory plan's limit shows here
    line = time_line(figures)
    assert "wait: memory plan 2.00" in line and "4.8 in flight on average (2.4 evaluating" in line


def test_a_store_from_before_says_nothing_rather_than_zeros():
    old = [_individual(1, None, 100.0), _individual(2, None, 101.0)]
    assert evaluation_time(old) is None and time_line(None) == ""


def test_where_verdicts_say_when_they_held_their_place_the_report_counts_them_at_once():
    """The walls give an estimate of how many evaluated at once; the verdicts' ``admitted_s`` give the
    count itself: here one at a time for 2 s, then two for 1 s, then one for 1 s."""
    run = [_individual(n, {"total": 1.0}, finished) for n, finished in ((1, 102.0), (2, 103.0), (3, 104.0))]
    for individual, span in zip(run, ([100.0, 102.0], [101.0, 103.0], [103.0, 104.0])):
        individual.result["admitted_s"] = span
    figures = evaluation_time(run)
    assert figures["admitted"] == pytest.approx(5.0 / 4.0) and figures["admitted_most"] == 2
    assert "(1.2 holding a place under the memory plan, 2 at most)" in time_line(figures)


def test_the_report_says_how_long_no_evaluation_held_a_place():
    """Where the memory plan lets few run at once, the seconds between a release and the next
    admission are what candidates not ready cost (on an H100 at 23_Softmax's own sizes, 17 s of 76):
    the report names them when they pass a twentieth of the span, and not otherwise."""
    run = [_individual(n, {"total": 1.0}, finished) for n, finished in ((1, 102.0), (2, 103.0), (3, 108.0))]
    for individual, span in zip(run, ([100.0, 102.0], [101.0, 103.0], [106.0, 108.0])):
        individual.result["admitted_s"] = span
    figures = evaluation_time(run)
    assert figures["none_admitted_s"] == pytest.approx(3.0) and figures["admitted_span_s"] == pytest.approx(8.0)
    assert figures["admitted"] == pytest.approx(6.0 / 8.0)
    assert "(0.8 holding a place under the memory plan, 2 at most; none for 3.0 s of 8.0)" in time_line(figures)
    run[2].result["admitted_s"] = [103.1, 105.0]  # a tenth of a second of 5: not worth a word
    assert "none for" not in time_line(evaluation_time(run))
