"""How kevo's timer compares with triton.testing.do_bench, and how much a
kernel's figure moves between evaluations, with and without the device trace.

Each suite seed is evaluated ``--repeats`` times in one warm evaluator per
timing method; between-evaluation spread = (max - min) / median of those
figures. do_bench times the same seed's forward in this process, back to back
with L2 flushes (its own protocol), as an outside yardstick.

    python bench/timing_bench.py --out timing.json          # on a GPU machine

``--windows`` compares timing windows instead (device trace on), each as
WARM-UP+WINDOW in milliseconds, with the suite's ``--shape`` overrides:

    python bench/timing_bench.py --windows 25+100 10+10 --problems elementwise softmax
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.shapes import SUITE, apply_shapes  # noqa: E402
from fitness import EvalSettings, Evaluator, Status  # noqa: E402
from fitness.problem import make_inputs  # noqa: E402
from platforms import get_platform  # noqa: E402


def do_bench_ms(evaluator: Evaluator, seed_path: Path) -> float:
    """triton.testing.do_bench of the seed's forward on the evaluator's inputs (trusted code)."""
    import torch
    import triton.testing

    spec = importlib.util.spec_from_file_location("kevo_bench_seed", seed_path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    problem = evaluator.main.problem
    model = module.ModelNew(*problem.get_init_inputs()).to(evaluator.device)
    inputs = make_inputs(problem, 0, evaluator.device)
    with torch.no_grad():
        return triton.testing.do_bench(lambda: model(*inputs), return_mode="median")


def measure(name: str, device: str, repeats: int, windows: list[str] | None = None,
            shape_args: list[str] | None = None) -> dict:
    ref = ROOT / "problems" / name / "reference.py"
    seed = ROOT / "problems" / name / "seed.py"
    source = seed.read_text()
    shapes = apply_shapes(ref, shape_args or [])
    row: dict = {"problem": name, "shapes": shapes}
    platform = get_platform(device)
    if windows:
        methods = {w: dataclasses.replace(platform.timing, warmup_ms=float(w.split("+")[0]),
                                          window_ms=float(w.split("+")[1])) for w in windows}
    else:
        methods = {key: dataclasses.replace(platform.timing, device_trace=trace)
                   for key, trace in (("trace", True), ("events", False))}
    for key, timing in methods.items():
        settings = EvalSettings(timing=timing)
        trace = timing.device_trace
        with Evaluator(ref, platform=platform, shapes=shapes, settings=settings) as ev:
            ev.evaluate(source)  # starts the worker, compiles the seed
            figures, walls = [], []
            for _ in range(repeats):
                t0 = time.perf_counter()
                result = ev.evaluate(source)
                walls.append(time.perf_counter() - t0)
                if result.status is not Status.ACCEPTED:
                    raise RuntimeError(f"{name}: seed not accepted: {result.reason}")
                figures.append(result.runtime_ms)
            med = statistics.median(figures)
            row[key] = {"median_ms": med, "between_evals": (max(figures) - min(figures)) / med,
                        "runs": figures, "within_spread": result.runtime_spread,
                        "reference_ms": result.reference_ms, "eval_wall_s": statistics.median(walls)}
            if trace and "do_bench_ms" not in row:
                row["do_bench_ms"] = do_bench_ms(ev, seed) if platform.name != "cpu" else float("nan")
    print(json.dumps(row), file=sys.stderr, flush=True)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--problems", nargs="*", default=SUITE)
    parser.add_argument("--windows", nargs="+", metavar="WARMUP+WINDOW", help="compare these windows (ms)")
    parser.add_argument("--shape", action="append", default=[], metavar="NAME=VALUE")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    rows = [measure(name, args.device, args.repeats, args.windows, args.shape) for name in args.problems]
    if args.windows:
        print("| problem | shapes | do_bench ms | window (warm-up + window ms) | median ms | between evals "
              "| within one window (p90 - p10) / median | eval wall s |")
        print("|---|---|---|---|---|---|---|---|")
        for r in rows:
            shapes = ", ".join(f"{k}={v}" for k, v in r["shapes"].items()) or "defaults"
            for w in args.windows:
                m = r[w]
                print(f"| {r['problem']} | {shapes} | {r['do_bench_ms']:.4g} | {w} | {m['median_ms']:.4g} "
                      f"| {100 * m['between_evals']:.1f}% | {100 * m['within_spread']:.1f}% | {m['eval_wall_s']:.2f} |")
    else:
        print_methods(rows)
    if args.out:
        args.out.write_text(json.dumps(rows, indent=1))


def print_methods(rows: list[dict]) -> None:
    print("| problem | do_bench ms | trace ms | between evals | events ms | between evals | eval wall s (trace / events) |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        t, e = r["trace"], r["events"]
        print(f"| {r['problem']} | {r['do_bench_ms']:.4g} | {t['median_ms']:.4g} | {100 * t['between_evals']:.1f}% "
              f"| {e['median_ms']:.4g} | {100 * e['between_evals']:.1f}% | {t['eval_wall_s']:.2f} / {e['eval_wall_s']:.2f} |")


if __name__ == "__main__":
    main()
