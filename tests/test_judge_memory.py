"""Judging in bounded memory: chunked comparisons, outputs handed over without
copies through host pickles, a memory plan, and out of memory as a result."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
import torch

import fitness.judge.compare as compare_module
from evolve.dispatch.actor import EvaluatorActor, EvaluatorSpec
from fitness import EvalResult, Evaluator, EvalSettings, ProblemError, Status
from fitness.judge.compare import CutoffError, check_cutoff, compare
from platforms.cuda import _checked_share

ROOT = Path(__file__).resolve().parents[1]
ELEMENTWISE = ROOT / "problems" / "elementwise" / "reference.py"
SOFTMAX = ROOT / "problems" / "softmax" / "reference.py"


def _naive(out: torch.Tensor, ref: torch.Tensor) -> float:
    finite = torch.isfinite(ref)
    return float((out.double()[finite] - ref.double()[finite]).abs().max())


def test_chunked_comparison_sees_what_a_whole_one_sees(monkeypatch):
    monkeypatch.setattr(compare_module, "CHUNK", 7)  # many chunks, the last one short
    torch.manual_seed(0)
    ref = torch.randn(10, 11)
    ref[3, 4] = float("inf")
    ref[9, 10] = float("nan")
    out = ref + 1e-3 * torch.randn(10, 11)
    out[3, 4], out[9, 10] = float("inf"), float("nan")
    verdict = compare([out], [ref], 1e-2)
    assert verdict.status == "accepted" and verdict.max_abs_diff == pytest.approx(_naive(out, ref))
    out[7, 2] += 1.0  # one element past the cutoff, in a middle chunk
    verdict = compare([out], [ref], 1e-2)
    assert verdict.status == "wrong" and verdict.max_abs_diff == pytest.approx(_naive(out, ref))
    out[7, 2] = float("nan")
    out[0, 0] = float("inf")
    assert "2 non-finite" in compare([out], [ref], 1e-2).reason
    out = ref.clone()
    out[9, 10] = 0.0  # the reference is NaN there
    assert compare([out], [ref], 1e9).status == "wrong"


def test_chunked_comparison_of_non_contiguous_outputs(monkeypatch):
    monkeypatch.setattr(compare_module, "CHUNK", 5)
    ref = torch.arange(24.0).reshape(4, 6)
    out = ref.t().contiguous().t()  # same values, other strides
    assert compare([out], [ref], 0.0).status == "accepted"
    bad = out.clone()
    bad[2, 5] += 1
    assert compare([bad], [ref], 0.5).max_abs_diff == pytest.approx(1.0)


def test_cutoff_check_in_chunks_still_refuses_trivial_outputs(monkeypatch):
    monkeypatch.setattr(compare_module, "CHUNK", 64)
    monkeypatch.setattr(compare_module, "SAMPLE", 50)
    torch.manual_seed(0)
    x = torch.randn(4, 1000)
    with pytest.raises(CutoffError, match="zeros"):
        check_cutoff([torch.softmax(x, dim=1)], [x], 1e-2)
    check_cutoff([torch.softmax(x, dim=1)], [x], 1e-6)
    with pytest.raises(CutoffError, match="input 0"):
        check_cutoff([x + 1e-5], [x], 1e-3)


def _share(**overrides) -> dict:
    shared = {"device": 0, "handle": "aGFuZGxl", "storage_bytes": 4096, "storage_offset_bytes": 0,
              "ref_counter": "/torch_1234_99_0", "ref_offset": 3, "event": None, "event_sync": False,
              "offset": 0}
    shared.update(overrides)
    return shared


def test_a_shared_device_tensor_is_opened_only_when_every_part_checks_out():
    args = _checked_share(_share(), torch.float32, [32, 32], producer_pid=1234, index=0)
    assert args[1] == b"handle" and args[4] == b"/torch_1234_99_0"
    refused = [
        (_share(ref_counter="/torch_999_99_0"), "reference counter"),  # another process's counter
        (_share(ref_counter="/../etc/passwd"), "reference counter"),
        (_share(ref_offset=10_000), "ref_offset"),  # past the counter file
        (_share(storage_bytes=4095), "storage_bytes"),  # smaller than the tensor
        (_share(offset=1), "storage_bytes"),
        (_share(device=1), "device"),
        (_share(handle="not base64!"), "handle"),
        (_share(event_sync=True), "handle"),  # an event to wait on, but none given
        (_share(storage_offset_bytes=-4), "storage_offset_bytes"),
    ]
    for shared, what in refused:
        with pytest.raises(ValueError, match=what):
            _checked_share(shared, torch.float32, [32, 32], producer_pid=1234, index=0)


def test_the_evaluator_keeps_no_reference_outputs():
    with Evaluator(ELEMENTWISE, platform="cpu", shapes={"batch_size": 4, "dim": 100}) as evaluator:
        assert not any(isinstance(v, torch.Tensor) for v in vars(evaluator.main).values())
        assert evaluator.prepared.footprint() > 0
        result = evaluator.evaluate((ROOT / "problems" / "elementwise" / "seed.py").read_text())
    assert result.status is Status.ACCEPTED, result.reason
    # 2 fixed and 1 fresh input set, one per held-out group, and the timed runs (all of the CPU's few)
    assert result.checks >= 3 + 2 + 3


def test_a_problem_that_cannot_fit_is_refused_naming_the_memory(monkeypatch):
    from platforms.cpu import CpuPlatform

    monkeypatch.setattr(CpuPlatform, "free_memory", lambda self: 1 << 20)
    with pytest.raises(ProblemError, match=r"needs about .* GB of memory .* only 0.0 GB is free .* smaller `shapes:`"):
        Evaluator(ELEMENTWISE, platform="cpu", shapes={"batch_size": 64, "dim": 4096})


def test_out_of_memory_in_the_harness_is_a_result_not_a_traceback():
    """The worker's own allocation (the problem's inputs) fails under an address-space cap."""
    shapes = {"batch_size": 8192, "dim": 16384}  # one 512 MB input
    with Evaluator(SOFTMAX, platform="cpu", shapes={"batch_size": 4, "dim": 64}) as probe:
        probe.evaluate((ROOT / "problems" / "softmax" / "seed.py").read_text())
        pid = probe.channel.worker.process.pid
        status = Path(f"/proc/{pid}/status").read_text()
    vm_peak = int(next(line for line in status.splitlines() if line.startswith("VmPeak")).split()[1]) * 1024
    settings = EvalSettings(memory_limit_bytes=vm_peak + (256 << 20))  # room for the harness, not the input
    with Evaluator(SOFTMAX, platform="cpu", shapes=shapes, settings=settings, held_out=[]) as evaluator:
        result = evaluator.evaluate((ROOT / "problems" / "softmax" / "seed.py").read_text())
    assert result.status is Status.OUT_OF_MEMORY, result.reason
    assert result.harness_failure and "kevo's worker ran out of memory" in result.reason


class _Prepared:
    """A problem prepared on a device with room for any number of its evaluations."""

    platform = type("_Roomy", (), {"free_memory": staticmethod(lambda: 1 << 50)})()

    def slots_that_fit(self, wanted: int) -> int:
        return wanted

    def footprint(self) -> int:
        return 1 << 30

    main, overlap_reference, overlap_held_out = None, True, True

    def variants(self) -> list:
        return []  # no shapes of its own: the log names no phase (fitness.judge.memory_plan.largest_phase)


class _FlakyEvaluator:
    """Runs out of kevo's memory while another evaluation is in flight, not alone."""

    def __init__(self, actor_state: dict) -> None:
        self.prepared = _Prepared()
        self.state = actor_state

    def evaluate(self, source: str) -> EvalResult:
        with self.state["lock"]:
            self.state["running"] += 1
        time.sleep(0.2)
        with self.state["lock"]:
            crowded = self.state["running"] > 1  # the other evaluation overlapped this one
            self.state["running"] -= 1
        if crowded and source == "big":
            return EvalResult(Status.OUT_OF_MEMORY, "kevo's worker ran out of memory during call",
                              harness_failure=True)
        return EvalResult(Status.ACCEPTED, runtime_ms=1.0)

    def close(self) -> None:
        pass


def test_an_actor_retries_an_out_of_memory_alone_and_keeps_fewer_in_flight(monkeypatch):
    state = {"lock": threading.Lock(), "running": 0}
    monkeypatch.setattr(EvaluatorSpec, "build", lambda self, lane=None, prepared=None: _FlakyEvaluator(state))
    actor = EvaluatorActor(slots=2)
    spec = EvaluatorSpec("r.py")
    results = {}

    def evaluate(source: str) -> None:
        results[source] = actor.evaluate(spec, source)[1]

    threads = [threading.Thread(target=evaluate, args=(s,)) for s in ("big", "small")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results["big"].status is Status.ACCEPTED  # tried again with the device to itself
    assert results["small"].status is Status.ACCEPTED
    assert actor.admissions.limit[spec] == 1


PEAK = textwrap.dedent("""
    import json, resource, runpy, sys
    sys.argv = ["kevo", *sys.argv[1:]]
    try:
        runpy.run_module("evolve.cli", run_name="__main__")
    except SystemExit as exit:
        code = exit.code
    print(json.dumps({"judge": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
                      "worker": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024,
                      "code": code}), file=sys.stderr)
""")


def _peaks(tmp_path: Path, batch_size: int, dim: int) -> dict:
    seed = (ROOT / "problems" / "elementwise" / "seed.py").read_text()
    candidate = tmp_path / "wide_blocks.py"  # few interpreted programs: the test is about memory
    candidate.write_text(seed.replace("BLOCK_SIZE=1024", "BLOCK_SIZE=1 << 20"))
    script = tmp_path / "peak.py"
    script.write_text(PEAK)
    done = subprocess.run([sys.executable, str(script), "verify", str(ELEMENTWISE), str(candidate), "--device", "cpu",
                           "--shape", f"batch_size={batch_size}", "--shape", f"dim={dim}", "--json"],
                          cwd=ROOT, capture_output=True, text=True, timeout=900)
    peaks = json.loads(done.stderr.strip().splitlines()[-1])
    assert peaks["code"] == 0 and json.loads(done.stdout)["status"] == "accepted", done.stderr[-2000:]
    return peaks


@pytest.mark.slow
def test_judge_and_worker_need_under_ten_times_the_output_over_a_tiny_shape(tmp_path):
    tiny = _peaks(tmp_path, 4, 1024)
    big = _peaks(tmp_path, 2048, 16384)
    output_bytes = 2048 * 16384 * 4  # 128 MB
    for side in ("judge", "worker"):
        extra = big[side] - tiny[side]
        assert extra <= 10 * output_bytes, f"the {side} needed {extra / output_bytes:.1f}x the output"


class _Crowded:
    """Four evaluations at once where three fit: each of the four runs out of memory together,
    as a profile beside real-size evaluations made five on one H200 (23_Softmax, six slots)."""

    def __init__(self, state: dict) -> None:
        self.prepared, self.state = _Prepared(), state

    def evaluate(self, source: str) -> EvalResult:
        with self.state["lock"]:
            self.state["running"] += 1
            self.state["most"] = max(self.state["most"], self.state["running"])
        first_try = source.startswith("together") and source not in self.state["tried"]
        self.state["tried"].add(source)
        try:
            if first_try:
                self.state["together"].wait()  # all four in flight at once
            time.sleep(0.05)
            with self.state["lock"]:
                crowded = self.state["running"] > 3
            if first_try:
                self.state["together"].wait()  # and all four saw the crowd
            if crowded:
                return EvalResult(Status.OUT_OF_MEMORY, "kevo's worker ran out of memory during call",
                                  harness_failure=True)
            return EvalResult(Status.ACCEPTED, runtime_ms=1.0)
        finally:
            with self.state["lock"]:
                self.state["running"] -= 1

    def profile(self, source: str, runtime_ms: float | None, room=None) -> dict:
        time.sleep(self.state.get("tool start-up", 0.0))  # the profiler starting: no device memory yet
        with room() if room is not None else contextlib.nullcontext():  # the program on the device
            with self.state["lock"]:
                self.state["running"] += 1
                self.state["most"] = max(self.state["most"], self.state["running"])
            time.sleep(0.3)
            with self.state["lock"]:
                self.state["running"] -= 1
        return {"profiled": True}

    def close(self) -> None:
        pass


def _crowded_actor(monkeypatch, slots: int) -> tuple[EvaluatorActor, EvaluatorSpec, dict]:
    state = {"lock": threading.Lock(), "running": 0, "most": 0, "together": threading.Barrier(4, timeout=30),
             "tried": set()}
    monkeypatch.setattr(EvaluatorSpec, "build", lambda self, lane=None, prepared=None: _Crowded(state))
    return EvaluatorActor(slots=slots), EvaluatorSpec("r.py"), state


def _all_at_once(actor: EvaluatorActor, spec: EvaluatorSpec, sources: list[str]) -> list[EvalResult]:
    """``sources`` evaluated by ``actor``, each from a thread of its own started together; the verdicts
    of those that returned (a thread that raised adds none)."""
    results: list[EvalResult] = []
    threads = [threading.Thread(target=lambda s=s: results.append(actor.evaluate(spec, s)[1])) for s in sources]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


def test_evaluations_out_of_memory_together_take_the_limit_to_one_below_their_crowd_not_to_one(monkeypatch):
    actor, spec, state = _crowded_actor(monkeypatch, slots=6)
    together = _all_at_once(actor, spec, [f"together {i}" for i in range(4)])
    assert state["most"] == 4
    assert actor.admissions.limit[spec] == 3  # four were too many: three, whichever of the four came back first
    assert len(together) == 4  # each tried again alone: accepted, its first try's time in its record
    assert all(r.status is Status.ACCEPTED and "out of memory: first try" in r.walls_s for r in together)
    state["most"] = 0
    results = _all_at_once(actor, spec, [f"later {i}" for i in range(8)])
    assert len(results) == 8 and all(r.status is Status.ACCEPTED for r in results)
    assert state["most"] == 3  # no more than three at once since, and three did run


@pytest.mark.parametrize("limit, overlaps", [(1, False), (6, True)])
def test_a_profile_takes_an_evaluation_s_place_where_memory_limits_the_slots(monkeypatch, limit, overlaps):
    actor, spec, state = _crowded_actor(monkeypatch, slots=6)
    actor.evaluate(spec, "first")  # built and planned
    actor.admissions.limit[spec] = limit  # the plan: one fits (memory binds), or all six slots do
    profiled = threading.Thread(target=actor.profile, args=(spec, "parent", 1.0))
    profiled.start()
    time.sleep(0.1)  # the profile is on the device
    assert actor.evaluate(spec, "child")[1].status is Status.ACCEPTED
    profiled.join()
    assert (state["most"] == 2) is overlaps  # beside the profile only where memory does not bind


def test_a_profile_takes_an_evaluation_s_place_only_while_its_program_is_on_the_device(monkeypatch):
    """The tool's start-up and its report hold no device memory: evaluations go on meanwhile (on the
    H200, four profiles in flight whole held the places of a real-size run's evaluations for 20 s)."""
    actor, spec, state = _crowded_actor(monkeypatch, slots=6)
    actor.evaluate(spec, "first")
    actor.admissions.limit[spec] = 1  # memory binds: one at a time
    state["tool start-up"] = 0.6
    profiled = threading.Thread(target=actor.profile, args=(spec, "parent", 1.0))
    profiled.start()
    time.sleep(0.1)  # the tool is starting
    started = time.monotonic()
    assert actor.evaluate(spec, "child")[1].status is Status.ACCEPTED
    assert time.monotonic() - started < 0.4  # not behind the profile's start-up
    profiled.join()
    assert state["most"] == 1  # and never beside the profiled program


def test_a_lowered_limit_rises_after_evaluations_that_fit_and_stays_once_a_rise_ran_out(monkeypatch):
    """Out of memory may be passing (profiles, another problem's work): the limit comes back up, one at a
    time, but not again to where it ran out after coming back."""
    import evolve.dispatch.admission as admission_module

    monkeypatch.setattr(admission_module, "RISE_AFTER", 2)
    actor, spec, state = _crowded_actor(monkeypatch, slots=6)
    _all_at_once(actor, spec, [f"together a{i}" for i in range(4)])
    assert actor.admissions.limit[spec] == 3
    for i in range(2):
        assert actor.evaluate(spec, f"alone {i}")[1].status is Status.ACCEPTED
    assert actor.admissions.limit[spec] == 4  # two in a row that fit: one more at once
    crowd = _all_at_once(actor, spec, [f"together b{i}" for i in range(4)])  # four at once run out again
    assert len(crowd) == 4 and all(r.status is Status.ACCEPTED for r in crowd)
    assert actor.admissions.limit[spec] == 3
    for i in range(6):
        actor.evaluate(spec, f"after {i}")
    assert actor.admissions.limit[spec] == 3  # it rose to four and ran out there: three from now on


def test_the_judge_gives_its_cache_back_before_the_worker_runs_at_other_sizes(monkeypatch):
    """The worker cannot use what this process's caching allocator keeps, and blocks cached at one
    size fit no other: on an H100 a seed ran out at held-out shapes beside 62 GB the judge held
    after preparing. The judge gives its cache back once prepared and before each variant's load."""
    from fitness.boundary import protocol
    from fitness.settings import RELEASE_ABOVE
    from platforms.cpu import CpuPlatform

    events: list = []
    monkeypatch.setattr(CpuPlatform, "release_memory",
                        lambda self, keep_bytes=0: events.append(("release", keep_bytes)))
    with Evaluator(ELEMENTWISE, platform="cpu", shapes={"batch_size": 4, "dim": 100}) as evaluator:
        assert events and events[-1] == ("release", 0)  # once prepared, before the memory plan counts
        assert evaluator.prepared.held_out_groups  # held-out shapes to move to
        events.clear()
        real = evaluator.channel.step

        def step(message, *args, **kwargs):
            if isinstance(message, protocol.Load):
                events.append(("load", tuple(sorted(message.shapes.items()))))
            return real(message, *args, **kwargs)

        monkeypatch.setattr(evaluator.channel, "step", step)
        seed = (ELEMENTWISE.parent / "seed.py").read_text()
        assert evaluator.evaluate(seed).status is Status.ACCEPTED
    loads = [i for i, e in enumerate(events) if e[0] == "load"]
    assert len(loads) == 1 + len(evaluator.prepared.held_out_groups)  # each held-out variant, then the main
    assert all(events[i - 1] == ("release", RELEASE_ABOVE) for i in loads)


@pytest.mark.parametrize("large", [True, False])
def test_a_worker_between_candidates_holds_nothing_at_large_sizes(monkeypatch, large):
    """On an H100 at 23_Softmax's own sizes, six slots' workers each held 12.9 GB between
    candidates, outside the memory plan, and half the evaluations ran out of memory. After an
    evaluation of a problem whose main shapes hold a GB or more, the worker drops all it holds
    (a reset), and the next candidate is judged as before; small problems keep theirs."""
    import fitness.judge.evaluator as evaluator_module
    from fitness.boundary import protocol

    if large:
        monkeypatch.setattr(evaluator_module, "RELEASE_ABOVE", 0)  # these sizes count as large
    seed = (ELEMENTWISE.parent / "seed.py").read_text()
    with Evaluator(ELEMENTWISE, platform="cpu", shapes={"batch_size": 4, "dim": 100}, held_out=[]) as evaluator:
        sent: list = []
        real = evaluator.channel._request
        monkeypatch.setattr(evaluator.channel, "_request",
                            lambda worker, step, *a, **k: sent.append(type(step)) or real(worker, step, *a, **k))
        assert evaluator.evaluate(seed).status is Status.ACCEPTED
        worker = evaluator.channel.worker
        assert (protocol.Reset in sent) == large and worker is not None and worker.alive()
        assert (evaluator.channel.loaded is None) == large
        assert evaluator.evaluate(seed).status is Status.ACCEPTED  # the same worker, loaded afresh
        assert evaluator.channel.worker is worker


def test_an_actor_builds_no_more_evaluators_than_its_plan_lets_run(monkeypatch):
    """Six slots where the plan lets two run (23_Softmax at its own shapes on an H100): candidates
    waiting for room take no evaluator, so no more workers start or hold memory than two (each
    extra one started inside an admitted evaluation, 7 s, and held its context and its segment)."""
    built = []

    class _Planned(_Crowded):
        def __init__(self, state: dict) -> None:
            super().__init__(state)
            self.prepared = type("_TwoFit", (_Prepared,), {"slots_that_fit": lambda self, wanted: 2})()
            built.append(self)

    state = {"lock": threading.Lock(), "running": 0, "most": 0, "tried": set()}
    monkeypatch.setattr(EvaluatorSpec, "build", lambda self, lane=None, prepared=None: _Planned(state))
    actor, spec = EvaluatorActor(slots=6), EvaluatorSpec("r.py")
    results = _all_at_once(actor, spec, [f"candidate {i}" for i in range(12)])
    assert len(results) == 12 and all(r.status is Status.ACCEPTED for r in results)
    assert state["most"] == 2
    assert len(built) == 2
