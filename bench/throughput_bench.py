"""Evaluations per second for one fixed stream of candidates: Ray actors on one
GPU and on several, with one or more slots each, against a fresh Python process
per candidate (how peer tools evaluate), and how busy each GPU's timing lane is.

The stream is the first ``--candidates`` points of the config's parametric
grid (every one a real kernel variant, compiled and judged from scratch).
Actor start-up (importing torch, building the reference) is reported apart
from the stream's wall time.

    python bench/throughput_bench.py --config configs/rmsnorm.yaml --shape batch_size=2048 \\
        --plans 1x1 1x3 2x3 --fresh 4 --out throughput.json           # on a machine with 2 GPUs

``--bare`` adds the rate of the bare minimum on the same stream, in this
process: import the candidate, one check against the reference, and
``triton.testing.do_bench`` (no sandbox, no held-out shapes, no probes).
``--warmup-ms`` and ``--window-ms`` replace the platform's timing window.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.shapes import apply_shapes  # noqa: E402
from evolve.config import load_config  # noqa: E402
from evolve.dispatch.ray import RayDispatcher  # noqa: E402
from evolve.report_time import median_parts  # noqa: E402
from evolve.session import evaluator_spec, search_space  # noqa: E402
from fitness.problems.problem import build_model, load_problem, make_inputs  # noqa: E402
from fitness.settings import DEFAULT_MAX_ABS_DIFF, EvalSettings  # noqa: E402
from operators import apply_params  # noqa: E402
from platforms import TimingSettings, get_platform  # noqa: E402


def stream(config, count: int) -> list[str]:
    seed = config.problem.seeds[0].read_text()
    space = search_space(config, [seed])
    names = sorted(space)
    points = [{}]
    for name in names:
        points = [{**p, name: v} for p in points for v in space[name]]
    step = max(1, len(points) // count)
    return [apply_params(seed, p) for p in points[::step][:count]]


def median_walls(results: list) -> dict[str, float]:
    """Where the evaluations' time went: the median seconds of each part (EvalResult.walls_s)."""
    return {p: round(s, 4) for p, s in median_parts([r.walls_s for r in results if r.walls_s]).items()}


def occupancy(results: list, slots: int, wall: float) -> dict:
    """Each evaluation's total in the order the results came (the first slots-full found
    their workers fresh), and the share of the slots' time that evaluations filled: below 1,
    slots waited for work or for their evaluator outside the evaluation."""
    totals = [r.walls_s.get("total", 0.0) for r in results if r.walls_s]
    return {"totals_s": [round(t, 3) for t in totals],
            "slot_occupancy": round(sum(totals) / (slots * wall), 3) if wall > 0 else None}


def with_pool(config, sources: list[str], actors: int, slots: int, timing: TimingSettings | None = None,
              passes: int = 1) -> list[dict]:
    """The stream through one pool, ``passes`` times (later passes find Triton's disk cache warm)."""
    spec = evaluator_spec(config)
    if timing is not None:
        spec = dataclasses.replace(spec, settings=dataclasses.replace(spec.settings, timing=timing))
    t0 = time.perf_counter()
    with RayDispatcher(spec, num_actors=actors, slots=slots) as dispatcher:
        startup = time.perf_counter() - t0
        rows = []
        for n in range(passes):
            before = dispatcher.lane_stats()
            started = time.perf_counter()
            for key, source in enumerate(sources):
                dispatcher.submit(n * len(sources) + key, source)
            results = [r for _, r in dispatcher.results()]
            statuses = [r.status.value for r in results]
            wall = time.perf_counter() - started
            after = dispatcher.lane_stats()
            busy = [(a["timing_s"] - b["timing_s"]) / wall for a, b in zip(after, before)]
            rows.append({"plan": f"{actors}x{slots}" + (f" pass {n + 1}" if passes > 1 else ""), "actors": actors,
                         "slots": slots, "startup_s": startup, "wall_s": wall, "evals_per_s": len(sources) / wall,
                         "lane_busy_share": busy, "timings": [a["timings"] - b["timings"] for a, b in zip(after, before)],
                         "accepted": statuses.count("accepted"), "statuses": sorted(set(statuses)),
                         "median_walls_s": median_walls(results), **occupancy(results, actors * slots, wall)})
    return rows


def fresh_processes(config, sources: list[str]) -> dict:
    """``kevo verify`` in a new Python process per candidate, with the config's shapes, cutoff and dtype."""
    options = [f"--shape={k}={v}" for k, v in config.problem.shapes.items()]
    if config.fitness.max_abs_diff is not None:
        options.append(f"--max-abs-diff={config.fitness.max_abs_diff}")
    if config.problem.dtype is not None:
        options.append(f"--dtype={config.problem.dtype}")
    walls = []
    with tempfile.TemporaryDirectory() as tmp:
        for i, source in enumerate(sources):
            path = Path(tmp) / f"candidate_{i}.py"
            path.write_text(source)
            t0 = time.perf_counter()
            done = subprocess.run([sys.executable, "-m", "evolve.cli", "verify", str(config.problem.reference),
                                   str(path), "--json", "--device", config.platform.value, *options],
                                  cwd=ROOT, capture_output=True, text=True, timeout=600)
            walls.append(time.perf_counter() - t0)
            if done.returncode not in (0, 1):
                raise RuntimeError(f"kevo verify failed: {done.stderr[-1000:]}")
    return {"plan": "fresh process per candidate", "wall_s": sum(walls), "evals_per_s": len(sources) / sum(walls),
            "per_candidate_s": walls, "verify_options": options}


def bare(config, sources: list[str], passes: int = 1) -> list[dict]:
    """One warm process: per candidate, import it, check it once against the reference
    (max |diff| within the cutoff), and ``do_bench`` it. What a minimal harness costs."""
    import torch

    platform = get_platform(config.platform.value)
    device = platform.device()
    problem = load_problem(config.problem.reference, config.problem.shapes, config.problem.dtype)
    settings = EvalSettings()  # the same weights and first fixed inputs as kevo's checks
    reference = build_model(problem.Model, problem, settings.init_seed, device)
    inputs = make_inputs(problem, settings.fixed_seeds[0], device)
    with torch.no_grad():
        expected = reference(*inputs)
    cutoff = config.fitness.max_abs_diff if config.fitness.max_abs_diff is not None else DEFAULT_MAX_ABS_DIFF
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for n in range(passes):
            walls, ok = [], 0
            for i, source in enumerate(sources):
                t0 = time.perf_counter()
                ok += bare_one(source, Path(tmp) / f"bare_candidate_{n}_{i}.py", problem, device,
                               inputs, expected, cutoff, settings.init_seed)
                walls.append(time.perf_counter() - t0)
            rows.append({"plan": "bare: one check + do_bench, one warm process" + (f" pass {n + 1}" if passes > 1 else ""),
                         "wall_s": sum(walls), "evals_per_s": len(sources) / sum(walls), "accepted": ok,
                         "per_candidate_s": walls})
    return rows


def bare_one(source: str, path: Path, problem, device: str, inputs: list, expected, cutoff: float,
             init_seed: int) -> bool:
    """Import ``source`` from ``path``, check it once, ``do_bench`` it; whether it was right."""
    import torch
    import triton.testing

    path.write_text(source)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module
    spec.loader.exec_module(module)
    model = build_model(module.ModelNew, problem, init_seed, device)
    with torch.no_grad():
        good = bool((model(*inputs) - expected).abs().max().item() <= cutoff)
        triton.testing.do_bench(lambda: model(*inputs), return_mode="median")
    return good


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", type=Path, required=True)
    parser.add_argument("--shape", action="append", default=[], metavar="NAME=VALUE")
    parser.add_argument("--candidates", type=int, default=24)
    parser.add_argument("--plans", nargs="*", default=["1x1", "1x3", "2x3"], help="ACTORSxSLOTS (none: no pool)")
    parser.add_argument("--fresh", type=int, default=4, help="candidates judged in a fresh process each (0: none)")
    parser.add_argument("--bare", action="store_true", help="also the bare check + do_bench rate (see above)")
    parser.add_argument("--warmup-ms", type=float, help="the timing's warm-up (default: the platform's)")
    parser.add_argument("--window-ms", type=float, help="the timed window (default: the platform's)")
    parser.add_argument("--passes", type=int, default=1,
                        help="the stream this many times per plan (later passes: Triton's disk cache warm)")
    parser.add_argument("--compile-timeout", type=float, help="fitness.compile_timeout_s (default: the config's)")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    config = load_config(args.config)
    if args.compile_timeout is not None:
        config = dataclasses.replace(config, fitness=dataclasses.replace(config.fitness,
                                                                         compile_timeout_s=args.compile_timeout))
    shapes = apply_shapes(config.problem.reference, args.shape, config.problem.shapes, ignore_unknown=False)
    config = dataclasses.replace(config, problem=dataclasses.replace(config.problem, shapes=shapes))
    sources = stream(config, args.candidates)
    timing = None
    if args.warmup_ms is not None or args.window_ms is not None:
        default = get_platform(config.platform.value).timing
        timing = dataclasses.replace(default, **{k: v for k, v in (("warmup_ms", args.warmup_ms),
                                                                    ("window_ms", args.window_ms)) if v is not None})
    rows = []
    for plan in args.plans:
        actors, slots = (int(x) for x in plan.split("x"))
        rows.extend(with_pool(config, sources, actors, slots, timing, args.passes))
        print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    if args.bare:
        rows.extend(bare(config, sources, args.passes))
        print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    if args.fresh:
        rows.append(fresh_processes(config, sources[:args.fresh]))
        print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    if not rows:
        parser.error("nothing to measure: give --plans, --fresh or --bare")
    base = rows[0]["evals_per_s"]
    print(f"{len(sources)} candidates of {args.config.name} at {shapes}")
    print("| plan (actors x slots) | start-up s | stream wall s | evaluations/s | vs first plan | timing lane busy |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        busy = ", ".join(f"{100 * b:.0f}%" for b in r.get("lane_busy_share", [])) or "-"
        start = f"{r['startup_s']:.1f}" if "startup_s" in r else "-"
        print(f"| {r['plan']} | {start} | {r['wall_s']:.1f} | {r['evals_per_s']:.3g} | "
              f"{r['evals_per_s'] / base:.2f}x | {busy} |")
    if args.out:
        args.out.write_text(json.dumps({"shapes": shapes, "candidates": len(sources), "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
