"""What the CPU interpreter's bounds checks cost: the suite's seeds, forward by forward.

Each seed's ``ModelNew`` runs here, in this process, under Triton's
interpreter, first as Triton ships it and then with
``platforms.interpreter_bounds`` installed (as every CPU worker has it); the
figure is the median wall time of ``--runs`` forwards on the same inputs.

    python bench/bounds_bench.py                  # the suite at small shapes
    python bench/bounds_bench.py --runs 50 --out bounds.json
"""

from __future__ import annotations

import os

os.environ["TRITON_INTERPRET"] = "1"  # before Triton is imported

import argparse  # noqa: E402
import importlib.util  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.shapes import SMALL, SUITE  # noqa: E402
from fitness.problem import build_model, load_problem, make_inputs  # noqa: E402


def seed_models() -> dict[str, tuple]:
    """name -> (the seed's ModelNew built at small shapes, inputs)."""
    made = {}
    for name in SUITE:
        folder = ROOT / "problems" / name
        problem = load_problem(folder / "reference.py", SMALL[name])
        spec = importlib.util.spec_from_file_location(f"seed_{name}", folder / "seed.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # Triton reads a kernel's source through its module
        spec.loader.exec_module(module)
        made[name] = (build_model(module.ModelNew, problem, 42, "cpu"), make_inputs(problem, 101, "cpu"))
    return made


def median_ms(model, inputs, runs: int) -> float:
    import torch

    times = []
    with torch.no_grad():
        model(*inputs)  # warm-up
        for _ in range(runs):
            start = time.perf_counter()
            model(*inputs)
            times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    models = seed_models()
    plain = {name: median_ms(m, x, args.runs) for name, (m, x) in models.items()}
    from platforms.interpreter_bounds import InterpreterBounds

    InterpreterBounds()  # from here on every launch is checked
    checked = {name: median_ms(m, x, args.runs) for name, (m, x) in models.items()}
    rows = [{"problem": n, "shapes": SMALL[n], "plain_ms": plain[n], "checked_ms": checked[n],
             "overhead": checked[n] / plain[n] - 1} for n in SUITE]
    print("| problem (shapes) | forward, interpreter as shipped | with bounds checks | cost |")
    print("|---|---|---|---|")
    for r in rows:
        shapes = ", ".join(f"{k}={v}" for k, v in r["shapes"].items())
        print(f"| {r['problem']} ({shapes}) | {r['plain_ms']:.2f} ms | {r['checked_ms']:.2f} ms "
              f"| {100 * r['overhead']:+.1f}% |")
    if args.out:
        args.out.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
