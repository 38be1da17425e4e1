"""Parents' profiles steer the search: classes on the CPU, the selector across a resume, bias off, the report."""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import io
import random

import pytest
from rich.console import Console

from evolve.config import OperatorName, OperatorsConfig
from evolve.dispatch.base import InProcessDispatcher
from evolve.search.loop import STATE_KEY
from evolve.dispatch.ray import EvaluatorActor, EvaluatorSpec
from evolve.report import build_report, print_report
from evolve.session import make_evaluator, start_run
from evolve.search.steering import FALLBACK_EVENT, Steering
from fitness import Evaluator
from fitness.judge.lane import TimingLane
from operators import CROSSOVER, MUTATION, params_of
from operators.selector import FOCUSES
from platforms.profiling import LATENCY_BOUND, MEMORY_BOUND, UNKNOWN, ProfileRecord
from population_store import RunStore, source_hash
from tests.conftest import PROBLEMS, SMALL_SHAPES
from tests.test_evolve import Crash, FakeEvaluator, drive, make_config, rows

CPU_REASON = "no hardware profiler on the cpu platform"


class ProfilingEvaluator(FakeEvaluator):
    """The fake evaluator, plus profiles: a matmul with BLOCK_M >= 64 is memory-bound, else latency-bound."""

    def __init__(self) -> None:
        super().__init__()
        self.profiled: list[str] = []

    def profile(self, source: str, runtime_ms: float | None) -> dict:
        self.profiled.append(source_hash(source))
        bottleneck = MEMORY_BOUND if params_of(source)["matmul_kernel.BLOCK_M"] >= 64 else LATENCY_BOUND
        return ProfileRecord("fake", "1", "fake device", bottleneck, "by BLOCK_M", {},
                             summary=f"fake profile: {bottleneck}").to_dict()


def test_parents_get_a_bottleneck_class_on_the_cpu_from_the_roofline(tmp_path):
    config = tmp_path / "tiny.yaml"
    config.write_text(f"""\
problem:
  reference: {PROBLEMS}/elementwise/reference.py
  seeds: [{PROBLEMS}/elementwise/seed.py]
  shapes: {{batch_size: 4, dim: 100}}
search: {{population_size: 4, max_evaluations: 13}}
platform: cpu
""")
    profiled: list[str] = []

    class Counting(InProcessDispatcher):
        def profile(self, source, runtime_ms):
            profiled.append(source_hash(source))
            return super().profile(source, runtime_ms)

    @contextlib.contextmanager
    def counting(cfg):
        with make_evaluator(cfg) as evaluator:
            yield Counting(evaluator), {"platform": "cpu", "device_name": "cpu", "cutoff": evaluator.cutoff}

    assert start_run(config, tmp_path / "run", dispatchers=counting) == "max_evaluations reached (13)"
    with RunStore.open(tmp_path / "run" / "run.sqlite", readonly=True) as store:
        profiles = store.profiles()
        individuals = store.individuals()
        events = store.events(FALLBACK_EVENT)
    by_id = {i.id: i for i in individuals}
    parents = {by_id[p].source_hash for i in individuals for p in i.parents}
    assert parents and parents <= set(profiles)  # every parent was profiled before it bred
    assert len(profiled) == len(set(profiled)) == len(profiles)  # each source once
    for record in profiles.values():
        assert (record["tool"], record["bottleneck"], record["reason"]) == ("roofline", UNKNOWN, CPU_REASON)
        assert record["metrics"]["duration_ns"]["value"] > 0  # from the parent's measured runtime
        assert CPU_REASON in record["summary"]
    assert [e["data"]["reason"] for e in events] == [CPU_REASON]  # the degraded mode, said once


def test_profiling_takes_the_device_to_itself_and_runs_on_an_actor(evaluators):
    lane = TimingLane()
    seed = (PROBLEMS / "elementwise" / "seed.py").read_text()
    shapes = SMALL_SHAPES["elementwise"]
    with Evaluator(PROBLEMS / "elementwise" / "reference.py", platform="cpu", shapes=shapes, lane=lane) as evaluator:
        record = evaluator.profile(seed, runtime_ms=0.5)
    # the roofline (no tool on the CPU) touches no device, so the lane is not held; a tool's program
    # holds it exclusively while it uses the device (tests/test_profile_scale.py)
    assert lane.stats()["timings"] == 0
    assert record["bottleneck"] == UNKNOWN and record["metrics"]["duration_ns"]["value"] == pytest.approx(5e5)
    actor = EvaluatorActor()  # the Ray actor's class, called in this process
    try:
        spec = EvaluatorSpec(str(PROBLEMS / "elementwise" / "reference.py"), platform="cpu", shapes=shapes)
        assert actor.profile(spec, seed, 0.5) == record
    finally:
        actor.close()


@pytest.fixture(scope="module")
def steered(tmp_path_factory):
    """An uninterrupted run whose parents are memory- or latency-bound (by BLOCK_M)."""
    path = tmp_path_factory.mktemp("steered") / "run.sqlite"
    evaluator = ProfilingEvaluator()
    reason = drive(path, make_config(max_evaluations=40), evaluator)
    return reason, rows(path), evaluator, path


@pytest.mark.parametrize("after", [4, 19])
def test_the_selector_is_checkpointed_and_a_resumed_run_continues_it(tmp_path, steered, after):
    reason, (whole, whole_state), whole_evaluator, _ = steered
    stats = whole_state["selector"]["stats"]["operator"]
    assert set(stats) == {MEMORY_BOUND, LATENCY_BOUND}  # learnt under the parents' classes
    tries = sum(t for arms in stats.values() for t, _ in arms.values())
    assert tries == len(whole) - 1  # one outcome per child, the seed teaches nothing
    assert whole_state["outcomes"] == {}  # every outcome was learnt
    path = tmp_path / "run.sqlite"
    evaluator = ProfilingEvaluator()
    with pytest.raises(Crash):
        drive(path, make_config(max_evaluations=40), evaluator, dispatcher_after=after)
    cut = rows(path)[1]
    if cut is not None and cut["generation"] >= 1:  # a checkpoint past the seeds holds what was learnt so far
        assert cut["selector"]["stats"]["operator"]
    assert drive(path, make_config(max_evaluations=40), evaluator) == reason
    resumed, state = rows(path)
    assert resumed == whole and state["selector"] == whole_state["selector"]
    assert state["rng_state"] == whole_state["rng_state"]
    assert len(evaluator.profiled) == len(set(evaluator.profiled))  # profiles were kept across the crash
    assert sorted(evaluator.profiled) == sorted(whole_evaluator.profiled)


def test_the_report_shows_what_paid_off_under_which_class(steered):
    _, (whole, _), _, path = steered
    with RunStore.open(path, readonly=True) as store:
        report = build_report(store, path.parent)
    table = report["operators_by_class"]
    operators = [r for r in table if r["kind"] == "operator"]
    assert {r["bottleneck"] for r in operators} == {MEMORY_BOUND, LATENCY_BOUND}
    assert {r["arm"] for r in operators} <= {MUTATION, CROSSOVER}
    assert sum(r["tries"] for r in operators) == len(whole) - 1
    assert all(0 <= r["improvements"] <= r["tries"] and r["rate"] == r["improvements"] / r["tries"] for r in table)
    out = io.StringIO()
    print_report(report, Console(file=out, width=160))
    text = out.getvalue()
    assert "what paid off, by the parent's bottleneck class" in text
    row = operators[0]
    assert any(row["bottleneck"] in line and row["arm"] in line and str(row["tries"]) in line
               for line in text.splitlines())


WEIGHTS = {OperatorName.PARAMETRIC_MUTATION: 0.5, OperatorName.PARAMETRIC_CROSSOVER: 0.5}


def test_bias_off_draws_the_plain_weights_and_bias_on_follows_the_class():
    plain = Steering(OperatorsConfig(weights=WEIGHTS, bias=False), random.Random(4))
    for _ in range(30):  # what it counts steers nothing
        plain.selector.update(LATENCY_BOUND, CROSSOVER, True)
    reference = random.Random(4)
    names, weights = [MUTATION, CROSSOVER], [0.5, 0.5]
    assert [plain.choose(LATENCY_BOUND, llm=True) for _ in range(300)] == \
        [reference.choices(names, weights)[0] for _ in range(300)]
    assert [plain.choose_focus(MEMORY_BOUND) for _ in range(50)] == [reference.choice(FOCUSES) for _ in range(50)]

    biased = Steering(OperatorsConfig(weights=WEIGHTS), random.Random(4))
    draws = collections.Counter(biased.choose(LATENCY_BOUND, llm=True) for _ in range(3000))
    assert draws[MUTATION] > 1.1 * draws[CROSSOVER]  # latency-bound: parametric mutation x1.5
    focuses = collections.Counter(biased.choose_focus(MEMORY_BOUND) for _ in range(3000))
    assert focuses.most_common(1)[0][0] == "memory"


def test_bias_off_profiles_nothing_without_an_llm_but_still_reports(tmp_path):
    evaluator = ProfilingEvaluator()
    config = dataclasses.replace(make_config(max_evaluations=20), operators=OperatorsConfig(bias=False))
    drive(tmp_path / "run.sqlite", config, evaluator)
    assert evaluator.profiled == []  # the uniform baseline spends nothing on profiles
    with RunStore.open(tmp_path / "run.sqlite", readonly=True) as store:
        table = build_report(store, tmp_path)["operators_by_class"]
        assert store.get_state(STATE_KEY)["selector"] is not None
    assert {r["bottleneck"] for r in table} == {UNKNOWN} and sum(r["tries"] for r in table) == 19


def test_llm_operators_are_not_drawn_without_the_llm():
    steering = Steering(OperatorsConfig(weights={OperatorName.LLM_MUTATION: 1.0}), random.Random(0))
    assert {steering.choose(MEMORY_BOUND, llm=False) for _ in range(20)} == {MUTATION}  # the budget is spent
    assert {steering.choose(MEMORY_BOUND, llm=True) for _ in range(20)} == {"llm_mutation"}


def test_profiling_holds_the_device_no_longer_than_its_share_of_the_search(tmp_path):
    """``profiler.max_device_share``: on the H200, 23_Softmax's parents held the device 18 s of a 66 s run."""
    from evolve.search.population import Candidate
    from evolve.search.steering import ParentProfiles

    class Later:  # a pool that profiles in the background: records land when the test says
        def __init__(self) -> None:
            self.sent: list[str] = []
            self.landed: set[str] = set()

        def profile_later(self, source, runtime_ms):
            self.sent.append(source)
            return source

        def profile_result(self, handle):
            done = handle in self.landed
            return done, ({"tool": "ncu", "bottleneck": MEMORY_BOUND, "cost": {"device_s": 2.0}} if done else None)

    now = [0.0]
    pool = Later()
    with RunStore.create(tmp_path / "run.sqlite", {"problem": {}}) as store:
        profiles = ParentProfiles(store, pool, max_device_share=0.25, clock=lambda: now[0])
        parents = [Candidate(i, f"kernel {i}", source_hash(f"kernel {i}"), {}, 0, 0) for i in range(4)]
        profiles.take(parents)
        assert pool.sent == ["kernel 0"]  # its cost unknown: one at a time
        now[0] = 1.0
        pool.landed.add("kernel 0")
        profiles.take(parents)
        assert pool.sent == ["kernel 0"]  # 2 s of device in 1 s: over a quarter
        assert profiles.bottleneck(parents[0]) == MEMORY_BOUND and profiles.bottleneck(parents[1]) == UNKNOWN
        now[0] = 16.0  # 4 s, that one and the next, fit in a quarter of 16 s; a third would not
        profiles.take(parents)
        assert pool.sent == ["kernel 0", "kernel 1"]
        unbounded = ParentProfiles(store, Later(), clock=lambda: now[0])
        unbounded.take(parents[1:])
        assert unbounded.dispatcher.sent == ["kernel 1", "kernel 2", "kernel 3"]  # no share: every parent at once
