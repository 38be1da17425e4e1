"""What each metric kevo asks Nsight Compute for costs in replay passes.

ncu replays a profiled launch once per counter pass, saving and restoring the
program's device memory around every replay: at real sizes the passes are
what a profile costs. For each metric of ``platforms.profiling.ncu.NCU_METRICS``
alone, then for the whole set, one ncu run over a row softmax (``--rows`` x ``--cols`` fp32, one launch) and one
JSON line: the passes ncu reports (``profiler__replayer_passes``), the bytes
it saved and restored, the run's wall time, and each metric's value on the
profiled launch. ``--set NAME=METRIC,METRIC`` measures named sets instead
(``--program mm`` or ``mm_bf16``: an 8192 x 8192 matmul in fp32 on the FMA
units, or in bf16 on the tensor cores); ``--csv DIR`` keeps each run's CSV
export (``--page raw --print-units base``, as kevo reads it).

    python bench/ncu_passes.py --out ncu_passes.jsonl          # on a GPU machine with ncu
    python bench/ncu_passes.py --program mm --set all=sm__throughput.avg.pct_of_peak_sustained_elapsed,...
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from platforms.profiling.ncu import NCU_METRICS, ncu_commands, parse_ncu_csv  # noqa: E402
from platforms.profiling.profilers import profiler_for  # noqa: E402

PROGRAM = """
import sys, torch
torch.backends.cuda.matmul.allow_tf32 = False
if "{program}" == "softmax":
    x = torch.randn({rows}, {cols}, device="cuda")
    work = lambda: torch.softmax(x, dim=1)
else:
    dtype = torch.bfloat16 if "{program}" == "mm_bf16" else torch.float32
    a, b = (torch.randn(8192, 8192, device="cuda", dtype=dtype) for _ in range(2))
    work = lambda: a @ b
work(); torch.cuda.synchronize()
torch.cuda.profiler.start()
work(); torch.cuda.synchronize()
torch.cuda.profiler.stop()
"""


def values_of(text: str, metrics: tuple[str, ...]) -> dict[str, str]:
    """The first launch's value of each metric in ncu's raw CSV page (as written, units base)."""
    rows = [r for r in csv.reader(io.StringIO(text)) if r]
    at = next((i for i, r in enumerate(rows) if "Kernel Name" in r), None)
    if at is None or len(rows) < at + 3:
        return {}
    header, launch = rows[at], rows[at + 2]  # a units row under the header
    return {m: launch[header.index(m)] for m in metrics if m in header and header.index(m) < len(launch)}


def run(binary: str, metrics: tuple[str, ...], rows: int, cols: int, program: str = "softmax",
        keep: Path | None = None, name: str = "") -> dict:
    with tempfile.TemporaryDirectory(prefix="kevo-ncu-passes-") as tmp:
        report = str(Path(tmp) / "report")
        command = [sys.executable, "-c", PROGRAM.format(rows=rows, cols=cols, program=program)]
        profile, export = ncu_commands(binary, report, command, None, launch_count=1, metrics=metrics)
        started = time.monotonic()
        done = subprocess.run(profile, capture_output=True, text=True, timeout=300)
        wall = time.monotonic() - started
        if done.returncode:
            return {"program": program, "metrics": list(metrics), "error": (done.stderr or done.stdout).strip()[-300:]}
        text = subprocess.run(export, capture_output=True, text=True, timeout=120).stdout
        parsed = parse_ncu_csv(text)
    if keep is not None:
        keep.mkdir(parents=True, exist_ok=True)
        (keep / f"{program}_{name or len(metrics)}.csv").write_text(text)
    return {"program": program, "set": name, "metrics": list(metrics), "passes": parsed.replay_passes,
            "bytes_backed_up": parsed.replay_bytes, "wall_s": round(wall, 2), "values": values_of(text, metrics)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=4096)
    parser.add_argument("--cols", type=int, default=8192)
    parser.add_argument("--out", default=None, help="a JSON-lines file (appended as each run lands)")
    parser.add_argument("--program", choices=("softmax", "mm", "mm_bf16"), default="softmax")
    parser.add_argument("--set", action="append", default=[], metavar="NAME=METRIC,METRIC",
                        help="a named set of metrics to measure (repeatable); default: kevo's, one by one")
    parser.add_argument("--csv", default=None, help="a folder to keep each run's CSV export in")
    args = parser.parse_args()
    named = []
    for spec in args.set:
        name, _, listed = spec.partition("=")
        if not listed:
            parser.error(f"--set {spec!r}: expected NAME=METRIC,METRIC")
        named.append((name, tuple(m for m in listed.split(",") if m)))
    profiler = profiler_for("cuda")
    binary = getattr(profiler, "binary", None)
    if not binary:
        sys.exit(f"ncu_passes: no ncu here: {profiler.disabled_reason}")
    sets = named or [("", (m,)) for m in NCU_METRICS] + [("kevo", NCU_METRICS)]
    for name, metrics in sets:
        row = run(binary, metrics, args.rows, args.cols, args.program,
                  Path(args.csv) if args.csv else None, name)
        line = json.dumps(row)
        print(line, flush=True)
        if args.out:
            with open(args.out, "a") as f:
                f.write(line + "\n")


if __name__ == "__main__":
    main()
