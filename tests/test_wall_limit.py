"""``search.max_wall_time_s`` holds: at the limit the candidates in flight are left pending, not
waited for, and a resume evaluates them (the loop, in process; on Ray actors: test_ray_dispatch)."""

from __future__ import annotations

import time

from evolve.dispatch.base import InProcessDispatcher, SlotUsage
from evolve.report_sol import sol_lines
from population_store import RunStore
from tests.test_evolve import FakeEvaluator, drive, make_config, rows

EVAL_S = 0.3  # one evaluation of the slow evaluator
LIMIT_S = 1.5


class SlowEvaluator(FakeEvaluator):
    def __init__(self, eval_s: float = EVAL_S) -> None:
        super().__init__()
        self.eval_s = eval_s

    def evaluate(self, source):
        time.sleep(self.eval_s)
        return super().evaluate(source)


def test_a_run_ends_within_its_wall_limit_plus_one_evaluation_and_a_resume_evaluates_what_was_left(tmp_path):
    config = make_config(population_size=8, max_evaluations=400, max_wall_time_s=LIMIT_S)
    path = tmp_path / "run.sqlite"
    began = time.monotonic()
    reason = drive(path, config, SlowEvaluator())
    wall = time.monotonic() - began
    assert reason.startswith("max_wall_time_s reached"), reason
    assert wall <= LIMIT_S + EVAL_S + 0.5, wall  # not the rest of the generation (8 x 0.3 s)
    stored, state = rows(path)
    pending = sorted(r[0] for r in stored if r[6] == "pending")
    assert pending, "the generation in flight at the limit was left pending"
    assert state["in_flight"] == pending
    with RunStore.open(path, readonly=True) as store:
        assert store.events("stopped")[-1]["data"]["not_evaluated"] == pending
    hashes = {r[0]: r[1] for r in stored}

    fast = FakeEvaluator()
    reason = drive(path, config, fast)  # `kevo resume`: the limit is spent, what was left is evaluated
    assert reason.startswith("max_wall_time_s reached"), reason
    resumed, state = rows(path)
    assert len(resumed) == len(stored) and not any(r[6] == "pending" for r in resumed)  # nothing new was bred
    assert sorted(fast.evaluated) == sorted(hashes[i] for i in pending)  # each left one, once
    assert state["in_flight"] == []
    with RunStore.open(path, readonly=True) as store:
        assert store.events("stopped")[-1]["data"]["not_evaluated"] == []


def test_a_budget_spent_before_the_limit_but_waited_for_past_it_says_the_limit_stopped_it(tmp_path):
    # seen on the H200: "max_evaluations reached (4)" with two of the four left pending at the limit
    config = make_config(population_size=8, max_evaluations=3, max_wall_time_s=0.5)
    path = tmp_path / "run.sqlite"
    reason = drive(path, config, SlowEvaluator())
    assert reason.startswith("max_wall_time_s reached") and "(max_evaluations reached (3))" in reason, reason
    with RunStore.open(path, readonly=True) as store:
        stopped = store.events("stopped")[-1]["data"]
    assert stopped["not_evaluated"] and stopped["reason"] == reason
    assert drive(path, config, FakeEvaluator()).startswith("max_evaluations reached")  # all in, the budget spent


def test_the_top_kernels_timed_again_keep_to_the_wall_limit(tmp_path):
    # seen on the H200: level-1 runs that stopped searching within their 90 s spent up to 96 s more
    # timing their top kernels again (here 5 rounds of 3-4 kernels: at least 15 x 0.2 s past the search)
    limit = 2.0
    config = make_config(population_size=4, max_evaluations=4, max_wall_time_s=limit, confirm_rounds=5)
    path = tmp_path / "run.sqlite"
    began = time.monotonic()
    reason = drive(path, config, SlowEvaluator(eval_s=0.2))
    wall = time.monotonic() - began
    assert reason == "max_evaluations reached (4)", reason
    assert wall < limit + 0.2 + 0.6, wall
    with RunStore.open(path, readonly=True) as store:
        confirmed = store.events("confirmed")
    assert len(confirmed) == 1, "the rounds that finished before the limit are recorded"
    data = confirmed[0]["data"]
    assert 1 <= data["rounds"] < 5 and data["cut_short"]["rounds_planned"] == 5, data
    assert all(len(k["runtime_ms"]) == data["rounds"] for k in data["kernels"])
    line = next(line for line in sol_lines({"confirmed": data}) if line.startswith("confirmed"))
    assert f"{data['rounds']} interleaved rounds of 5 (cut at the run's wall limit)" in line, line


def test_a_run_cut_short_while_its_seeds_are_judged_resumes_from_them(tmp_path):
    config = make_config(population_size=4, max_evaluations=12, max_wall_time_s=1e-6)
    path = tmp_path / "run.sqlite"
    assert drive(path, config, FakeEvaluator()).startswith("max_wall_time_s reached")
    stored, state = rows(path)
    assert [r[6] for r in stored] == ["pending"] and state["generation"] == -1
    evaluator = FakeEvaluator()
    assert drive(path, config, evaluator).startswith("max_wall_time_s reached")
    stored, state = rows(path)
    assert [r[6] for r in stored] == ["accepted"] and len(evaluator.evaluated) == 1 and state["generation"] == 0


def test_an_in_process_dispatcher_counts_its_busy_time():
    dispatcher = InProcessDispatcher(SlowEvaluator())
    dispatcher.submit(1, "x = 1\n")
    time.sleep(EVAL_S)  # idle
    assert dict(dispatcher.results())[1] is not None
    stats = dispatcher.usage.stats()
    assert 0.3 < stats["busy_share"] < 0.7, stats
    usage = SlotUsage(capacity=2)
    usage.hold(2)
    usage.resize(1)  # an actor lost: never more busy than there are slots
    assert usage.stats()["busy_share"] <= 1.0


def test_a_run_that_searches_to_its_wall_limit_still_times_its_best_again(tmp_path):
    # seen on the H200: five of eight level-1 runs searched to their 100 s limit and left no time for the
    # end-of-run rounds, so they had no clean figure against torch.compile; the search leaves them a reserve
    limit = 2.5
    config = make_config(population_size=4, max_evaluations=400, max_wall_time_s=limit, confirm_rounds=2)
    path = tmp_path / "run.sqlite"
    began = time.monotonic()
    reason = drive(path, config, SlowEvaluator(eval_s=0.05))
    wall = time.monotonic() - began
    assert reason.startswith("max_wall_time_s reached"), reason
    assert wall < limit + 0.3, wall
    with RunStore.open(path, readonly=True) as store:
        confirmed = store.events("confirmed")
    assert len(confirmed) == 1 and confirmed[0]["data"]["rounds"] >= 1, confirmed
