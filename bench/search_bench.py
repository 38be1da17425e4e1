"""How many evaluations kevo's search needs to come within 2% of an exhaustive
grid's best configuration, against random search and the grid itself, and the
grid's best kernel against eager PyTorch (for docs/RESULTS.md).

GPU time is spent once. Every point of the config's parametric space (resolved
from its seed, as a run resolves it) is evaluated once with one evaluator, and
each verdict is written to the --cache JSON file as it lands, so a killed run
resumes where it stopped and a later run with the same cache evaluates
nothing. Each strategy is then replayed against that table: kevo's own search
loop (``evolve.search.loop.run_search`` with the real selection and variation, fed by
a dispatcher whose evaluator looks verdicts up), random search without
replacement, and grid order.

    python bench/search_bench.py --config configs/softmax.yaml --config configs/rmsnorm.yaml \\
        --seeds 5 --cache grid.json --out results.json                     # on a GPU machine
    python bench/search_bench.py --config configs/quickstart.yaml --device cpu --cache /tmp/grid.json \\
        --space matmul_kernel.BLOCK_M=32,64 --space matmul_kernel.BLOCK_K=16,32   # CPU smoke run
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import hashlib
import importlib.metadata
import itertools
import json
import math
import os
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.shapes import apply_shapes  # noqa: E402
from evolve.config import Config, ConfigError, PlatformName, load_config  # noqa: E402
from evolve.dispatch.base import InProcessDispatcher, evaluator_info  # noqa: E402
from evolve.search.loop import Search, SearchError, run_search  # noqa: E402
from evolve.session import make_dispatcher, search_space  # noqa: E402
from fitness import CutoffError, EvalResult, ProblemError  # noqa: E402
from fitness.profiling import problem_work  # noqa: E402
from operators import apply_params, params_of  # noqa: E402
from platforms import PlatformUnavailable  # noqa: E402
from platforms.profiling import Workload  # noqa: E402
from platforms.profiling.profilers import RooflineProfiler  # noqa: E402
from population_store import RunStore  # noqa: E402

CACHE_FORMAT = "kevo-search-bench-grid/1"
REASON_CHARS = 300  # a verdict's reason is kept this long in the cache
NOISE_NOTE = (
    "Every runtime in the grid table is a single evaluation (the median of one timing window), "
    "never repeated. The grid's best is the minimum of many single measurements, so it is biased "
    "low, and points closer together than the evaluator's run-to-run spread (docs/RESULTS.md) "
    "cannot be ranked: 'within {pct}' means a point whose one measurement is within {pct} of the "
    "best one measurement. Every strategy is replayed against the same measurements.")

Space = dict[str, tuple[int, ...]]
Table = dict[str, dict[str, Any]]  # point key -> {"result": EvalResult.to_dict(), "wall_s": s}


class BenchError(Exception):
    """The benchmark cannot run as asked; the message says what to change."""


# --- the grid and its cache -------------------------------------------------------


def point_key(params: dict[str, int]) -> str:
    """The cache key of one setting of the tunables: ``name=value`` pairs, sorted by name."""
    return ",".join(f"{name}={value}" for name, value in sorted(params.items()))


def grid_points(space: Space) -> list[dict[str, int]]:
    """Every point of ``space``, in grid order (the first tunable varies slowest)."""
    names = list(space)
    return [dict(zip(names, values)) for values in itertools.product(*(space[n] for n in names))]


class GridCache:
    """Verdicts by point, one table per problem identity, in one JSON file rewritten after every point."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.data: dict[str, Any] = {"format": CACHE_FORMAT, "tables": {}}
        if path.exists():
            try:
                self.data = json.loads(path.read_text(encoding="utf-8"))
            except (OSError, ValueError) as exc:
                raise BenchError(f"cannot read the cache {path}: {exc}; move it away to start afresh") from None
            if self.data.get("format") != CACHE_FORMAT:
                raise BenchError(f"{path} is not a search_bench cache of format {CACHE_FORMAT}")

    def table(self, identity: dict[str, Any]) -> dict[str, Any]:
        """The table of the problem ``identity`` names (created empty on first use)."""
        fingerprint = hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:16]
        return self.data["tables"].setdefault(fingerprint, {"identity": identity, "sessions": [], "points": {}})

    def save(self) -> None:
        """Replace the file atomically, so a kill leaves the previous or the new version."""
        scratch = self.path.with_name(self.path.name + ".tmp")
        with open(scratch, "w", encoding="utf-8") as out:
            json.dump(self.data, out)
            out.flush()
            os.fsync(out.fileno())
        os.replace(scratch, self.path)


def table_identity(config: Config, seed: str) -> dict[str, Any]:
    """Everything in the config that changes a verdict; a table is reused only when all of it matches."""
    problem = config.problem
    return {"reference": str(problem.reference),
            "reference_sha256": hashlib.sha256(problem.reference.read_bytes()).hexdigest(),
            "seed_sha256": hashlib.sha256(seed.encode()).hexdigest(),
            "shapes": problem.shapes, "held_out_shapes": problem.held_out_shapes,
            "max_abs_diff": config.fitness.max_abs_diff, "timeout_s": config.fitness.timeout_s,
            "platform": config.platform.value}


def fill_grid(name: str, config: Config, seed: str, points: list[dict[str, int]], cache: GridCache,
              table: dict[str, Any], evaluator_factory: Callable[[Config], Any] | None = None) -> int:
    """Evaluate the ``points`` the table lacks, saving after each; return how many were evaluated.

    The points go through the config's dispatcher (every GPU's Ray actor, as
    a run would use them), or through ``evaluator_factory``'s evaluator in
    this process. No evaluator is built when nothing is missing, so a
    complete cache replays anywhere.
    """
    missing = [p for p in points if point_key(p) not in table["points"]]
    if not missing:
        return 0
    with _dispatcher(config, evaluator_factory) as (dispatcher, where):
        _check_session(table, _session(where), cache.path)
        for key, params in enumerate(missing):
            dispatcher.submit(key, apply_params(seed, params))
        started = last = time.monotonic()
        for done, (key, result) in enumerate(dispatcher.results(), 1):
            params = missing[key]
            record = {**result.to_dict(), "reason": result.reason[:REASON_CHARS], "profile": None}
            # wall_s: time since the previous verdict (in process, the evaluation's own wall time;
            # on a pool, the times add up to the wall time of filling the grid)
            now = time.monotonic()
            table["points"][point_key(params)] = {"result": record, "wall_s": round(now - last, 3)}
            last = now
            cache.save()
            eta = (time.monotonic() - started) / done * (len(missing) - done)
            runtime = f"{result.runtime_ms:.4g} ms" if result.accepted else result.reason[:80]
            print(f"[{name}] {done}/{len(missing)} {_short(params)}: {result.status.value} {runtime} "
                  f"(eta {eta / 60:.1f} min)", file=sys.stderr, flush=True)
        table.setdefault("fill_wall_s", []).append(round(time.monotonic() - started, 2))
    return len(missing)


@contextlib.contextmanager
def _dispatcher(config: Config, evaluator_factory: Callable[[Config], Any] | None):
    if evaluator_factory is None:
        with make_dispatcher(config) as made:
            yield made
        return
    with evaluator_factory(config) as evaluator, InProcessDispatcher(evaluator) as dispatcher:
        yield dispatcher, evaluator_info(evaluator)


def _session(where: dict[str, Any]) -> dict[str, Any]:
    return {"platform": where["platform"], "device_name": where["device_name"], "cutoff": where["cutoff"],
            **{pkg: importlib.metadata.version(pkg) for pkg in ("torch", "triton")}}


def _check_session(table: dict[str, Any], session: dict[str, Any], path: Path) -> None:
    """Refuse to mix measurements of different machines or versions in one table."""
    if table["sessions"] and table["sessions"][0] != session:
        raise BenchError(f"{path} holds measurements taken with {table['sessions'][0]}, but this machine has "
                         f"{session}; use another --cache file")
    if not table["sessions"]:
        table["sessions"].append(session)


def _short(params: dict[str, int]) -> str:
    return " ".join(f"{n.rsplit('.', 1)[-1]}={v}" for n, v in params.items())


# --- the strategies, replayed against the table -----------------------------------


class TableEvaluator:
    """An evaluator that looks verdicts up in the grid table instead of measuring.

    Its profiles are the analytic roofline of the stored runtime on the
    grid's device (``work``: the problem's bytes and flops), as a run gets
    them where no hardware profiler works; without ``work`` it profiles nothing.
    """

    def __init__(self, points: Table, work: Workload | None = None) -> None:
        self.points = points
        self.work = work
        self._roofline = RooflineProfiler("cuda", "replayed from the grid table: analytic roofline")

    def profile(self, source: str, runtime_ms: float | None = None) -> dict[str, Any] | None:
        if self.work is None:
            return None
        workload = dataclasses.replace(self.work, runtime_ms=runtime_ms)
        return self._roofline.profile([], {}, None, 1.0, workload).to_dict()

    def evaluate(self, source: str) -> EvalResult:
        key = point_key(params_of(source))
        if key not in self.points:
            raise BenchError(f"the search reached {key}, which the grid does not hold: the seed's "
                             "value of a tunable lies outside the space; add it to operators.space")
        return EvalResult.from_dict(self.points[key]["result"])


def kevo_runtimes(config: Config, seed: str, space: Space, points: Table, search_seed: int, budget: int,
                  keep_stops: bool, work: Workload | None = None,
                  bias: bool | None = None) -> tuple[list[float | None], str]:
    """Runtimes (None: not accepted) in the order kevo's loop evaluates them, and why it stopped.

    With ``keep_stops`` false only the budget ends the run (patience and the
    other stop conditions are dropped, so every strategy gets the same budget).
    Wall-time limits are always dropped: a replay takes no time.
    """
    stops = {} if keep_stops else {"patience": None, "max_generations": None, "target_speedup": None}
    search = dataclasses.replace(config.search, seed=search_seed, max_evaluations=budget,
                                 max_wall_time_s=None, **stops)
    config = dataclasses.replace(config, search=search)
    if bias is not None:
        config = dataclasses.replace(config, operators=dataclasses.replace(config.operators, bias=bias))
    runtimes: list[float | None] = []
    with tempfile.TemporaryDirectory() as scratch:
        with RunStore.create(Path(scratch) / "run.sqlite", config.to_dict()) as store:
            with InProcessDispatcher(TableEvaluator(points, work)) as dispatcher:
                reason = run_search(Search(store, dispatcher, config, [seed], space,
                                           lambda candidate: runtimes.append(candidate.runtime_ms)))
    return runtimes, reason


def _work(config: Config, table: dict[str, Any]) -> Workload | None:
    """The problem's bytes and flops at the grid's shapes, on the grid's device (for the roofline)."""
    if not table["sessions"]:
        return None
    work = problem_work(config.problem.reference, config.problem.shapes)
    return Workload(bytes_moved=work.bytes_moved, flops=work.flops, dtype=work.dtype,
                    device_name=table["sessions"][0]["device_name"])


def runtimes_of(points: Table, keys: list[str]) -> list[float | None]:
    return [points[k]["result"]["runtime_ms"] if points[k]["result"]["status"] == "accepted" else None
            for k in keys]


def evaluations_to(runtimes: list[float | None], target_ms: float) -> int | None:
    """1-based index of the first runtime at or below ``target_ms``; None if there is none."""
    return next((i for i, ms in enumerate(runtimes, 1) if ms is not None and ms <= target_ms), None)


def median_of(counts: list[int | None]) -> float | None:
    """Median with "not reached" ranked above every count; None when the median itself is not reached."""
    middle = statistics.median(math.inf if c is None else c for c in counts)
    return None if math.isinf(middle) else middle


# --- one problem --------------------------------------------------------------------


def bench_problem(config_path: Path, args: argparse.Namespace, cache: GridCache,
                  evaluator_factory: Callable[[Config], Any] | None = None) -> dict[str, Any]:
    """Fill the grid of one config, then replay every strategy against it."""
    config, seed, space = _setup(config_path, args)
    name = config_path.stem
    grid = grid_points(space)
    if len(grid) > args.max_grid:
        raise BenchError(f"{config_path}: the grid holds {len(grid)} points, more than --max-grid "
                         f"{args.max_grid}; raise --max-grid or restrict the space (--space NAME=V1,V2,...)")
    table = cache.table(table_identity(config, seed))
    seed_point = params_of(seed)
    extra = [] if seed_point in grid else [seed_point]  # kevo evaluates the seed first
    evaluated = fill_grid(name, config, seed, grid + extra, cache, table, evaluator_factory)
    points: Table = table["points"]
    keys = [point_key(p) for p in grid]
    grid_runtimes = runtimes_of(points, keys)
    accepted = [(ms, k) for ms, k in zip(grid_runtimes, keys) if ms is not None]
    row = {"problem": name, "config": str(config_path), "reference": str(config.problem.reference),
           "shapes": config.problem.shapes, "space": {n: list(v) for n, v in space.items()},
           "grid_size": len(grid), "accepted": len(accepted), "evaluated_now": evaluated,
           "grid_wall_s": sum(points[k]["wall_s"] for k in keys), "sessions": table["sessions"]}
    if not accepted:
        return {**row, "error": "no point of the grid is accepted"}
    best_ms, best_key = min(accepted)
    best = points[best_key]["result"]
    target = best_ms * (1 + args.within)
    budget = args.budget or config.search.max_evaluations
    seeds = [config.search.seed + i for i in range(args.seeds)]
    row.update(grid_best_ms=best_ms, grid_best_params=best_key, grid_best_spread=best["runtime_spread"],
               eager_ms=best["reference_ms"], best_speedup=best["speedup"],
               seed_ms=runtimes_of(points, [point_key(seed_point)])[0], target_ms=target,
               points_within=sum(ms <= target for ms, _ in accepted), budget=budget, search_seeds=seeds,
               strategies=_replay(config, seed, space, points, keys, target, budget, seeds,
                                  _work(config, table)))
    return row


def _setup(config_path: Path, args: argparse.Namespace) -> tuple[Config, str, Space]:
    config = load_config(config_path)
    if len(config.problem.seeds) != 1:
        raise BenchError(f"{config_path}: the grid is the space of one seed; name exactly one in problem.seeds")
    overrides = dict(config.operators.space)
    for item in args.space:
        tunable, _, values = item.partition("=")
        try:
            overrides[tunable] = [int(v) for v in values.split(",")]
        except ValueError:
            raise BenchError(f"--space {item}: expected NAME=V1,V2,... with integer values") from None
    config = dataclasses.replace(config, operators=dataclasses.replace(config.operators, space=overrides))
    if args.device:
        config = dataclasses.replace(config, platform=PlatformName(args.device))
    try:
        shapes = apply_shapes(config.problem.reference, getattr(args, "shape", None) or [], config.problem.shapes)
    except ValueError as exc:
        raise BenchError(str(exc)) from None
    config = dataclasses.replace(config, problem=dataclasses.replace(config.problem, shapes=shapes))
    seed = config.problem.seeds[0].read_text(encoding="utf-8")
    return config, seed, search_space(config, [seed])


def _replay(config: Config, seed: str, space: Space, points: Table, keys: list[str], target: float,
            budget: int, seeds: list[int], work: Workload | None = None) -> dict[str, Any]:
    """Evaluations to ``target`` per strategy and search seed (None: not reached).

    ``kevo`` biases its operator choice by the parents' roofline class (as
    configured); ``kevo_uniform`` is the same search with ``operators.bias``
    off, drawing operators from the config's weights alone.
    """
    kevo, uniform, configured = [], [], []
    for s in seeds:
        try:
            runtimes, _ = kevo_runtimes(config, seed, space, points, s, budget, keep_stops=False, work=work,
                                        bias=True)
            kevo.append(evaluations_to(runtimes, target))
            runtimes, _ = kevo_runtimes(config, seed, space, points, s, budget, keep_stops=False, work=work,
                                        bias=False)
            uniform.append(evaluations_to(runtimes, target))
            runtimes, reason = kevo_runtimes(config, seed, space, points, s, budget, keep_stops=True, work=work)
            configured.append({"reached_at": evaluations_to(runtimes, target), "spent": len(runtimes),
                               "stop_reason": reason})
        except SearchError as exc:
            return {"error": f"kevo cannot search: {exc}"}
    sampled = [random.Random(s).sample(keys, min(budget, len(keys))) for s in seeds]
    random_counts = [evaluations_to(runtimes_of(points, order), target) for order in sampled]
    grid_count = evaluations_to(runtimes_of(points, keys), target)  # the grid is exhaustive: no budget
    strategies: dict[str, Any] = {
        name: {"per_seed": counts, "median": median_of(counts), "reached": sum(c is not None for c in counts)}
        for name, counts in (("kevo", kevo), ("kevo_uniform", uniform), ("random", random_counts),
                             ("grid", [grid_count] * len(seeds)))}
    strategies["kevo_as_configured"] = configured
    return strategies


# --- output ------------------------------------------------------------------------


def markdown(rows: list[dict[str, Any]], within: float, seeds: int) -> str:
    pct = f"{100 * within:g}%"
    lines = [f"| problem | grid size (accepted) | grid best ms | eager ms | best vs eager | points within {pct} "
             f"| budget | median evaluations to {pct}: kevo | kevo, uniform operators | random | grid order "
             f"| kevo / grid size |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if "error" in r or "error" in r.get("strategies", {}):
            lines.append(f"| {r['problem']} | {r['grid_size']} ({r['accepted']}) | "
                         f"{r.get('error') or r['strategies']['error']} |")
            continue
        st = r["strategies"]
        share = "n/a" if st["kevo"]["median"] is None else f"{100 * st['kevo']['median'] / r['grid_size']:.1f}%"
        lines.append(f"| {r['problem']} | {r['grid_size']} ({r['accepted']}) | {r['grid_best_ms']:.4g} | "
                     f"{r['eager_ms']:.4g} | {r['best_speedup']:.2f}x | {r['points_within']} | {r['budget']} | "
                     f"{_count(st['kevo'])} | {_count(st['kevo_uniform'])} | {_count(st['random'])} | "
                     f"{_count(st['grid'])} | {share} |")
    lines += ["", f"Medians over {seeds} search seeds; (n/m): seeds that "
              f"reached {pct} within the budget. Grid order is deterministic and has no budget.",
              "kevo's search has only the budget as its stop condition here; with the config's own stop "
              "conditions (patience, ...) it reached the target in:"]
    for r in rows:
        configured = r.get("strategies", {}).get("kevo_as_configured")
        if configured:
            reached = sum(c["reached_at"] is not None for c in configured)
            spent = statistics.median(c["spent"] for c in configured)
            lines.append(f"- {r['problem']}: {reached}/{len(configured)} seeds, median {spent:g} evaluations "
                         f"spent before it stopped")
    return "\n".join(lines + ["", NOISE_NOTE.format(pct=pct)])


def _count(strategy: dict[str, Any]) -> str:
    median = "not reached" if strategy["median"] is None else f"{strategy['median']:g}"
    return f"{median} ({strategy['reached']}/{len(strategy['per_seed'])})"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", type=Path, action="append", required=True, help="a kevo config (repeatable)")
    parser.add_argument("--cache", type=Path, required=True, help="JSON file of grid verdicts (resumed if present)")
    parser.add_argument("--out", type=Path, help="write the results as JSON here")
    parser.add_argument("--seeds", type=int, default=5, help="search seeds per strategy (default 5)")
    parser.add_argument("--budget", type=int, help="evaluations per search (default: search.max_evaluations)")
    parser.add_argument("--within", type=float, default=0.02, help="target: runtime <= best * (1 + WITHIN)")
    parser.add_argument("--device", choices=[p.value for p in PlatformName], help="override the config's platform")
    parser.add_argument("--max-grid", type=int, default=3000, help="refuse grids larger than this (default 3000)")
    parser.add_argument("--shape", action="append", default=[], metavar="NAME=VALUE",
                        help="override a shape knob of every problem that has it (repeatable)")
    parser.add_argument("--space", action="append", default=[], metavar="NAME=V1,V2,...",
                        help="restrict a tunable's values (repeatable; applies to every --config)")
    args = parser.parse_args(argv)
    if args.seeds < 1 or (args.budget is not None and args.budget < 1) or args.within < 0:
        parser.error("--seeds and --budget must be at least 1 and --within at least 0")
    cache = GridCache(args.cache)
    rows = []
    try:
        for config_path in args.config:
            rows.append(bench_problem(config_path, args, cache))
            print(json.dumps({k: v for k, v in rows[-1].items() if k != "sessions"}), file=sys.stderr, flush=True)
    except (BenchError, ConfigError, ProblemError, CutoffError, PlatformUnavailable) as exc:
        print(f"search_bench: {exc}", file=sys.stderr)
        return 2
    report = {"within": args.within, "noise_note": NOISE_NOTE.format(pct=f"{100 * args.within:g}%"),
              "problems": rows}
    if args.out:
        args.out.write_text(json.dumps(report, indent=2), encoding="utf-8")
    print(markdown(rows, args.within, args.seeds))
    return 0


if __name__ == "__main__":
    sys.exit(main())
