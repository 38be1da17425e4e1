"""The search loop, in process: budgets, dedup, stop conditions, islands, and resume.

Most tests drive the loop with a fake evaluator whose verdicts are a pure
function of a kernel's tunables, so a run is deterministic and a run cut short
at any point and resumed can be compared row by row with one that was not. The
last tests use the real evaluator on the CPU.
"""

from __future__ import annotations

import ast
import dataclasses
import math
import random
import re
from pathlib import Path

import pytest

from evolve.config import OperatorName, OperatorsConfig, config_from_dict
from evolve.dispatch.base import InProcessDispatcher
from evolve.search.loop import STATE_KEY, Search, SearchError, run_search
from evolve.search.population import Candidate, RuntimeFitness, select_parents, survivors
from evolve.report import build_report, write_plot
from evolve.session import default_run_dir, search_space, start_run
from evolve.search.variation import vary
from fitness import EvalResult, Status
from operators import CROSSOVER, MUTATION, apply_params, params_of, resolve_space
from population_store import RunStore, source_hash
from tests.conftest import PROBLEMS, SMALL_SHAPES

MATMUL_SEED = (PROBLEMS / "matmul" / "seed.py").read_text()
SUITE = sorted(SMALL_SHAPES)


class FakeEvaluator:
    """Verdicts from the tunables alone: num_warps 16 is wrong, other runtimes are smooth in the values."""

    def __init__(self) -> None:
        self.evaluated: list[str] = []

    def evaluate(self, source: str) -> EvalResult:
        self.evaluated.append(source_hash(source))
        params = params_of(source)
        if any(name.endswith("num_warps") and value == 16 for name, value in params.items()):
            return EvalResult(Status.WRONG, "fake: wrong at num_warps 16", max_abs_diff=1.0, platform="fake")
        runtime = 1.0 + sum(abs(math.log2(v) - 4.5) for v in params.values() if isinstance(v, int)) / 8
        return EvalResult(Status.ACCEPTED, "", max_abs_diff=0.0, runtime_ms=runtime, runtime_spread=0.0,
                          reference_ms=2.0, platform="fake")


class Crash(Exception):
    """Stands for the process dying at this point."""


class CrashingDispatcher(InProcessDispatcher):
    def __init__(self, evaluator, after: int) -> None:
        super().__init__(evaluator)
        self.left = after

    def next_result(self):
        if self.left == 0:
            raise Crash
        self.left -= 1
        return super().next_result()


class LastFirstDispatcher(InProcessDispatcher):
    """Hands results back newest first, as a pool of GPUs may."""

    def next_result(self):
        key, source = self._queue.pop()
        return key, self.evaluator.evaluate(source)


class CrashingStore(RunStore):
    """Dies before the ``after``-th write of kind ``method`` commits."""

    crash_method, crash_after = "", -1

    def _crash(self) -> None:
        if self.crash_after == 0:
            raise Crash
        self.crash_after -= 1

    def add_individual(self, ind):
        if self.crash_method == "add_individual":
            self._crash()
        return super().add_individual(ind)

    def put_state(self, key, value):
        if self.crash_method == "put_state" and key == STATE_KEY:
            self._crash()
        return super().put_state(key, value)


def make_config(**search):
    data = {"problem": {"reference": str(PROBLEMS / "matmul" / "reference.py"),
                        "seeds": [str(PROBLEMS / "matmul" / "seed.py")]},
            "search": {"population_size": 6, "max_evaluations": 40, "seed": 3, **search},
            "platform": "cpu"}
    return config_from_dict(data, origin="test")


def drive(path, config, evaluator, dispatcher_after=None, store_cls=RunStore, dispatcher_cls=None, **crash):
    """Start (or resume) the run stored at ``path``; returns the stop reason."""
    store = store_cls.open(path) if path.exists() else store_cls.create(path, config.to_dict())
    for key, value in crash.items():
        setattr(store, key, value)
    seeds = [MATMUL_SEED]
    if dispatcher_cls is not None:
        dispatcher = dispatcher_cls(evaluator)
    elif dispatcher_after is None:
        dispatcher = InProcessDispatcher(evaluator)
    else:
        dispatcher = CrashingDispatcher(evaluator, dispatcher_after)
    try:
        return run_search(Search(store, dispatcher, config, seeds, search_space(config, seeds)))
    finally:
        store.close()


def rows(path):
    with RunStore.open(path, readonly=True) as store:
        return [(i.id, i.source_hash, i.parents, i.generation, i.island, i.operator, i.status, i.runtime_ms)
                for i in store.individuals()], store.get_state(STATE_KEY)


@pytest.fixture(scope="module")
def islands_config():
    return make_config(islands=2, migration_interval=2, migrants=1, max_evaluations=44)


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory, islands_config):
    path = tmp_path_factory.mktemp("whole") / "run.sqlite"
    evaluator = FakeEvaluator()
    reason = drive(path, islands_config, evaluator)
    return reason, rows(path), evaluator


def test_the_loop_spends_its_budget_exactly_and_never_evaluates_a_source_twice(uninterrupted):
    reason, (stored, state), evaluator = uninterrupted
    assert reason == "max_evaluations reached (44)"
    assert len(stored) == 44 and len(evaluator.evaluated) == 44
    assert len({r[1] for r in stored}) == 44  # no source hash stored twice
    assert sorted(evaluator.evaluated) == sorted(r[1] for r in stored)
    assert all(r[6] != "pending" for r in stored)
    assert {r[5] for r in stored} == {"seed", MUTATION, CROSSOVER}
    assert {r[6] for r in stored} == {"accepted", "wrong"}
    ids = {r[0] for r in stored}
    assert all(set(r[2]) <= ids and all(p < r[0] for p in r[2]) for r in stored)  # parents came first
    assert {r[4] for r in stored} == {0, 1}
    assert state["generation"] == max(r[3] for r in stored) and state["evaluations"] == 44


def test_the_populations_keep_the_elite_and_only_accepted_kernels(uninterrupted):
    _, (stored, state), _ = uninterrupted
    by_id = {r[0]: r for r in stored}
    best = min((r for r in stored if r[6] == "accepted"), key=lambda r: r[7])
    members = {i for population in state["islands"] for i in population}
    assert best[0] in members
    assert all(by_id[i][6] == "accepted" for i in members)
    assert all(len(p) <= 6 for p in state["islands"])


def test_islands_trade_kernels_along_the_ring(uninterrupted):
    _, (stored, state), _ = uninterrupted
    by_id = {r[0]: r for r in stored}
    born_elsewhere = [i for island, population in enumerate(state["islands"]) for i in population
                      if by_id[i][3] > 0 and by_id[i][4] != island]
    assert born_elsewhere, "no migrant in any island after migrations"


@pytest.mark.parametrize("crash", [
    {"dispatcher_after": 0},  # during the seeds
    {"dispatcher_after": 4},
    {"dispatcher_after": 17},
    {"dispatcher_after": 30},
    {"crash_method": "add_individual", "crash_after": 9},  # in the middle of making a generation
    {"crash_method": "put_state", "crash_after": 2},  # every result of a generation in, no checkpoint
], ids=lambda c: "-".join(map(str, c.values())))
def test_a_run_cut_short_and_resumed_equals_an_uninterrupted_one(tmp_path, islands_config, uninterrupted, crash):
    path = tmp_path / "run.sqlite"
    evaluator = FakeEvaluator()
    with pytest.raises(Crash):
        drive(path, islands_config, evaluator, store_cls=CrashingStore, **crash)
    before, _ = rows(path)
    committed = [r for r in before if r[6] != "pending"]
    reason = drive(path, islands_config, evaluator)
    after, state = rows(path)
    _, (whole, whole_state), _ = uninterrupted
    assert reason == "max_evaluations reached (44)"
    assert after == whole  # same children, same lineage, same verdicts, same ids
    assert state["islands"] == whole_state["islands"] and state["rng_state"] == whole_state["rng_state"]
    assert [r for r in after if r[0] in {c[0] for c in committed}] == committed  # nothing committed changed
    assert len(evaluator.evaluated) == len(set(evaluator.evaluated)) == 44  # none evaluated twice


def test_results_may_arrive_in_any_order(tmp_path, islands_config, uninterrupted):
    drive(tmp_path / "run.sqlite", islands_config, FakeEvaluator(), dispatcher_cls=LastFirstDispatcher)
    _, (whole, _), _ = uninterrupted
    assert rows(tmp_path / "run.sqlite")[0] == whole


def test_nothing_in_flight_is_an_error_not_a_hang():
    with pytest.raises(LookupError):
        InProcessDispatcher(FakeEvaluator()).next_result()


def test_the_default_run_directory_is_named_after_the_config_and_never_reused(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    first = default_run_dir("configs/quickstart.yaml")
    assert first.parent == Path("runs") and re.fullmatch(r"quickstart-\d{8}-\d{6}", first.name)
    first.mkdir(parents=True)
    second = default_run_dir("configs/quickstart.yaml")
    assert second != first and second.name.startswith(first.name[:len("quickstart-")])


@pytest.mark.parametrize("search, reason", [
    ({"max_generations": 2}, "max_generations reached (2)"),
    ({"target_speedup": 1.1}, "target_speedup reached"),
    ({"patience": 1, "max_evaluations": 400}, "no faster kernel for 1 generations"),
    ({"max_wall_time_s": 1e-9}, "max_wall_time_s reached"),
])
def test_each_stop_condition_ends_the_run(tmp_path, search, reason):
    config = make_config(**search)
    assert reason in drive(tmp_path / "run.sqlite", config, FakeEvaluator())
    stored, state = rows(tmp_path / "run.sqlite")
    if "max_generations" in search:
        assert max(r[3] for r in stored) == 2
    if "target_speedup" in search:
        best = min(r[7] for r in stored if r[7] is not None)
        assert 2.0 / best >= 1.1
    with RunStore.open(tmp_path / "run.sqlite", readonly=True) as store:
        assert reason in store.events("stopped")[-1]["data"]["reason"]


def test_an_exhausted_space_stops_the_run_instead_of_repeating_itself(tmp_path):
    config = dataclasses.replace(make_config(max_evaluations=50), operators=OperatorsConfig(space={
        "matmul_kernel.BLOCK_M": [32, 64], "matmul_kernel.BLOCK_N": [64], "matmul_kernel.BLOCK_K": [32],
        "matmul_kernel.num_warps": [4], "matmul_kernel.num_stages": [2, 3]}))
    reason = drive(tmp_path / "run.sqlite", config, FakeEvaluator())
    stored, _ = rows(tmp_path / "run.sqlite")
    assert "exhausted" in reason
    # the whole space, each point once: 4 settings of the numbers x the dot's 3 input precisions
    assert len(stored) == 12 == len({r[1] for r in stored})


def test_no_accepted_seed_is_a_clear_error(tmp_path):
    class Rejects(FakeEvaluator):
        def evaluate(self, source):
            super().evaluate(source)
            return EvalResult(Status.COMPILE_ERROR, "fake: does not compile", platform="fake")

    with pytest.raises(SearchError, match="no seed kernel is accepted.*compile_error: fake: does not compile"):
        drive(tmp_path / "run.sqlite", make_config(), Rejects())


def test_fitness_is_minimised_runtime_and_selection_uses_the_runs_generator():
    def candidate(i, runtime):
        c = Candidate(i, "", str(i), {}, 1, 0)
        c.fitness.values = (runtime,)
        return c

    pool = [candidate(i, runtime) for i, runtime in enumerate([5.0, 1.0, 3.0, 2.0, 4.0])]
    assert RuntimeFitness((1.0,)) > RuntimeFitness((2.0,))  # faster is fitter
    assert [c.id for c in survivors(pool, 2, 1, 2, random.Random(0))][0] == 1  # the elite first
    state = random.getstate()
    picks = [[c.id for c in select_parents(pool, 6, 2, random.Random(7))] for _ in range(2)]
    assert picks[0] == picks[1]  # the run's generator decides, not the global one
    assert random.getstate() == state


@pytest.mark.parametrize("name", SUITE)
def test_variation_on_every_suite_seed_makes_valid_distinct_children(name, evaluators):
    seed = (PROBLEMS / name / "seed.py").read_text()
    space = resolve_space(seed)
    parent = Candidate(1, seed, source_hash(seed), params_of(seed), 0, 0)
    seen = {parent.source_hash}
    rng = random.Random(0)
    mutants = vary([parent] * 8, 4, rng, OperatorsConfig(), space, seen)
    other = apply_params(seed, {n: next(v for v in space[n] if v != value) for n, value in parent.params.items()})
    cross = vary([dataclasses.replace(parent, id=2), dataclasses.replace(parent, id=3, source=other)], 1, rng,
                 OperatorsConfig(weights={OperatorName.PARAMETRIC_CROSSOVER: 1.0}), space, seen)
    children = mutants + cross
    assert len({c.source_hash for c in children}) == len(children) == 5
    assert all(c.operator == MUTATION and c.parents == [1] for c in mutants)
    assert all(c.operator == CROSSOVER and c.parents == [2, 3] for c in cross)
    for child in children:
        ast.parse(child.source)
        assert child.params == params_of(child.source) != parent.params
        assert all(value in space[n] for n, value in child.params.items())
    evaluator = evaluators.get(name)
    for child in (mutants[0], cross[0]):  # they still compute the right answer
        result = evaluator.evaluate(child.source)
        assert result.accepted, (child.params, result.reason)


def test_a_real_run_on_the_cpu_end_to_end(tmp_path):
    config = tmp_path / "tiny.yaml"
    config.write_text(f"""\
problem:
  reference: {PROBLEMS}/elementwise/reference.py
  seeds: [{PROBLEMS}/elementwise/seed.py]
  shapes: {{batch_size: 4, dim: 100}}
search: {{population_size: 4, max_evaluations: 9}}
platform: cpu
""")
    reason = start_run(config, tmp_path / "run")
    assert reason == "max_evaluations reached (9)"
    with RunStore.open(tmp_path / "run" / "run.sqlite", readonly=True) as store:
        assert store.count() == 9 and store.count("pending") == 0
        report = build_report(store, tmp_path / "run")
        best = report["best"]
        assert best["status"] == "accepted" and best["speedup"] == best["reference_ms"] / best["runtime_ms"]
        assert report["lineage"][-1]["id"] == best["id"] and report["lineage"][0]["operator"] == "seed"
        assert write_plot(store, tmp_path / "run" / "progress.png").read_bytes()[:4] == b"\x89PNG"
        # the CPU has no hardware profiler: the parents' roofline fallback is recorded once
        assert [e["kind"] for e in store.events()] == ["started", "profiler_fallback", "stopped"]
        assert store.config()["problem"]["shapes"] == {"batch_size": 4, "dim": 100}
        # where the evaluations' time went: every verdict carries its parts, the report their medians
        timing = report["evaluation_time"]
        assert timing["evaluations"] == 9 and timing["pace_per_s"] > 0
        assert {"total", "step call", "step time", "window", "wait: lane"} <= set(timing["median_s"])


class PoolDispatcher(InProcessDispatcher):
    """Four evaluators at once, finishing in a shuffled order; can die after ``after`` results."""

    def __init__(self, evaluator, after: int | None = None, seed: int = 0) -> None:
        super().__init__(evaluator)
        self.rng = random.Random(seed)
        self.left = after
        self.peak = 0  # most candidates in flight seen at a next_result call

    @property
    def capacity(self) -> int:
        return 4

    def next_result(self):
        if self.left == 0:
            raise Crash
        if self.left is not None:
            self.left -= 1
        self.peak = max(self.peak, len(self._queue))
        # one of the (up to) four "running" candidates finishes first
        index = self.rng.randrange(min(4, len(self._queue)))
        key, source = self._queue[index]
        del self._queue[index]
        return key, self.evaluator.evaluate(source)


def test_generations_overlap_on_a_pool_and_the_budget_holds(tmp_path, islands_config):
    evaluator = FakeEvaluator()
    pool = PoolDispatcher(evaluator)
    store = RunStore.create(tmp_path / "run.sqlite", islands_config.to_dict())
    with store:
        reason = run_search(Search(store, pool, islands_config, [MATMUL_SEED],
                                   search_space(islands_config, [MATMUL_SEED])))
    stored, state = rows(tmp_path / "run.sqlite")
    assert reason == "max_evaluations reached (44)"
    assert len(stored) == 44 and all(r[6] != "pending" for r in stored)
    assert sorted(evaluator.evaluated) == sorted(set(evaluator.evaluated)) and len(evaluator.evaluated) == 44
    assert state["in_flight"] == []
    # a generation closed while results of an earlier one were still out: later
    # generations were submitted on top of them
    assert pool.peak > islands_config.search.population_size * islands_config.search.islands


@pytest.mark.parametrize("after", [3, 15, 29])
def test_a_pool_run_killed_with_candidates_in_flight_resumes_to_its_budget(tmp_path, islands_config, after):
    path = tmp_path / "run.sqlite"
    evaluator = FakeEvaluator()
    with pytest.raises(Crash):
        drive(path, islands_config, evaluator, dispatcher_cls=lambda e: PoolDispatcher(e, after=after, seed=after))
    committed = [r for r in rows(path)[0] if r[6] != "pending"]
    assert len(committed) == after
    reason = drive(path, islands_config, evaluator, dispatcher_cls=lambda e: PoolDispatcher(e, seed=1))
    stored, state = rows(path)
    assert reason == "max_evaluations reached (44)"
    assert len(stored) == 44 and all(r[6] != "pending" for r in stored)
    assert [r for r in stored if r[0] in {c[0] for c in committed}] == committed  # nothing committed changed
    assert len(evaluator.evaluated) == len(set(evaluator.evaluated)) == 44  # none evaluated twice
    assert state["in_flight"] == []


class WideDispatcher(PoolDispatcher):
    """256 evaluators; counts the times the loop handed out work with nothing in flight."""

    def __init__(self, evaluator) -> None:
        super().__init__(evaluator)
        self.results = 0
        self.drained = 0

    @property
    def capacity(self) -> int:
        return 256

    def submit(self, key, source):
        if not self._queue and self.results > 1:  # past the seed, the pool had run dry
            self.drained += 1
        super().submit(key, source)

    def next_result(self):
        self.results += 1
        return super().next_result()


def test_a_bred_out_neighbourhood_waits_for_one_result_not_for_the_whole_pool(tmp_path):
    # A lone seed has few neighbours: the first rounds breed fewer children than
    # the pool holds, then none. Each result may open new ground, so the loop
    # breeds again after it instead of letting every evaluator finish first.
    config = make_config(population_size=8, max_evaluations=300)
    pool = WideDispatcher(FakeEvaluator())
    reason = drive(tmp_path / "run.sqlite", config, pool.evaluator, dispatcher_cls=lambda e: pool)
    stored, state = rows(tmp_path / "run.sqlite")
    assert reason == "max_evaluations reached (300)" and len(stored) == 300
    assert pool.drained == 0
    # rounds that bred nothing were no generations: patience and max_generations count bred ones
    assert state["generation"] <= max(r[3] for r in stored)
