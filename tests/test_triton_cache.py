"""Triton's cache carries no candidate's binary into another's verdict (docs/EVALUATION.md, "Triton's cache").

Each evaluation compiles into a Triton cache of its own: a directory in its worker's scratch directory,
where no other worker may write (``fitness.boundary.confine``), named by a secret the evaluator draws for
the evaluation (``fitness.boundary.protocol.cache_name``); the last evaluation's is removed. What a
candidate's library code writes there (a binary under a kernel's key) is found by no later evaluation.
"""
from __future__ import annotations

import pytest

import os
from pathlib import Path

from tests.conftest import ROOT, SMALL_SHAPES, problem_path

from fitness import Evaluator, Status
from fitness.judge.ahead import compile_ahead
from platforms.cpu import CpuPlatform
from fitness.boundary.protocol import Load, ProtocolViolation, Warm, read_step
from fitness.boundary.sandbox import OWN_CACHES, WorkerProcess

HONEST = (ROOT / "tests" / "attacks" / "honest_elementwise.py").read_text()


def caches(evaluator: Evaluator) -> dict[str, Path]:
    """The Triton caches in ``evaluator``'s worker, by name."""
    scratch = Path(evaluator.channel.worker.workdir)
    return {path.name.removeprefix("triton-"): path for path in scratch.glob("kevo-worker-*/triton-*")}


def test_each_evaluation_compiles_into_a_cache_of_its_own_and_finds_nothing_planted():
    evaluator = Evaluator(problem_path("elementwise"), platform="cpu", shapes=SMALL_SHAPES["elementwise"], held_out=[])
    try:
        assert evaluator.evaluate(HONEST).status is Status.ACCEPTED
        first = caches(evaluator)
        assert list(first) == [evaluator.cache]
        # what the candidate's library code could write there: a binary under a kernel's key
        plant = first[evaluator.cache] / ("A" * 52) / "silu_gate_kernel.cubin"
        plant.parent.mkdir()
        plant.write_bytes(b"a faster binary")
        assert evaluator.evaluate(HONEST).status is Status.ACCEPTED  # the same source, judged again
        second = caches(evaluator)
        assert list(second) == [evaluator.cache] and evaluator.cache not in first  # the first is gone
        assert not any(second[evaluator.cache].rglob("*.cubin"))
        # the warm step and the evaluation of its source share theirs (the evaluation finds its kernels)
        compile_ahead(evaluator, HONEST)
        warmed = evaluator.warmed_cache[1]
        assert list(caches(evaluator)) == [warmed]
        evaluator.evaluate(HONEST)
        assert evaluator.cache == warmed
        compile_ahead(evaluator, HONEST)
        warmed = evaluator.warmed_cache[1]
        assert evaluator.evaluate(HONEST.replace("BLOCK = 1024", "BLOCK = 512")).status is Status.ACCEPTED
        assert evaluator.cache not in (warmed, "")  # another source: a cache of its own
    finally:
        evaluator.close()


@pytest.mark.parametrize("name", ["../x" + "0" * 28, "0" * 31, "0" * 32 + "/", "G" * 32, 7])
def test_a_cache_s_name_is_thirty_two_hex_digits_or_nothing(name):
    for step in (Load("s", "p", "", {}, 0, cache="0" * 32), Warm("s", "p", "", [{}], 0, cache="")):
        assert read_step(step.to_wire()) == step
        with pytest.raises(ProtocolViolation, match="cache"):
            read_step({**step.to_wire(), "cache": name})


def test_a_worker_writes_no_compile_cache_but_its_own(monkeypatch, tmp_path):
    """The user's compile caches (here each set in the environment) are not a worker's: every directory its
    policy lets it write lies in its own scratch or spill directory, but shared memory."""
    for name in OWN_CACHES:
        monkeypatch.setenv(name, str(tmp_path / name))
    worker = WorkerProcess("cpu", 0, dict(CpuPlatform.worker_env), startup_timeout=120)
    try:
        assert worker.confinement  # it started
        writable = worker.policy.writable
        assert {os.path.join(worker.workdir, folder) for folder in OWN_CACHES.values()} <= set(writable)
        assert all(d.startswith((worker.workdir, worker.spill_dir)) or d == "/dev/shm" for d in writable), writable
    finally:
        worker.stop()
