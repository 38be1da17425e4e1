"""What the device trace of one timed window costs the host, and where: starting it, the
window's runs, stopping it, and reading its events; at a small size and at a real one.

A window like the worker's: each run draws fresh inputs, flushes the cache, runs a
softmax, and checks its output (a max-abs-diff against a second softmax), the trace
bracketing all of it (``all``), or no trace (``none``, the window alone); each in a
fresh process.

The first window a process traces also pays the profiler's own start-up (CUPTI's); it is
reported apart (``first``) from the median of the later ones.

    python bench/trace_cost.py --rows 4096 --cols 393216 --windows 4 --out trace_cost.json   # on a GPU machine
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


def one_process(rows: int, cols: int, windows: int, runs: int, mode: str) -> dict:
    import torch

    sys.path.insert(0, str(ROOT))
    from platforms.timeline import DeviceTimeline

    device = torch.device("cuda")
    flush = torch.empty(256 << 20, dtype=torch.uint8, device=device)
    generator = torch.Generator(device=device)
    torch.softmax(torch.randn(8, 8, device=device), -1)
    torch.cuda.synchronize()
    results = []
    for w in range(windows):
        phases = dict.fromkeys(("enter", "runs", "exit", "read"), 0.0)
        timeline = DeviceTimeline() if mode == "all" else None
        t = time.perf_counter()
        if timeline:
            timeline.__enter__()
        phases["enter"] = time.perf_counter() - t
        t = time.perf_counter()
        for i in range(runs):
            generator.manual_seed(1000 * w + i)
            x = torch.randn(rows, cols, device=device, generator=generator)
            flush.zero_()
            torch.cuda.synchronize()
            if timeline:
                with timeline.run(i):
                    out = torch.softmax(x, -1)
                    torch.cuda.synchronize()
            else:
                out = torch.softmax(x, -1)
                torch.cuda.synchronize()
            float((out - torch.softmax(x, -1)).abs().max())
            del x, out
        phases["runs"] = time.perf_counter() - t
        t = time.perf_counter()
        if timeline:
            timeline.__exit__(None, None, None)
        phases["exit"] = time.perf_counter() - t
        t = time.perf_counter()
        spans = timeline.spans(runs) if timeline else None
        phases["read"] = time.perf_counter() - t
        phases["spans_ms"] = None if spans is None else round(statistics.median(spans), 4)
        results.append(phases)
    return {"mode": mode, "rows": rows, "cols": cols, "runs": runs, "windows": results}


def summarise(report: dict) -> dict:
    later = report["windows"][1:] or report["windows"]
    row = {"mode": report["mode"], "shape": f"{report['rows']} x {report['cols']}"}
    first = report["windows"][0]
    row["first: trace s"] = round(first["enter"] + first["exit"] + first["read"], 4)
    for part in ("enter", "runs", "exit", "read"):
        row[part] = round(statistics.median(w[part] for w in later), 4)
    row["trace s"] = round(row["enter"] + row["exit"] + row["read"], 4)
    row["run span ms"] = later[-1]["spans_ms"]
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=4096)
    parser.add_argument("--cols", type=int, nargs="+", default=[8192, 393216])
    parser.add_argument("--windows", type=int, default=4)
    parser.add_argument("--runs", type=int, default=12)
    parser.add_argument("--modes", nargs="+", default=["none", "all"], choices=["none", "all"])
    parser.add_argument("--out", type=Path)
    parser.add_argument("--child", nargs=2, metavar=("COLS", "MODE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(one_process(args.rows, int(args.child[0]), args.windows, args.runs, args.child[1])))
        return
    rows = []
    for cols in args.cols:
        for mode in args.modes:
            done = subprocess.run([sys.executable, __file__, "--rows", str(args.rows), "--windows",
                                   str(args.windows), "--runs", str(args.runs), "--child", str(cols), mode],
                                  capture_output=True, text=True, check=False)
            if done.returncode:
                print(f"{cols} {mode}: exit {done.returncode}\n{done.stderr[-2000:]}", file=sys.stderr)
                continue
            rows.append(summarise(json.loads(done.stdout.strip().splitlines()[-1])))
            print(json.dumps(rows[-1]), flush=True)
    if args.out:
        args.out.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
