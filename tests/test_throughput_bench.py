"""bench/throughput_bench.py: a fresh process per candidate judges it as the config says."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.conftest import PROBLEMS, ROOT


def test_throughput_fresh_mode_verifies_with_the_configs_cutoff_shapes_and_dtype(tmp_path):
    config = tmp_path / "softmax.yaml"
    config.write_text(json.dumps({"problem": {"reference": str(PROBLEMS / "softmax" / "reference.py"),
                                              "seeds": [str(PROBLEMS / "softmax" / "seed.py")],
                                              "shapes": {"batch_size": 4, "dim": 100}, "dtype": "float16"},
                                  "fitness": {"max_abs_diff": 0.003}, "platform": "cpu"}))
    out = tmp_path / "throughput.json"
    done = subprocess.run([sys.executable, "bench/throughput_bench.py", "--config", str(config), "--candidates", "1",
                           "--plans", "--fresh", "1", "--out", str(out)], cwd=ROOT, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    (row,) = json.loads(out.read_text())["rows"]
    assert row["plan"] == "fresh process per candidate" and len(row["per_candidate_s"]) == 1
    options = row["verify_options"]
    assert "--max-abs-diff=0.003" in options and "--dtype=float16" in options
    assert "--shape=batch_size=4" in options and "--shape=dim=100" in options
