"""What profiling a parent costs, and what the profiler says of each suite seed.

For each problem, the seed is evaluated once (its runtime feeds the roofline)
and then profiled the way a run profiles a parent (``Evaluator.profile``:
the platform's profiler, ncu on NVIDIA or rocprofv3 on AMD, with the device
to itself), ``--repeats`` times; the wall time of each profile is the cost a
run pays once per new parent.

    python bench/profile_bench.py --shape batch_size=1024 --out profile.json      # on a GPU machine
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.shapes import add_suite_options, apply_shapes  # noqa: E402
from fitness import Evaluator  # noqa: E402


def measure(name: str, device: str, shape_args: list[str], repeats: int) -> dict:
    reference = ROOT / "problems" / name / "reference.py"
    shapes = apply_shapes(reference, shape_args)
    source = (ROOT / "problems" / name / "seed.py").read_text()
    with Evaluator(reference, platform=device, shapes=shapes) as evaluator:
        result = evaluator.evaluate(source)
        walls, record = [], None
        for _ in range(repeats):
            t0 = time.perf_counter()
            record = evaluator.profile(source, result.runtime_ms)
            walls.append(time.perf_counter() - t0)
    row = {"problem": name, "shapes": shapes, "status": result.status.value, "runtime_ms": result.runtime_ms,
           "tool": record["tool"], "tool_version": record.get("tool_version", ""),
           "bottleneck": record["bottleneck"], "reason": record.get("reason", ""),
           "profile_wall_s": statistics.median(walls), "walls": walls}
    print(json.dumps(row), file=sys.stderr, flush=True)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_suite_options(parser, repeats=2)
    args = parser.parse_args()
    rows = [measure(name, args.device, args.shape, args.repeats) for name in args.problems]
    print("| problem | seed ms | tool | bottleneck class | profile wall s (median) |")
    print("|---|---|---|---|---|")
    for r in rows:
        runtime = f"{r['runtime_ms']:.4g}" if r["runtime_ms"] else r["status"]
        print(f"| {r['problem']} | {runtime} | {r['tool']} {r['tool_version']} | {r['bottleneck']} "
              f"| {r['profile_wall_s']:.2f} |")
    if args.out:
        args.out.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
