"""bench/throughput_bench.py: a fresh process per candidate judges it as the config says."""

from __future__ import annotations

from tests.conftest import ROOT


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
