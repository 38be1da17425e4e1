"""Figures for docs/RESULTS.md: the suite's seeds against eager PyTorch and
torch.compile, the spread of repeated measurements, and the wall time of one
verify in a warm worker against a fresh Python process per candidate.

    python bench/verify_bench.py --out results.json            # on a GPU machine
    python bench/verify_bench.py --device cpu --small          # anywhere (slow, CPU figures)
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.shapes import SMALL, SUITE  # noqa: E402
from fitness import Evaluator, Status  # noqa: E402


def compiled_ms(evaluator: Evaluator) -> float | None:
    """Median time of torch.compile(reference) on the evaluator's inputs, or None."""
    import torch

    try:
        return evaluator.time_in_process(torch.compile(evaluator.main.model))
    except Exception as exc:  # torch.compile does not work everywhere; the table says so
        print(f"torch.compile failed: {type(exc).__name__}: {str(exc)[:200]}", file=sys.stderr)
        return None


def suite(device: str, small: bool) -> list[dict]:
    rows = []
    for name in SUITE:
        ref = ROOT / "problems" / name / "reference.py"
        with Evaluator(ref, platform=device, shapes=SMALL[name] if small else {}) as ev:
            t0 = time.perf_counter()
            result = ev.evaluate((ROOT / "problems" / name / "seed.py").read_text())
            wall = time.perf_counter() - t0
            row = {"problem": name, "status": result.status.value, "reason": result.reason,
                   "max_abs_diff": result.max_abs_diff, "cutoff": ev.cutoff,
                   "seed_ms": result.runtime_ms, "spread": result.runtime_spread,
                   "eager_ms": result.reference_ms, "compile_ms": compiled_ms(ev),
                   "verify_wall_s": wall, "device": result.device_name,
                   "shapes": ev.main.shapes or "defaults"}
        rows.append(row)
        print(json.dumps(row), file=sys.stderr)
    return rows


def repeatability(device: str, small: bool, name: str = "softmax", times: int = 5) -> dict:
    ref = ROOT / "problems" / name / "reference.py"
    source = (ROOT / "problems" / name / "seed.py").read_text()
    with Evaluator(ref, platform=device, shapes=SMALL[name] if small else {}) as ev:
        medians = []
        for _ in range(times):
            r = ev.evaluate(source)
            assert r.status is Status.ACCEPTED, r.reason
            medians.append(r.runtime_ms)
    mid = statistics.median(medians)
    return {"problem": name, "medians_ms": medians, "spread": (max(medians) - min(medians)) / mid}


def warm_vs_fresh(device: str, small: bool, name: str = "softmax", times: int = 2) -> dict:
    ref = ROOT / "problems" / name / "reference.py"
    seed = ROOT / "problems" / name / "seed.py"
    shapes = SMALL[name] if small else {}
    with Evaluator(ref, platform=device, shapes=shapes) as ev:
        ev.evaluate(seed.read_text())  # start the worker, compile once
        warm = []
        for i in range(times):
            # a new candidate each time (a changed constant), so nothing is cached
            source = seed.read_text() + f"\nBENCH_VARIANT = {i}\n"
            t0 = time.perf_counter()
            assert ev.evaluate(source).status is Status.ACCEPTED
            warm.append(time.perf_counter() - t0)
    fresh = []
    # A fresh Python process per candidate, as peer tools evaluate: import
    # torch, build the reference, start a worker, judge, exit.
    script = ("import sys; from fitness import Evaluator; "
              "ev = Evaluator(sys.argv[1], platform=sys.argv[2], shapes=eval(sys.argv[4])); "
              "r = ev.evaluate(open(sys.argv[3]).read()); ev.close(); sys.exit(0 if r.accepted else 1)")
    for _ in range(times):
        t0 = time.perf_counter()
        done = subprocess.run([sys.executable, "-c", script, str(ref), device, str(seed), repr(shapes)],
                              cwd=ROOT, capture_output=True, text=True, timeout=900)
        fresh.append(time.perf_counter() - t0)
        assert done.returncode == 0, done.stderr
    return {"problem": name, "warm_s": warm, "fresh_process_s": fresh,
            "warm_median_s": statistics.median(warm), "fresh_median_s": statistics.median(fresh)}


def markdown(report: dict) -> str:
    def ms(v):
        return "n/a" if v is None else f"{v:.4g}"

    lines = []
    if "suite" in report:
        lines += ["| problem | status | seed ms | eager ms | torch.compile ms | seed speedup vs eager | max abs diff (cutoff) |",
                  "|---|---|---|---|---|---|---|"]
        for r in report["suite"]:
            speed = f"{r['eager_ms'] / r['seed_ms']:.2f}x" if r["seed_ms"] else "n/a"
            diff = "n/a" if r["max_abs_diff"] is None else f"{r['max_abs_diff']:.2g}"
            lines.append(f"| {r['problem']} | {r['status']} | {ms(r['seed_ms'])} | {ms(r['eager_ms'])} | "
                         f"{ms(r['compile_ms'])} | {speed} | {diff} ({r['cutoff']:g}) |")
    if "repeatability" in report:
        rep = report["repeatability"]
        lines.append(f"\nFive evaluations of the {rep['problem']} seed: medians "
                     + ", ".join(f"{m:.4g}" for m in rep["medians_ms"])
                     + f" ms; spread (max-min)/median = {100 * rep['spread']:.2f}%")
    if "warm_vs_fresh" in report:
        wf = report["warm_vs_fresh"]
        lines.append(f"\nOne verify of a new {wf['problem']} candidate: warm worker {wf['warm_median_s']:.2f} s, "
                     f"fresh Python process per candidate {wf['fresh_median_s']:.2f} s (medians of {len(wf['warm_s'])})")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--small", action="store_true", help="tiny shapes (for the CPU interpreter)")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--parts", default="suite,repeatability,warm_vs_fresh",
                        help="comma-separated subset of: suite, repeatability, warm_vs_fresh")
    args = parser.parse_args()
    parts = {"suite": suite, "repeatability": repeatability, "warm_vs_fresh": warm_vs_fresh}
    report = {}
    for part in args.parts.split(","):
        report[part] = parts[part](args.device, args.small)
        print(json.dumps({part: report[part]}), file=sys.stderr, flush=True)
    if args.out:
        args.out.write_text(json.dumps(report, indent=2))
    print(markdown(report))


if __name__ == "__main__":
    main()
