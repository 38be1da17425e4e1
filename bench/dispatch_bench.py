"""The driver's overhead per evaluation, with many simulated evaluators on Ray.

The real search loop (variation, the SQLite store, the Ray dispatcher with
``ray.wait``) drives ``--actors`` simulated evaluators: Ray actor processes
with many slots each, whose evaluation sleeps and returns an accepted
verdict. A candidate's sleep is ``--eval-s`` seconds times a factor drawn
uniformly from [1 - jitter, 1 + jitter] by its source (real evaluations
differ by candidate; with no jitter every wave of evaluations ends at the
same instant). With perfect saturation the run would take the summed sleep
divided by the evaluators; the driver's overhead is the share of evaluator
time lost to everything else:

    overhead = 1 - (summed sleep) / (evaluators × wall)

That end-to-end figure also holds what no driver can avoid: the seed is
evaluated alone first, and the last evaluations finish one by one after the
budget is spent. The steady-state figure leaves both out: between the end of
the seed's evaluation and the start of the last evaluation, the share of
evaluator time not spent evaluating:

    steady overhead = 1 - (evaluation time inside the window) / (evaluators × window)

    python bench/dispatch_bench.py --actors 64 256 --eval-s 5 --rounds 8
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from evolve.config import config_from_dict  # noqa: E402
from evolve.search.loop import Search, run_search  # noqa: E402
from evolve.dispatch.ray import EvaluatorSpec, RayDispatcher, start_ray  # noqa: E402
from evolve.session import search_space  # noqa: E402
from population_store import RunStore  # noqa: E402

SEED = ROOT / "problems" / "matmul" / "seed.py"
REFERENCE = ROOT / "problems" / "matmul" / "reference.py"


class SleepingEvaluator:
    """EvaluatorActor's methods; an evaluation sleeps and is accepted with a runtime from the source."""

    def __init__(self, home: str | None = None, eval_s: float = 1.0, jitter: float = 0.0) -> None:
        self.eval_s, self.jitter = eval_s, jitter

    def prepare(self, spec) -> dict:
        return {"pid": os.getpid(), "platform": "simulated", "device_name": "sleep", "cutoff": 1e-3}

    def evaluate(self, spec, source: str):
        from fitness import EvalResult, Status

        start = time.time()
        time.sleep(sleep_s(source, self.eval_s, self.jitter))
        runtime = 1.0 + (hash(source) % 1000) / 1000
        return os.getpid(), EvalResult(Status.ACCEPTED, f"{start} {time.time()}", max_abs_diff=0.0,
                                       runtime_ms=runtime,
                                       runtime_spread=0.01, reference_ms=1.5, platform="simulated",
                                       device_name="sleep")

    def lane_stats(self) -> dict:
        return {}

    def close(self) -> None:
        pass


def sleep_s(source: str, eval_s: float, jitter: float) -> float:
    fraction = int(hashlib.sha256(source.encode()).hexdigest()[:8], 16) / 0xFFFFFFFF
    return eval_s * (1 - jitter + 2 * jitter * fraction)


def measure(evaluators: int, eval_s: float, per_process: int, rounds: int, jitter: float = 0.0) -> dict:
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
            super().__init__(home, eval_s, jitter)

    spec = EvaluatorSpec(str(REFERENCE), platform="cpu")
    with tempfile.TemporaryDirectory() as tmp, RayDispatcher(
            spec, num_actors=processes, slots=slots, actor_class=Actor,
            actor_options={"num_cpus": 0}) as dispatcher:
        with RunStore.create(Path(tmp) / "run.sqlite", config.to_dict()) as store:
            cpu0, t0 = time.process_time(), time.perf_counter()
            run_search(Search(store, dispatcher, config, seeds, search_space(config, seeds)))
            wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
            done = store.count()
            spans = [tuple(map(float, i.result["reason"].split())) for i in store.individuals()]
    slept = [end - start for start, end in spans]
    # the seed is evaluated alone (one candidate on an otherwise idle pool): count that wait as ideal
    ideal = slept[0] + sum(slept[1:]) / evaluators
    lo, hi = spans[0][1], max(start for start, _ in spans)
    inside = sum(max(0.0, min(end, hi) - max(start, lo)) for start, end in spans[1:])
    steady = 1 - inside / (evaluators * (hi - lo))
    row = {"evaluators": evaluators, "processes": processes, "slots": slots, "eval_s": eval_s, "jitter": jitter,
           "evaluations": done, "wall_s": wall, "ideal_s": ideal, "overhead": 1 - ideal / wall,
           "steady_overhead": steady,
           "driver_cpu_ms_per_eval": 1e3 * cpu / done}
    print(json.dumps(row), file=sys.stderr, flush=True)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--actors", type=int, nargs="+", default=[64, 256])
    parser.add_argument("--eval-s", type=float, default=2.0)
    parser.add_argument("--per-process", type=int, default=32, help="simulated evaluators per Ray actor process")
    parser.add_argument("--rounds", type=int, default=8, help="evaluations per evaluator")
    parser.add_argument("--jitter", type=float, default=0.5, help="evaluation times spread over eval_s x [1 -/+ jitter]")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    start_ray(num_cpus=os.cpu_count() or 1)
    rows = [measure(n, args.eval_s, args.per_process, args.rounds, args.jitter) for n in args.actors]
    print("| simulated evaluators | evaluations | wall s | ideal s | end-to-end overhead | steady-state overhead "
          "| driver CPU ms / evaluation |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['evaluators']} ({r['processes']} × {r['slots']}) | {r['evaluations']} | {r['wall_s']:.1f} "
              f"| {r['ideal_s']:.1f} | {100 * r['overhead']:.1f}% | {100 * r['steady_overhead']:.1f}% "
              f"| {r['driver_cpu_ms_per_eval']:.2f} |")
    if args.out:
        args.out.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
