"""How busy a sweep keeps its evaluators, and its wall: runs one after another, and side by side.

The same sweep runs once per ``--side-by-side`` value (1 is today's sweep,
one problem after another), each into a fresh directory, on the same Ray
evaluators' settings. For each it prints one JSON line: the sweep's wall,
the evaluator slots' busy share (slot-seconds a candidate held a slot over
the slot-seconds there were, from the moment the evaluators were ready; the
``evaluators`` of the sweep's summary), evaluations, and the runs that
finished. Then a table.

By default the sweep is made here for the CPU platform (Triton's
interpreter): the suite's problems at small shapes, cycled with shape
variants up to ``--problems`` runs, ``--evals`` evaluations each, on
``--actors`` CPU actors of a local Ray instance. ``--sweep FILE`` runs a
sweep file as it is instead (on a GPU: a KernelBench folder with
``seeds: compile``), its ``side_by_side`` replaced by each value asked for. Each measurement runs
in a process of its own with Triton's and Inductor's caches empty, so that
none finds the kernels and seed captures of another (``--warm-caches``: all
in this process, one after another).

    python bench/sweep_busy.py --problems 8 --evals 4 --actors 2 --side-by-side 1 3
    python bench/sweep_busy.py --sweep bench/kernelbench_compile_sweep.yaml --side-by-side 1 4
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import yaml  # noqa: E402

from evolve.report_sweep import Outcome  # noqa: E402
from evolve.sweep import SweepObserver, run_sweep  # noqa: E402
from evolve.sweep_file import Entry, load_sweep  # noqa: E402

PROBLEMS = ROOT / "problems"
# The suite at shapes the interpreter runs in about a second, and a second shape of each.
SHAPES = {
    "elementwise": [{"batch_size": 4, "dim": 100}, {"batch_size": 3, "dim": 257}],
    "softmax": [{"batch_size": 4, "dim": 100}, {"batch_size": 5, "dim": 130}],
    "gelu": [{"batch_size": 4, "dim": 100}, {"batch_size": 2, "dim": 333}],
    "rmsnorm": [{"batch_size": 3, "dim": 300}, {"batch_size": 2, "dim": 129}],
    "sum_middle": [{"batch_size": 2, "dim1": 37, "dim2": 50}, {"batch_size": 3, "dim1": 20, "dim2": 31}],
    "matvec": [{"M": 33, "K": 300}, {"M": 17, "K": 129}],
    "matmul": [{"M": 33, "K": 47, "N": 29}, {"M": 20, "K": 33, "N": 41}],
}


def cpu_sweep(path: Path, problems: int, evals: int, actors: int, seed: int) -> Path:
    """A sweep file of ``problems`` small runs on CPU actors."""
    runs = [(name, shapes) for variant in range(2) for name, all_shapes in SHAPES.items()
            for shapes in [all_shapes[variant]]][:problems]
    path.write_text(yaml.safe_dump({
        "defaults": {"search": {"population_size": 2, "max_evaluations": evals, "seed": seed}, "platform": "cpu",
                     "cluster": {"actors": actors}, "profiler": {"enabled": False}},
        "problems": [{"reference": str(PROBLEMS / name / "reference.py"), "seeds": [str(PROBLEMS / name / "seed.py")],
                      "shapes": shapes, "held_out_shapes": [], "name": f"{name}-{i}"}
                     for i, (name, shapes) in enumerate(runs)],
    }))
    return path


class Ends(SweepObserver):
    """One line on stderr as each run ends (seconds since the sweep began): a measurement cut
    short still says how far it got."""

    def __init__(self, began: float) -> None:
        self.began = began

    def ended(self, outcome: Outcome) -> None:
        print(f"[{time.monotonic() - self.began:6.1f} s] {outcome.name}: {outcome.status}, "
              f"{outcome.evaluations} evaluation(s)", file=sys.stderr, flush=True)


def measure(entries: list[Entry], side_by_side: int, out: Path) -> dict:
    entries = [dataclasses.replace(e, side_by_side=side_by_side) for e in entries]
    began = time.monotonic()
    outcomes = run_sweep(entries, out, observer=Ends(began))
    wall = time.monotonic() - began
    usage = json.loads((out / "summary.json").read_text()).get("evaluators") or {}
    return {"side_by_side": side_by_side, "runs": len(entries), "wall_s": round(wall, 1),
            "busy_share": None if usage.get("busy_share") is None else round(usage["busy_share"], 3),
            "busy_s": round(usage.get("busy_s", 0.0), 1), "slot_s": round(usage.get("slot_s", 0.0), 1),
            "evaluations": sum(o.evaluations for o in outcomes),
            "finished": sum(o.status == "finished" for o in outcomes)}


def apart(sweep: Path, side_by_side: int, out: Path, tmp: Path) -> dict:
    """``measure`` in a process of its own whose Triton and Inductor caches start empty."""
    caches = Path(tempfile.mkdtemp(prefix=f"caches-{side_by_side}-", dir=tmp))
    env = dict(os.environ, TRITON_CACHE_DIR=str(caches / "triton"), TORCHINDUCTOR_CACHE_DIR=str(caches / "inductor"))
    done = subprocess.run([sys.executable, __file__, "--child", "--sweep", str(sweep), "--run-dir", str(out.parent),
                           "--side-by-side", str(side_by_side)], env=env, stdout=subprocess.PIPE, text=True,
                          check=False)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode or not lines:
        raise SystemExit(f"the measurement with {side_by_side} side by side failed (exit {done.returncode})")
    return json.loads(lines[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sweep", type=Path, help="a sweep file to run as it is (default: a CPU sweep made here)")
    parser.add_argument("--problems", type=int, default=8, help="runs of the CPU sweep (default 8)")
    parser.add_argument("--evals", type=int, default=4, help="evaluations per run of the CPU sweep (default 4)")
    parser.add_argument("--actors", type=int, default=2, help="CPU actors of the CPU sweep (default 2)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--run-dir", type=Path, help="keep each measurement's sweep in DIR/side-by-side-N "
                        "(default: a temporary folder, removed at the end)")
    parser.add_argument("--side-by-side", type=int, nargs="+", default=[1, 3], metavar="N",
                        help="runs at once, one measurement each (default: 1 3)")
    parser.add_argument("--warm-caches", action="store_true",
                        help="run the measurements one after another in this process, so that a later one "
                        "finds Triton's and Inductor's caches filled by the earlier ones (default: each in a "
                        "process of its own with empty caches, so that they compare)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(name)s: %(message)s")
    with tempfile.TemporaryDirectory(prefix="kevo-sweep-busy-") as tmp:
        sweep = args.sweep or cpu_sweep(Path(tmp) / "sweep.yaml", args.problems, args.evals, args.actors, args.seed)
        entries = load_sweep(sweep)
        rows = []
        for n in args.side_by_side:
            out = (args.run_dir or Path(tmp)) / f"side-by-side-{n}"
            if args.warm_caches or args.child:
                rows.append(measure(entries, n, out))
            else:
                rows.append(apart(sweep, n, out, Path(tmp)))
            print(json.dumps(rows[-1]), flush=True)
    if args.child:
        return 0
    print("\n| side by side | runs | wall s | busy share | evaluations | finished |\n|---|---|---|---|---|---|")
    for r in rows:
        share = "-" if r["busy_share"] is None else f"{100 * r['busy_share']:.0f}%"
        print(f"| {r['side_by_side']} | {r['runs']} | {r['wall_s']} | {share} | {r['evaluations']} | {r['finished']} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
