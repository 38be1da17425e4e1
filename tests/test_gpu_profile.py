"""Real ncu on suite kernels: an elementwise kernel is memory-bound, a large matmul compute-bound.

Needs an NVIDIA GPU and Nsight Compute (``ncu`` on PATH, in /usr/local/cuda/bin
or /opt/nvidia/nsight-compute, or named by ``KEVO_NCU``); skipped otherwise.
"""

from __future__ import annotations

import os

import pytest

from tests.conftest import PROBLEMS

from fitness.profiling.candidate import profile_candidate
from platforms.profiling import COMPUTE_BOUND, MEMORY_BOUND, NcuProfiler, profiler_for

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def ncu() -> NcuProfiler:
    import torch

    if not torch.cuda.is_available() or torch.version.hip is not None:
        pytest.skip("needs an NVIDIA GPU")
    profiler = profiler_for("cuda", ncu_bin_path=os.environ.get("KEVO_NCU") or None)
    if not isinstance(profiler, NcuProfiler):
        pytest.skip(profiler.disabled_reason or "no ncu")
    return profiler


def profile(profiler: NcuProfiler, problem: str):
    import torch

    source = (PROBLEMS / problem / "seed.py").read_text()
    record = profile_candidate(profiler, PROBLEMS / problem / "reference.py", {}, source, "cuda", 0, 300.0,
                               device_name=torch.cuda.get_device_name(0))
    assert record.measured, record.reason
    assert record.tool == "ncu" and record.tool_version != "unknown"
    return record


def test_elementwise_kernel_is_memory_bound(ncu):
    record = profile(ncu, "elementwise")  # 4096 x 16384 fp32: 768 MiB of traffic a forward
    kernel = record.kernel("gated_mul_kernel")
    assert kernel.launches == 1  # the measured run only: warm-up and input set-up are outside the region
    assert record.scale == "" and record.cost["device_s"] < record.cost["seconds"]  # 768 MiB: not halved, kept
    assert record.cost["replay_passes"] >= 1 and record.cost["tool_runs"] == 2
    assert kernel.bottleneck == MEMORY_BOUND, record.summary
    assert record.bottleneck == MEMORY_BOUND, record.summary


def test_large_matmul_is_compute_bound(ncu):
    record = profile(ncu, "matmul")  # 4096^3 fp32 (IEEE, no tensor cores): 137 GFLOP a forward
    kernel = record.kernel("matmul_kernel")
    assert kernel.bottleneck == COMPUTE_BOUND, record.summary
    assert record.bottleneck == COMPUTE_BOUND, record.summary


THIEF = '''
import os as _os
for _path in ({environ!r}, {planted!r}):
    try:
        with open(_path, "rb") as _file:
            _file.read()
    except OSError:
        continue
    raise SystemExit(f"read {{_path}}")  # a profile that reads a secret fails, and says so
'''


def test_a_profiled_candidate_reads_neither_the_evaluator_s_environment_nor_the_checkout(ncu, tmp_path, monkeypatch):
    """The target program under real ncu is confined as a worker is (tests/test_secrets.py has the whole attack)."""
    import torch

    from fitness.profiling import candidate
    from tests.conftest import ROOT

    planted = ROOT / f".env.kevo-test-{os.getpid()}"
    planted.write_text("OPENAI_API_KEY=sk-planted\n")
    source = THIEF.format(environ=f"/proc/{os.getpid()}/environ", planted=str(planted)) + \
        (PROBLEMS / "elementwise" / "seed.py").read_text()
    shapes = {"batch_size": 256, "dim": 4096}

    def run():
        return profile_candidate(ncu, PROBLEMS / "elementwise" / "reference.py", shapes, source, "cuda", 0, 300.0,
                                 device_name=torch.cuda.get_device_name(0))

    try:
        record = run()
        assert record.measured, record.reason
        monkeypatch.setattr(candidate, "confined", lambda command, env, *where: (command, env))
        assert not run().measured  # unconfined, the same candidate reads both and fails
    finally:
        planted.unlink()
