"""How close eager PyTorch and torch.compile come to each problem's floor.

For every problem file of a KernelBench folder (default: level 1 under $KB or
../shared/kernelbench), at its own
shapes: the compulsory bytes and FLOPs of the reference, its floor on this
device (``fitness.judge.floor``, with the device's measured peaks from
``platforms.peaks``), the reference timed eager and under ``torch.compile``
(default mode) with kevo's own protocol (cold cache, the whole device
synchronised, inputs drawn afresh for every run as a candidate's are; the
median run), and the SOL of each: floor / time.

Each problem's row is appended to ``--out`` (JSON lines) as soon as it is
done, after a ``started`` line written before it begins; run the same command
again and it goes on where it stopped: problems with a row are skipped, and a
problem that was under way when the process died is recorded as
``interrupted`` and skipped too. A problem that fails is a row with its error.

    python bench/sol_bench.py --out sol_level1.jsonl                  # a GPU, level 1
    python bench/sol_bench.py --device cpu --only '^(19|23)_' --skip-compile \\
        --shape batch_size=8 --shape dim=300 --out sol_cpu.jsonl      # a smoke test

On an H200, 17 level-1 problems of every kind (matmuls, activations, norms,
pooling, convolutions, attention, losses) took 45 s together, compiles
included, after 12 s measuring the peaks: level 1 takes about 5 minutes.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import signal
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.per_problem import add_folder_options, chosen_files, problem_rows  # noqa: E402
from bench.shapes import apply_shapes  # noqa: E402
from fitness.judge.floor import below_floor, count_work, floor_of, sol  # noqa: E402
from fitness.problems.problem import build_model, load_problem, make_inputs  # noqa: E402
from fitness.settings import EvalSettings  # noqa: E402
from platforms import get_platform, time_runs  # noqa: E402
from platforms.peaks import achievable_peaks  # noqa: E402


def time_forward(model, problem, platform) -> float:
    """Median ms of ``model``'s forward under kevo's protocol, on inputs drawn afresh each run
    (as ``fitness.judge.prepared.PreparedProblem.time_in_process`` times the reference)."""
    import torch

    seeds = EvalSettings().fixed_seeds

    def prepare(i: int) -> list:
        return make_inputs(problem, seeds[i % len(seeds)], platform.device())

    def run(_i: int, args: list) -> None:
        with torch.no_grad():
            model(*args)

    return time_runs(platform, run, platform.timing, prepare).median_ms


def measure(path: Path, shapes: dict[str, int], dtype: str | None, platform, peaks,
            skip_compile: bool) -> dict:
    """One problem's row: its floor, and eager and compiled times with their SOL."""
    import torch

    problem = load_problem(path, shapes, dtype)
    floor = floor_of(count_work(problem, platform.device()), peaks)
    row = {"bytes": floor.bytes, "flops": floor.flops, "flops_source": floor.how["flops_source"],
           "traced": floor.how["traced"], "dtype": floor.how["dtype"], "bound": floor.bound,
           "floor_ms": floor.floor_ms, "cached_floor_ms": floor.cached_floor_ms, "bandwidth_gbs": floor.bandwidth_gbs,
           "peak_tflops": floor.peak_tflops, "precision": floor.how["precision"], "peaks_source": floor.source,
           "floor_note": floor.note}
    model = build_model(problem.Model, problem, EvalSettings().init_seed, platform.device())
    try:
        row["eager_ms"] = time_forward(model, problem, platform)
        row["sol_eager"] = sol(floor.floor_ms, row["eager_ms"])
        row["eager_below_floor"] = below_floor(floor, row["eager_ms"])
        if not skip_compile:
            compiled = torch.compile(model)
            compile_started = time.perf_counter()
            with torch.no_grad():  # compiled before it is timed
                compiled(*make_inputs(problem, EvalSettings().fixed_seeds[0], platform.device()))
            row["compile_s"] = round(time.perf_counter() - compile_started, 1)
            row["compiled_ms"] = time_forward(compiled, problem, platform)
            row["sol_compiled"] = sol(floor.floor_ms, row["compiled_ms"])
            row["compiled_below_floor"] = below_floor(floor, row["compiled_ms"])
    finally:
        del model
        torch._dynamo.reset()
        platform.release_memory()
    return row


class ProblemTimeout(Exception):
    """A problem ran past ``--timeout``."""


@contextlib.contextmanager
def time_limit(seconds: int):
    """Raise ``ProblemTimeout`` in this (main) thread after ``seconds`` (0: no limit)."""
    def expire(_signum, _frame):
        raise ProblemTimeout(f"ran past --timeout {seconds} s")

    if seconds <= 0:
        yield
        return
    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def table(rows: list[dict]) -> str:
    def ms(value) -> str:
        return f"{value:.4g}" if isinstance(value, (int, float)) else "-"

    lines = [f"{'problem':44} {'bound':7} {'MB':>9} {'GFLOP':>9} {'floor ms':>9} {'eager ms':>9} {'SOL':>5} "
             f"{'compiled':>9} {'SOL':>5}"]
    for r in rows:
        if "error" in r:
            lines.append(f"{r['problem'][:44]:44} error: {r['error'][:100]}")
            continue
        lines.append(f"{r['problem'][:44]:44} {r['bound']:7} {r['bytes'] / 1e6:9.4g} {r['flops'] / 1e9:9.4g} "
                     f"{ms(r['floor_ms']):>9} {ms(r.get('eager_ms')):>9} {ms(r.get('sol_eager')):>5} "
                     f"{ms(r.get('compiled_ms')):>9} {ms(r.get('sol_compiled')):>5}")
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_folder_options(parser)
    parser.add_argument("--skip-compile", action="store_true", help="time eager PyTorch only")
    parser.add_argument("--timeout", type=int, default=300, help="seconds a problem may take (0: no limit)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    files = chosen_files("sol_bench", args)
    if files is None:
        return 2
    platform = get_platform(args.device)
    peaks = achievable_peaks(platform)
    print(f"peaks of {peaks.device_name} ({peaks.source}): {peaks.bandwidth_gbs:.0f} GB/s, "
          + ", ".join(f"{k} {v:.4g} TFLOP/s" for k, v in peaks.tflops.items()), file=sys.stderr, flush=True)

    def head(path: Path) -> dict:
        key = json.dumps([path.stem, sorted(args.shape), args.dtype, peaks.device_name])
        return {"key": key, "problem": path.stem, "device": peaks.device_name, "dtype_override": args.dtype}

    def measure_problem(path: Path, _head: dict) -> dict:
        with time_limit(args.timeout):
            shapes = apply_shapes(path, args.shape)
            return {"shapes": shapes, **measure(path, shapes, args.dtype, platform, peaks, args.skip_compile)}

    print(table(problem_rows(files, args.out, head, measure_problem)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
