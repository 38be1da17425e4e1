"""Faster only beyond noise: promotion in the search (evolve.search.population), and the run's
fastest kernels timed again side by side when it stops (evolve.search.confirm), with timers the
tests control."""

from __future__ import annotations

import random

import pytest

from evolve.config import config_from_dict
from evolve.dispatch.base import InProcessDispatcher
from evolve.report import build_report
from evolve.report_sol import sol_lines
from evolve.search.confirm import CONFIRMED_EVENT, confirm_top, rounds_for
from evolve.search.loop import STATE_KEY, Search, run_search
from evolve.search.population import Candidate, faster, ranked, survivors
from evolve.session import search_space
from fitness import EvalResult, Incumbent, Status
from operators.selector import improved
from platforms.timing import MIN_GAIN
from population_store import ACCEPTED, Individual, RunStore, source_hash
from tests.conftest import PROBLEMS

SEED = (PROBLEMS / "matmul" / "seed.py").read_text()


class Timer:
    """Verdicts whose runtimes and spreads the test chooses: the seed's, and every child's."""

    def __init__(self, seed_ms: float, child_ms: float, spread: float) -> None:
        self.seed_ms, self.child_ms, self.spread = seed_ms, child_ms, spread

    def evaluate(self, source: str) -> EvalResult:
        ms = self.seed_ms if source_hash(source) == source_hash(SEED) else self.child_ms
        return EvalResult(Status.ACCEPTED, "", max_abs_diff=0.0, runtime_ms=ms, runtime_spread=self.spread,
                          reference_ms=2.0, platform="fake")


def search(tmp_path, timer: Timer) -> dict:
    config = config_from_dict({"problem": {"reference": str(PROBLEMS / "matmul" / "reference.py"),
                                           "seeds": [str(PROBLEMS / "matmul" / "seed.py")]},
                               "search": {"population_size": 4, "max_evaluations": 13, "seed": 1},
                               "platform": "cpu"}, origin="test")
    with RunStore.create(tmp_path / "run.sqlite", config.to_dict()) as store:
        run_search(Search(store, InProcessDispatcher(timer), config, [SEED], search_space(config, [SEED])))
        return {"state": store.get_state(STATE_KEY), "seed": store.individuals()[0].id, "count": store.count()}


def test_a_child_faster_by_less_than_the_noise_does_not_replace_its_parent(tmp_path):
    # every child reads 3% faster than the seed, whose runs and theirs spread by 5%
    run = search(tmp_path / "noise", Timer(seed_ms=1.0, child_ms=0.97, spread=0.05))
    state = run["state"]
    assert run["count"] == 13
    assert state["best_ms"] == 1.0  # the seed is still the best
    assert state["islands"][0][0] == run["seed"]  # and the elite of its island
    assert state["stale"] >= 1  # no generation found a faster kernel


def test_a_child_faster_beyond_the_noise_replaces_it(tmp_path):
    run = search(tmp_path / "real", Timer(seed_ms=1.0, child_ms=0.8, spread=0.05))
    state = run["state"]
    assert state["best_ms"] == 0.8 and state["islands"][0][0] != run["seed"]


def candidate(i: int, ms: float, spread: float | None) -> Candidate:
    c = Candidate(i, "", str(i), {}, 0, 0, {"status": ACCEPTED, "runtime_ms": ms, "runtime_spread": spread})
    c.fitness.values = (ms,)
    return c


def test_the_rule_and_the_ranking():
    assert not faster(0.97, 0.05, 1.0, 0.05) and faster(0.9, 0.05, 1.0, 0.05)
    assert not faster(1 - MIN_GAIN / 2, 0.0, 1.0, 0.0)  # too little to count, whatever the spreads
    assert faster(1.0, 0.1, None, None)  # anything beats no kernel at all
    parent, child, slow = candidate(1, 1.0, 0.05), candidate(2, 0.97, 0.05), candidate(3, 2.0, 0.0)
    assert [c.id for c in ranked([slow, child, parent])] == [1, 2, 3]  # the older stays ahead within noise
    assert [c.id for c in survivors([parent, child, slow, candidate(4, 1.5, 0.0)], 2, 1, 2, random.Random(0))][0] == 1
    assert [c.id for c in ranked([parent, candidate(5, 0.5, 0.05)])] == [5, 1]


@pytest.mark.parametrize("ms", [0.5, 0.9, 0.95, 0.97, 0.985, 0.995, 1.0, 1.02])
@pytest.mark.parametrize("spread, other_spread", [(None, None), (0.0, 0.0), (0.02, 0.0), (0.04, 0.04), (0.1, 0.01)])
def test_promotion_and_the_selectors_credit_call_the_same_kernels_faster(ms, spread, other_spread):
    # a child the elite would not put ahead of its parent teaches the steering nothing either, and the reverse
    assert faster(ms, spread, 1.0, other_spread) == improved(ms, spread, 1.0, other_spread)


# -- the fastest kernels timed again when the run stops ---------------------------------------

class RoundTimer:
    """Evaluates in order (as the in-process dispatcher does) with runtimes per kernel and round."""

    def __init__(self, times: dict[str, list[float]], spread: float = 0.01) -> None:
        self.times, self.spread, self.order = times, spread, []
        self.rounds: dict[str, int] = {}

    def evaluate(self, source: str) -> EvalResult:
        self.order.append(source)
        r = self.rounds[source] = self.rounds.get(source, -1) + 1
        return EvalResult(Status.ACCEPTED, "", max_abs_diff=0.0, runtime_ms=self.times[source][r],
                          runtime_spread=self.spread, reference_ms=4.0, platform="cuda")

    def time_incumbent(self, job: Incumbent) -> EvalResult:
        """torch.compile at ``times["compile"]`` (``"compile_tf32"`` with TF32), eager at 4 ms."""
        return self.evaluate("compile_tf32" if job.tf32 else "compile")


@pytest.fixture
def stored_run(tmp_path):
    """A seed and three children of it, as one window timed them: b reads a little faster than a."""
    config = config_from_dict({"problem": {"reference": str(PROBLEMS / "matmul" / "reference.py"),
                                           "seeds": [str(PROBLEMS / "matmul" / "seed.py")]}},
                              origin="test")
    store = RunStore.create(tmp_path / "run.sqlite", config.to_dict())
    ids = {}
    for name, ms, parents in (("s", 2.0, []), ("a", 1.0, ["s"]), ("b", 0.99, ["a"]), ("c", 1.5, ["s"])):
        ind = Individual(None, name, source_hash(name), 1 if parents else 0, 0, "mutation" if parents else "seed",
                         [ids[p] for p in parents], {})
        ids[name] = store.add_individual(ind)
        record = EvalResult(Status.ACCEPTED, "", 0.0, ms, 0.01, 4.0, "cuda", "GPU").to_dict()
        store.set_result(ids[name], record, "accepted", ms)
    yield store, ids
    store.close()


def test_the_top_kernels_are_timed_again_interleaved_and_the_speedup_has_an_interval(stored_run):
    store, ids = stored_run
    timer = RoundTimer({"b": [1.00, 0.98, 1.01], "a": [1.00, 1.00, 0.99], "c": [1.5, 1.5, 1.5],
                        "s": [2.0, 2.1, 1.9], "compile": [1.2] * 3})
    data = confirm_top(store, InProcessDispatcher(timer), None)  # 3 rounds on a GPU by default
    # interleaved: fastest first, then the best's seed, then torch.compile
    assert timer.order == ["b", "a", "c", "s", "compile"] * 3
    assert data["rounds"] == 3 and data["best"] == ids["b"] and data["seed"] == ids["s"]
    over = data["speedup_over_seed"]
    assert (over["low"], over["median"], over["high"]) == pytest.approx((1.9 / 1.01, 2.0, 2.1 / 0.98))
    assert data["indistinct"] == [ids["a"]]  # b is not faster than a beyond noise in every round
    assert store.events(CONFIRMED_EVENT)[-1]["data"] == data
    report = build_report(store, store.path.parent)
    line = next(line for line in sol_lines(report) if line.startswith("confirmed"))
    assert f"kernel {ids['b']} 2x over its seed {ids['s']} (1.88x-2.14x)" in line
    assert f"cannot be told apart from kernel(s) {ids['a']}" in line


def test_a_kernel_not_accepted_again_keeps_why_and_the_report_says_it(stored_run):
    store, ids = stored_run

    class OneRoundOutOfMemory(RoundTimer):
        def evaluate(self, source: str) -> EvalResult:
            result = super().evaluate(source)
            if source == "b" and self.rounds["b"] == 0:
                return EvalResult(Status.OUT_OF_MEMORY, "kevo's worker ran out of memory during time",
                                  platform="cuda")
            return result

    timer = OneRoundOutOfMemory({"b": [1.0] * 3, "a": [1.0] * 3, "c": [1.5] * 3, "s": [2.0] * 3,
                                 "compile": [1.0] * 3})
    data = confirm_top(store, InProcessDispatcher(timer), None)
    assert data["failed"] == [{"id": ids["b"], "statuses": ["out_of_memory", "accepted", "accepted"],
                               "reasons": ["kevo's worker ran out of memory during time"]}]
    assert data["speedup_over_seed"] is None  # the best itself failed a round: nothing to compare it by
    line = next(line for line in sol_lines(build_report(store, store.path.parent)) if line.startswith("confirmed"))
    assert (f"kernel {ids['b']} was not accepted again (out_of_memory, accepted, accepted): "
            "kevo's worker ran out of memory during time") in line
    assert data["vs_compile"] == {"why": "the best was not accepted in every round of timing again"}


def test_no_rounds_on_the_cpu_unless_asked_and_the_report_says_so(stored_run):
    store, _ = stored_run
    assert rounds_for(None, "cpu") == 0 and rounds_for(None, "rocm") == 3 and rounds_for(0, "cuda") == 0
    timer = RoundTimer({})
    assert confirm_top(store, InProcessDispatcher(timer), 0) is None and timer.order == []
    report = build_report(store, store.path.parent)
    assert report["confirmed"] is None and "not timed again" not in report["unconfirmed"]  # not stopped yet
    assert report["within_noise"] == [store.best(2)[1].id]  # from the spreads alone: 0.99 against 1.0
