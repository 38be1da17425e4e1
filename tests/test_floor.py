"""A problem's floor (fitness.judge.floor) and the device peaks behind it (platforms.peaks).

Byte counts are worked out by hand from the problems' shapes; FLOPs of a
matmul are 2*M*N*K. Peaks are never measured on this machine's shared cores
except once, at tiny sizes, to show the measuring path runs.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.conftest import PROBLEMS, ROOT, problem_path

from fitness.judge.floor import BELOW_FLOOR_MARGIN, Floor, Work, below_floor, count_work, floor_of, problem_floor, sol
from fitness.problems.problem import load_problem
from platforms import get_platform
from platforms import peaks as peaks_module
from platforms.peaks import (
    CACHE_ENV,
    DATASHEET,
    MEASURED,
    Peaks,
    PeaksUnavailable,
    achievable_peaks,
    cache_path,
    datasheet_peaks,
    device_key,
    measure_peaks,
    read_cached,
)
from platforms.specs import GPU_SPECS
from platforms.timing import TimingSettings

F32 = 4


def work_of(problem: str, shapes: dict, dtype: str | None = None) -> Work:
    return count_work(load_problem(problem_path(problem), shapes, dtype))


# -- bytes and FLOPs of real problems -------------------------------------------------

def test_softmax_moves_its_input_and_output_once_and_does_no_matrix_work():
    work = work_of("softmax", {"batch_size": 4, "dim": 100})
    assert (work.input_bytes, work.parameter_bytes, work.output_bytes) == (4 * 100 * F32, 0, 4 * 100 * F32)
    assert work.bytes == 3200 and work.flops == 0 and work.traced == "fake" and work.dtype == "float32"


def test_elementwise_reads_two_inputs_and_writes_one_output():
    assert work_of("elementwise", {"batch_size": 4, "dim": 100}).bytes == 3 * 4 * 100 * F32


def test_matmul_moves_a_b_and_c_and_does_2mnk_flops():
    m, k, n = 33, 47, 29
    work = work_of("matmul", {"M": m, "K": k, "N": n})
    assert work.bytes == (m * k + k * n + m * n) * F32 == 15484
    assert work.flops == 2 * m * n * k and work.flops_source == "counted"


def test_a_problem_run_in_bfloat16_moves_half_the_bytes():
    work = work_of("matmul", {"M": 33, "K": 47, "N": 29}, "bfloat16")
    assert work.bytes == 15484 // 2 and work.dtype == "bfloat16" and work.flops == 2 * 33 * 29 * 47


def test_parameters_and_buffers_of_the_model_count(tmp_path):
    # KernelBench's BatchNorm: weight, bias, running mean and variance (fp32, one per feature)
    # and num_batches_tracked (one int64).
    b, c, h, w = 2, 3, 5, 7
    work = work_of("kernelbench/level1/33_BatchNorm", {"batch_size": b, "features": c, "dim1": h, "dim2": w})
    assert work.parameter_bytes == 4 * c * F32 + 8 == 56
    assert work.input_bytes == work.output_bytes == b * c * h * w * F32
    assert work.bytes == 1736 and work.flops == 0


def test_a_convolution_counts_its_weight_and_its_flops():
    b, cin, cout, h, w = 2, 3, 5, 4, 6
    work = work_of("kernelbench/level1/87_conv_pointwise_2D",
                   {"batch_size": b, "in_channels": cin, "out_channels": cout, "height": h, "width": w})
    assert (work.input_bytes, work.parameter_bytes, work.output_bytes) == (
        b * cin * h * w * F32, cout * cin * F32, b * cout * h * w * F32)
    assert work.flops == 2 * b * cout * h * w * cin  # a 1x1 convolution is a matmul over channels


def test_attention_counts_its_two_matmuls_on_the_cpu_too():
    b, heads, s, d = 2, 3, 5, 7
    work = work_of("kernelbench/level1/97_ScaledDotProductAttention",
                   {"batch_size": b, "num_heads": heads, "sequence_length": s, "embedding_dimension": d})
    assert work.flops == 2 * (2 * b * heads * s * s * d)  # Q K^T, then P V
    assert work.bytes == 4 * b * heads * s * d * F32


def test_kernelbench_problems_at_their_own_multi_gb_shapes_are_counted_without_their_memory():
    relu = work_of("kernelbench/level1/19_ReLU", {})  # 4096 x 393216 fp32: 6 GiB in, 6 GiB out
    assert relu.bytes == 2 * 4096 * 393216 * F32 and relu.traced == "fake"
    square = work_of("kernelbench/level1/1_Square_matrix_multiplication_", {})  # N = 4096
    assert square.bytes == 3 * 4096**2 * F32 and square.flops == 2 * 4096**3


def test_a_declared_flops_wins_over_the_count(tmp_path):
    problem = tmp_path / "matmul.py"
    problem.write_text((PROBLEMS / "matmul" / "reference.py").read_text() + "\nFLOPS = 12345\n")
    work = count_work(load_problem(problem, {"M": 3, "K": 4, "N": 5}))
    assert work.flops == 12345 and work.flops_source == "declared"


@pytest.mark.parametrize("fake", [True, False])
def test_memory_passed_or_returned_twice_is_counted_once(tmp_path, fake):
    # x is both inputs, the bias a row broadcast over the batch, and the output is returned twice:
    # a kernel reads 400 + 100 floats and writes 400
    problem = tmp_path / "twice.py"
    problem.write_text(
        "import torch\nimport torch.nn as nn\n"
        "class Model(nn.Module):\n"
        "    def forward(self, x, y, bias):\n"
        "        out = x * y + bias\n"
        "        return out, out\n"
        "def get_inputs():\n    x = torch.randn(4, 100)\n    return [x, x, torch.randn(100).expand(4, 100)]\n"
        "def get_init_inputs():\n    return []\n")
    work = count_work(load_problem(problem), fake=fake)
    assert (work.input_bytes, work.output_bytes) == ((400 + 100) * F32, 400 * F32)
    assert work.traced == ("fake" if fake else "real")
    if fake:  # the profiler's roofline counts the same bytes (on the meta device)
        from fitness.profiling.candidate import problem_work

        assert problem_work(problem).bytes_moved == (400 + 100 + 400) * F32


def test_a_reference_that_fake_tensors_cannot_run_is_run_for_real(tmp_path):
    problem = tmp_path / "reads_a_value.py"
    problem.write_text(
        "import torch\nimport torch.nn as nn\nn = 6\n"
        "class Model(nn.Module):\n"
        "    def forward(self, x):\n"
        "        return x[: int(x.abs().sum().item() > 0) + 1] @ x.T\n"  # a shape from a value
        "def get_inputs():\n    return [torch.randn(n, 4)]\n"
        "def get_init_inputs():\n    return []\n")
    work = count_work(load_problem(problem))
    assert work.traced == "real" and "fake tensors cannot run" in work.note
    assert work.flops == 2 * 2 * 6 * 4 and work.output_bytes == 2 * 6 * F32


# -- the floor: memory or compute, the cache, the margin --------------------------------

GPU = Peaks("gpu", 1000.0, {"float32": 50.0, "tf32": 400.0, "bfloat16": 800.0}, MEASURED, cache_bytes=1000)


def test_a_floor_is_the_larger_of_memory_time_and_compute_time():
    memory = floor_of(Work(6_000_000, 0, 2_000_000, 1e9, "counted", "float32", "fake"), GPU)
    # 8 MB at 1000 GB/s = 0.008 ms; 1 GFLOP at 400 TFLOP/s = 0.0025 ms
    assert memory.bound == "memory" and memory.floor_ms == pytest.approx(0.008)
    compute = floor_of(Work(6_000_000, 0, 2_000_000, 1e10, "counted", "float32", "fake"), GPU)
    assert compute.bound == "compute" and compute.floor_ms == pytest.approx(0.025)
    assert compute.peak_tflops == 400.0 and compute.how["precision"] == "tf32"
    assert compute.how["memory_ms"] == pytest.approx(0.008) and compute.source == MEASURED


def test_fp32_work_at_true_fp32_and_half_precision_work_at_its_own_rate():
    work = Work(8, 0, 8, 1e10, "counted", "float32", "fake")
    assert floor_of(work, GPU, tf32=False).floor_ms == pytest.approx(0.2)  # 1e10 / 50e12 s
    bf16 = floor_of(Work(8, 0, 8, 1e10, "counted", "bfloat16", "fake"), GPU)
    assert bf16.floor_ms == pytest.approx(0.0125) and bf16.how["precision"] == "bfloat16"


def test_work_in_a_dtype_without_a_rate_is_bounded_by_memory_and_says_so():
    floor = floor_of(Work(6_000_000, 0, 2_000_000, 1e12, "counted", "float64", "fake"), GPU)
    assert floor.bound == "memory" and floor.peak_tflops is None and "no matmul rate" in floor.note


def test_outputs_that_fit_in_the_cache_are_left_out_of_the_cached_floor():
    small = floor_of(Work(4000, 1000, 500, 0.0, "counted", "float32", "fake"), GPU)
    assert small.floor_ms == pytest.approx(5500 / 1000 / 1e6)
    assert small.cached_floor_ms == pytest.approx(5000 / 1000 / 1e6)  # all 500 output bytes may stay cached
    large = floor_of(Work(4000, 1000, 3000, 0.0, "counted", "float32", "fake"), GPU)
    assert large.cached_floor_ms == pytest.approx((8000 - 1000) / 1000 / 1e6)  # the cache holds 1000 of them
    unknown = Peaks("gpu", 1000.0, {}, DATASHEET, cache_bytes=None)
    assert floor_of(Work(4000, 1000, 3000, 0.0, "counted", "float32", "fake"), unknown).cached_floor_ms == \
        pytest.approx(5000 / 1000 / 1e6)


def test_below_floor_allows_the_margin_and_no_more():
    floor = Floor(1.0, "memory", 1000, 0.0, 1.0, None, MEASURED, cached_floor_ms=0.8)
    edge = 0.8 * (1 - BELOW_FLOOR_MARGIN)
    assert not below_floor(floor, 1.0) and not below_floor(floor, 0.79) and not below_floor(floor, edge)
    assert below_floor(floor, edge * 0.999)
    assert 0 < BELOW_FLOOR_MARGIN < 0.5


def test_sol_is_the_fraction_of_the_floor_reached():
    assert sol(0.5, 2.0) == 0.25 and sol(0.5, 0.5) == 1.0 and sol(0.5, 0.1) == 1.0 and sol(0.0, 1.0) == 0.0
    with pytest.raises(ValueError):
        sol(0.5, 0.0)


def test_a_problems_floor_is_json_and_says_how_it_was_obtained():
    n = 4096  # the problem's own shapes: 680 FLOPs a byte, above the 400 this GPU needs to be compute bound
    floor = problem_floor(load_problem(PROBLEMS / "matmul" / "reference.py"), GPU)
    data = json.loads(json.dumps(floor.to_dict()))
    assert data["bound"] == "compute" and data["flops"] == 2 * n**3 and data["bytes"] == 3 * n * n * F32
    assert data["floor_ms"] == pytest.approx(2 * n**3 / 400e12 * 1e3)
    assert data["how"]["bytes"] == {"inputs": 2 * n * n * F32, "parameters": 0, "outputs": n * n * F32}
    assert data["how"]["flops_source"] == "counted" and data["source"] == MEASURED


# -- peaks: the datasheet, the cache, the fallback -------------------------------------

class StubGpu:
    """What peaks asks of a platform, for a GPU this machine does not have."""

    name = "cuda"

    def __init__(self, device_name: str) -> None:
        self._name = device_name

    def device_name(self) -> str:
        return self._name


def measured(platform) -> Peaks:
    measured.calls += 1
    return Peaks(platform.device_name(), 4000.0, {"float32": 50.0, "tf32": 400.0}, MEASURED, 60 << 20)


def test_the_h200_datasheet_figures():
    h200 = datasheet_peaks("NVIDIA H200")
    assert h200.source == DATASHEET and h200.bandwidth_gbs == 4800
    assert h200.tflops == {"float32": 67, "tf32": 494.7, "float16": 989.4, "bfloat16": 989.4}


@pytest.mark.parametrize("entry", sorted(GPU_SPECS))
def test_every_gpu_of_the_table_has_datasheet_peaks(entry):
    peaks = datasheet_peaks(entry)
    assert peaks.bandwidth_gbs > 0 and peaks.cache_bytes > 0
    assert peaks.tflops["float16"] >= peaks.tflops["float32"] and peaks.tflops["bfloat16"] >= peaks.tflops["float32"]
    assert peaks.tflops.get("tf32", peaks.tflops["float32"]) >= peaks.tflops["float32"]
    if "tf32" in peaks.tflops:
        assert peaks.tflops["tf32"] == pytest.approx(peaks.tflops["bfloat16"] / 2, rel=0.02)


def test_measured_peaks_are_cached_by_device_and_read_back(tmp_path, monkeypatch):
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "peaks.json"))  # read when called, not at import
    assert cache_path() == tmp_path / "peaks.json"
    measured.calls = 0
    h200, h100 = StubGpu("NVIDIA H200"), StubGpu("NVIDIA H100 80GB HBM3")
    first = achievable_peaks(h200, measurer=measured)
    assert first.source == MEASURED and first.key == device_key(h200) and measured.calls == 1
    again = achievable_peaks(h200, measurer=measured)
    assert again == first and measured.calls == 1  # from the cache
    achievable_peaks(h100, measurer=measured)
    assert measured.calls == 2
    entries = json.loads((tmp_path / "peaks.json").read_text())
    assert set(entries) == {device_key(h200), device_key(h100)}
    assert "NVIDIA H200" in device_key(h200) and "torch " in device_key(h200)
    assert read_cached(device_key(h200)).tflops == {"float32": 50.0, "tf32": 400.0}


def test_a_corrupt_cache_is_measured_again(tmp_path):
    path = tmp_path / "peaks.json"
    path.write_text("{not json")
    measured.calls = 0
    assert achievable_peaks(StubGpu("NVIDIA H200"), path=path, measurer=measured).source == MEASURED
    assert measured.calls == 1 and json.loads(path.read_text())


def test_a_failed_measurement_falls_back_to_the_datasheet_and_says_why(tmp_path):
    def out_of_memory(platform):
        raise RuntimeError("CUDA out of memory. Tried to allocate 1.00 GiB")

    path = tmp_path / "peaks.json"
    peaks = achievable_peaks(StubGpu("NVIDIA H200"), path=path, measurer=out_of_memory)
    assert peaks.source == DATASHEET and peaks.bandwidth_gbs == 4800
    assert "out of memory" in peaks.detail["why_datasheet"] and not path.exists()
    assert achievable_peaks(StubGpu("NVIDIA H200"), path=path, measure=False).source == DATASHEET


def test_a_device_with_neither_measurement_nor_datasheet_is_refused(tmp_path):
    with pytest.raises(PeaksUnavailable, match="specs.py"):
        achievable_peaks(StubGpu("NVIDIA GeForce GTX 1080"), path=tmp_path / "p.json", measure=False)


def test_the_cpu_is_measured_and_has_no_datasheet(tmp_path, monkeypatch):
    assert datasheet_peaks(get_platform("cpu").device_name()) is None
    monkeypatch.setattr(peaks_module, "_CPU_BUFFER_BYTES", 4 << 20)
    monkeypatch.setattr(peaks_module, "_CPU_MATMUL_N", {"float32": 64, "float16": 16, "bfloat16": 16})
    quick = TimingSettings(warmup_ms=0, window_ms=0, min_runs=3, max_runs=3, device_trace=False)
    peaks = measure_peaks(get_platform("cpu"), quick)
    assert peaks.source == MEASURED and peaks.bandwidth_gbs > 0 and "tf32" not in peaks.tflops
    assert set(peaks.tflops) == {"float32", "float16", "bfloat16"} and all(v > 0 for v in peaks.tflops.values())
    assert peaks.detail["copy_gbs"] > 0 and peaks.detail["buffer_bytes"] == 4 << 20


# -- bench/sol_bench.py ----------------------------------------------------------------

def run_bench(args: list[str]) -> None:
    """bench/sol_bench.py on its command line (the peaks' cache as the environment says)."""
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "sol_bench.py"), *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]


def test_the_bench_writes_a_row_per_problem_survives_a_failure_and_resumes(tmp_path, monkeypatch):
    folder = tmp_path / "level"
    folder.mkdir()
    (folder / "10_softmax.py").write_text((PROBLEMS / "softmax" / "reference.py").read_text())
    (folder / "2_elementwise.py").write_text((PROBLEMS / "elementwise" / "reference.py").read_text())
    (folder / "3_broken.py").write_text("import torch\nraise ValueError('broken problem')\n")
    cpu = get_platform("cpu")
    peaks_file = tmp_path / "peaks.json"
    monkeypatch.setenv(CACHE_ENV, str(peaks_file))
    peaks_module.write_cached(Peaks(cpu.device_name(), 10.0, {"float32": 0.1}, MEASURED, None, device_key(cpu)))
    out = tmp_path / "sol.jsonl"
    args = [str(folder), "--device", "cpu", "--skip-compile", "--out", str(out),
            "--shape", "batch_size=4", "--shape", "dim=100"]
    run_bench(args)
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    final = [r for r in rows if r["status"] != "started"]
    assert [r["problem"] for r in final] == ["2_elementwise", "3_broken", "10_softmax"]
    elementwise, broken, softmax = final
    assert elementwise["bytes"] == 3 * 4 * 100 * F32 and elementwise["bound"] == "memory"
    assert elementwise["floor_ms"] == pytest.approx(4800 / 10.0 / 1e6)
    assert elementwise["eager_ms"] > 0 and 0 < elementwise["sol_eager"] <= 1 and "compiled_ms" not in elementwise
    assert "broken problem" in broken["error"] and softmax["status"] == "done"
    # a run that died during a problem: run again, it is recorded as interrupted and the rest are skipped
    with out.open("a") as f:
        f.write(json.dumps({**{k: softmax[k] for k in ("key", "problem", "device")}, "status": "started"}) + "\n")
    run_bench(args + ["--only", "softmax|elementwise"])
    last = json.loads(out.read_text().splitlines()[-1])
    assert last["problem"] == "10_softmax" and "interrupted" in last["error"]
    assert len(out.read_text().splitlines()) == len(rows) + 2
