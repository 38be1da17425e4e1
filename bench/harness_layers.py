"""What each layer of the worker's harness costs a timed run, peeled off one at a time.

The real ``fitness.worker.Harness`` is built in this process and loads the
torch.compile seed of each chosen problem (``evolve.capture.seed.compile_seed``) with
its own ``load`` step; then its forward (``Harness._run``, as the time step
runs it) is timed under kevo's protocol (``platforms.time_runs``, device
spans), first with every layer on, then with one more layer taken away each
time:

1. ``full``: the dispatch trace, the launch counter around every Triton
   launch, the guard's running context (audit hook active), fresh inputs,
   their witnesses and the NaN poisoning before each run;
2. ``- trace``: no dispatch trace;
3. ``- launch wrapper``: Triton's own ``JITFunction.run``;
4. ``- guard``: no guard context (the audit hook sees the guard inactive);
5. ``- fresh inputs``: the same inputs every run, no witnesses, no poisoning.

A layer whose removal takes much time off is what a multi-kernel candidate
pays for under kevo. Trusted code only (kevo's own seeds).

    python bench/harness_layers.py bench/kernelbench_compile_sweep.yaml --only 48_ 23_ --out layers.json
"""

from __future__ import annotations

import atexit
import contextlib
import shutil
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.seed_gap import each_problem  # noqa: E402
from evolve.capture.seed import SeedError, compile_seed  # noqa: E402
from fitness import EvalSettings  # noqa: E402
from fitness.problem import make_inputs  # noqa: E402
from fitness.worker import Harness  # noqa: E402
from platforms import time_runs  # noqa: E402

LAYERS = ("full", "- trace", "- launch wrapper", "- guard", "- fresh inputs")


class _NoTrace:
    """Stands in for the dispatch trace: records nothing, costs nothing."""

    def __init__(self, *args) -> None:
        self.violations: list[str] = []
        self.launch_depth = 0

    def __enter__(self) -> "_NoTrace":
        return self

    def __exit__(self, *exc) -> None:
        return None


class _Moving:
    """A launch count that never equals its last reading: ``Harness._run``'s check that the
    forward launched a Triton kernel holds once Triton's own launcher no longer counts."""

    def __eq__(self, other: object) -> bool:
        return False

    def __add__(self, other: int) -> "_Moving":
        return self

    __hash__ = None


def measure(harness: Harness, reference: str, shapes: dict[str, int] | None) -> dict:
    import torch
    import triton.runtime.interpreter as interpreter
    import triton.runtime.jit as triton_jit

    row: dict = {"problem": Path(reference).stem, "shapes": shapes or {}}
    try:
        seed = compile_seed(reference, shapes=shapes)
    except SeedError as exc:
        return {**row, "error": str(exc)}
    settings = EvalSettings()
    harness.load(seed.source, reference, shapes or {}, settings.init_seed)
    platform = harness.platform
    fixed = make_inputs(harness.problem, settings.fixed_seeds[0], harness.device)
    with torch.no_grad():
        out = harness._run(fixed, profile=False)
    outputs = list(out) if isinstance(out, (tuple, list)) else [out]
    poison = [t.numel() * t.element_size() for t in outputs]
    del out, outputs
    fresh = {"on": True}

    def prepare(i: int) -> list:
        if not fresh["on"]:
            return fixed
        args = make_inputs(harness.problem, 1000 + i, harness.device)
        harness._witnesses(args)
        platform.poison_memory(poison)
        return args

    launchers = [triton_jit.JITFunction, interpreter.InterpretedFunction]
    wrapped = [cls.run for cls in launchers]
    figures = {}
    try:
        for layer in LAYERS:
            if layer == "- trace":
                harness.trace_cls = _NoTrace
            elif layer == "- launch wrapper":
                for cls, run in zip(launchers, wrapped):
                    cls.run = (run.__kwdefaults__ or {}).get("_original", run)
                harness.launches = _Moving()
            elif layer == "- guard":
                harness.guard.running = lambda profile=True: contextlib.nullcontext()
            elif layer == "- fresh inputs":
                fresh["on"] = False
            started = time.perf_counter()
            timing = time_runs(platform, lambda i, args: harness._run(args, profile=False), platform.timing, prepare)
            figures[layer] = {"ms": timing.median_ms, "from_device": timing.from_device,
                              "wall_ms": sorted(timing.wall_ms)[len(timing.wall_ms) // 2],
                              "runs": len(timing.runs_ms), "s": round(time.perf_counter() - started, 2)}
    finally:
        from fitness.trace import ComputeTrace

        harness.trace_cls = ComputeTrace
        for cls, run in zip(launchers, wrapped):
            cls.run = run
        harness.guard.__dict__.pop("running", None)
        harness.launches = 0
    row.update(kernels=len(seed.kernels), layers=figures)
    harness.reset()
    return row


def table(rows: list[dict]) -> str:
    lines = ["| problem | kernels | " + " | ".join(f"{layer} ms (host wall)" for layer in LAYERS) + " |",
             "|---|---|" + "---|" * len(LAYERS)]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['problem']} | {r['error'][:100]} |" + " |" * len(LAYERS))
            continue
        cells = [f"{r['layers'][k]['ms']:.4g} ({r['layers'][k]['wall_ms']:.3g})" if k in r["layers"] else "-"
                 for k in LAYERS]
        lines.append(f"| {r['problem']} | {r['kernels']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> int:
    def add_arguments(parser) -> None:
        parser.add_argument("--platform", default="cuda", help="kevo's platform for the harness (cuda or rocm)")

    def make_measure(args):
        harness = Harness(args.platform, 0)
        atexit.register(shutil.rmtree, harness.tmpdir, True)  # its candidates' files
        return lambda reference, shapes: measure(harness, reference, shapes)

    return each_problem("harness_layers", __doc__.splitlines()[0], make_measure, table, add_arguments)


if __name__ == "__main__":
    sys.exit(main())
