"""Where one evaluation's wall time goes: the worker's steps (load, call,
time, with the checked timed runs handed over inside it) and the evaluator's own work (reference outputs,
comparisons, timing the reference), for each suite seed.

Each seed is evaluated ``--repeats`` times in one warm evaluator (the first,
which starts the worker, is left out); the table gives the median seconds of
each part. "compile" is the part of the steps Triton spent compiling (the
worker's own count), "lane lent" the part spent compiling with the timing
lane lent out; "time: ..." are the worker's own account of its time
step (warm-up, the window, and in the window: drawing inputs, the input
check, handing checked runs over).

    python bench/eval_breakdown.py --shape batch_size=2048 --out breakdown.json     # on a GPU machine
    python bench/eval_breakdown.py --device cpu --problems softmax --shape batch_size=4 --shape dim=100

With ``--config``, the candidates are instead ``--repeats`` distinct
variants of the config's seed (the first points of its parametric grid, as
``bench/throughput_bench.py`` streams them), so every one is compiled anew:

    python bench/eval_breakdown.py --config configs/softmax.yaml --shape batch_size=4096 --shape dim=8192 --repeats 6

With ``--same`` as well, the config's first variant is evaluated every time
(compiled once, by the evaluation left out): what one evaluation costs with
nothing to compile, as when its kernels were compiled ahead.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.shapes import add_suite_options, apply_shapes  # noqa: E402
from fitness import Evaluator, Status  # noqa: E402


def measure(name: str, device: str, shape_args: list[str], repeats: int, config: Path | None = None,
            same: bool = False) -> dict:
    if config is None:
        reference = ROOT / "problems" / name / "reference.py"
        shapes = apply_shapes(reference, shape_args)
        seed = (ROOT / "problems" / name / "seed.py").read_text()
        sources, cutoff = [seed] * (repeats + 1), None
    else:
        from bench.throughput_bench import stream
        from evolve.config import load_config

        loaded = load_config(config)
        reference, cutoff = loaded.problem.reference, loaded.fitness.max_abs_diff
        shapes = apply_shapes(reference, shape_args, loaded.problem.shapes)
        sources = [stream(loaded, 1)[0]] * (repeats + 1) if same else stream(loaded, repeats + 1)
    walls = []
    with Evaluator(reference, platform=device, shapes=shapes, max_abs_diff=cutoff) as evaluator:
        for i, source in enumerate(sources):
            result = evaluator.evaluate(source)
            if result.status is not Status.ACCEPTED:
                raise RuntimeError(f"{name}: the seed was not accepted: {result.reason}")
            if i:
                walls.append(dict(evaluator.walls))
    parts = sorted({p for w in walls for p in w})
    row = {"problem": name, "shapes": shapes, "median_s": {p: statistics.median(w.get(p, 0.0) for w in walls)
                                                           for p in parts}}
    print(json.dumps(row), file=sys.stderr, flush=True)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_suite_options(parser, repeats=3)
    parser.add_argument("--config", type=Path, help="distinct variants of this config's seed (see above)")
    parser.add_argument("--same", action="store_true", help="with --config: its first variant every time")
    args = parser.parse_args()
    if args.same and not args.config:
        parser.error("--same needs --config")
    if args.config:
        rows = [measure(args.config.stem, args.device, args.shape, args.repeats, args.config, args.same)]
    else:
        rows = [measure(name, args.device, args.shape, args.repeats) for name in args.problems]
    parts = sorted({p for r in rows for p in r["median_s"]}, key=lambda p: (p != "total", p))
    print("| problem | " + " | ".join(parts) + " |")
    print("|---|" + "---|" * len(parts))
    for r in rows:
        print(f"| {r['problem']} | " + " | ".join(f"{r['median_s'].get(p, 0.0):.3f}" for p in parts) + " |")
    if args.out:
        args.out.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
