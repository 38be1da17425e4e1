"""On a GPU: side streams, a poisoned CUDA context, and timing. Skipped without a GPU."""

from __future__ import annotations

import importlib.util
import statistics

import pytest

from tests.conftest import PROBLEMS

from fitness import Evaluator, Status

pytestmark = pytest.mark.gpu

SEED = (PROBLEMS / "elementwise" / "seed.py").read_text()
LAUNCH = "gated_mul_kernel[grid](x, y, out, n_elements, BLOCK_SIZE=1024, num_warps=4)"
SHAPES = {"batch_size": 1024, "dim": 16384}  # 64 MiB per tensor: long enough to time


@pytest.fixture(scope="module")
def gpu_evaluator():
    evaluator = Evaluator(PROBLEMS / "elementwise" / "reference.py", platform="auto", shapes=SHAPES)
    yield evaluator
    evaluator.close()


def repeated(times: int, stream: bool) -> str:
    """The seed with its launch repeated ``times``, on a side stream if ``stream``."""
    assert LAUNCH in SEED
    body = f"for _ in range({times}):\n            {LAUNCH}"
    if stream:
        body = ("side = torch.cuda.Stream()\n        side.wait_stream(torch.cuda.current_stream())\n"
                f"        with torch.cuda.stream(side):\n            for _ in range({times}):\n"
                f"                {LAUNCH}")
    return SEED.replace(LAUNCH, body, 1)


def test_work_hidden_on_a_side_stream_is_counted(gpu_evaluator):
    main = gpu_evaluator.evaluate(repeated(20, stream=False))
    side = gpu_evaluator.evaluate(repeated(20, stream=True))
    assert main.status is Status.ACCEPTED, main.reason
    assert side.status is Status.ACCEPTED, side.reason
    # the side-stream version does the same work; it must not look faster
    assert side.runtime_ms >= 0.8 * main.runtime_ms, (side.runtime_ms, main.runtime_ms)


def test_illegal_memory_access_costs_one_worker(gpu_evaluator):
    wild = SEED.replace("tl.store(out_ptr + offsets", "tl.store(out_ptr + offsets + (1 << 40)", 1)
    assert wild != SEED
    result = gpu_evaluator.evaluate(wild)
    assert result.status in (Status.CRASHED, Status.RUNTIME_ERROR), result.reason
    # the evaluator's own context is intact and a fresh worker takes over
    after = gpu_evaluator.evaluate(SEED)
    assert after.status is Status.ACCEPTED, after.reason


def test_timing_is_stable_and_agrees_with_triton_do_bench(gpu_evaluator):
    import torch
    import triton.testing

    runs = [gpu_evaluator.evaluate(SEED) for _ in range(3)]
    assert all(r.status is Status.ACCEPTED for r in runs)
    medians = [r.runtime_ms for r in runs]
    # runs are timed from the device trace, so host jitter stays out of them
    assert (max(medians) - min(medians)) / statistics.median(medians) < 0.10, medians
    # the seed's own forward under do_bench (back to back, in this process)
    spec = importlib.util.spec_from_file_location("kevo_gpu_seed", PROBLEMS / "elementwise" / "seed.py")
    seed = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(seed)
    a = torch.randn(SHAPES["batch_size"], SHAPES["dim"], device="cuda")
    b = torch.randn_like(a)
    model = seed.ModelNew()
    seed_ms = triton.testing.do_bench(lambda: model(a, b), return_mode="median")
    assert 0.75 < statistics.median(medians) / seed_ms < 1.33, (medians, seed_ms)
    # the reference's time, measured independently in this process
    x = torch.randn(SHAPES["batch_size"], SHAPES["dim"], device="cuda")
    y = torch.randn_like(x)
    eager = triton.testing.do_bench(lambda: x * torch.sigmoid(y), return_mode="median")
    assert 0.5 < runs[0].reference_ms / eager < 2.0, (runs[0].reference_ms, eager)


def test_a_compile_lends_the_lane_unless_the_candidate_could_run_there():
    from fitness import EvalSettings

    # a block size no other test uses: the kernel compiles in this worker
    honest = SEED.replace("BLOCK_SIZE=1024", "BLOCK_SIZE=512", 1)
    assert honest != SEED
    hooked = honest.replace("class ModelNew", "def _hook(*args, **kwargs):\n    return None\n\n\n"
                            "triton.knobs.runtime.jit_cache_hook = _hook\n\n\nclass ModelNew", 1)
    settings = EvalSettings(screen=False)  # the static screen would refuse the knob; the worker must cope alone
    with Evaluator(PROBLEMS / "elementwise" / "reference.py", platform="auto", shapes=SHAPES,
                   settings=settings) as evaluator:
        result = evaluator.evaluate(honest)
        assert result.status is Status.ACCEPTED, result.reason
        assert evaluator.walls["lane lent"] > 0  # the compiles ran with the lane lent out
        result = evaluator.evaluate(hooked.replace("BLOCK_SIZE=512", "BLOCK_SIZE=256", 1))
        assert result.status is Status.FORBIDDEN, result.reason
        assert "Triton's compile or launch hooks" in result.reason
        assert evaluator.walls["lane lent"] == 0  # a hook of the candidate's could run in a compile


def test_a_fresh_worker_is_warm_before_its_first_candidate():
    """Platform.warm_up, as a worker runs it at its start: the device's context exists, and
    kevo's own kernel compiled and ran there (a second warm-up finds Triton's cache warm)."""
    import subprocess
    import sys

    probe = ("import torch; from platforms import get_platform; p = get_platform('cuda'); p.warm_up(); "
             "assert torch.cuda.is_initialized(); "
             "from platforms.warm_kernel import touch; x = torch.zeros(16, device=p.device()); touch(x); "
             "assert x.tolist() == [1.0] * 16; print('warm')")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "warm" in done.stdout


def test_an_idle_worker_gives_back_what_its_checks_held():
    """A worker's flush buffer, which lives as long as the worker, is made at its start (warm_up):
    made later, out of a freed block of gigabytes that the checks held, it kept that whole
    segment, and a full release gave nothing back (6.1 GB an idle worker held on an H100)."""
    import subprocess
    import sys

    probe = ("import torch; from platforms import get_platform; p = get_platform('cuda'); p.warm_up(); "
             "big = torch.empty(1 << 29, device=p.device()); del big; "  # 2 GiB a check held, freed and cached
             "p.flush_cache(); p.release_memory(); "
             "print('held', torch.cuda.memory_reserved(p.index))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    held = int(done.stdout.split("held")[-1])
    assert held < 1 << 30, f"{held / 2**30:.2f} GiB still reserved after a full release"


def test_torch_compile_is_timed_as_the_incumbent_by_the_same_clock(gpu_evaluator):
    """fitness.judge.incumbent on a real GPU: torch.compile of the reference, checked against it, timed alone
    with eager beside it; for this memory-bound op both near the seed's own time, and TF32 changes nothing."""
    from fitness import Incumbent

    seed = gpu_evaluator.evaluate(SEED)
    compiled = gpu_evaluator.time_incumbent(Incumbent())
    assert compiled.status is Status.ACCEPTED and compiled.reason == "", compiled.reason
    assert compiled.max_abs_diff <= gpu_evaluator.cutoff
    assert compiled.runtime_ms > 0 and compiled.reference_ms > 0 and compiled.runtime_spread is not None
    # the same few hundred MB moved by all three: within a factor of two of each other
    assert 0.5 < compiled.runtime_ms / seed.runtime_ms < 2 and 0.5 < compiled.reference_ms / seed.runtime_ms < 2
    import torch

    before = torch.get_float32_matmul_precision()
    tf32 = gpu_evaluator.time_incumbent(Incumbent(tf32=True))
    assert tf32.status is Status.ACCEPTED and torch.get_float32_matmul_precision() == before
    assert gpu_evaluator.evaluate(SEED).status is Status.ACCEPTED  # the judge still judges after it


def test_timed_runs_are_checked_from_the_profilers_record(gpu_evaluator):
    """A timed run on a GPU goes without the dispatch trace; the profiler that times it records its
    PyTorch operators instead (``platforms.timeline.DeviceTimeline.host_ops``), and a Triton
    launch adds none of its own. A candidate that computes with PyTorch once its checks are
    over is ``forbidden`` all the same."""
    import torch

    from platforms import TimingSettings, get_platform, time_runs

    spec = importlib.util.spec_from_file_location("elementwise_seed", PROBLEMS / "elementwise" / "seed.py")
    seed = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(seed)
    x = torch.rand(1 << 20, device="cuda")

    def run(i, args):
        out = torch.empty_like(x)
        seed.gated_mul_kernel[(x.numel() // 1024,)](x, x, out, x.numel(), BLOCK_SIZE=1024)
        if i == 2:
            torch.mm(x[:64, None], x[None, :64])
        return out

    timing = time_runs(get_platform("cuda"), run, TimingSettings(warmup_ms=0, window_ms=0, min_runs=4))
    assert timing.host_ops == [["empty_like"], ["empty_like"],
                               ["empty_like", "slice", "unsqueeze", "unsqueeze", "slice", "mm"], ["empty_like"]]
    # right answers, computed by PyTorch once the checks are over: past the first 10 calls (the checks before the
    # timing take 8 on the CPU; a window here has some 20 runs with its warm-up, so a later start went unseen)
    late = SEED.replace("    def forward(self, x, y):", "    calls = 0\n\n    def forward(self, x, y):", 1)
    late = late.replace(LAUNCH, LAUNCH + "\n        self.calls += 1\n        if self.calls > 10:\n"
                                 "            out.copy_(x * torch.sigmoid(y))", 1)
    assert late.count("self.calls") == 2
    result = gpu_evaluator.evaluate(late)
    assert result.status is Status.FORBIDDEN and "aten.sigmoid" in result.reason, (result.status, result.reason)


def test_no_l2_is_set_aside_for_persisting_lines_and_each_flush_resets_them():
    from platforms.cuda import CudaPlatform

    platform = CudaPlatform()
    platform.warm_up()
    assert platform.persisting_l2_bytes() == 0  # outside a worker: nothing read
    platform.worker_setup()
    assert platform._l2 is not None and platform.persisting_l2_bytes() == 0
    try:
        assert platform._l2.set_aside(4 << 20)  # what a candidate's C code could do
        assert platform.persisting_l2_bytes() > 0  # the worker's check after its time step reads it
        reset = platform._l2._reset
        calls = []
        platform._l2._reset = lambda: calls.append(reset())
        platform.flush_cache()
        assert calls == [0]  # the flush turned persisting lines back into normal ones (CUDA_SUCCESS)
    finally:
        platform._l2.set_aside(0)


def test_l2_persisting_attack_is_refused_with_the_screen_off():
    from fitness import EvalSettings

    source = (PROBLEMS.parent / "tests" / "attacks" / "l2_persisting_window_elementwise.py").read_text()
    with Evaluator(PROBLEMS / "elementwise" / "reference.py", platform="auto", shapes=SHAPES,
                   settings=EvalSettings(screen=False)) as evaluator:
        result = evaluator.evaluate(source)
    assert result.status is Status.FORBIDDEN, result.reason  # the guard refuses ctypes from the candidate


def test_a_graph_captured_in_forward_is_refused_with_the_screen_off():
    from fitness import EvalSettings

    source = (PROBLEMS.parent / "tests" / "attacks" / "graph_capture_first_call_elementwise.py").read_text()
    with Evaluator(PROBLEMS / "elementwise" / "reference.py", platform="auto", shapes=SHAPES,
                   settings=EvalSettings(screen=False)) as evaluator:
        result = evaluator.evaluate(source)
    assert result.status is Status.FORBIDDEN, result.reason
    assert "operator" in result.reason or "aten" in result.reason, result.reason  # the dispatch trace's
