"""``seeds: compile`` on the CPU, before a GPU sees a problem: capture, convert, judge.

    python bench/seeds_on_cpu.py 57 61 89 97 [--kb ../shared/kernelbench/level1] [--out results.jsonl]

For each KernelBench level-1 problem named by its number, at small shapes
(``SHAPES`` below): ``compile_seeds`` on the CPU (Inductor's Triton backend
for the CPU, its kernels and template benchmarks run by Triton's interpreter),
then every distinct seed judged by the evaluator on the CPU, held-out shapes
and probes included. One JSON line a problem: the seeds' verdicts, or why it
got none. The CPU's Inductor is not a GPU's (it splits and tiles for two
"SMs"), so a problem that passes here can still fail on a GPU; one that fails
here for a reason of the conversion or the judge (a grid type not handled, a
size baked in) fails there too.

A problem whose sizes are a tuple the ``--shape`` overrides cannot reach (the
scans' ``input_shape = (32768,)``) is judged from a copy with those lines
replaced (``EDITS``), written to a temporary folder.
"""

from __future__ import annotations

import os

os.environ["TRITON_INTERPRET"] = "1"  # before anything imports Triton

import argparse  # noqa: E402
import json  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

#: Small shapes a problem is captured and judged at (its module-level integers).
SHAPES: dict[str, dict[str, int]] = {
    "34": dict(batch_size=2, features=3, dim1=8, dim2=8),
    "35": dict(batch_size=2, features=8, num_groups=2, dim1=8, dim2=8),
    "38": dict(batch_size=4, dim=100),
    "41": dict(batch_size=2, features=3, sequence_length=64, kernel_size=8),
    "57": dict(batch_size=2, in_channels=4, out_channels=4, height=9, width=9),
    "61": dict(batch_size=2, in_channels=4, out_channels=4, depth=6, height=6, width=6),
    "64": dict(batch_size=2, in_channels=4, out_channels=4, length=40),
    "67": dict(batch_size=2, in_channels=4, out_channels=6, length=40),
    "73": dict(batch_size=2, in_channels=8, out_channels=8, depth=4, height=5, width=6),
    "74": dict(batch_size=2, in_channels=4, out_channels=6, length=40),
    "75": dict(batch_size=2, in_channels=8, out_channels=8, height=9, width=10),
    "76": dict(batch_size=2, in_channels=4, out_channels=6, length=60),
    "79": dict(batch_size=2, in_channels=4, out_channels=6, length=40),
    "80": dict(batch_size=2, in_channels=3, out_channels=4, width=30, height=28),
    "81": dict(batch_size=2, in_channels=4, out_channels=6, height_in=6, width_in=7),
    "84": dict(batch_size=2, in_channels=4, out_channels=4, width_in=9, height_in=7),
    "85": dict(batch_size=2, in_channels=4, out_channels=4, width=12, height=9),
    "86": dict(batch_size=2, in_channels=4, out_channels=8, width=9, height=9),
    "87": dict(batch_size=2, in_channels=4, out_channels=8, width=9, height=9),
    **{n: dict(batch_size=8) for n in ("89", "90", "91", "92", "93")},
    "95": dict(batch_size=4, num_classes=16),
    "96": dict(batch_size=2),
    "97": dict(batch_size=2, num_heads=2, sequence_length=16, embedding_dimension=8),
    "98": dict(batch_size=2),
    "99": dict(batch_size=2),
}
#: Lines of a problem replaced in its scratch copy (sizes no override reaches).
EDITS: dict[str, tuple[str, str]] = {n: ("input_shape = (32768,)", "input_shape = (64,)")
                                     for n in ("89", "90", "91", "92", "93")}


def check(number: str, kb: Path, scratch: Path) -> dict:
    from evolve.capture.seed import compile_seeds
    from fitness import Evaluator

    path = next(kb.glob(f"{number}_*.py"))
    if number in EDITS:
        old, new = EDITS[number]
        text = path.read_text(encoding="utf-8")
        if old not in text:
            raise SystemExit(f"{path.name}: no line {old!r} to replace")
        path = scratch / path.name
        path.write_text(text.replace(old, new), encoding="utf-8")
    shapes = SHAPES[number]
    row: dict = {"problem": path.stem, "shapes": shapes, "edit": EDITS.get(number)}
    started = time.monotonic()
    try:
        seeds = compile_seeds(path, device="cpu", shapes=shapes)
    except Exception as exc:  # the problem's own failure, reported as it is
        row["no_seed"] = f"{type(exc).__name__}: {exc}"
    else:
        row["skipped"] = dict(seeds[0].skipped)
        row["seeds"] = {}
        for seed in seeds:
            with Evaluator(path, platform="cpu", shapes=shapes) as evaluator:
                result = evaluator.evaluate(seed.source)
            row["seeds"][seed.variant] = {"status": result.status.value, "reason": result.reason[:500]}
    row["seconds"] = round(time.monotonic() - started, 1)
    return row


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("problems", nargs="+", help="level-1 problem numbers, of: " + " ".join(SHAPES))
    ap.add_argument("--kb", type=Path, default=ROOT.parent / "shared" / "kernelbench" / "level1")
    ap.add_argument("--out", type=Path, default=None, help="append the JSON lines here too")
    args = ap.parse_args()
    unknown = [n for n in args.problems if n not in SHAPES]
    if unknown:
        ap.error(f"no small shapes for problem(s) {', '.join(unknown)}: add them to SHAPES")
    if not args.kb.is_dir():
        ap.error(f"no KernelBench level 1 at {args.kb} (--kb)")
    with tempfile.TemporaryDirectory(prefix="seeds-on-cpu-") as scratch:
        for number in args.problems:
            row = check(number, args.kb, Path(scratch))
            line = json.dumps(row)
            if args.out:
                with args.out.open("a", encoding="utf-8") as fh:
                    fh.write(line + "\n")
            verdicts = {v: s["status"] for v, s in row.get("seeds", {}).items()} or row.get("no_seed", "")[:300]
            print(f"{row['problem']}  {row['seconds']} s  {verdicts}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
