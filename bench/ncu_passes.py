"""What each metric kevo asks Nsight Compute for costs in replay passes.

ncu replays a profiled launch once per counter pass, saving and restoring the
program's device memory around every replay: at real sizes the passes are
what a profile costs. For each metric of ``platforms.profiling.ncu.NCU_METRICS``
alone, then for the whole set, and for the set without each one in turn, one
ncu run over a row softmax (``--rows`` x ``--cols`` fp32, one launch) and one
JSON line: the passes ncu reports (``profiler__replayer_passes``), the bytes
it saved and restored, and the run's wall time.

    python bench/ncu_passes.py --out ncu_passes.jsonl          # on a GPU machine with ncu
"""

from __future__ import annotations

import argparse
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
x = torch.randn({rows}, {cols}, device="cuda")
torch.softmax(x, dim=1); torch.cuda.synchronize()
torch.cuda.profiler.start()
torch.softmax(x, dim=1); torch.cuda.synchronize()
torch.cuda.profiler.stop()
"""


def run(binary: str, metrics: tuple[str, ...], rows: int, cols: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="kevo-ncu-passes-") as tmp:
        report = str(Path(tmp) / "report")
        command = [sys.executable, "-c", PROGRAM.format(rows=rows, cols=cols)]
        profile, export = ncu_commands(binary, report, command, None, launch_count=1, metrics=metrics)
        started = time.monotonic()
        done = subprocess.run(profile, capture_output=True, text=True, timeout=300)
        wall = time.monotonic() - started
        if done.returncode:
            return {"metrics": list(metrics), "error": (done.stderr or done.stdout).strip()[-300:]}
        parsed = parse_ncu_csv(subprocess.run(export, capture_output=True, text=True, timeout=120).stdout)
    return {"metrics": list(metrics), "passes": parsed.replay_passes, "bytes_backed_up": parsed.replay_bytes,
            "wall_s": round(wall, 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=4096)
    parser.add_argument("--cols", type=int, default=8192)
    parser.add_argument("--out", default=None, help="a JSON-lines file (appended as each run lands)")
    args = parser.parse_args()
    profiler = profiler_for("cuda")
    binary = getattr(profiler, "binary", None)
    if not binary:
        sys.exit(f"ncu_passes: no ncu here: {profiler.disabled_reason}")
    sets = [(m,) for m in NCU_METRICS] + [NCU_METRICS]
    sets += [tuple(m for m in NCU_METRICS if m != left) for left in NCU_METRICS]
    for metrics in sets:
        row = run(binary, metrics, args.rows, args.cols)
        if len(metrics) == len(NCU_METRICS) - 1:
            row["without"] = next(m for m in NCU_METRICS if m not in metrics)
        line = json.dumps(row)
        print(line, flush=True)
        if args.out:
            with open(args.out, "a") as f:
                f.write(line + "\n")


if __name__ == "__main__":
    main()
