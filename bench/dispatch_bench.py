"""The driver's overhead per evaluation, with many simulated evaluators on Ray.

The real search loop (variation, the SQLite store, the Ray dispatcher with
``ray.wait``) drives ``--actors`` simulated evaluators: Ray actor processes
with many slots each, whose evaluation sleeps ``--eval-s`` seconds and
returns an accepted verdict. With perfect saturation the run would take
``evaluations × eval_s / evaluators`` seconds; the driver's overhead is the
share of evaluator time lost to everything else:

    overhead = 1 - (evaluations × eval_s) / (evaluators × wall)

    python bench/dispatch_bench.py --actors 64 256 --eval-s 2
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from evolve.config import config_from_dict  # noqa: E402
from evolve.loop import Search, run_search  # noqa: E402
from evolve.ray_dispatch import EvaluatorSpec, RayDispatcher, start_ray  # noqa: E402
from evolve.session import search_space  # noqa: E402
from population_store import RunStore  # noqa: E402

SEED = ROOT / "problems" / "matmul" / "seed.py"
REFERENCE = ROOT / "problems" / "matmul" / "reference.py"


class SleepingEvaluator:
    """EvaluatorActor's methods; an evaluation sleeps and is accepted with a runtime from the source."""

    def __init__(self, home: str | None = None, eval_s: float = 1.0) -> None:
        self.eval_s = eval_s

    def prepare(self, spec) -> dict:
        return {"pid": os.getpid(), "platform": "simulated", "device_name": "sleep", "cutoff": 1e-3}

    def evaluate(self, spec, source: str):
        from fitness import EvalResult, Status

        time.sleep(self.eval_s)
        runtime = 1.0 + (hash(source) % 1000) / 1000
        return os.getpid(), EvalResult(Status.ACCEPTED, "", max_abs_diff=0.0, runtime_ms=runtime,
                                       runtime_spread=0.01, reference_ms=1.5, platform="simulated",
                                       device_name="sleep")

    def lane_stats(self) -> dict:
        return {}

    def close(self) -> None:
        pass


def measure(evaluators: int, eval_s: float, per_process: int, rounds: int) -> dict:
    processes = max(1, evaluators // per_process)
    slots = evaluators // processes
    evaluations = rounds * evaluators
    config = config_from_dict({
        "problem": {"reference": str(REFERENCE), "seeds": [str(SEED)]},
        "search": {"population_size": 16, "max_evaluations": evaluations, "seed": 0},
        "platform": "cpu"}, origin="bench")
    seeds = [SEED.read_text()]

    class Actor(SleepingEvaluator):
        def __init__(self, home=None):
            super().__init__(home, eval_s)

    spec = EvaluatorSpec(str(REFERENCE), platform="cpu")
    with tempfile.TemporaryDirectory() as tmp, RayDispatcher(
            spec, num_actors=processes, slots=slots, actor_class=Actor,
            actor_options={"num_cpus": 0}) as dispatcher:
        with RunStore.create(Path(tmp) / "run.sqlite", config.to_dict()) as store:
            cpu0, t0 = time.process_time(), time.perf_counter()
            run_search(Search(store, dispatcher, config, seeds, search_space(config, seeds)))
            wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
            done = store.count()
    # the seeds are evaluated alone (one candidate on an otherwise idle pool): count that wait as ideal
    ideal = eval_s + (done - 1) * eval_s / evaluators
    row = {"evaluators": evaluators, "processes": processes, "slots": slots, "eval_s": eval_s,
           "evaluations": done, "wall_s": wall, "ideal_s": ideal, "overhead": 1 - ideal / wall,
           "driver_cpu_ms_per_eval": 1e3 * cpu / done}
    print(json.dumps(row), file=sys.stderr, flush=True)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--actors", type=int, nargs="+", default=[64, 256])
    parser.add_argument("--eval-s", type=float, default=2.0)
    parser.add_argument("--per-process", type=int, default=32, help="simulated evaluators per Ray actor process")
    parser.add_argument("--rounds", type=int, default=4, help="evaluations per evaluator")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    start_ray(num_cpus=os.cpu_count() or 1)
    rows = [measure(n, args.eval_s, args.per_process, args.rounds) for n in args.actors]
    print("| simulated evaluators | evaluations | wall s | ideal s | driver overhead | driver CPU ms / evaluation |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['evaluators']} ({r['processes']} × {r['slots']}) | {r['evaluations']} | {r['wall_s']:.1f} "
              f"| {r['ideal_s']:.1f} | {100 * r['overhead']:.1f}% | {r['driver_cpu_ms_per_eval']:.2f} |")
    if args.out:
        args.out.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
