"""bench/search_bench.py: the grid is measured once and resumed, and each strategy is replayed from it.

Most tests measure a synthetic grid (a fake evaluator whose runtime is a
function of the tunables); the last one runs the real evaluator on the CPU.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math

import pytest

from fitness import EvalResult, Status
from operators import find_tunables, params_of
from tests.conftest import PROBLEMS, ROOT

spec = importlib.util.spec_from_file_location("search_bench", ROOT / "bench" / "search_bench.py")
search_bench = importlib.util.module_from_spec(spec)
spec.loader.exec_module(search_bench)

SPACE = {"matmul_kernel.BLOCK_M": [32, 64, 128], "matmul_kernel.BLOCK_N": [32, 64, 128],
         "matmul_kernel.BLOCK_K": [16, 32], "matmul_kernel.num_warps": [2, 4, 8],
         "matmul_kernel.num_stages": [2, 3]}
GRID = math.prod(len(v) for v in SPACE.values())
BEST = {name: values[-1] for name, values in SPACE.items()}  # the last point of the grid order


class Crash(Exception):
    """Stands for the process being killed."""


class FakeEvaluator:
    """Runtimes smooth in the tunables, fastest at ``BEST``; can die after some evaluations."""

    platform = argparse.Namespace(name="fake", device_name=lambda: "fake device")
    cutoff = 0.01
    cutoff_rule = "given"

    def __init__(self, log: list, die_after: int | None = None) -> None:
        self.log, self.die_after = log, die_after

    def evaluate(self, source: str) -> EvalResult:
        if self.die_after is not None and len(self.log) >= self.die_after:
            raise Crash
        params = params_of(source)
        self.log.append(params)
        distance = sum(abs(math.log2(BEST[n] / v)) for n, v in params.items() if n in BEST)
        return EvalResult(Status.ACCEPTED, max_abs_diff=0.0, runtime_ms=1.0 + distance / 8,
                          runtime_spread=0.0, reference_ms=2.0, platform="fake")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        pass


def write_config(tmp_path, problem="matmul", shapes="{M: 33, K: 47, N: 29}", budget=60, space=SPACE):
    lines = "".join(f"    {name}: {values}\n" for name, values in space.items())
    path = tmp_path / f"{problem}.yaml"
    seed = tmp_path / "seed.py"  # the seed with its structural choices pinned (a config's space holds numbers)
    pinned = {t.name: [t.value] for t in find_tunables((PROBLEMS / problem / "seed.py").read_text())
              if isinstance(t.value, str)}
    seed.write_text(f"KEVO_SPACE = {pinned!r}\n" + (PROBLEMS / problem / "seed.py").read_text())
    path.write_text(f"""\
problem:
  reference: {PROBLEMS}/{problem}/reference.py
  seeds: [{seed}]
  shapes: {shapes}
search: {{population_size: 6, max_evaluations: {budget}, patience: 2, seed: 0}}
operators:
  space:
{lines}platform: cpu
""")
    return path


def run(config, cache, log, die_after=None, seeds=3, **extra):
    args = argparse.Namespace(space=[], device=None, max_grid=3000, within=0.02, budget=None, seeds=seeds, **extra)
    return search_bench.bench_problem(config, args, search_bench.GridCache(cache),
                                      lambda _config: FakeEvaluator(log, die_after))


def test_a_killed_grid_resumes_and_a_complete_one_is_never_measured_again(tmp_path):
    config, cache = write_config(tmp_path), tmp_path / "grid.json"
    first: list = []
    with pytest.raises(Crash):
        run(config, cache, first, die_after=40)
    assert len(json.loads(cache.read_text())["tables"].popitem()[1]["points"]) == 40
    second: list = []
    row = run(config, cache, second)
    assert row["evaluated_now"] == len(second) == GRID - 40
    assert not {search_bench.point_key(p) for p in first} & {search_bench.point_key(p) for p in second}
    third: list = []
    again = run(config, cache, third, die_after=0)  # an evaluator that is used would raise
    assert third == [] and again["evaluated_now"] == 0
    assert again["strategies"] == row["strategies"]


def test_each_strategy_is_replayed_against_the_grid(tmp_path):
    row = run(write_config(tmp_path), tmp_path / "grid.json", [])
    strategies = row["strategies"]
    assert row["grid_size"] == GRID and row["grid_best_ms"] == 1.0 and row["points_within"] == 1
    assert row["best_speedup"] == 2.0 and row["eager_ms"] == 2.0
    assert strategies["grid"]["per_seed"] == [GRID] * 3  # the best is the grid's last point
    # The real loop finds the best of a smooth landscape well before the grid order does.
    assert strategies["kevo"]["reached"] == 3 and strategies["kevo"]["median"] < GRID / 2
    assert all(c is None or 1 <= c <= 60 for c in strategies["random"]["per_seed"])
    configured = strategies["kevo_as_configured"]
    assert all("patience" in c["stop_reason"] or c["spent"] == 60 for c in configured)
    table = search_bench.markdown([row], 0.02, 3)
    assert f"| matmul | {GRID} ({GRID}) | 1 | 2 | 2.00x | 1 | 60 |" in table
    assert "single evaluation" in table


def test_a_grid_larger_than_the_guard_is_refused_before_anything_is_measured(tmp_path, capsys):
    config = write_config(tmp_path)
    code = search_bench.main(["--config", str(config), "--cache", str(tmp_path / "grid.json"), "--max-grid", "10"])
    assert code == 2
    assert f"the grid holds {GRID} points, more than --max-grid 10" in capsys.readouterr().err
    assert not (tmp_path / "grid.json").exists()


def test_the_real_evaluator_end_to_end_on_the_cpu(tmp_path, capsys):
    space = {"gated_mul_kernel.BLOCK_SIZE": [128, 1024], "gated_mul_kernel.num_warps": [2, 4]}
    config = write_config(tmp_path, "elementwise", "{batch_size: 4, dim: 100}", budget=4, space=space)
    argv = ["--config", str(config), "--cache", str(tmp_path / "grid.json"), "--out", str(tmp_path / "out.json"),
            "--seeds", "2", "--device", "cpu"]
    assert search_bench.main(argv) == 0
    row = json.loads((tmp_path / "out.json").read_text())["problems"][0]
    assert row["grid_size"] == row["accepted"] == row["evaluated_now"] == 4
    assert row["sessions"][0]["platform"] == "cpu"
    assert row["strategies"]["random"]["reached"] == 2  # the budget covers the whole grid
    assert "| elementwise | 4 (4) |" in capsys.readouterr().out


def test_throughput_fresh_mode_verifies_with_the_configs_cutoff_shapes_and_dtype(tmp_path, monkeypatch):
    import subprocess as real_subprocess

    from bench import throughput_bench
    from evolve.config import config_from_dict

    cfg = config_from_dict({"problem": {"reference": str(ROOT / "problems" / "softmax" / "reference.py"),
                                        "seeds": [str(ROOT / "problems" / "softmax" / "seed.py")],
                                        "shapes": {"batch_size": 4, "dim": 100}, "dtype": "float16"},
                            "fitness": {"max_abs_diff": 0.003}, "platform": "cpu"}, origin="test")
    seen = []

    def run(argv, **kwargs):
        seen.append(argv)
        return real_subprocess.CompletedProcess(argv, 0, "{}", "")

    monkeypatch.setattr(throughput_bench.subprocess, "run", run)
    throughput_bench.fresh_processes(cfg, ["source"])
    argv = seen[0]
    assert "--max-abs-diff=0.003" in argv and "--dtype=float16" in argv
    assert "--shape=batch_size=4" in argv and "--shape=dim=100" in argv
