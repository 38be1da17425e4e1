"""Compiling ahead (``fitness.ahead``) on one device: where a candidate's compile goes, cold.

Each round evaluates the candidate twice with kernels Triton has never
compiled (a comment with a fresh tag in the first kernel's body changes its
cache key): once as before, its kernels compiled inside the evaluation, and
once after the warm step, which should have compiled them. Prints one JSON
line a round and the medians: the evaluation's own ``compile`` and ``total``
each way, and the warm step's ``ahead`` and ``ahead: compile``.

    python bench/compile_ahead.py                                   # problems/softmax at 4096 x 393216 fp32
    python bench/compile_ahead.py --shape batch_size=1024 --rounds 5 --out runs/ahead.json
    python bench/compile_ahead.py --reference R.py --candidate C.py --device cpu --shape dim=64   # the path, no compile
"""

from __future__ import annotations

import argparse
import json
import secrets
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from fitness import Evaluator  # noqa: E402
from fitness.ahead import compile_ahead  # noqa: E402


def tagged(source: str, tag: str) -> str:
    """``source`` with a comment naming ``tag`` after the first ``tl.program_id(`` line: a new cache key."""
    at = source.index("tl.program_id(")
    end = source.index("\n", at)
    return source[:end] + f"  # {tag}" + source[end:]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reference", default=str(ROOT / "problems" / "softmax" / "reference.py"))
    parser.add_argument("--candidate", default=str(ROOT / "problems" / "softmax" / "seed.py"))
    parser.add_argument("--shape", action="append", default=None, metavar="NAME=N")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    shapes = dict(s.split("=", 1) for s in args.shape) if args.shape else {"batch_size": "4096", "dim": "393216"}
    shapes = {k: int(v) for k, v in shapes.items()}
    source = Path(args.candidate).read_text(encoding="utf-8")
    nonce = secrets.token_hex(4)
    rows = []
    with Evaluator(args.reference, platform=args.device, shapes=shapes, held_out=[]) as evaluator:
        first = evaluator.evaluate(tagged(source, f"warm-up {nonce}"))  # the worker started, the checks warm
        print(json.dumps({"warm-up": first.status.value, "reason": first.reason[:200]}), flush=True)
        for i in range(args.rounds):
            inside = evaluator.evaluate(tagged(source, f"inside {nonce} {i}"))
            warmed = tagged(source, f"ahead {nonce} {i}")
            verdict = compile_ahead(evaluator, warmed)
            ahead = dict(evaluator.ahead)
            after = verdict or evaluator.evaluate(warmed)
            row = {"round": i, "inside": inside.status.value, "after": after.status.value,
                   "inside compile": inside.walls_s.get("compile", 0.0), "inside total": inside.walls_s["total"],
                   "after compile": after.walls_s.get("compile", 0.0), "after total": after.walls_s.get("total", 0.0),
                   "ahead": ahead.get("ahead", 0.0), "ahead: compile": ahead.get("ahead: compile", 0.0)}
            rows.append(row)
            print(json.dumps(row), flush=True)
    medians = {key: round(statistics.median(r[key] for r in rows), 4) for key in rows[0]
               if isinstance(rows[0][key], float)}
    print(json.dumps({"medians": medians, "shapes": shapes}), flush=True)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps({"rows": rows, "medians": medians, "shapes": shapes}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
