"""How close eager PyTorch and torch.compile come to each problem's floor.

For every problem file of a KernelBench folder (default: level 1), at its own
shapes: the compulsory bytes and FLOPs of the reference, its floor on this
device (``fitness.floor``, with the device's measured peaks from
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
        --shape batch_size=8 --shape dim=300 --out /tmp/sol_cpu.jsonl  # a smoke test

On an H200, 17 level-1 problems of every kind (matmuls, activations, norms,
pooling, convolutions, attention, losses) took 45 s together, compiles
included, after 12 s measuring the peaks: level 1 takes about 5 minutes.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import re
import signal
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.shapes import apply_shapes  # noqa: E402
from fitness.floor import below_floor, count_work, floor_of, sol  # noqa: E402
from fitness.problem import DTYPES, build_model, load_problem, make_inputs  # noqa: E402
from fitness.settings import EvalSettings  # noqa: E402
from platforms import PLATFORM_NAMES, get_platform, time_runs  # noqa: E402
from platforms.peaks import achievable_peaks  # noqa: E402

DEFAULT_FOLDER = Path("/work/shared/kernelbench/level1")


def problem_files(folder: Path, only: str | None, limit: int | None) -> list[Path]:
    """The folder's problem files in KernelBench's order (1_, 2_, ..., 100_), those whose
    name matches the regex ``only``, at most ``limit`` of them."""
    def order(path: Path) -> tuple[int, str]:
        number = re.match(r"\d+", path.stem)
        return (int(number[0]) if number else sys.maxsize, path.stem)

    files = sorted((p for p in folder.glob("*.py") if not p.name.startswith("_")), key=order)
    if only:
        files = [p for p in files if re.search(only, p.stem)]
    return files[:limit] if limit else files


def time_forward(model, problem, platform) -> float:
    """Median ms of ``model``'s forward under kevo's protocol, on inputs drawn afresh each run
    (as ``fitness.prepared.PreparedProblem.time_in_process`` times the reference)."""
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

    started = time.perf_counter()
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
    row["seconds"] = round(time.perf_counter() - started, 1)
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


def recorded(out: Path) -> dict[str, dict]:
    """The last line written for each problem in ``out`` (a ``started`` line: the run died there)."""
    last: dict[str, dict] = {}
    if out.exists():
        for line in out.read_text().splitlines():
            with contextlib.suppress(json.JSONDecodeError):  # a line cut short when the process died
                row = json.loads(line)
                last[row["key"]] = row
    return last


def append(out: Path, row: dict) -> None:
    with out.open("a") as f:
        f.write(json.dumps(row) + "\n")
        f.flush()


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
    parser.add_argument("folder", nargs="?", type=Path, default=DEFAULT_FOLDER,
                        help=f"a folder of problem files (default {DEFAULT_FOLDER})")
    parser.add_argument("--out", type=Path, required=True, help="JSON lines, appended as each problem is done")
    parser.add_argument("--only", help="problems whose file name matches this regex")
    parser.add_argument("--limit", type=int, help="at most this many problems")
    parser.add_argument("--skip-compile", action="store_true", help="time eager PyTorch only")
    parser.add_argument("--device", default="auto", choices=PLATFORM_NAMES)
    parser.add_argument("--shape", action="append", default=[], metavar="NAME=VALUE",
                        help="override a shape knob of every problem that has it (repeatable)")
    parser.add_argument("--dtype", choices=DTYPES, help="cast inputs and parameters to this")
    parser.add_argument("--timeout", type=int, default=300, help="seconds a problem may take (0: no limit)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if not args.folder.is_dir():
        print(f"sol_bench: no folder {args.folder}", file=sys.stderr)
        return 2
    files = problem_files(args.folder, args.only, args.limit)
    if not files:
        print(f"sol_bench: no problem file in {args.folder} matches {args.only!r}", file=sys.stderr)
        return 2
    platform = get_platform(args.device)
    peaks = achievable_peaks(platform)
    print(f"peaks of {peaks.device_name} ({peaks.source}): {peaks.bandwidth_gbs:.0f} GB/s, "
          + ", ".join(f"{k} {v:.4g} TFLOP/s" for k, v in peaks.tflops.items()), file=sys.stderr, flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    done = recorded(args.out)
    rows = []
    for i, path in enumerate(files):
        key = json.dumps([path.stem, sorted(args.shape), args.dtype, peaks.device_name])
        head = {"key": key, "problem": path.stem, "device": peaks.device_name, "dtype_override": args.dtype}
        earlier = done.get(key)
        if earlier is not None:
            if earlier.get("status") == "started":
                earlier = {**head, "status": "error", "error": "interrupted: an earlier run stopped during it"}
                append(args.out, earlier)
            print(f"[{i + 1}/{len(files)}] {path.stem}: recorded already", file=sys.stderr, flush=True)
            rows.append(earlier)
            continue
        print(f"[{i + 1}/{len(files)}] {path.stem}", file=sys.stderr, flush=True)
        append(args.out, {**head, "status": "started"})
        try:
            with time_limit(args.timeout):
                shapes = apply_shapes(path, args.shape)
                row = {**head, "status": "done", "shapes": shapes,
                       **measure(path, shapes, args.dtype, platform, peaks, args.skip_compile)}
        except Exception as exc:  # a failing problem is a row; the bench goes on with the next
            row = {**head, "status": "error", "error": f"{type(exc).__name__}: {str(exc)[:500]}"}
        append(args.out, row)
        rows.append(row)
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
