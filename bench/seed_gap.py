"""Where a torch.compile seed's time goes: the same kernels timed four ways.

For each chosen problem of a sweep file, the seed ``seeds: compile`` writes is
captured (``evolve.seeding.seed.compile_seed``) and its forward timed, with eager
PyTorch and the compiled model beside it:

- ``do_bench``: ``triton.testing.do_bench``, runs enqueued back to back (the
  host runs ahead of the device, so its time between launches is hidden);
- ``protocol``: ``platforms.time_runs``, kevo's own protocol outside the
  evaluator (each run on an idle device with a cold cache; its device span,
  first to last activity, so the host's time between two launches of one run
  is counted);
- ``traced``: the protocol with kevo's dispatch trace around the forward (the
  ``TorchDispatchMode`` that keeps the computing in Triton);
- ``kevo``: the evaluator's verdict (``Evaluator.evaluate``: the worker, its
  guard, fresh inputs each run).

Beside them, each device activity of the seed's forward and of torch.compile's (its defaults), by
name: how many per call and their microseconds (``kernels``), so a gap shows the kernel it lies in.

torch.compile is timed twice: as the seed's capture compiles it (``dynamic=True``,
every size symbolic) and with its defaults (what a user gets, and kevo's
incumbent): a gap between the two is what shape generality costs.

A gap between ``do_bench`` and ``protocol`` is the host inside a run; between
``protocol`` and ``traced``, the trace; between ``traced`` and ``kevo``, the
rest of the worker. Trusted code only: the seeds are kevo's own conversion of
Inductor's output, run in this process outside the sandbox.

    python bench/seed_gap.py bench/kernelbench_compile_sweep.yaml --only 37_Frob 23_Soft 19_ReLU --out gap.json
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from evolve.seeding.seed import SeedError, compile_seed  # noqa: E402
from evolve.sweep_file import load_sweep  # noqa: E402
from fitness import EvalSettings, Evaluator  # noqa: E402
from fitness.problems.problem import build_model, load_problem, make_inputs  # noqa: E402
from fitness.worker.trace import INIT_OPS, LAUNCH_OPS, ComputeTrace  # noqa: E402
from platforms import get_platform, time_runs  # noqa: E402

WAYS = ("do_bench", "protocol", "traced")


def host_us(forward, platform, calls: int = 100) -> float:
    """Host microseconds per call with the calls enqueued back to back (the device's
    time where it is the slower of the two)."""
    forward()
    platform.synchronize()
    started = time.perf_counter()
    for _ in range(calls):
        forward()
    elapsed = time.perf_counter() - started
    platform.synchronize()
    return elapsed / calls * 1e6


def timings(forward, platform, trace_ops: frozenset[str] | None) -> dict[str, float | str | None]:
    """``forward`` timed by do_bench, by kevo's protocol, and (with ``trace_ops``) by the protocol
    under the dispatch trace, with the host's time per call for each; a forward the trace
    refuses gets its reason instead."""
    import torch
    import triton.testing

    with torch.no_grad():
        out: dict[str, float | str | None] = {
            "do_bench": triton.testing.do_bench(forward, return_mode="median"),
            "protocol": time_runs(platform, lambda i, args: forward(), platform.timing).median_ms,
            "host_us": host_us(forward, platform),
            "traced": None, "traced_host_us": None,
        }
        if trace_ops is not None:
            def traced() -> None:
                with ComputeTrace(trace_ops):
                    forward()
            try:
                out["traced"] = time_runs(platform, lambda i, args: traced(), platform.timing).median_ms
                out["traced_host_us"] = host_us(traced, platform)
            except Exception as exc:  # the trace refused an op: say which
                out["traced"] = f"{type(exc).__name__}: {str(exc)[:120]}"
    return out


def kernels(forward, calls: int = 20) -> list[tuple[str, float, float]]:
    """Each device activity of ``forward`` (kernel, copy, set) by name: launches per call and microseconds
    per call, the largest first, from the profiler over ``calls`` calls run back to back: which kernel a
    gap between the seed and torch.compile lies in, or whether it is one kernel more."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    with torch.no_grad():
        forward()
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(calls):
                forward()
            torch.cuda.synchronize()
    found: dict[str, list[float]] = {}
    for event in prof.profiler.kineto_results.events():
        if not str(event.device_type()).endswith("CPU"):
            found.setdefault(event.name(), []).append((event.end_ns() - event.start_ns()) / 1e3)
    rows = [(name[:60], len(us) / calls, sum(us) / calls) for name, us in found.items()]
    return sorted(rows, key=lambda row: -row[2])


def measure(reference: str, shapes: dict[str, int] | None, platform) -> dict:
    import torch

    row: dict = {"problem": Path(reference).stem, "shapes": shapes or {}}
    started = time.perf_counter()
    try:
        seed = compile_seed(reference, shapes=shapes)
    except SeedError as exc:
        return {**row, "error": str(exc)}
    row.update(kernels=len(seed.kernels), capture_s=round(time.perf_counter() - started, 1),
               compiled_protocol_ms_at_capture=seed.recording.get("compiled_protocol_ms"))
    with Evaluator(reference, platform="cuda", shapes=shapes) as evaluator:
        result = evaluator.evaluate(seed.source)
    row.update(verdict=result.status.value, kevo_ms=result.runtime_ms, eager_kevo_ms=result.reference_ms)

    row.update(_forwards(reference, shapes, seed.source, platform))
    torch._dynamo.reset()
    torch.cuda.empty_cache()
    return row


def _forwards(reference: str, shapes: dict[str, int] | None, source: str, platform, device: str = "cuda") -> dict:
    """Eager, compiled and the seed, each timed three ways, on kevo's first fixed inputs."""
    import torch

    problem = load_problem(reference, shapes)
    settings = EvalSettings()  # kevo's weights and first fixed inputs
    path = Path(tempfile.mkdtemp(prefix="kevo-gap-")) / "kevo_gap_seed.py"  # kept: Triton reads its source
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("kevo_gap_seed", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    inputs = make_inputs(problem, settings.fixed_seeds[0], device)
    model = build_model(problem.Model, problem, settings.init_seed, device)
    candidate = build_model(module.ModelNew, problem, settings.init_seed, device)
    compiled = torch.compile(model, dynamic=True)  # as the seed's capture compiles it: every size symbolic
    static = torch.compile(model)  # what a user gets: torch.compile's defaults (the incumbent, fitness.judge.incumbent)
    with torch.no_grad():
        compiled(*inputs)  # compiled before it is timed
        static(*inputs)
    return {"eager": timings(lambda: model(*inputs), platform, None),
            "compiled": timings(lambda: compiled(*inputs), platform, None),
            "static": timings(lambda: static(*inputs), platform, None),
            "seed": timings(lambda: candidate(*inputs), platform, INIT_OPS | LAUNCH_OPS),
            "seed_kernels": kernels(lambda: candidate(*inputs)), "static_kernels": kernels(lambda: static(*inputs))}


def table(rows: list[dict]) -> str:
    def ms(value) -> str:
        return f"{value:.4g}" if isinstance(value, (int, float)) else "-" if value is None else "refused"

    lines = ["| problem | kernels | seed do_bench | seed protocol | seed traced | seed kevo | "
             "compile (dynamic) do_bench | compile (dynamic) protocol | compile (default) protocol | "
             "eager do_bench | eager protocol | eager kevo | host us/call: seed, traced, compile, eager |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['problem']} | {r['error'][:100]} |" + " |" * 11)
            continue
        s, c, e, d = r["seed"], r["compiled"], r["eager"], r.get("static", {})
        lines.append(f"| {r['problem']} | {r['kernels']} | {ms(s['do_bench'])} | {ms(s['protocol'])} | "
                     f"{ms(s['traced'])} | {ms(r['kevo_ms'])} | {ms(c['do_bench'])} | {ms(c['protocol'])} | "
                     f"{ms(d.get('protocol'))} | "
                     f"{ms(e['do_bench'])} | {ms(e['protocol'])} | {ms(r['eager_kevo_ms'])} | "
                     f"{ms(s['host_us'])}, {ms(s['traced_host_us'])}, {ms(c['host_us'])}, {ms(e['host_us'])} |")
    lines += ["", "Device activity per call (launches, microseconds), the seed's and torch.compile's (default):", ""]
    for r in rows:
        for who in ("seed", "static"):
            found = r.get(f"{who}_kernels") or []
            total = sum(us for _, _, us in found)
            lines.append(f"- {r['problem']} {who}: {total:.1f} us: " +
                         "; ".join(f"{name} x{n:g} {us:.1f}" for name, n, us in found))
    return "\n".join(lines)


def each_problem(tool: str, description: str, make_measure, table, add_arguments=None) -> int:
    """The main of a bench over a sweep file's problems:
    its arguments (the sweep file, ``--only`` prefixes of problem names, ``--out`` for the
    rows as JSON, written as they come, and what ``add_arguments(parser)`` adds), then
    ``make_measure(args)(reference, shapes)`` for each chosen problem with a progress line,
    then ``table(rows)``. Exit 2, said on stderr, without a GPU or a matching entry."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("sweep", type=Path, help="a sweep file whose entries say the problems and shapes")
    parser.add_argument("--only", nargs="+", default=[], help="entries whose problem name starts with one of these")
    parser.add_argument("--out", type=Path, help="write the rows as JSON here, after each problem")
    if add_arguments is not None:
        add_arguments(parser)
    args = parser.parse_args()
    import torch

    if not torch.cuda.is_available():
        print(f"{tool}: needs a GPU (the seeds come from torch.compile on one)", file=sys.stderr)
        return 2
    entries = [e for e in load_sweep(args.sweep)
               if not args.only or any(Path(e.config["problem"]["reference"]).stem.startswith(o) for o in args.only)]
    if not entries:
        print(f"{tool}: no entry of {args.sweep} matches {' '.join(args.only)}", file=sys.stderr)
        return 2
    measure = make_measure(args)
    rows = []
    for i, entry in enumerate(entries):
        problem = entry.config["problem"]
        print(f"[{i + 1}/{len(entries)}] {Path(problem['reference']).stem}", file=sys.stderr, flush=True)
        rows.append(measure(problem["reference"], problem.get("shapes")))
        if args.out:
            args.out.write_text(json.dumps(rows, indent=1))
    print(table(rows))
    return 0


def main() -> int:
    def make_measure(args):
        platform = get_platform("cuda")
        return lambda reference, shapes: measure(reference, shapes, platform)

    return each_problem("seed_gap", __doc__.splitlines()[0], make_measure, table)


if __name__ == "__main__":
    sys.exit(main())
