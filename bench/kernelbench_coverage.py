"""Which KernelBench problems kevo can judge at their own shapes: per problem
file of a folder, prepared or refused (and why), the memory one evaluation
needs, how many evaluations at once fit, and the wall time of preparing it.

Preparing is what an evaluator does before it judges anything: load the
problem, build the reference, run it on the fixed inputs, check the cutoff,
prepare the held-out shapes, and fit the memory plan. Each result is written
to ``--out`` (JSON lines) as it arrives, so a run cut short keeps what it did.

    python bench/kernelbench_coverage.py ../shared/kernelbench/level1 --out coverage.jsonl   # on a GPU
    python bench/kernelbench_coverage.py ../shared/kernelbench/level1 --no-probes ...   # without probe inputs
    python bench/kernelbench_coverage.py ../shared/kernelbench/level1 --device cpu \\
        --shape batch_size=2 --only 19_ReLU 23_Softmax                # small shapes on the CPU
"""

from __future__ import annotations

import argparse
import collections
import gc
import json
import re
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.per_problem import append  # noqa: E402
from bench.shapes import apply_shapes  # noqa: E402
from fitness import CutoffError, PreparedProblem, ProblemError  # noqa: E402
from fitness.settings import EvalSettings  # noqa: E402
from platforms import get_platform  # noqa: E402

GB = float(1 << 30)


def problems(folder: Path, only: list[str]) -> list[Path]:
    files = [p for p in folder.glob("*.py") if re.search(r"^class Model\b", p.read_text(), re.MULTILINE)]
    files.sort(key=lambda p: [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", p.stem)])
    return [p for p in files if not only or any(p.stem.startswith(o) for o in only)]


def prepare(path: Path, platform, shape_args: list[str], slots: int, probes: bool = True) -> dict:
    shapes = apply_shapes(path, shape_args, ignore_unknown=True)
    row: dict = {"problem": path.stem, "shapes": shapes}
    started = time.perf_counter()
    prepared = None
    try:
        prepared = PreparedProblem(path, platform, shapes, settings=EvalSettings(probes=probes))
        fit = prepared.slots_that_fit(slots)  # first: it decides whether checks overlap the reference
        row.update(status="prepared", footprint_gb=prepared.footprint() / GB, slots=fit,
                   overlap=prepared.overlap_reference, held_out_overlap=prepared.overlap_held_out,
                   phases_gb={k: v / GB for k, v in prepared.main.phases(prepared.overlap_reference).items()},
                   cutoff=prepared.cutoff, cutoff_rule=prepared.cutoff_rule,
                   held_out=sum(len(g) for g in prepared.held_out_groups),
                   probes=[p.describe() for p in prepared.probes], notes=prepared.notes)
    except CutoffError as exc:
        row.update(status="refused", kind="cutoff", reason=str(exc))
    except ProblemError as exc:
        kind = "memory" if "GB of memory" in str(exc) or "out of memory" in str(exc) else "problem"
        row.update(status="refused", kind=kind, reason=str(exc))
    row["wall_s"] = time.perf_counter() - started
    del prepared
    gc.collect()
    platform.release_memory()
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path, help="a KernelBench level folder")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--shape", action="append", default=[], metavar="NAME=VALUE",
                        help="override a knob wherever a problem has it (for small runs on the CPU)")
    parser.add_argument("--only", nargs="*", default=[], help="problem file names starting with these")
    parser.add_argument("--slots", type=int, default=3, help="evaluations at once an actor would like")
    parser.add_argument("--no-probes", action="store_true", help="prepare without probe inputs (kevo before them)")
    parser.add_argument("--out", type=Path, help="JSON lines, one per problem, written as they arrive")
    args = parser.parse_args()
    platform = get_platform(args.device)
    rows = []
    for path in problems(args.folder, args.only):
        rows.append(prepare(path, platform, args.shape, args.slots, probes=not args.no_probes))
        print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
        if args.out:
            append(args.out, rows[-1])
    counts = collections.Counter(r.get("kind", "prepared") for r in rows)
    print(f"{len(rows)} problems of {args.folder} on {platform.device_name()}: "
          + ", ".join(f"{n} {k}" for k, n in sorted(counts.items())))
    print("| problem | status | footprint GB | slots | reference | wall s | reason |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        foot = f"{r['footprint_gb']:.2f}" if "footprint_gb" in r else "-"
        when = "-" if "overlap" not in r else ("meanwhile" if r["overlap"] else "after")
        print(f"| {r['problem']} | {r['status']} | {foot} | {r.get('slots', '-')} | {when} | {r['wall_s']:.1f} "
              f"| {r.get('reason', '')[:160]} |")


if __name__ == "__main__":
    main()
