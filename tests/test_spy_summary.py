"""bench/spy_summary.py: py-spy's raw stacks read back by process kind, kevo's functions and leaves."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# The shape of py-spy's --subprocesses --idle --threads --format raw lines (taken from a real record)
RAW = """\
process 10:"python -m evolve.cli run c.yaml";thread (10): MainThread;main (evolve/cli.py:5);wait (threading.py:320) 40
process 10:"python -m evolve.cli run c.yaml";process 20:"ray::EvaluatorActor.evaluate";thread (21): Thread-2;Evaluator._time (/x/fitness/judge/evaluator.py:290);TimingLane.exclusive (/x/fitness/judge/lane.py:60);wait (threading.py:320) 30
process 10:"python -m evolve.cli run c.yaml";process 20:"ray::EvaluatorActor.evaluate";thread (22): PythonGCThread;gc_loop (ray/_private/gc.py:3) 25
process 10:"python -m evolve.cli run c.yaml";process 20:"ray::EvaluatorActor.evaluate";process 30:"/v/python -m fitness.worker 6 5 cuda 0";thread (30): MainThread;Harness.call (/x/fitness/worker/harness.py:222);compile (triton/compiler/compiler.py:300) 50
"""


def spy_summary(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "bench/spy_summary.py", *args], cwd=ROOT, capture_output=True, text=True)


def test_stacks_are_summed_by_process_kind_and_function(tmp_path):
    raw = tmp_path / "raw.txt"
    raw.write_text(RAW)
    done = spy_summary(str(raw), "--rate", "50", "--top", "10", "--json")
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert set(summary) == {"driver", "ray actor", "worker"}
    assert summary["driver"]["sampled_s"] == 0.8
    actor = summary["ray actor"]
    assert actor["sampled_s"] == 1.1 and actor["threads_s"] == {"Thread-2": 0.6, "PythonGCThread": 0.5}
    assert actor["own_inclusive_s"] == {"Evaluator._time (judge/evaluator.py)": 0.6,
                                        "TimingLane.exclusive (judge/lane.py)": 0.6}
    assert actor["leaves_s"] == {"wait (threading.py)": 0.6, "(stacks without kevo's code)": 0.5}
    assert summary["worker"]["leaves_s"] == {"compile (compiler/compiler.py)": 1.0}


def test_the_command_line_refuses_an_empty_record(tmp_path):
    empty = tmp_path / "spy.txt"
    empty.write_text("")
    done = spy_summary(str(empty))
    assert done.returncode == 1 and "no samples" in done.stderr
    raw = tmp_path / "raw.txt"
    raw.write_text(RAW)
    done = spy_summary(str(raw), "--rate", "50")
    assert done.returncode == 0 and "== worker: 1.0 s" in done.stdout, done.stderr
