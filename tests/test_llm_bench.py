"""bench/llm_bench.py against the loopback replay server: one small problem on the CPU, shape overrides,
one sample right at once and one right after a repair turn."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

from tests.conftest import ROOT
from tests.llm_replay_server import ReplayServer
from tests.test_evolve_llm import MODEL, REFERENCE, REPLY_USD, reply, written
from tests.test_llm_loop import BROKEN, FIX


pytestmark = pytest.mark.usefixtures("offline_llm")


class Writer(ReplayServer):
    """Right at once when asked to work on anything (focus general); a hard-coded size otherwise, fixed when shown."""

    def _next(self, body, headers):
        self.record(body)
        prompt = body["messages"][-1]["content"]
        if "## Your last attempt, and what became of it" in prompt:
            return reply(FIX)
        if "Focus: whatever holds this kernel back most" in prompt:
            return reply(written(256, 2))
        return reply(f"Hard-coded.\n\n```python\n{BROKEN}```\n")


def run_bench(argv: list[str]) -> str:
    """bench/llm_bench.py on its command line (the replay server's key from the environment); its stdout."""
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "llm_bench.py"), *argv], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def test_the_llm_bench_reports_correctness_speed_tokens_and_dollars_per_problem(tmp_path):
    folder = tmp_path / "level0"
    folder.mkdir()
    shutil.copy(REFERENCE, folder / "1_Gated_elementwise.py")
    out = tmp_path / "llm.jsonl"
    with Writer() as server:
        argv = [str(folder), "--model", MODEL, "--api-base", server.base_url, "--device", "cpu",
                "--shape", "batch_size=4", "--shape", "dim=100", "--samples", "2", "--repair-turns", "1",
                "--timeout-s", "30", "--out", str(out)]
        table = run_bench(argv)
        assert len(server.requests) == 3  # two first kernels, one repair
        (row,) = [json.loads(line) for line in out.read_text().splitlines()]
        run_bench(argv)
        assert len(server.requests) == 3  # recorded already: nothing asked again
    assert row["status"] == "done" and row["shapes"] == {"batch_size": 4, "dim": 100}
    assert (row["samples"], row["correct_first"], row["correct"]) == (2, 0.5, 1.0)
    assert sorted(row["turns_to_correct"]) == [0, 1]
    assert row["statuses"]["accepted"] == 2 and sum(row["statuses"].values()) == 3
    assert 0 <= row["fast_1_eager"] <= 1 and row["best_speedup_eager"] > 0  # the interpreter is slow: a CPU figure
    assert row["fast_1_compiled"] is None and row["compiled_ms"] is None  # not known, not measured
    assert row["requests"] == 3 and row["prompt_tokens"] == 3 * 2000 and row["completion_tokens"] == 3 * 400
    assert row["cost_usd"] == pytest.approx(3 * REPLY_USD)
    assert "1_Gated_elementwise" in table and "mean over 1 problems" in table
