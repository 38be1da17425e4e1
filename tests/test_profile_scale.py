"""Profiling at real sizes: the reduced shape, the smaller ncu metric set, the lane held only on the device, the cost.

KernelBench's 24_LogSoftmax and 36_RMSNorm_ are withheld from ../shared/kernelbench;
23_Softmax has 24_LogSoftmax's shapes (4096 x 393216 fp32) and 34_InstanceNorm
36_RMSNorm_'s (112 x 64 x 512 x 512 fp32), so they stand in for them.
"""

from __future__ import annotations

import csv
import io
import math
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from rich.console import Console

from evolve.dispatch.base import InProcessDispatcher
from evolve.report import build_report, print_report
from evolve.search.steering import profiling_cost, profiling_line
from fitness.judge.lane import TimingLane
from fitness.profiling.candidate import profile_candidate
from fitness.profiling.shape import (
    PROFILE_MAX_BYTES,
    larger_size,
    layout_at,
    profile_shape,
    size_text,
    smaller_size,
)
from platforms.profiling import NCU_METRICS, ProfileRecord, ncu_commands, parse_ncu_csv, thresholds_for
from platforms.profiling import profilers as profilers_module
from platforms.profiling.ncu import _RAW_NAMES, COMPUTE_PARTS
from platforms.profiling.record import COMPUTE_PCT, DRAM_PCT, DURATION_NS, GRID_BLOCKS, Launch, metric
from platforms.profiling.summary import build_record
from population_store import RunStore
from tests.conftest import PROBLEMS, problem_path
from tests.test_evolve import MATMUL_SEED, FakeEvaluator, drive, make_config

NCU_FIXTURES = Path(__file__).parent / "fixtures" / "profilers" / "ncu_h200"


# -- the reduced shape -------------------------------------------------------------------


@pytest.mark.parametrize("problem", [
    "23_Softmax",  # 24_LogSoftmax's shapes: 12 GiB of input and output
    "34_InstanceNorm",  # 36_RMSNorm_'s shapes: 14 GiB
    "38_L1Norm_",
    "3_Batched_matrix_multiplication",
    "84_conv_depthwise_2D_asymmetric_input_square_kernel",
    "67_conv_standard_1D",
])
def test_a_large_kernelbench_problem_is_profiled_below_the_limit_with_its_inner_dims(problem):
    path = problem_path(f"kernelbench/level1/{problem}")
    shape = profile_shape(path)
    own, reduced = layout_at(path, {}), layout_at(path, shape.shapes)
    assert shape.own_bytes == own.bytes > PROFILE_MAX_BYTES
    assert shape.reduced and shape.bytes == reduced.bytes <= PROFILE_MAX_BYTES
    assert list(shape.outer) == ["batch_size"] and list(shape.shapes) == ["batch_size"]
    size, own_size = shape.shapes["batch_size"], shape.outer["batch_size"]
    assert 2 <= size < own_size
    assert math.gcd(size, 16) == math.gcd(own_size, 16) or size < 16  # Triton's divisibility kept where it fits
    for kind in ("inputs", "outputs"):  # every dimension but the leading one kept, and every dtype
        for (a, size_a), (b, size_b) in zip(getattr(own, kind), getattr(reduced, kind), strict=True):
            assert a[1:] == b[1:] and size_a == size_b and len(a) == len(b)
    assert reduced.state == own.state  # parameters and buffers untouched
    assert shape.note.startswith(f"batch_size={size} of {own_size}: ") and not shape.why_not


def test_the_logsoftmax_shape_in_numbers():
    shape = profile_shape(problem_path("kernelbench/level1/23_Softmax"))
    assert shape.shapes == {"batch_size": 160}  # 160 rows of 393216 fp32, in and out: 480 MiB
    assert shape.bytes == 160 * 393216 * 4 * 2
    assert shape.note == "batch_size=160 of 4096: 480 MiB of tensors instead of 12 GiB"


def test_the_shape_overrides_of_the_run_are_the_base_and_stay():
    path = problem_path("kernelbench/level1/23_Softmax")
    shape = profile_shape(path, {"batch_size": 2048, "dim": 65536})  # a run's own --shape
    assert shape.shapes["dim"] == 65536 and shape.outer == {"batch_size": 2048}
    assert shape.bytes <= PROFILE_MAX_BYTES and shape.shapes["batch_size"] % 16 == 0


@pytest.mark.parametrize("problem, why", [
    ("6_Matmul_with_large_K_dimension_", "do not follow its outer knob M"),  # a GEMM must not become a GEMV
    ("40_LayerNorm", "would not halve them"),  # 544 MiB: little to save
])
def test_a_problem_without_a_safe_outer_knob_keeps_its_own_shapes(problem, why):
    shape = profile_shape(problem_path(f"kernelbench/level1/{problem}"))
    assert not shape.reduced and shape.shapes == {} and shape.note == ""
    assert shape.own_bytes > PROFILE_MAX_BYTES and shape.why_not.startswith("profiled at its own shapes (")
    assert why in shape.why_not


def test_a_knob_written_as_arithmetic_is_reduced_like_any():
    # M = 256 * 8: a knob (arithmetic on literals), so the matrix-vector product is profiled on fewer rows
    shape = profile_shape(problem_path("kernelbench/level1/4_Matrix_vector_multiplication_"))
    assert shape.reduced and shape.outer == {"M": 2048} and set(shape.shapes) == {"M"}
    assert shape.shapes["M"] < 2048 and shape.bytes <= PROFILE_MAX_BYTES < shape.own_bytes


def test_a_small_problem_is_profiled_at_its_own_shapes():
    shape = profile_shape(PROBLEMS / "softmax" / "reference.py", {"batch_size": 4, "dim": 100})
    assert shape.shapes == {"batch_size": 4, "dim": 100} and not shape.reduced and not shape.why_not


def test_sizes_keep_their_divisibility_and_never_reach_one():
    assert smaller_size(4096, 170) == 160 and smaller_size(112, 4) == 4 and smaller_size(16, 1) == 2
    assert smaller_size(2, 1) is None and smaller_size(7, 3) == 3 and smaller_size(4096, 10**6) == 4080
    assert larger_size(4096, 1100) == 1104 and larger_size(112, 20) == 32 and larger_size(112, 500) == 112
    assert size_text(12 << 30) == "12 GiB" and size_text(1022 << 20) == "1022 MiB" and size_text(None) == "unknown"


# -- the ncu command line and its recorded output ---------------------------------------


def _raw_header(name: str = "h200_ncu_raw_metrics.csv") -> list[str]:
    text = (NCU_FIXTURES / name).read_text()
    lines = [line for line in text.splitlines() if line.startswith('"') and not line.startswith('"==')]
    return next(csv.reader(lines[:1]))


def test_ncu_is_asked_only_for_what_the_classifier_and_the_prompt_read():
    profile, _ = ncu_commands("/opt/ncu", "/tmp/r", ["python", "-m", "t"], "^(k)")
    asked = profile[profile.index("--metrics") + 1].split(",")
    assert asked == list(NCU_METRICS) and len(asked) == 7
    read = dict(_RAW_NAMES)
    assert all(name in read or name in COMPUTE_PARTS for name in asked)  # nothing asked that kevo does not read
    assert {DURATION_NS, DRAM_PCT} <= {read[name] for name in asked if name in read}  # the class's inputs
    assert set(COMPUTE_PARTS) <= set(asked)  # and its compute side
    # ncu 2025.3.1 on an H200: a metric list, and the SpeedOfLight section's raw names
    header = _raw_header() + _raw_header("h200_ncu_raw_sections_sol_mem.csv")
    assert [name for name in asked if name not in header] == []  # every one is a metric real ncu writes
    for dropped in ("gpu__compute_memory_throughput", "lts__t_sector_hit_rate", "dram__bytes_read",
                    "launch__occupancy_limit", "sm__throughput"):  # sm__throughput: 9 replay passes alone
        assert not any(name.startswith(dropped) for name in asked)


def _without(text: str, prefix: str) -> str:
    """ncu's raw CSV with every column whose name starts with ``prefix`` taken out."""
    lines = text.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith('"ID"'))
    rows = list(csv.reader(lines[at:]))
    keep = [i for i, name in enumerate(rows[0]) if not name.startswith(prefix)]
    out = io.StringIO()
    csv.writer(out, quoting=csv.QUOTE_ALL, lineterminator="\n").writerows([[r[i] for i in keep if i < len(r)]
                                                                         for r in rows])
    return "\n".join(lines[:at]) + "\n" + out.getvalue()


def test_the_compute_side_without_sm_throughput_classifies_the_recorded_kernels_as_it_did():
    """Real ncu output with the SpeedOfLight breakdown (six kernels: fills, adds, a random draw, a bf16
    GEMM, a reduction): the busier of issue and the tensor pipe, which kevo asks for instead of
    sm__throughput, gives every kernel the class sm__throughput gave, and at most its value."""
    text = (NCU_FIXTURES / "h200_ncu_raw_sections_sol_mem.csv").read_text()
    full, parts = parse_ncu_csv(text), parse_ncu_csv(_without(text, "sm__throughput"))
    assert len(full.launches) == len(parts.launches) == 6
    for with_it, stand_in in zip(full.launches, parts.launches):
        sm, part = with_it.metrics[COMPUTE_PCT].value, stand_in.metrics[COMPUTE_PCT].value
        assert part <= sm + 1e-9 and sm - part < 6, (with_it.kernel, sm, part)
    assert max(launch.metrics[COMPUTE_PCT].value for launch in parts.launches) == pytest.approx(93.1)  # the GEMM
    records = [build_record("ncu", "2025.3.1", "NVIDIA H200", report.launches, thresholds_for("cuda"))
               for report in (full, parts)]
    assert [(k.name, k.bottleneck) for k in records[1].kernels] == [(k.name, k.bottleneck) for k in records[0].kernels]
    assert records[1].bottleneck == records[0].bottleneck


def test_the_smaller_metric_set_classifies_the_recorded_kernels_as_the_full_one_did():
    parsed = parse_ncu_csv((NCU_FIXTURES / "h200_ncu_raw_metrics.csv").read_text())
    # compute_pct: NCU_METRICS give it through COMPUTE_PARTS, which this recording lacks (the test above:
    # the same classes as sm__throughput on the recording that has both)
    kept = {kevo for raw, kevo in _RAW_NAMES if raw in NCU_METRICS} | {GRID_BLOCKS, "block_threads", COMPUTE_PCT}
    full = build_record("ncu", "2025.3.1", "NVIDIA H200", parsed.launches, thresholds_for("cuda"))
    smaller = [Launch(launch.kernel, {k: m for k, m in launch.metrics.items() if k in kept})
               for launch in parsed.launches]
    small = build_record("ncu", "2025.3.1", "NVIDIA H200", smaller, thresholds_for("cuda"))
    assert [(k.name, k.bottleneck) for k in small.kernels] == [(k.name, k.bottleneck) for k in full.kernels]
    assert small.bottleneck == full.bottleneck


def test_the_replays_cost_is_read_from_recorded_ncu_output():
    parsed = parse_ncu_csv((NCU_FIXTURES / "h200_ncu_raw_metrics.csv").read_text())
    assert parsed.replay_passes == 10  # the H200 fixture: every launch replayed for 10 passes
    backed_up = [2_768_247_810, 5_452_606_930, 6_796_965_690, 9_147_098_010, 11_831_462_300, 11_852_475_170]
    assert parsed.replay_bytes == sum(backed_up)  # grows with what the program has allocated
    details = parse_ncu_csv((NCU_FIXTURES / "h200_ncu_details_sol_occ_launch.csv").read_text())
    assert details.replay_passes is None and details.replay_bytes is None  # not on the details page


# -- profiling a candidate: the lane, the shape, the grid, the cost ----------------------


class Recording(profilers_module.Profiler):
    """Runs the target program as a tool would, and returns the roofline."""

    tool = "recording"

    def _profile(self, command, env, kernel_filter, timeout_s, workload):
        import subprocess

        self.command = command
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout_s)
        assert done.returncode == 0, done.stderr
        record = build_record("recording", "1", "cpu", [Launch("gated_mul_kernel", {
            DURATION_NS: metric(DURATION_NS, 5e4), DRAM_PCT: metric(DRAM_PCT, 80), COMPUTE_PCT: metric(COMPUTE_PCT, 5),
        })], self.thresholds)
        record.cost["tool_runs"] = 1
        return record


def test_the_profiled_program_holds_the_lane_only_while_it_uses_the_device(tmp_path):
    lane, profiler, seen = TimingLane(), Recording("cpu"), []

    class Watched:  # the lane's exclusive(), noting what the gated program has done when it is taken and left
        def __enter__(self):
            self.gate = Path(profiler.command[profiler.command.index("--gate") + 1])
            seen.append(("ask", sorted(p.name.split(".")[0] for p in self.gate.iterdir())))
            self.held = lane.exclusive()
            self.held.__enter__()
            seen.append(("enter", sorted(p.name.split(".")[0] for p in self.gate.iterdir())))

        def __exit__(self, *exc):
            seen.append(("exit", sorted(p.name.split(".")[0] for p in self.gate.iterdir())))
            self.held.__exit__(*exc)

    source = (PROBLEMS / "elementwise" / "seed.py").read_text()
    results = []
    timing = lane.exclusive()  # a candidate's timing holds the lane while the profile starts
    timing.__enter__()
    thread = threading.Thread(target=lambda: results.append(profile_candidate(
        profiler, PROBLEMS / "elementwise" / "reference.py", {"batch_size": 4, "dim": 100}, source, "cpu", 0,
        120.0, runtime_ms=1.0, exclusive=Watched)))
    thread.start()
    deadline = time.monotonic() + 60
    while not seen and time.monotonic() < deadline:
        time.sleep(0.02)  # the program starts (Python, torch, the candidate) with no lane held
    time.sleep(0.3)
    assert seen == [("ask", [])] and thread.is_alive()  # ready, and waiting for the timing to end
    timing.__exit__(None, None, None)
    thread.join(60)
    (record,) = results
    assert seen[1:] == [("enter", []), ("exit", ["done", "go"])]  # let on with the lane held; done inside it
    assert lane.stats()["timings"] == 2  # the timing and the profile
    assert "--gate" in profiler.command and profiler.command[profiler.command.index("--runs") + 1] == "1"
    assert record.shapes == {"batch_size": 4, "dim": 100} and record.scale == ""
    cost = record.cost
    assert 0 < cost["device_s"] < cost["seconds"] and cost["tool_runs"] == 1
    (turn,) = cost["device_turns"]  # asked for the device, let on after the timing, done
    assert turn[0] + 0.3 <= turn[1] <= turn[2] and turn[2] - turn[1] <= cost["device_s"] + 0.01


def _gates(profiler) -> list[str]:
    command = getattr(profiler, "command", None)
    return [command[command.index("--gate") + 1]] if command else []


class GridOf(profilers_module.Profiler):
    """No tool: a record whose kernel grid is ``grid(batch_size)`` at the shape the command asks for."""

    tool = "grid"

    def __init__(self, grid) -> None:
        super().__init__("cuda")
        self.grid, self.sizes = grid, []

    def _profile(self, command, env, kernel_filter, timeout_s, workload):
        size = int(next(a for a in command if a.startswith("batch_size=")).partition("=")[2])
        self.sizes.append(size)
        record = build_record("grid", "1", "NVIDIA H200", [Launch("softmax_kernel", {
            DURATION_NS: metric(DURATION_NS, 3e5), DRAM_PCT: metric(DRAM_PCT, 85), COMPUTE_PCT: metric(COMPUTE_PCT, 9),
            GRID_BLOCKS: metric(GRID_BLOCKS, self.grid(size))})], self.thresholds)
        record.cost["tool_runs"] = 2
        return record


def _profile_large_softmax(profiler, shapes_seen=None, dim=4096):
    source = (PROBLEMS / "softmax" / "seed.py").read_text()
    return profile_candidate(profiler, PROBLEMS / "softmax" / "reference.py", {"batch_size": 4096, "dim": dim},
                             source, "cpu", 0, 120.0, runtime_ms=0.2, device_name="NVIDIA H200", max_bytes=8 << 20,
                             shapes_seen=shapes_seen)


def test_a_grid_too_small_for_the_device_is_profiled_again_larger():
    profiler = GridOf(lambda rows: rows)  # one program per row
    record = _profile_large_softmax(profiler)
    assert profiler.sizes == [256, 1056]  # 256 rows of 16 KiB in and out: 8 MiB; then 8 blocks per SM of 132
    assert record.shapes == {"batch_size": 1056, "dim": 4096} and record.measured
    assert record.scale.startswith("batch_size=1056 of 4096: ")
    assert any("profiled again at batch_size=1056" in note for note in record.notes)
    assert record.cost["tool_runs"] == 4 and "Profiled at a reduced shape (batch_size=1056 of 4096" in record.summary
    assert any("datasheet's DRAM bandwidth" in note for note in record.notes)  # the own shape's roofline beside


def test_the_next_parent_starts_at_the_shape_the_last_had_to_grow_to():
    """On the H200, 23_Softmax's parents each took two runs of ncu (reduced, then grown): the second
    parent on starts at the grown shape, and is still checked."""
    seen: dict = {}
    profiler = GridOf(lambda rows: rows)
    first = _profile_large_softmax(profiler, seen)
    second = _profile_large_softmax(profiler, seen)
    assert profiler.sizes == [256, 1056, 1056]  # one run for the second parent
    assert first.shapes == second.shapes == {"batch_size": 1056, "dim": 4096}
    assert second.cost["tool_runs"] == 2 and any("from the start" in note for note in second.notes)
    other = _profile_large_softmax(profiler, seen, dim=2048)  # other shapes: their own start
    assert profiler.sizes[3] != 1056 and other.measured


def test_a_parent_whose_grid_is_smaller_still_grows_from_where_the_last_ended():
    seen: dict = {}
    two_a_row = GridOf(lambda rows: 2 * rows)
    _profile_large_softmax(two_a_row, seen)
    assert two_a_row.sizes == [256, 528]  # 512 blocks: grown to 1056 blocks
    one_a_row = GridOf(lambda rows: rows)
    record = _profile_large_softmax(one_a_row, seen)
    assert one_a_row.sizes == [528, 1056] and record.shapes["batch_size"] == 1056
    assert _profile_large_softmax(GridOf(lambda rows: rows), seen).shapes["batch_size"] == 1056


def test_a_grid_that_does_not_follow_the_rows_is_not_profiled_again():
    profiler = GridOf(lambda rows: 132)  # persistent: one program per SM
    record = _profile_large_softmax(profiler)
    assert profiler.sizes == [256] and record.shapes == {"batch_size": 256, "dim": 4096}
    assert record.cost["tool_runs"] == 2


def test_the_roofline_costs_no_tool_and_no_lane():
    lane = TimingLane()
    record = profile_candidate(profilers_module.profiler_for("cpu"), PROBLEMS / "elementwise" / "reference.py",
                               {"batch_size": 4, "dim": 100}, "not even python", "cpu", 0, 5.0, runtime_ms=1.0,
                               exclusive=lane.exclusive)
    assert record.tool == "roofline" and record.cost == {} and lane.stats()["timings"] == 0


def test_in_process_a_hardware_profile_runs_beside_the_evaluations():
    release, threads = threading.Event(), []

    class Profiling(FakeEvaluator):
        profiler = SimpleNamespace(disabled_reason=None)  # a tool runs: in the background

        def profile(self, source, runtime_ms):
            threads.append(threading.current_thread())
            if not release.wait(30):
                raise TimeoutError("never released")
            if source == "bad":
                raise ValueError("FLOPS in the problem is not a number")
            return {"tool": "ncu", "source": source}

    dispatcher = InProcessDispatcher(Profiling())
    handle = dispatcher.profile_later("parent", 1.0)
    assert dispatcher.profile_result(handle) == (False, None)  # the loop goes on without it
    dispatcher.submit(1, MATMUL_SEED)
    key, result = dispatcher.next_result()  # an evaluation while the profile runs
    assert key == 1 and result.status.value == "accepted"
    bad = dispatcher.profile_later("bad", 1.0)
    release.set()
    dispatcher.close()  # waits for the profiles in flight
    assert dispatcher.profile_result(handle) == (True, {"tool": "ncu", "source": "parent"})
    with pytest.raises(ValueError, match="FLOPS"):  # raised where the loop asks for it
        dispatcher.profile_result(bad)
    assert threading.main_thread() not in threads
    Profiling.profiler = SimpleNamespace(disabled_reason="no ncu")  # the roofline: at once, in the loop's thread
    at_once = InProcessDispatcher(Profiling())
    assert at_once.profile_result(at_once.profile_later("p", 1.0)) == (True, {"tool": "ncu", "source": "p"})
    assert threads[-1] is threading.main_thread()


# -- what profiling cost, in the store and the report -----------------------------------


class CostlyProfiles(FakeEvaluator):
    """The fake evaluator, plus ncu-like profiles with a cost and a reduced shape."""

    def profile(self, source, runtime_ms):
        record = ProfileRecord("ncu", "2025.3.1", "NVIDIA H200", "memory_bound", "DRAM 85%", {},
                               shapes={"M": 160}, scale="M=160 of 4096: 480 MiB of tensors instead of 12 GiB",
                               cost={"seconds": 2.5, "device_s": 0.75, "tool_runs": 2, "replay_passes": 10})
        return record.to_dict()


def test_the_report_says_what_profiling_cost(tmp_path):
    path = tmp_path / "run.sqlite"
    drive(path, make_config(max_evaluations=14), CostlyProfiles())
    with RunStore.open(path, readonly=True) as store:
        profiles = store.profiles()
        report = build_report(store, tmp_path)
    n = len(profiles)
    assert n >= 1 and all(record["cost"]["seconds"] == 2.5 for record in profiles.values())
    cost = report["profiling"]
    assert cost == profiling_cost(profiles) and cost["profiles"] == n and cost["by_tool"] == {"ncu": n}
    assert cost["seconds"] == pytest.approx(2.5 * n) and cost["device_s"] == pytest.approx(0.75 * n)
    assert cost["shapes"] == ["M=160 of 4096"] and cost["tool_runs"] == 2 * n
    out = io.StringIO()
    print_report(report, Console(file=out, width=200))
    lines = [line for line in out.getvalue().splitlines() if line.startswith("profiling")]
    assert lines == [f"profiling  {n} parents (ncu {n}): {2.5 * n:.1f} s, the device held {0.75 * n:.1f} s; "
                     "at M=160 of 4096"]


def test_records_from_before_the_cost_was_kept_say_so():
    old = {"a": {"tool": "ncu", "bottleneck": "memory_bound"}, "b": {"tool": "roofline", "bottleneck": "unknown"}}
    cost = profiling_cost(old)
    assert cost["unrecorded"] == 1 and cost["seconds"] == 0
    assert profiling_line(cost) == ("profiling  2 parents (ncu 1, roofline 1): 0.0 s, the device held 0.0 s "
                                    "(1 taken without a recorded cost)")
    assert profiling_line(profiling_cost({})) is None
    assert ProfileRecord.from_dict({**ProfileRecord("ncu", "1", "d", "unknown", "", {}).to_dict(),
                                    "cost": {"seconds": 1}}).cost == {"seconds": 1.0}


def test_a_profile_on_the_device_waits_for_another_processs_timed_window(tmp_path, monkeypatch):
    """The profiled program replays the candidate's kernels on the device: another kevo process's timed
    window must not run meanwhile, so the profile takes the device's lock between processes too
    (platforms.device_lock), after the lane, as a timed window does."""
    import platforms.device_lock as device_lock_module
    from fitness import Evaluator
    from platforms.cpu import CpuPlatform
    from platforms.device_lock import LOCK_DIR_ENV, DeviceLock
    from tests.test_device_lock import hold_elsewhere

    monkeypatch.setenv(LOCK_DIR_ENV, str(tmp_path / "locks"))
    monkeypatch.setattr(CpuPlatform, "device_lock", lambda self: DeviceLock("gpu-test"))
    taken: list[float] = []
    real = device_lock_module.window

    class Noted:  # the device's lock, noting when it was taken
        def __init__(self, platform):
            self.turn = real(platform)

        def __enter__(self):
            self.turn.__enter__()
            taken.append(time.monotonic())

        def __exit__(self, *exc):
            self.turn.__exit__(*exc)

    monkeypatch.setattr(device_lock_module, "window", Noted)
    source = (PROBLEMS / "elementwise" / "seed.py").read_text()
    with Evaluator(PROBLEMS / "elementwise" / "reference.py", platform="cpu", shapes={"batch_size": 4, "dim": 100},
                   lane=TimingLane()) as evaluator:
        evaluator.profiler = Recording("cpu")
        taken.clear()  # the device's peaks, where this machine has none cached yet
        child = hold_elsewhere(3.0)  # returns once the other process holds the lock, for 3 s
        held_at = time.monotonic()
        record = evaluator.profile(source, runtime_ms=1.0)
        child.wait(timeout=30)
    assert record["tool"] == "recording"
    assert len(taken) == 1 and taken[0] - held_at > 2.5  # on the device only once the other window was over


@pytest.mark.parametrize("program, side", [("softmax", "sm__issue_active"), ("mm", "sm__issue_active"),
                                           ("mm_bf16", "sm__pipe_tensor_cycles_active")])
def test_on_an_h100_issue_and_the_tensor_pipe_give_what_sm_throughput_gave(program, side):
    """Real ncu output on an H100 (tests/fixtures/profilers/ncu_h100): a softmax, an fp32 matmul on the
    FMA units, a bf16 one on the tensor cores. Without sm__throughput (which cost 9 of the 10 passes),
    compute_pct is its value, taken from the side named; the class is the same."""
    text = (NCU_FIXTURES.parent / "ncu_h100" / f"h100_ncu_raw_{program}_compare.csv").read_text()
    full, parts = parse_ncu_csv(text), parse_ncu_csv(_without(text, "sm__throughput"))
    assert full.replay_passes == 10 and len(full.launches) == len(parts.launches) == 1
    sm = full.launches[0].metrics[COMPUTE_PCT].value
    assert parts.launches[0].metrics[COMPUTE_PCT].value == pytest.approx(sm, abs=0.01)
    header = _raw_header(f"../ncu_h100/h100_ncu_raw_{program}_compare.csv")
    row = next(csv.reader(text.splitlines()[2:3]))  # the launch, under the units row
    assert float(row[header.index(f"{side}.avg.pct_of_peak_sustained_elapsed")]) == pytest.approx(sm, abs=0.01)
    records = [build_record("ncu", "h100", "NVIDIA H100 80GB HBM3", report.launches, thresholds_for("cuda"))
               for report in (full, parts)]
    assert records[0].bottleneck == records[1].bottleneck
