"""bench/compile_sweep_table.py: every run of a sweep is a row, one set aside to run again alone included; its
ratios come from the clean clock only."""

from __future__ import annotations

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


def test_the_sweep_table_takes_its_ratios_from_the_clean_clock_only(tmp_path):
    """best vs compile comes from the end-of-run rounds (torch.compile timed alone, interleaved); the
    capture's in-run times are shown but never make a ratio, and a run without rounds says why."""
    from evolve.search.confirm import CONFIRMED_EVENT
    from evolve.session import COMPILED_SEED_FILE, RECORDING_FILE
    from population_store import Individual, RunStore, source_hash

    def run(name: str, confirmed: dict | None) -> None:
        run_dir = tmp_path / "sweep" / name
        run_dir.mkdir(parents=True)
        (run_dir / RECORDING_FILE).write_text(json.dumps({"kernels": {"k": {}}, "compiled_ms": 0.1,
                                                          "compiled_protocol_ms": 0.3}))
        (run_dir / COMPILED_SEED_FILE).write_text("seed")
        with RunStore.create(run_dir / "run.sqlite", {"problem": {}, "search": {}}) as store:
            store.add_individual(Individual(None, "seed", source_hash("seed"), 0, 0, "seed", [], {},
                                            "accepted", 0.4, {"status": "accepted", "reference_ms": 0.5,
                                                              "platform": "cuda"}))
            store.add_individual(Individual(None, "best", source_hash("best"), 1, 0, "mutation", [1], {},
                                            "accepted", 0.2, {"status": "accepted", "reference_ms": 0.5,
                                                              "platform": "cuda"}))
            if confirmed:
                store.record_event(CONFIRMED_EVENT, confirmed)

    clean = {"ratio": 0.9, "low": 0.88, "high": 0.93, "compile_ms": 0.19, "faster": "torch.compile",
             "seed": {"ratio": 0.5, "low": 0.5, "high": 0.5}}
    run("confirmed", {"vs_compile": clean})
    run("in-run only", None)
    table = tmp_path / "table.json"
    subprocess.run([sys.executable, str(ROOT / "bench/compile_sweep_table.py"), str(tmp_path / "sweep"), "--json",
                    str(table)], capture_output=True, text=True, cwd=ROOT, check=True)
    rows = {row["run"]: row for row in json.loads(table.read_text())}
    row = rows["confirmed"]
    assert row["best_vs_compile"] == 0.9 and row["best_vs_compile_range"] == [0.88, 0.93]
    assert row["seed_vs_compile"] == 0.5 and row["clean_compiled_ms"] == 0.19 and row["faster"] == "torch.compile"
    row = rows["in-run only"]
    assert "best_vs_compile" not in row and "seed_vs_compile" not in row  # 0.3 ms in-run: no ratio from it
    assert row["compiled_protocol_ms"] == 0.3 and "timed again when the run stops" in row["no_clean_compile"]
