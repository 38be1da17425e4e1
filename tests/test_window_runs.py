"""A window of long runs: as many runs as fill ``min_runs_ms``, at least ``least_runs``, every one checked."""

from __future__ import annotations

import time
from pathlib import Path

from fitness import EvalSettings
from fitness.judge.evaluator import Evaluator
from platforms import TimingSettings, get_platform, time_runs
from tests.conftest import SMALL_SHAPES

ROOT = Path(__file__).resolve().parents[1]
ATTACKS = Path(__file__).parent / "attacks"

#: As on a GPU: at least 12 runs while 12 fit in 60 ms, else as many as fit, at least 5.
LONG = dict(warmup_ms=0, window_ms=0, min_runs=12, max_runs=1000, min_runs_ms=60.0, least_runs=5,
            device_trace=False)


def runs_of(prepare_s: float, **settings) -> int:
    def prepare(i: int) -> list:
        time.sleep(prepare_s)  # a run's fresh inputs: on a GPU, gigabytes drawn and witnessed
        return []

    timing = time_runs(get_platform("cpu"), lambda i, args: None, TimingSettings(**{**LONG, **settings}), prepare)
    return len(timing.runs_ms)


def test_short_runs_keep_the_minimum_and_long_ones_fill_the_budget():
    assert runs_of(0.0) == 12
    assert runs_of(0.03) == 5  # 12 runs of 30 ms would take 360 ms: the least, 5
    assert runs_of(0.03, min_runs_ms=0.0) == 12  # 0: the minimum always holds (the CPU platform's default)


def test_the_budget_never_raises_the_minimum():
    assert runs_of(0.03, min_runs=3) == 3


# honest on every call but the third timed run: 9 calls come before timing at these shapes (the
# checked calls, the first fixed inputs run twice among them, then 1 warm-up run)
ONE_WRONG_RUN = (ATTACKS / "late_turn_wrong_in_timing_elementwise.py").read_text().replace(
    "HONEST_CALLS = 9 + 1 + 6", "HONEST_CALLS = 9 + 2").replace(
    "HONEST=CALLS[0] <= HONEST_CALLS", "HONEST=CALLS[0] != HONEST_CALLS + 1")


def evaluate(source: str, **settings) -> object:
    timing = TimingSettings(**{**LONG, "min_runs_ms": 1e-6, **settings})  # every run counts as long
    with Evaluator(str(ROOT / "problems" / "elementwise" / "reference.py"), platform="cpu",
                   shapes=SMALL_SHAPES["elementwise"], settings=EvalSettings(timing=timing)) as evaluator:
        return evaluator.evaluate(source)


def test_a_short_window_checks_every_run():
    assert "HONEST_CALLS = 9 + 2" in ONE_WRONG_RUN and "!= HONEST_CALLS + 1" in ONE_WRONG_RUN
    honest = evaluate((ROOT / "problems" / "elementwise" / "seed.py").read_text())
    assert honest.status.value == "accepted", honest.reason
    wrong = evaluate(ONE_WRONG_RUN)
    # one wrong run among five: drawn from twelve, ten checks and the last would miss it 1 time in 12
    assert wrong.status.value == "wrong" and wrong.reason.startswith("timed run 2:"), wrong.reason
    # the honest one's five runs all judged; the wrong one's judged up to run 2, which is not a check passed
    assert honest.checks == wrong.checks + 3
