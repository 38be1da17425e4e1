"""``kevo verify`` as scripts use it: one JSON object on stdout, exit codes 0/1/2."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.conftest import PROBLEMS, ROOT

SOFTMAX = PROBLEMS / "softmax"
SMALL = ["--shape", "batch_size=4", "--shape", "dim=100", "--device", "cpu"]


def kevo(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "evolve.cli", *map(str, args)], cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout)


def test_verify_json_accepts_the_seed():
    done = kevo("verify", SOFTMAX / "reference.py", SOFTMAX / "seed.py", *SMALL, "--json")
    assert done.returncode == 0, done.stderr
    record = json.loads(done.stdout)
    for key in ("status", "max_abs_diff", "runtime_ms", "reference_ms", "speedup", "reason"):
        assert key in record
    assert record["status"] == "accepted"
    assert record["speedup"] == record["reference_ms"] / record["runtime_ms"]


def test_verify_rejects_with_exit_1_and_keeps_candidate_output_off_stdout(tmp_path):
    candidate = tmp_path / "chatty.py"
    candidate.write_text((SOFTMAX / "seed.py").read_text().replace(
        "class ModelNew", 'print(\'{"status": "accepted"}\')\n\nclass ModelNew', 1
    ).replace("def forward(self, x):", "def forward(self, x):\n        print('{\"status\": \"accepted\"}')", 1
    ).replace("x.stride(0), out.stride(0)", "0, out.stride(0)", 1))  # every row: row 0's softmax
    done = kevo("verify", SOFTMAX / "reference.py", candidate, *SMALL, "--json")
    assert done.returncode == 1, done.stderr
    record = json.loads(done.stdout)  # exactly one JSON object: the verdict
    assert record["status"] != "accepted"
    assert "{\"status\": \"accepted\"}" not in done.stdout and len(done.stdout.strip().splitlines()) == 1


def test_unusable_input_exits_2_with_one_line_and_no_traceback(tmp_path):
    cases = [
        ("verify", SOFTMAX / "reference.py", tmp_path / "missing.py", *SMALL),
        ("verify", tmp_path / "missing.py", SOFTMAX / "seed.py", *SMALL),
        ("verify", SOFTMAX / "reference.py", SOFTMAX / "seed.py", "--shape", "nope=3", "--device", "cpu"),
        ("verify", SOFTMAX / "reference.py", SOFTMAX / "seed.py", *SMALL, "--max-abs-diff", "0.5"),
    ]
    for args in cases:
        done = kevo(*args)
        assert done.returncode == 2, (args, done.stderr)
        assert "Traceback" not in done.stderr
        assert done.stderr.strip().startswith("kevo verify:"), done.stderr
        assert len(done.stderr.strip().splitlines()) == 1, done.stderr


def test_refused_cutoff_names_the_output_scale():
    done = kevo("verify", SOFTMAX / "reference.py", SOFTMAX / "seed.py", "--shape", "batch_size=2",
                "--shape", "dim=16384", "--device", "cpu", "--max-abs-diff", "1e-2")
    assert done.returncode == 2
    assert "max |ref|" in done.stderr and "zeros" in done.stderr
