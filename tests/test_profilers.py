"""Profilers on real tool output (tests/fixtures/profilers, see its README), offline.

Every fixture file parses; the values read are the ones in the files; the
classes come out right, the tensor-core GEMM trap included; and the
plumbing around the tools (timeouts, failures, fallbacks, skipped counter
passes) is exercised with fake ``ncu`` / ``rocprofv3`` / ``rocprof``
executables that replay the fixtures.
"""

from __future__ import annotations

import json
import math
import os
import stat
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.conftest import PROBLEMS, ROOT

from platforms.profiling import (
    AT_ROOFLINE,
    COMPUTE_BOUND,
    LATENCY_BOUND,
    LAUNCH_BOUND,
    MEMORY_BOUND,
    THRESHOLDS,
    UNKNOWN,
    NcuProfiler,
    ProfileParseError,
    ProfileRecord,
    ProfilerConfigError,
    RocprofProfiler,
    RooflineProfiler,
    Workload,
    amd_launch,
    build_record,
    classify,
    counter_passes,
    kernel_base_name,
    merge_passes,
    ncu_commands,
    parse_dispatches,
    parse_ncu_csv,
    parse_ncu_version,
    parse_stats,
    profiler_for,
    roofline_record,
)
from platforms.profiling import profilers as profilers_module
from platforms.profiling.record import COMPUTE_PCT, DRAM_BYTES, DRAM_PCT, DURATION_NS, TENSOR_PCT
from platforms.profiling.rocprof import counter_command, trace_command
from platforms.specs import lookup

FIXTURES = ROOT / "tests" / "fixtures" / "profilers"
NCU = FIXTURES / "ncu_h200"
V3 = FIXTURES / "rocprofv3"
V1 = FIXTURES / "rocprof_v1"
CUDA, ROCM = THRESHOLDS["cuda"], THRESHOLDS["rocm"]

# file -> launches (ncu) / dispatches (rocprof tables) / rows (stats tables)
NCU_FILES = {
    "h200_ncu_default_page_time.csv": 6, "h200_ncu_details_setfull_gemm.csv": 1,
    "h200_ncu_details_sol_occ_launch.csv": 6, "h200_ncu_raw_metrics.csv": 6,
    "h200_ncu_raw_print_units_base.csv": 4, "h200_ncu_raw_sections_sol_mem.csv": 6,
    "h200_ncu_raw_summary_per_kernel.csv": 4,
}
DISPATCH_FILES = {
    "rocprofv3/rocprofv3_docs_2024-10_counter_collection.csv": 7,
    "rocprofv3/rocprofv3_docs_2024-10_kernel_names.csv": 4,
    "rocprofv3/rocprofv3_docs_2024-10_kernel_trace.csv": 7,
    "rocprofv3/rocprofv3_docs_counter_collection.csv": 4,
    "rocprofv3/rocprofv3_docs_kernel_trace.csv": 9,
    "rocprofv3/rocprofv3_docs_kernel_trace_truncated.csv": 4,
    "rocprof_v1/mi210_blog_HSA_trace_results.csv": 1,
    "rocprof_v1/mi250x_laplacian_data_movement.csv": 1004,
    "rocprof_v1/mi250x_laplacian_results.csv": 1004,
}
STATS_FILES = {
    "rocprofv3/rocprofv3_docs_hip_api_stats.csv": 17, "rocprofv3/rocprofv3_docs_hip_domain_stats.csv": 1,
    "rocprofv3/rocprofv3_kernel_stats_EXCERPT_mpi_rank.csv": 9,
    "rocprofv3/rocprofv3_kernel_stats_EXCERPT_single_process.csv": 9,
    "rocprof_v1/mi210_blog_SYS_trace_results.copy_stats.csv": 2,
    "rocprof_v1/mi210_blog_SYS_trace_results.hip_stats.csv": 14,
    "rocprof_v1/mi210_blog_SYS_trace_results.hsa_stats.csv": 37,
    "rocprof_v1/mi210_blog_SYS_trace_results.stats.csv": 1,
    "rocprof_v1/mi250x_laplacian_results.stats.csv": 4,
}
# ncu on an H100 asked for the compute side's metrics alone, no time (tests/test_profile_scale.py reads them)
NCU_H100_FILES = {f"ncu_h100/h100_ncu_raw_{p}_compare.csv" for p in ("softmax", "mm", "mm_bf16")}
# Not profiler tables: the environment, rocminfo, and rocprof input files (checked separately).
OTHER_FILES = {"README.md", "ncu_h200/h200_env.txt", "rocprof_v1/mi250x_results.sysinfo.txt",
               "rocprof_v1/mi210_blog_input.txt", "rocprof_v1/mi250x_laplacian_data_movement.txt"}


def text(path: Path) -> str:
    return path.read_text(encoding="utf-8", errors="replace")


def raw_record(name: str = "h200_ncu_raw_metrics.csv", forwards: int = 1) -> ProfileRecord:
    parsed = parse_ncu_csv(text(NCU / name))
    return build_record("ncu", "2025.3.1.0", parsed.device_name or "NVIDIA H200", parsed.launches, CUDA, forwards)


# -- every file parses ---------------------------------------------------------


def test_the_lists_cover_every_fixture_file():
    files = {str(p.relative_to(FIXTURES)) for p in FIXTURES.rglob("*") if p.is_file()
             and not p.name.endswith(".source.txt")}
    listed = ({f"ncu_h200/{n}" for n in NCU_FILES} | NCU_H100_FILES | set(DISPATCH_FILES) | set(STATS_FILES)
              | OTHER_FILES)
    assert files == listed
    for path in files - {"README.md"}:
        assert (FIXTURES / (path + ".source.txt")).is_file(), f"{path} has no .source.txt sidecar"


@pytest.mark.parametrize("name,launches", sorted(NCU_FILES.items()))
def test_every_ncu_file_parses(name, launches):
    parsed = parse_ncu_csv(text(NCU / name))
    assert len(parsed.launches) == launches
    assert all(l.metrics[DURATION_NS].value > 0 for l in parsed.launches)


@pytest.mark.parametrize("name,count", sorted(DISPATCH_FILES.items()))
def test_every_rocprof_dispatch_table_parses(name, count):
    dispatches = parse_dispatches(text(FIXTURES / name))
    assert len(dispatches) == count
    assert all(d.kernel for d in dispatches)


@pytest.mark.parametrize("name,count", sorted(STATS_FILES.items()))
def test_every_stats_table_parses(name, count):
    stats = parse_stats(text(FIXTURES / name))
    assert len(stats) == count
    assert all(s.calls >= 1 and s.total_ns > 0 for s in stats)


def test_rocprof_input_files_match_the_format_kevo_writes():
    from platforms.profiling.rocprof import input_file_text

    assert text(V1 / "mi210_blog_input.txt").strip() == input_file_text(
        ("SQ_WAVES", "GRBM_COUNT", "GRBM_GUI_ACTIVE", "SQ_INSTS_VALU", "FETCH_SIZE")).strip()
    assert text(V1 / "mi250x_laplacian_data_movement.txt").strip() == input_file_text(
        ("FETCH_SIZE", "WRITE_SIZE", "TCP_TOTAL_CACHE_ACCESSES_sum", "TCP_TCC_READ_REQ_sum",
         "TCP_TCC_WRITE_REQ_sum")).strip()


# -- ncu: the values in the files ------------------------------------------------


def test_raw_page_values_units_row_and_thousands_separators():
    parsed = parse_ncu_csv(text(NCU / "h200_ncu_raw_metrics.csv"))
    assert parsed.device_name == "NVIDIA H200"
    gemm = parsed.launches[3]
    assert gemm.kernel == "nvjet_sm90_tst_320x128_64x3_1x2_h_bz_coopB_NNT"
    assert gemm.metrics[DURATION_NS].value == 1_648_864
    assert gemm.metrics[DURATION_NS].unit == "ns"
    assert gemm.metrics[DRAM_PCT].value == 16.22
    assert gemm.metrics[COMPUTE_PCT].value == 93.30
    assert gemm.metrics["memory_units_pct"].value == 94.46
    assert gemm.metrics[TENSOR_PCT].value == 97.06
    assert gemm.metrics["grid_blocks"].value == 2 * 66
    add = parsed.launches[1]
    assert "CUDAFunctor_add" in add.kernel
    assert add.metrics[DURATION_NS].value == 125_056
    assert add.metrics[DRAM_PCT].value == 85.17
    assert add.metrics[DRAM_BYTES].value == 268_449_280 + 243_846_144


def test_details_page_values_with_rule_rows_and_short_metric_rows():
    launches = parse_ncu_csv(text(NCU / "h200_ncu_details_sol_occ_launch.csv")).launches
    fill = launches[0]
    assert "FillFunctor" in fill.kernel
    assert fill.metrics[DURATION_NS].value == 60_096
    assert fill.metrics[DRAM_PCT].value == 83.54
    assert fill.metrics["occupancy_pct"].value == 86.98
    assert launches[3].metrics["theoretical_occupancy_pct"].value == 18.75
    # the GEMM's "Memory Throughput" is both a % (SpeedOfLight) and a byte/s figure: the % is kept
    gemm = parse_ncu_csv(text(NCU / "h200_ncu_details_setfull_gemm.csv")).launches[0]
    assert gemm.metrics["memory_units_pct"].value == 94.35


def test_default_page_metric_rows_and_per_kernel_summary():
    times = [l.metrics[DURATION_NS].value for l in parse_ncu_csv(text(NCU / "h200_ncu_default_page_time.csv")).launches]
    assert times == [60_224, 124_960, 206_752, 1_643_680, 213_856, 68_320]
    summary = parse_ncu_csv(text(NCU / "h200_ncu_raw_summary_per_kernel.csv"))
    assert summary.device_name == "NVIDIA H200"
    assert summary.launches[0].kernel.startswith("nvjet_sm90")
    assert summary.launches[0].metrics[DURATION_NS].value == 1_689_856  # "1689856.000000", ns
    assert summary.launches[0].metrics[DRAM_PCT].value == 17.442538


def test_noise_inside_the_csv_stream_is_ignored():
    lines = text(NCU / "h200_ncu_raw_metrics.csv").splitlines()
    noisy = lines[:5] + ['"the candidate printed this"', "==PROF== Profiling \"kernel\": 0%...100%",
                         '"==WARNING== quoted noise"', "plain program output"] + lines[5:]
    assert [l.metrics for l in parse_ncu_csv("\n".join(noisy)).launches] == \
        [l.metrics for l in parse_ncu_csv("\n".join(lines)).launches]
    with pytest.raises(ProfileParseError, match="Kernel Name"):
        parse_ncu_csv("==PROF== Connected to process 1\n-450240.8125\n")


def test_ncu_version_from_its_banner():
    assert parse_ncu_version(text(NCU / "h200_env.txt")) == "2025.3.1.0"


# -- classes ------------------------------------------------------------------------


def test_h200_kernels_classify_as_their_work_implies():
    record = raw_record()
    classes = [(k.name.split("<")[0][:40], k.bottleneck) for k in
               sorted(record.kernels, key=lambda k: -k.total_ns)]
    by_kind = {
        "FillFunctor": MEMORY_BOUND, "CUDAFunctor_add": MEMORY_BOUND, "reduce_kernel": MEMORY_BOUND,
        "distribution_elementwise": COMPUTE_BOUND,  # Philox RNG: SM 76%, DRAM 11%
        "direct_copy_kernel": COMPUTE_BOUND,  # an unvectorised bf16->fp32 copy is issue-bound: SM 64%, DRAM 37%
        "nvjet": COMPUTE_BOUND,
    }
    for fragment, expected in by_kind.items():
        kernel = next(k for k in record.kernels if fragment in k.name)
        assert kernel.bottleneck == expected, (fragment, kernel.why, classes)


def test_the_tensor_core_gemm_trap():
    gemm = raw_record().kernel("nvjet_sm90")
    memory_units = gemm.metrics["memory_units_pct"].value
    compute = gemm.metrics[COMPUTE_PCT].value
    # "memory throughput >= compute throughput" would call this memory-bound...
    assert memory_units > compute
    # ...but DRAM is nearly idle and the tensor pipe is full
    assert gemm.metrics[DRAM_PCT].value < 20 and gemm.metrics[TENSOR_PCT].value > 95
    assert gemm.bottleneck == COMPUTE_BOUND, gemm.why
    # and its low occupancy (15%, by design for this GEMM) does not make it latency-bound
    assert gemm.metrics["occupancy_pct"].value < 20


def test_every_page_layout_gives_the_same_classes():
    expected = [k.bottleneck for k in _in_launch_order(raw_record())]
    for name in ("h200_ncu_details_sol_occ_launch.csv", "h200_ncu_raw_sections_sol_mem.csv"):
        assert [k.bottleneck for k in _in_launch_order(raw_record(name))] == expected, name
    assert raw_record("h200_ncu_details_setfull_gemm.csv").bottleneck == COMPUTE_BOUND


def _in_launch_order(record: ProfileRecord):
    return sorted(record.kernels, key=lambda k: (k.metrics["grid_blocks"].value, k.metrics["block_threads"].value,
                                                k.name))


def test_record_class_and_time_per_forward():
    record = raw_record(forwards=1)
    assert record.bottleneck == COMPUTE_BOUND  # the GEMM holds most of the GPU time
    assert record.kernels[0].name.startswith("nvjet")
    total = 59_584 + 125_056 + 206_848 + 1_648_864 + 213_664 + 70_720
    assert record.value(DURATION_NS) == total
    assert raw_record(forwards=2).value(DURATION_NS) == total / 2
    assert "compute-bound" in record.summary and "nvjet_sm90" in record.summary


def test_a_page_without_throughputs_is_unknown_not_guessed():
    parsed = parse_ncu_csv(text(NCU / "h200_ncu_default_page_time.csv"))
    record = build_record("ncu", "2025.3.1.0", "NVIDIA H200", parsed.launches, CUDA)
    assert record.bottleneck == UNKNOWN
    assert "neither" in record.why


def test_thresholds_differ_per_platform():
    busy_dram = {DURATION_NS: 1e6, DRAM_PCT: 88.0, COMPUTE_PCT: 10.0}
    assert classify(busy_dram, CUDA)[0] == MEMORY_BOUND
    assert classify(busy_dram, ROCM)[0] == AT_ROOFLINE
    assert classify({DURATION_NS: 1e6, DRAM_PCT: 97.0, COMPUTE_PCT: 10.0}, CUDA)[0] == AT_ROOFLINE
    idle = {DURATION_NS: 1e6, DRAM_PCT: 20.0, COMPUTE_PCT: 30.0, "grid_blocks": 40, "occupancy_pct": 12.0}
    cls, why = classify(idle, CUDA, units=132)
    assert cls == LATENCY_BOUND and "92 of 132" in why and "occupancy 12%" in why
    assert classify({DURATION_NS: 4_000, DRAM_PCT: 20.0}, CUDA)[0] == LAUNCH_BOUND
    assert classify({DURATION_NS: 12_000, DRAM_PCT: 20.0}, CUDA)[0] == UNKNOWN  # compute unmeasured
    assert classify({DURATION_NS: 12_000, DRAM_PCT: 20.0}, ROCM)[0] == LAUNCH_BOUND
    assert classify({DURATION_NS: 1e6, COMPUTE_PCT: 30.0}, ROCM)[0] == UNKNOWN  # DRAM pass lost: no guess
    assert classify({DURATION_NS: 1e6, COMPUTE_PCT: 70.0}, ROCM)[0] == COMPUTE_BOUND


# -- AMD ----------------------------------------------------------------------------


def test_rocprof_v1_laplacian_on_mi250x_is_memory_bound():
    timing = parse_dispatches(text(V1 / "mi250x_laplacian_results.csv"))
    counted = parse_dispatches(text(V1 / "mi250x_laplacian_data_movement.csv"))
    dispatches = merge_passes(timing, [counted])
    laplacian = dispatches[1]
    assert laplacian.kernel == "laplacian_kernel"
    assert laplacian.duration_ns == 2_647_539
    assert laplacian.counters["FETCH_SIZE"] == 1979347.875
    assert laplacian.counters["WRITE_SIZE"] == 1043147.625
    specs = lookup("AMD Instinct MI250X/MI250")  # the marketing name rocminfo reports (results.sysinfo.txt)
    assert specs["arch"] == "gfx90a"
    launch = amd_launch(laplacian, specs)
    expected_bytes = (1979347.875 + 1043147.625) * 1024
    assert launch.metrics[DRAM_BYTES].value == expected_bytes
    expected_pct = 100 * expected_bytes / 2_647_539e-9 / 1638.4e9
    assert math.isclose(launch.metrics[DRAM_PCT].value, expected_pct) and 70 < expected_pct < 72
    assert launch.metrics["grid_blocks"].value == 134217728 // 256
    record = build_record("rocprof", "1", "AMD Instinct MI250X/MI250",
                          [amd_launch(d, specs) for d in dispatches], ROCM, forwards=1001)
    assert record.kernel("laplacian_kernel").bottleneck == MEMORY_BOUND
    assert record.kernel("laplacian_kernel").launches == 1001
    assert record.kernel("__amd_rocclr_fillBufferAligned").bottleneck == LAUNCH_BOUND  # 5.4 µs
    assert record.bottleneck == MEMORY_BOUND


def test_rocprofv3_kernel_trace_in_both_format_generations():
    new = parse_dispatches(text(V3 / "rocprofv3_docs_kernel_trace.csv"))
    assert new[0].kernel.startswith("void addition_kernel<float>")
    assert new[0].duration_ns == 1550151853042437 - 1550151853029637 == 12_800
    assert new[0].grid_size == 1024 * 1024 and new[0].workgroup_size == 64 and new[0].vgprs == 8
    old = parse_dispatches(text(V3 / "rocprofv3_docs_2024-10_kernel_trace.csv"))
    assert old[0].duration_ns == 8819330200116308 - 8819330200067564
    assert old[0].vgprs is None  # the 2024 format has no VGPR column
    truncated = parse_dispatches(text(V3 / "rocprofv3_docs_kernel_trace_truncated.csv"))
    assert [kernel_base_name(d.kernel) for d in truncated] == [kernel_base_name(d.kernel) for d in new[:4]]


def test_rocprofv3_counter_collection_long_format_joins_the_trace():
    trace = parse_dispatches(text(V3 / "rocprofv3_docs_kernel_trace.csv"))
    counters = parse_dispatches(text(V3 / "rocprofv3_docs_counter_collection.csv"))
    assert counters[0].counters == {"SQ_WAVES": 16384.0}
    assert counters[0].duration_ns == 3200098838483232 - 3200098838431081
    merged = merge_passes(trace, [counters])
    add = next(d for d in merged if d.kernel.startswith("void addition_kernel"))
    assert add.counters["SQ_WAVES"] == 16384.0 and add.duration_ns == 12_800
    oldest = parse_dispatches(text(V3 / "rocprofv3_docs_2024-10_kernel_names.csv"))
    assert {kernel_base_name(d.kernel) for d in oldest} == {"divide_kernel"}
    # a 1M-element float kernel of ~10 µs on an MI300X is launch-bound
    specs = lookup("AMD Instinct MI300X")
    record = build_record("rocprofv3", "1.0.0", "AMD Instinct MI300X", [amd_launch(d, specs) for d in merged], ROCM,
                          forwards=3)
    assert record.kernel("void addition_kernel").bottleneck == LAUNCH_BOUND


def test_stats_values_and_the_stray_readme_artifact():
    mpi = parse_stats(text(V3 / "rocprofv3_kernel_stats_EXCERPT_mpi_rank.csv"))
    assert (mpi[0].calls, mpi[0].total_ns) == (142, 916515855)
    single = parse_stats(text(V3 / "rocprofv3_kernel_stats_EXCERPT_single_process.csv"))
    assert single[-1].average_ns == 15257.712121  # its StdDev field ends in a stray "> "
    v1 = parse_stats(text(V1 / "mi250x_laplacian_results.stats.csv"))
    assert (v1[0].name, v1[0].calls, v1[0].average_ns) == ("laplacian_kernel", 1001, 2643734)


def test_amd_compute_counters_account_for_xcds():
    from platforms.profiling.rocprof_parse import Dispatch

    specs = lookup("AMD Instinct MI300X")
    dispatch = Dispatch(1, "k", 100_000.0, {"GRBM_GUI_ACTIVE": 8 * 1000, "SQ_VALU_MFMA_BUSY_CYCLES": 304 * 4 * 900,
                                              "SQ_ACTIVE_INST_VALU": 304 * 100, "FETCH_SIZE": 100.0,
                                              "TCC_HIT_sum": 30.0, "TCC_MISS_sum": 10.0})
    launch = amd_launch(dispatch, specs)
    assert math.isclose(launch.metrics[TENSOR_PCT].value, 90.0)  # 900 busy cycles of 1000 on each XCD
    assert math.isclose(launch.metrics[COMPUTE_PCT].value, 90.0)
    assert launch.metrics[DRAM_BYTES].value == 100 * 1024
    assert launch.metrics["l2_hit_pct"].value == 75.0


def test_counter_passes_respect_the_hardware():
    for arch in ("gfx942", "gfx950", "gfx942:sramecc+:xnack-"):
        passes = counter_passes(arch)
        assert ("FETCH_SIZE",) in passes and ("WRITE_SIZE",) in passes
        assert not any("FETCH_SIZE" in p and "WRITE_SIZE" in p for p in passes)
        assert any("TCC_EA0_RDREQ_sum" in p for p in passes)
        assert not any("TCC_EA_RDREQ_sum" in p for p in passes)
    gfx90a = counter_passes("gfx90a")
    assert any("TCC_EA_RDREQ_sum" in p for p in gfx90a) and ("FETCH_SIZE", "WRITE_SIZE") in gfx90a
    unknown = counter_passes(None)
    assert not any(c.startswith("TCC_") for p in unknown for c in p)
    for passes in (counter_passes("gfx942"), gfx90a, unknown):  # SQ and TCC never share a pass
        assert all(not ({c[:3] for c in p} >= {"SQ_", "TCC"}) for p in passes)


def test_commands():
    profile, export = ncu_commands("/opt/ncu", "/tmp/r", ["python", "-m", "t"], "^(k)")
    assert profile[:1] == ["/opt/ncu"] and profile[-3:] == ["python", "-m", "t"]
    joined = " ".join(profile)
    for part in ("--clock-control none", "--profile-from-start off", "--kernel-name regex:^(k)",
                 "--export /tmp/r", "gpu__time_duration.sum", "sm__pipe_tensor_cycles_active"):
        assert part in joined
    assert export == ["/opt/ncu", "--import", "/tmp/r.ncu-rep", "--csv", "--page", "raw", "--print-units", "base"]
    v3 = trace_command("rocprofv3", "rocprofv3", "/o", ["app"], "^(k)")
    assert v3[v3.index("--output-format") + 1] == "csv" and v3[-2:] == ["--", "app"]
    assert "--kernel-include-regex" in v3
    pmc = counter_command("rocprofv3", "rocprofv3", "/o", ("FETCH_SIZE",), ["app"], None, "/in.txt")
    assert pmc[1:3] == ["--pmc", "FETCH_SIZE"] and "--kernel-include-regex" not in pmc
    v1 = counter_command("rocprof", "rocprof", "/o", ("FETCH_SIZE",), ["app"], None, "/in.txt")
    assert v1[1:3] == ["-i", "/in.txt"] and v1[-1] == "app"


# -- roofline ------------------------------------------------------------------------


def test_roofline_classes_from_bytes_flops_and_runtime():
    h200 = "NVIDIA H200"
    elementwise = Workload(bytes_moved=805_306_368, dtype="float32", runtime_ms=0.2, device_name=h200)
    record = roofline_record(elementwise, CUDA)
    assert record.bottleneck == MEMORY_BOUND
    assert math.isclose(record.value(DRAM_PCT), 100 * 805_306_368 / 0.2e-3 / 4800e9)
    matmul = Workload(bytes_moved=201_326_592, flops=2 * 4096**3, dtype="float32", runtime_ms=3.0, device_name=h200)
    record = roofline_record(matmul, CUDA)
    assert record.bottleneck == COMPUTE_BOUND
    assert math.isclose(record.value(COMPUTE_PCT), 100 * 2 * 4096**3 / 3e-3 / 67e12)
    slow = Workload(bytes_moved=805_306_368, dtype="float32", runtime_ms=5.0, device_name=h200)
    assert roofline_record(slow, CUDA).bottleneck == UNKNOWN  # low bandwidth, work unknown: no guess
    assert roofline_record(Workload(bytes_moved=1, runtime_ms=1.0, device_name="Mystery GPU"), CUDA).bottleneck \
        == UNKNOWN
    no_time = roofline_record(Workload(bytes_moved=1, device_name=h200), CUDA, reason="ncu not found")
    assert no_time.bottleneck == UNKNOWN and no_time.reason == "ncu not found"
    assert "ncu not found" in no_time.summary and not no_time.measured


def test_record_round_trips_through_json():
    record = raw_record()
    record.notes.append("a note")
    again = ProfileRecord.from_dict(json.loads(json.dumps(record.to_dict())))
    assert again == record
    roof = roofline_record(Workload(bytes_moved=10**9, runtime_ms=1.0, device_name="NVIDIA H100"), CUDA, "why")
    assert ProfileRecord.from_dict(json.loads(json.dumps(roof.to_dict()))) == roof


# -- the profilers around the tools (fake executables replay the fixtures) ----------


def fake_tool(folder: Path, name: str, body: str, **paths: Path | str) -> Path:
    """An executable ``name`` in ``folder`` running ``body`` (Python) with ``args`` and ``LOG`` set."""
    script = folder / name
    constants = "".join(f"{k} = {str(v)!r}\n" for k, v in paths.items())
    script.write_text(f"#!{sys.executable}\nimport json, os, shutil, sys, time\nargs = sys.argv[1:]\n{constants}"
                      "with open(LOG, 'a') as f:\n    f.write(json.dumps(args) + '\\n')\n" + textwrap.dedent(body))
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return script


def calls(log: Path) -> list[list[str]]:
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


NCU_BODY = """
if "--version" in args:
    sys.stdout.write(open(VERSION).read()); sys.exit(0)
if "--import" in args:
    sys.stdout.write(open(CSV).read()); sys.exit(0)
if MODE == "hang":
    time.sleep(120)
if MODE == "fail":
    print("==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA GPU Performance "
          "Counters on the target device 0.", file=sys.stderr)
    sys.exit(1)
if MODE == "ok":
    open(args[args.index("--export") + 1] + ".ncu-rep", "w").write("report")
print("==PROF== Disconnected from process 1")
"""


def ncu_profiler(tmp_path: Path, mode: str) -> tuple[NcuProfiler, Path]:
    log = tmp_path / f"ncu-{mode}.log"
    binary = fake_tool(tmp_path, f"ncu-{mode}", NCU_BODY, LOG=log, MODE=mode, VERSION=NCU / "h200_env.txt",
                       CSV=NCU / "h200_ncu_raw_metrics.csv")
    return NcuProfiler(str(binary)), log


def test_ncu_profiler_runs_the_tool_and_reads_its_report(tmp_path):
    profiler, log = ncu_profiler(tmp_path, "ok")
    record = profiler.profile(["python", "-m", "target"], dict(os.environ), "^(nvjet)", 30.0,
                              Workload(device_name="NVIDIA H200", forwards=1))
    assert record.measured and record.tool == "ncu" and record.tool_version == "2025.3.1.0"
    assert record.device_name == "NVIDIA H200"
    assert [k.name[:10] for k in record.kernels] == ["nvjet_sm90"]  # the filter keeps the candidate's kernels
    assert record.bottleneck == COMPUTE_BOUND
    profile_call = next(c for c in calls(log) if "--export" in c)
    assert "--clock-control" in profile_call and profile_call[profile_call.index("--clock-control") + 1] == "none"
    assert profile_call[-3:] == ["python", "-m", "target"]
    assert profiler.disabled_reason is None


def test_a_failing_ncu_falls_back_once_and_is_not_retried(tmp_path):
    profiler, log = ncu_profiler(tmp_path, "fail")
    workload = Workload(bytes_moved=805_306_368, dtype="float32", runtime_ms=0.2, device_name="NVIDIA H200")
    first = profiler.profile(["app"], {}, None, 30.0, workload)
    assert first.tool == "roofline" and not first.measured
    assert "ERR_NVGPUCTRPERM" in first.reason and first.bottleneck == MEMORY_BOUND
    assert "ERR_NVGPUCTRPERM" in profiler.disabled_reason
    runs = len(calls(log))
    second = profiler.profile(["app"], {}, None, 30.0, workload)
    assert len(calls(log)) == runs  # not run again
    assert second.reason == first.reason


def test_a_hanging_profiler_is_killed_at_the_timeout(tmp_path):
    profiler, _ = ncu_profiler(tmp_path, "hang")
    start = time.monotonic()
    record = profiler.profile(["app"], {}, None, 2.0, Workload())
    assert time.monotonic() - start < 30
    assert "did not finish within 2 s" in record.reason and record.bottleneck == UNKNOWN


def test_a_profile_in_flight_is_stopped_and_its_folder_goes(tmp_path, monkeypatch):
    """Seen on the H200: a sweep that ended with a parent's ncu profile in flight left its
    kevo-profile- and kevo-ncu- folders, its actor killed under it. ``stop_tools`` (an actor's
    close) stops the tool; the profile ends at once as a failure, and its folder goes."""
    import tempfile
    import threading

    from platforms.profiling import runner

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    profiler, _ = ncu_profiler(tmp_path, "hang")
    records = []
    thread = threading.Thread(target=lambda: records.append(profiler.profile(["app"], {}, None, 120.0, Workload())))
    thread.start()
    deadline = time.monotonic() + 30
    while not runner._running:  # the tool has started
        assert time.monotonic() < deadline and thread.is_alive(), records
        time.sleep(0.05)
    assert [n for n in os.listdir(tmp_path / "tmp") if n.startswith("kevo-ncu-")]
    start = time.monotonic()
    assert runner.stop_tools() == 1
    thread.join(timeout=30)
    assert not thread.is_alive() and time.monotonic() - start < 10
    assert "ncu-hang was stopped: the work it profiled for has ended" in records[0].reason
    assert os.listdir(tmp_path / "tmp") == [] and runner._running == set() and runner._stopped == set()
    assert runner.stop_tools() == 0  # nothing in flight: nothing to stop


def test_ncu_that_profiles_nothing_is_a_failure(tmp_path):
    profiler, _ = ncu_profiler(tmp_path, "no-report")
    record = profiler.profile(["app"], {}, "^(k)", 10.0, Workload())
    assert "ncu wrote no report" in record.reason
    profiler, _ = ncu_profiler(tmp_path, "ok")
    record = profiler.profile(["app"], {}, "^(not_a_kernel)", 10.0, Workload())
    assert "no kernel launch matching '^(not_a_kernel)'" in record.reason


ROCPROF_V3_BODY = """
if "--version" in args:
    print("rocprofv3 version 1.0.0"); sys.exit(0)
if MODE == "hang":
    time.sleep(120)
out = os.path.join(args[args.index("-d") + 1], "host", "4242")
os.makedirs(out, exist_ok=True)
if "--kernel-trace" in args:
    shutil.copy(TRACE, os.path.join(out, "trace_kernel_trace.csv"))
else:
    if "WRITE_SIZE" in args:
        print("Could not construct profile cfg failed with error code 38: Request exceeds the capabilities of "
              "the hardware to collect", file=sys.stderr)
        sys.exit(1)
    shutil.copy(COUNTERS, os.path.join(out, "counters_counter_collection.csv"))
"""

ROCPROF_V1_BODY = """
if "--version" in args:
    print("ROCProfiler: 2.0.0"); sys.exit(0)
out = args[args.index("-o") + 1]
shutil.copy(DATA if "-i" in args else RESULTS, out)
shutil.copy(STATS, out.replace(".csv", ".stats.csv"))  # a stats file beside it is not a dispatch table
"""


def test_rocprofv3_counter_pass_that_fails_is_skipped_for_the_run(tmp_path):
    log = tmp_path / "v3.log"
    v3 = fake_tool(tmp_path, "rocprofv3", ROCPROF_V3_BODY, LOG=log, MODE="ok",
                   TRACE=V3 / "rocprofv3_docs_kernel_trace.csv", COUNTERS=V3 / "rocprofv3_docs_counter_collection.csv")
    profiler = RocprofProfiler([("rocprofv3", str(v3))])
    workload = Workload(device_name="AMD Instinct MI300X", forwards=3)
    record = profiler.profile(["app"], {}, "^(void addition_kernel|multiply_kernel)", 30.0, workload)
    assert record.measured and record.tool == "rocprofv3" and record.tool_version == "1.0.0"
    assert {kernel_base_name(k.name) for k in record.kernels} == {"addition_kernel", "multiply_kernel"}
    assert any("WRITE_SIZE" in note and "error code 38" in note for note in record.notes)
    passes = [c[c.index("--pmc") + 1:c.index("--output-format")] for c in calls(log) if "--pmc" in c]
    assert passes == [list(p) for p in counter_passes("gfx942")]
    record = profiler.profile(["app"], {}, None, 30.0, workload)
    later = [c for c in calls(log) if "--pmc" in c][len(passes):]
    assert not any("WRITE_SIZE" in c for c in later)  # the failing pass is not retried
    assert any("not collected" in note for note in record.notes)
    assert profiler.disabled_reason is None


def test_rocprofv3_that_hangs_falls_back_to_rocprof_v1(tmp_path):
    v3_log, v1_log = tmp_path / "v3.log", tmp_path / "v1.log"
    v3 = fake_tool(tmp_path, "rocprofv3", ROCPROF_V3_BODY, LOG=v3_log, MODE="hang", TRACE="", COUNTERS="")
    v1 = fake_tool(tmp_path, "rocprof", ROCPROF_V1_BODY, LOG=v1_log, RESULTS=V1 / "mi250x_laplacian_results.csv",
                   DATA=V1 / "mi250x_laplacian_data_movement.csv", STATS=V1 / "mi250x_laplacian_results.stats.csv")
    profiler = RocprofProfiler([("rocprofv3", str(v3)), ("rocprof", str(v1))])
    workload = Workload(device_name="AMD Instinct MI250X/MI250", forwards=1001)
    record = profiler.profile(["app"], {}, "^(laplacian_kernel)", 2.0, workload)
    assert record.tool == "rocprof" and record.measured
    assert record.bottleneck == MEMORY_BOUND
    assert [k.name for k in record.kernels] == ["laplacian_kernel"]
    assert "rocprofv3" in profiler.failures[0] and "did not finish" in profiler.failures[0]
    assert record.notes[0].startswith("fell back from rocprofv3")  # the failure stays visible in each record
    assert len([c for c in calls(v1_log) if "-i" in c]) == len(counter_passes("gfx90a"))
    profiler.profile(["app"], {}, "^(laplacian_kernel)", 2.0, workload)
    assert len(calls(v3_log)) == 1  # the hung tool is not tried again


def test_profiler_for_finds_tools_or_falls_back(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(profilers_module, "_NCU_DIRS", ())
    monkeypatch.setattr(profilers_module, "_ROCM_DIRS", ())
    cuda = profiler_for("cuda")
    assert isinstance(cuda, RooflineProfiler) and "ncu_bin_path" in cuda.disabled_reason
    assert "rocprof_bin_path" in profiler_for("rocm").disabled_reason
    assert profiler_for("cpu").disabled_reason == "no hardware profiler on the cpu platform"
    with pytest.raises(ProfilerConfigError, match="profiler.ncu_bin_path"):
        profiler_for("cuda", ncu_bin_path=str(tmp_path / "missing-ncu"))
    log = tmp_path / "log"
    fake_tool(tmp_path, "ncu", "", LOG=log)
    for name in ("rocprofv2", "rocprof"):
        fake_tool(tmp_path, name, "", LOG=log)
    assert isinstance(profiler_for("cuda"), NcuProfiler)
    rocm = profiler_for("rocm")
    assert isinstance(rocm, RocprofProfiler) and [f for f, _ in rocm.tools] == ["rocprofv2", "rocprof"]
    configured = profiler_for("rocm", rocprof_bin_path=str(tmp_path / "rocprof"))
    assert [f for f, _ in configured.tools] == ["rocprof"]
    assert isinstance(profiler_for("cuda", enabled=False), RooflineProfiler)
    with pytest.raises(ValueError, match="unknown platform"):
        profiler_for("tpu")


# -- profiling a candidate ---------------------------------------------------------


def test_profile_candidate_runs_the_target_under_the_profiler(tmp_path, monkeypatch):
    import subprocess

    from fitness.profiling.candidate import profile_candidate

    class Recording(profilers_module.Profiler):
        tool = "recording"

        def _profile(self, command, env, kernel_filter, timeout_s, workload):
            self.seen = (command, env, kernel_filter, workload)
            done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout_s)
            assert done.returncode == 0, done.stderr
            return roofline_record(workload, self.thresholds)

    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret")
    profiler = Recording("cpu")
    source = (PROBLEMS / "elementwise" / "seed.py").read_text()
    shapes = {"batch_size": 4, "dim": 100}
    record = profile_candidate(profiler, PROBLEMS / "elementwise" / "reference.py", shapes, source, "cpu", 0, 120.0,
                               runtime_ms=1.0, runs=2, warmup=1)
    command, env, kernel_filter, workload = profiler.seen
    from fitness.boundary import confine

    program = command.index("--") + 1  # the target program, run as a worker is (tests/test_secrets.py)
    assert command[1:3] == ["-I", confine.__file__]
    assert command[program + 1:program + 3] == ["-m", "fitness.profiling.target"]
    policy = confine.Policy.from_json(command[3])
    assert not policy.network and policy.ports == profiler.ports == ()
    assert str(PROBLEMS / "elementwise" / "reference.py") in policy.readable
    assert env["TMPDIR"] in policy.writable and env["TRITON_CACHE_DIR"].startswith(env["TMPDIR"])
    assert "--shape" in command and "batch_size=4" in command and "--region" not in command
    assert "OPENAI_API_KEY" not in env and env["TRITON_INTERPRET"] == "1"
    assert kernel_filter == "^(gated_mul_kernel)"
    assert workload.bytes_moved == 3 * 4 * 100 * 4 and workload.forwards == 3 and workload.dtype == "float32"
    assert record.tool == "roofline"


def test_profile_candidate_with_no_tool_records_why(tmp_path):
    from fitness.profiling.candidate import profile_candidate

    record = profile_candidate(profiler_for("cpu"), PROBLEMS / "elementwise" / "reference.py",
                               {"batch_size": 4, "dim": 100}, "not even python", "cpu", 0, 5.0, runtime_ms=1.0,
                               device_name="cpu")
    assert record.reason == "no hardware profiler on the cpu platform" and record.bottleneck == UNKNOWN


def test_declared_flops_follow_the_shape_overrides(tmp_path):
    from fitness.problems.problem import ProblemError
    from fitness.profiling.candidate import problem_work

    problem = tmp_path / "mm.py"
    problem.write_text((PROBLEMS / "matmul" / "reference.py").read_text() + "\nFLOPS = 2 * M * N * K\n")
    work = problem_work(problem, {"M": 64, "K": 32, "N": 16})
    assert work.flops == 2 * 64 * 32 * 16
    assert work.bytes_moved == (64 * 32 + 32 * 16 + 64 * 16) * 4
    problem.write_text((PROBLEMS / "matmul" / "reference.py").read_text() + "\nFLOPS = 'many'\n")
    with pytest.raises(ProblemError, match="FLOPS"):
        problem_work(problem)


def test_kernel_filter_and_profile_cache():
    from fitness.profiling.candidate import ProfileCache, kernel_filter

    source = (PROBLEMS / "matmul" / "seed.py").read_text()
    assert kernel_filter(source) == "^(matmul_kernel)"
    two = "import triton\n@triton.autotune(configs=[], key=[])\n@triton.jit\ndef a(x): pass\n" \
          "@triton.jit()\ndef b(x): pass\ndef helper(): pass\n"
    assert kernel_filter(two) == "^(a|b)"
    assert kernel_filter("def f(): pass") is None
    cache = ProfileCache()
    record = raw_record()
    cache.put(source, {"M": 1}, "NVIDIA H200", record)
    assert cache.get(source, {"M": 1}, "NVIDIA H200") == record
    assert cache.get(source, {"M": 2}, "NVIDIA H200") is None
    assert ProfileCache(json.loads(json.dumps(cache.state()))).get(source, {"M": 1}, "NVIDIA H200") == record
