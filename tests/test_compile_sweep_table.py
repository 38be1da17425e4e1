"""bench/compile_sweep_table.py: every run of a sweep is a row, one set aside to run again alone included."""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _ended(folder: Path, status: str, reason: str) -> None:
    folder.mkdir(parents=True)
    (folder / f"{status}.json").write_text(json.dumps({"name": folder.name, "status": status, "reason": reason}))


def test_a_run_set_aside_for_lack_of_memory_is_a_row_until_it_runs_again(tmp_path):
    _ended(tmp_path / "000-1_A", "skipped", "no Triton-only seed")
    _ended(tmp_path / ".001-2_B.crowded", "skipped", "torch.compile failed: OutOfMemoryError")
    _ended(tmp_path / ".002-3_C.crowded", "failed", "out of memory")
    _ended(tmp_path / "002-3_C", "skipped", "no Triton-only seed")  # C ran again alone
    table = tmp_path / "table.json"
    out = subprocess.run([sys.executable, str(ROOT / "bench/compile_sweep_table.py"), str(tmp_path), "--json",
                          str(table)], capture_output=True, text=True, cwd=ROOT, check=True).stdout
    rows = {row["run"]: row for row in json.loads(table.read_text())}
    assert list(rows) == ["000-1_A", "001-2_B", "002-3_C"]
    assert rows["001-2_B"]["status"] == "set aside" and "OutOfMemoryError" in rows["001-2_B"]["reason"]
    assert rows["002-3_C"]["status"] == "skipped"
    assert "| 001-2_B |" in out and "set aside" in out
