"""The program a profiler wraps: build a candidate's ``ModelNew`` and run forward a few times.

    python -m fitness.profiling.target --problem REF.py --candidate CAND.py \\
        [--shape NAME=VALUE ...] --device cuda [--index 0] [--runs 1] [--warmup 1] [--region] [--gate DIR]

The model and inputs are seeded as the evaluation worker seeds them
(``--init-seed``, ``--input-seed``), so the profiled kernels see what the
timed ones saw. Warm-up forwards (compilation, autotuning) come first; the
``--runs`` measured forwards follow, inside the profiler API region when
``--region`` is given, and the device is synchronised after them. It is run
by ``fitness.profiling.candidate.profile_candidate`` under the sandbox's scrubbed
environment, confined as a worker is (``fitness.profiling.candidate.confined``).
Exit status: 0 done, 1 the candidate failed, 2 unusable input.

With ``--gate DIR`` the program runs work on the device only when let: once its
imports are done, the candidate is loaded (host work, seconds) and its device
context is made (no kernel runs; made inside the turn, under ``ncu`` on an
H100 a parent's two turns took 2.4 and 1.9 s for a 2.2 ms kernel), it writes
``DIR/ready.PID`` and waits for ``DIR/go.PID``; it writes ``DIR/done.PID``
when its device work is over (``device_turn``). Its caller lets it go while it
holds the device's timing lane (``fitness.profiling.candidate``), so a profile never
overlaps another candidate's timing, and the lane is not held while this
program starts.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from fitness.problems.problem import ProblemError, build_model, load_problem, make_inputs
from platforms import PLATFORM_NAMES, PlatformUnavailable, get_platform
from platforms.profiling.region import profiled_region


def parse_shapes(items: list[str]) -> dict[str, int]:
    """``["M=64", "N=32"]`` -> ``{"M": 64, "N": 32}``; ``ValueError`` names a malformed item."""
    shapes = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name.isidentifier():
            raise ValueError(f"--shape {item!r}: expected NAME=VALUE")
        try:
            shapes[name] = int(value)
        except ValueError:
            raise ValueError(f"--shape {item!r}: the value must be an integer") from None
    return shapes


def load_candidate(path: Path) -> type:
    """The ``ModelNew`` class of the candidate file at ``path``."""
    name = f"kevo_profiled_{path.stem}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ValueError(f"cannot load {path} as a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # Triton reads a kernel's source through its module
    spec.loader.exec_module(module)
    if not isinstance(getattr(module, "ModelNew", None), type):
        raise ValueError(f"{path} defines no class ModelNew")
    return module.ModelNew


@contextlib.contextmanager
def device_turn(gate: str | None, poll_s: float = 0.005) -> Iterator[None]:
    """Wait until the caller lets this program onto the device (``--gate``); say when it is done."""
    if gate is None:
        yield
        return
    folder, pid = Path(gate), os.getpid()
    Path(folder, f"ready.{pid}").touch()
    go = Path(folder, f"go.{pid}")
    while not go.exists():
        time.sleep(poll_s)
    try:
        yield
    finally:
        Path(folder, f"done.{pid}").touch()


def run(args: argparse.Namespace) -> int:
    import torch

    try:
        platform = get_platform(args.device, args.index)
        problem = load_problem(args.problem, parse_shapes(args.shape), args.dtype)
        candidate = Path(args.candidate)
        if not candidate.is_file():
            raise ValueError(f"no candidate file {candidate}")
    except (ProblemError, PlatformUnavailable, ValueError) as exc:
        print(f"profile_target: {exc}", file=sys.stderr)
        return 2
    device = platform.device()
    try:
        model_class = load_candidate(candidate)
        torch.empty(1, device=device)  # the device's context, before the turn: no kernel runs
        with device_turn(args.gate):
            model = build_model(model_class, problem, args.init_seed, device)
            inputs = make_inputs(problem, args.input_seed, device)
            with torch.no_grad():
                for _ in range(args.warmup):
                    model(*inputs)
                platform.synchronize()
                with profiled_region(args.region):
                    for _ in range(args.runs):
                        model(*inputs)
                    platform.synchronize()
    except Exception as exc:  # the candidate's failure: say what, without a traceback
        print(f"profile_target: the candidate failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fitness.profiling.target", description=__doc__.split("\n")[0])
    parser.add_argument("--problem", required=True, help="the problem (reference) file")
    parser.add_argument("--candidate", required=True, help="the candidate file defining ModelNew")
    parser.add_argument("--shape", action="append", default=[], metavar="NAME=VALUE")
    parser.add_argument("--device", default="cuda", choices=[n for n in PLATFORM_NAMES if n != "auto"])
    parser.add_argument("--index", type=int, default=0, help="device index")
    parser.add_argument("--runs", type=int, default=1, help="measured forwards")
    parser.add_argument("--warmup", type=int, default=1, help="forwards before the measured ones")
    parser.add_argument("--init-seed", type=int, default=42, help="seed before ModelNew is built")
    parser.add_argument("--input-seed", type=int, default=101, help="seed the inputs are drawn from")
    parser.add_argument("--dtype", default=None, help="cast floating inputs and weights to this precision")
    parser.add_argument("--region", action="store_true", help="bracket the measured runs with the profiler API")
    parser.add_argument("--gate", default=None, metavar="DIR", help="touch the device only when let (see above)")
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
