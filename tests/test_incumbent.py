"""torch.compile as the incumbent of every run on a GPU (fitness.judge.incumbent, evolve.search.confirm):
timed in the end-of-run rounds beside the best and its seed, and every figure a user reads is the
best over it with an interval, or why there is none. The timers here are the tests' own; the real
incumbent's timing runs on a GPU (tests/test_gpu.py)."""

from __future__ import annotations

import pytest

from evolve.config import config_from_dict
from evolve.dispatch.base import InProcessDispatcher
from evolve.report import build_report
from evolve.report_sweep import Outcome, format_sweep_summary, sweep_summary
from evolve.report_sol import compile_line, sol_lines
from evolve.search.confirm import NO_INCUMBENT, confirm_top, incumbents_for
from fitness import EvalResult, Incumbent, Status
from fitness.judge.incumbent import matmul_precision
from population_store import Individual, RunStore, source_hash
from tests.conftest import PROBLEMS

TF32_KERNEL = "@triton.jit\ndef k(a, b):\n    c = tl.dot(a, b)\n"
IEEE_KERNEL = "@triton.jit\ndef k(a, b):\n    c = tl.dot(a, b, input_precision='ieee')\n"


class Clock:
    """Runtimes per job and round, as the test sets them: a kernel by its source, torch.compile as
    ``compile`` (``compile_tf32`` with TF32 allowed), eager always at ``eager_ms``."""

    def __init__(self, times: dict[str, list[float]], spread: float = 0.01, eager_ms: float = 4.0,
                 platform: str = "cuda", compile_fails: str = "") -> None:
        self.times, self.spread, self.eager_ms, self.platform = times, spread, eager_ms, platform
        self.compile_fails, self.order, self.rounds = compile_fails, [], {}

    def _record(self, name: str) -> EvalResult:
        self.order.append(name)
        r = self.rounds[name] = self.rounds.get(name, -1) + 1
        return EvalResult(Status.ACCEPTED, "", max_abs_diff=0.0, runtime_ms=self.times[name][r],
                          runtime_spread=self.spread, reference_ms=self.eager_ms, platform=self.platform)

    def evaluate(self, source: str) -> EvalResult:
        return self._record(source)

    def time_incumbent(self, job: Incumbent) -> EvalResult:
        if self.compile_fails:
            self.order.append("compile")
            return EvalResult(Status.RUNTIME_ERROR, self.compile_fails, platform=self.platform)
        return self._record("compile_tf32" if job.tf32 else "compile")


def stored(tmp_path, best_source: str = "best", platform: str = "cuda") -> RunStore:
    """A run's store: a seed at 2 ms and its child, the best, at 1 ms."""
    config = config_from_dict({"problem": {"reference": str(PROBLEMS / "matmul" / "reference.py"),
                                           "seeds": [str(PROBLEMS / "matmul" / "seed.py")]}}, origin="test")
    store = RunStore.create(tmp_path / "run.sqlite", config.to_dict())
    seed = store.add_individual(Individual(None, "seed", source_hash("seed"), 0, 0, "seed", [], {}))
    store.set_result(seed, EvalResult(Status.ACCEPTED, "", 0.0, 2.0, 0.01, 4.0, platform, "GPU").to_dict(),
                     "accepted", 2.0)
    best = store.add_individual(Individual(None, best_source, source_hash(best_source), 1, 0, "mutation",
                                           [seed], {}))
    store.set_result(best, EvalResult(Status.ACCEPTED, "", 0.0, 1.0, 0.01, 4.0, platform, "GPU").to_dict(),
                     "accepted", 1.0)
    return store


def test_torch_compile_is_timed_in_every_round_and_the_best_is_read_against_it(tmp_path):
    store = stored(tmp_path)
    clock = Clock({"best": [1.0, 1.02, 0.98], "seed": [2.0, 2.0, 2.0], "compile": [0.80, 0.82, 0.79]})
    data = confirm_top(store, InProcessDispatcher(clock), None)
    assert clock.order == ["best", "seed", "compile"] * 3  # interleaved, one turn of each per round
    over = data["vs_compile"]
    ratios = [0.80 / 1.0, 0.82 / 1.02, 0.79 / 0.98]
    assert (over["low"], over["ratio"], over["high"]) == pytest.approx((min(ratios), sorted(ratios)[1], max(ratios)))
    assert over["faster"] == "torch.compile" and over["rounds"] == 3
    assert over["compile_ms"] == pytest.approx(0.80) and over["eager_ms"] == 4.0
    assert over["vs_eager"]["ratio"] == pytest.approx(4.0)
    assert over["seed"]["ratio"] == pytest.approx(0.40)  # the seed against torch.compile, same rounds
    assert "vs_compile_tf32" not in data  # the best fixes no precision below fp32
    report = build_report(store, tmp_path)
    assert report["vs_compile"] == over  # kevo report --json
    line = next(line for line in sol_lines(report) if line.startswith("vs compile"))
    assert "torch.compile is faster, by 24" in line and "over 3 rounds" in line  # a loss is never a win
    store.close()


def test_a_best_that_beats_torch_compile_beyond_noise_says_so(tmp_path):
    store = stored(tmp_path)
    clock = Clock({"best": [1.0] * 2, "seed": [2.0] * 2, "compile": [1.5, 1.6]})
    data = confirm_top(store, InProcessDispatcher(clock), 2)
    assert data["vs_compile"]["faster"] == "kevo" and data["vs_compile"]["ratio"] == pytest.approx(1.55)
    assert "kevo's kernel is faster beyond noise" in compile_line(data["vs_compile"])
    store.close()


def test_within_noise_is_neither_a_win_nor_a_clear_loss(tmp_path):
    store = stored(tmp_path)
    clock = Clock({"best": [1.0] * 3, "seed": [2.0] * 3, "compile": [0.995, 1.0, 0.99]}, spread=0.05)
    data = confirm_top(store, InProcessDispatcher(clock), None)
    assert data["vs_compile"]["faster"] == "neither"
    assert "(within noise)" in compile_line(data["vs_compile"])
    store.close()


@pytest.mark.parametrize("source, timed", [(TF32_KERNEL, True), (IEEE_KERNEL, False),
                                           (IEEE_KERNEL.replace("ieee", "tf32x3"), True)])
def test_a_best_below_fp32_is_also_read_against_torch_compile_with_tf32(tmp_path, source, timed):
    store = stored(tmp_path, best_source=source)
    clock = Clock({source: [1.0] * 3, "seed": [2.0] * 3, "compile": [3.0] * 3, "compile_tf32": [0.9] * 3})
    data = confirm_top(store, InProcessDispatcher(clock), None)
    assert ("compile_tf32" in clock.order) is timed
    assert data["vs_compile"]["ratio"] == pytest.approx(3.0)
    if timed:
        assert data["vs_compile_tf32"]["ratio"] == pytest.approx(0.9)
        lines = sol_lines(build_report(store, tmp_path))
        assert any("best 0.9x torch.compile with TF32 allowed" in line for line in lines)
    store.close()


def test_no_incumbent_off_the_gpu_and_the_reason_stands_in_its_place(tmp_path):
    assert incumbents_for("cpu", TF32_KERNEL) == [] and incumbents_for("rocm", "x") == [Incumbent()]
    store = stored(tmp_path, platform="cpu")
    report = build_report(store, tmp_path)  # no rounds by default on the CPU
    assert report["vs_compile"] == {"why": NO_INCUMBENT}
    clock = Clock({"best": [1.0] * 2, "seed": [2.0] * 2}, platform="cpu")
    data = confirm_top(store, InProcessDispatcher(clock), 2)  # rounds asked for: kernels only
    assert "compile" not in clock.order and data["vs_compile"] == {"why": NO_INCUMBENT}
    assert compile_line(build_report(store, tmp_path)["vs_compile"]).startswith("no clean torch.compile time")
    store.close()


def test_a_torch_compile_that_fails_is_the_reason(tmp_path):
    store = stored(tmp_path)
    clock = Clock({"best": [1.0] * 3, "seed": [2.0] * 3}, compile_fails="torch.compile failed: BackendCompilerFailed")
    data = confirm_top(store, InProcessDispatcher(clock), None)
    assert data["vs_compile"] == {"why": "torch.compile failed: BackendCompilerFailed"}
    assert data["speedup_over_seed"]["median"] == pytest.approx(2.0)  # the kernels' rounds still count
    store.close()


def test_a_run_not_stopped_yet_says_why_there_is_no_figure(tmp_path):
    store = stored(tmp_path)
    assert build_report(store, tmp_path)["vs_compile"] == {"why": "the top kernels are timed again when the run stops"}
    store.close()


def outcome(name: str, ratio: float | None, faster: str = "neither", why: str = "") -> Outcome:
    figures = {"why": why} if ratio is None else {"ratio": ratio, "low": ratio * 0.98, "high": ratio * 1.02,
                                                  "faster": faster}
    return Outcome(name, "finished", best_ms=1.0, reference_ms=2.0, speedup=2.0, vs_compile=figures)


def test_the_sweep_summary_gives_fast_p_and_the_geometric_mean_over_torch_compile():
    outcomes = [outcome("a", 0.5, "torch.compile"), outcome("b", 2.0, "kevo"), outcome("c", 1.2, "kevo"),
                outcome("d", None, why=NO_INCUMBENT), Outcome("e", "failed")]
    summary = sweep_summary(outcomes)
    over = summary["vs_compile"]
    assert over["problems"] == 3 and over["fast_1"] == pytest.approx(2 / 5) and over["fast_1.5"] == pytest.approx(1 / 5)
    assert over["geomean"] == pytest.approx((0.5 * 2.0 * 1.2) ** (1 / 3))
    assert over["slower"] == ["a"] and over["without"] == {"d": NO_INCUMBENT}
    assert summary["fast_1"] == pytest.approx(4 / 5)  # eager's figures stay beside them
    text = format_sweep_summary(summary)
    assert "| a | finished | 0 | 1 | 0.5x (0.49-0.51) |" in text
    assert "torch.compile is faster beyond noise on: a" in text and "geometric mean over the 3 1.06x" in text
    assert "a clean time on 3 of 5 problems; fast_p over all 5" in text


def test_tf32_is_allowed_only_inside_the_block():
    import torch

    before = torch.get_float32_matmul_precision()
    with matmul_precision(True):
        assert torch.get_float32_matmul_precision() == "high"
    assert torch.get_float32_matmul_precision() == before


def test_export_describes_the_kernel_as_it_is(tmp_path):
    """A seed whose comment and dot say ieee, mutated to tf32x3: the header says what the code does,
    that its comments were its seed's, and how it stands against torch.compile."""
    from evolve.export import HEADER_MARK, export_text

    seed_source = (PROBLEMS / "matmul" / "seed.py").read_text()
    best_source = seed_source.replace('input_precision="ieee"', 'input_precision="tf32x3"')
    config = config_from_dict({"problem": {"reference": str(PROBLEMS / "matmul" / "reference.py"),
                                           "seeds": [str(PROBLEMS / "matmul" / "seed.py")]}}, origin="test")
    with RunStore.create(tmp_path / "run.sqlite", config.to_dict()) as store:
        seed = store.add_individual(Individual(None, seed_source, source_hash(seed_source), 0, 0, "seed", [], {}))
        best = store.add_individual(Individual(None, best_source, source_hash(best_source), 1, 0,
                                               "parametric_mutation", [seed], {}))
        for ind, ms in ((seed, 2.0), (best, 1.0)):
            store.set_result(ind, EvalResult(Status.ACCEPTED, "", 0.0, ms, 0.01, 4.0, "cuda", "H200").to_dict(),
                             "accepted", ms)
        clock = Clock({best_source: [1.0] * 3, seed_source: [2.0] * 3, "compile": [0.9] * 3,
                       "compile_tf32": [0.5] * 3})
        confirm_top(store, InProcessDispatcher(clock), None)
        text, line = export_text(store, store.get(best))
    header, _, body = text.partition("\n\n")
    assert f"# vs torch.compile: {line}" in header  # what kevo export says on stderr is the header's
    assert body == best_source and header.startswith(HEADER_MARK)
    assert "dot precision: matmul_kernel.dot[0] tf32x3" in header
    assert "comments below were written for its seed, whose dots multiplied at ieee" in header
    assert "best 0.9x torch.compile (0.9-0.9x over 3 rounds): torch.compile is faster, by 11.1%" in header
    assert "best 0.5x torch.compile with TF32 allowed" in header


class SearchClock:
    """The seed at 2 ms, every child at ``child_ms``, torch.compile at ``compile_ms``, on ``platform``."""

    def __init__(self, child_ms: float, compile_ms: float, platform: str = "cuda") -> None:
        self.child_ms, self.compile_ms, self.platform, self.incumbents = child_ms, compile_ms, platform, 0

    def evaluate(self, source: str) -> EvalResult:
        ms = 2.0 if source_hash(source) == source_hash(MATMUL_SEED) else self.child_ms
        return EvalResult(Status.ACCEPTED, "", max_abs_diff=0.0, runtime_ms=ms, runtime_spread=0.01,
                          reference_ms=4.0, platform=self.platform)

    def time_incumbent(self, job: Incumbent) -> EvalResult:
        self.incumbents += 1
        return EvalResult(Status.ACCEPTED, "", max_abs_diff=0.0, runtime_ms=self.compile_ms, runtime_spread=0.01,
                          reference_ms=4.0, platform=self.platform)


MATMUL_SEED = (PROBLEMS / "matmul" / "seed.py").read_text()


def searched(tmp_path, clock: SearchClock, search: dict) -> tuple[str, RunStore]:
    from evolve.search.loop import Search, run_search
    from evolve.session import search_space

    config = config_from_dict({"problem": {"reference": str(PROBLEMS / "matmul" / "reference.py"),
                                           "seeds": [str(PROBLEMS / "matmul" / "seed.py")]},
                               "search": {"population_size": 4, "max_evaluations": 40, "seed": 1,
                                          "confirm_rounds": 0, **search}, "platform": "cpu"}, origin="test")
    store = RunStore.create(tmp_path / "run.sqlite", config.to_dict())
    reason = run_search(Search(store, InProcessDispatcher(clock), config, [MATMUL_SEED],
                               search_space(config, [MATMUL_SEED])))
    return reason, store


def test_target_speedup_can_be_set_against_torch_compile(tmp_path):
    from evolve.search.loop import INCUMBENT_EVENT

    # children run 1 ms: 4x eager, but only 1.5x torch.compile (1.5 ms); a target of 2x over it is never met
    clock = SearchClock(child_ms=1.0, compile_ms=1.5)
    reason, store = searched(tmp_path / "unmet", clock, {"target_speedup": 2.0, "speedup_over": "compile"})
    assert reason.startswith("max_evaluations reached") and clock.incumbents == 1  # timed once a run
    assert store.events(INCUMBENT_EVENT)[-1]["data"]["runtime_ms"] == 1.5
    store.close()
    reason, store = searched(tmp_path / "met", SearchClock(child_ms=1.0, compile_ms=1.5),
                             {"target_speedup": 1.4, "speedup_over": "compile"})
    assert reason == "target_speedup reached (1.5x >= 1.4x over torch.compile)"
    store.close()
    reason, store = searched(tmp_path / "eager", SearchClock(child_ms=1.0, compile_ms=1.5), {"target_speedup": 3.0})
    assert reason == "target_speedup reached (4x >= 3x)"  # over eager, as before: no torch.compile timed
    assert store.events(INCUMBENT_EVENT) == []
    store.close()


def test_patience_can_be_set_against_torch_compile(tmp_path):
    """Children at 1 ms beat the 2 ms seed in the first generation and never improve after. Against
    torch.compile at 0.8 ms that improvement is no progress: patience runs from the start."""
    def generations(store: RunStore) -> int:
        return max(i.generation for i in store.individuals())

    reason, store = searched(tmp_path / "eager", SearchClock(child_ms=1.0, compile_ms=0.8), {"patience": 3})
    assert reason == "no faster kernel for 3 generations (patience 3)" and generations(store) == 4
    store.close()
    reason, store = searched(tmp_path / "lost", SearchClock(child_ms=1.0, compile_ms=0.8),
                             {"patience": 3, "speedup_over": "compile"})
    assert reason == "no kernel faster than torch.compile for 3 generations (patience 3)" and generations(store) == 3
    store.close()
    # faster than torch.compile (1.5 ms): the improvement counts, as over eager
    reason, store = searched(tmp_path / "won", SearchClock(child_ms=1.0, compile_ms=1.5),
                             {"patience": 3, "speedup_over": "compile"})
    assert reason == "no faster kernel for 3 generations (patience 3)" and generations(store) == 4
    store.close()


def test_a_target_over_torch_compile_off_the_gpu_is_refused_with_the_reason(tmp_path):
    from evolve.search.loop import SearchError

    with pytest.raises(SearchError, match="speedup_over: compile cannot be met on platform 'cpu'"):
        searched(tmp_path, SearchClock(1.0, 1.5, platform="cpu"), {"target_speedup": 2.0, "speedup_over": "compile"})


def test_the_real_incumbent_is_compiled_checked_and_timed_through_each_dispatcher():
    """Evaluator.time_incumbent itself (the CPU runs torch.compile's C++ there: a time, not a figure
    kevo reports), through the in-process dispatcher and a Ray actor's class in this process."""
    import torch

    from evolve.dispatch.actor import EvaluatorActor, EvaluatorSpec
    from fitness import Evaluator

    reference, shapes = str(PROBLEMS / "elementwise" / "reference.py"), {"batch_size": 4, "dim": 64}
    with Evaluator(reference, platform="cpu", shapes=shapes) as evaluator:
        dispatcher = InProcessDispatcher(evaluator)
        dispatcher.submit(1, Incumbent())
        key, record = dispatcher.next_result()
        assert key == 1 and record.status is Status.ACCEPTED and record.reason == ""
        assert record.max_abs_diff <= evaluator.cutoff and record.runtime_ms > 0 and record.reference_ms > 0
        assert record.runtime_spread is not None and record.platform == "cpu"
        before = torch.get_float32_matmul_precision()
        assert evaluator.time_incumbent(Incumbent(tf32=True)).status is Status.ACCEPTED
        assert torch.get_float32_matmul_precision() == before  # TF32 allowed only while it was timed
        assert len(evaluator.prepared.incumbents) == 2  # compiled once per precision, kept for the next round
        seed = (PROBLEMS / "elementwise" / "seed.py").read_text()
        assert evaluator.evaluate(seed).status is Status.ACCEPTED  # the judge still judges beside it
    actor = EvaluatorActor(slots=2)
    try:
        _, record = actor.evaluate(EvaluatorSpec(reference, platform="cpu", shapes=shapes), Incumbent())
        assert record.status is Status.ACCEPTED and record.runtime_ms > 0
    finally:
        actor.close()


def test_a_reference_torch_compile_cannot_compile_is_a_record_that_says_so(monkeypatch):
    """torch.compile failing at its first call (as Inductor does, compiling lazily) is the record's reason."""
    import torch

    from fitness import Evaluator

    def compile_that_fails(model):
        def first_call(*args):
            raise RuntimeError("backend compiler failed: this model refuses to be compiled")
        return first_call

    monkeypatch.setattr(torch, "compile", compile_that_fails)
    with Evaluator(str(PROBLEMS / "elementwise" / "reference.py"), platform="cpu",
                   shapes={"batch_size": 4, "dim": 64}) as evaluator:
        record = evaluator.time_incumbent(Incumbent())
    assert record.status is Status.RUNTIME_ERROR and record.runtime_ms is None
    assert record.reason.startswith("torch.compile failed: RuntimeError: backend compiler failed")


def test_the_report_says_why_a_seed_from_torch_compile_may_not_match_it(tmp_path):
    import json

    from evolve.report_sol import seed_note
    from evolve.session import RECORDING_FILE

    assert seed_note(tmp_path) == ""  # seed files, no capture
    (tmp_path / RECORDING_FILE).write_text(json.dumps({"variant": "max_autotune", "skipped": {
        "default": "no Triton-only seed: Inductor's call() calls extern_kernels.mm"}}))
    assert seed_note(tmp_path).startswith("torch.compile's own code is not Triton only (no Triton-only seed: "
                                          "Inductor's call() calls extern_kernels.mm): the seed is Inductor's "
                                          "max_autotune configuration")
    (tmp_path / RECORDING_FILE).write_text(json.dumps({"variant": "default", "skipped": {
        "default_fast_path": "no fast path: the main shapes' capture made 2 graphs (one is needed)"}}))
    store = stored(tmp_path)
    report = build_report(store, tmp_path)
    assert report["seed_note"].startswith("the seed holds torch.compile's general code only (no fast path")
    assert any(line.startswith("seed       the seed holds") for line in sol_lines(report))
    (tmp_path / RECORDING_FILE).write_text(json.dumps({"variant": "default", "fast_path": {}, "skipped": {}}))
    assert seed_note(tmp_path) == ""
    store.close()
