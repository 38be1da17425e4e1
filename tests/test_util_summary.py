"""bench/util_summary.py: the device's busy share from nvidia-smi's samples, start-up left out."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def util_summary(*args: str) -> str:
    done = subprocess.run([sys.executable, "bench/util_summary.py", *args], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_the_samples_of_the_work_are_summarised_and_the_rest_left_out(tmp_path):
    csv = tmp_path / "real-size.util.csv"
    csv.write_text("2026/12/06 10:00:00.000, 90, 60, 30000\n"
                   "2026/12/06 10:00:00.250, 100, 70, 31000\n"
                   "2026/12/06 10:00:00.500, 0, 0, 500\n"  # start-up: little memory in use
                   "2026/12/06 10:00:00.750, 80, 50, 20000\n"
                   "[N/A]\n")  # a sample nvidia-smi could not take
    line = util_summary(str(csv), "--busy-mib", "8192")
    assert line.startswith("real-size.util.csv: 3 of 4 samples")
    assert "kernel running mean 90%, quartiles 80/90/100%" in line and "memory busy mean 60%" in line
    assert "too few" in util_summary(str(csv), "--busy-mib", "40000")
