"""What each part of one checked run costs at a problem's own shapes, alone.

A real-size evaluation spends seconds where its kernels take milliseconds
(23_Softmax at 4096 x 393216: about 1.9 s an evaluation on an H100 for an
8.7 ms kernel). This times, one part at a time and with the device
synchronised around each, what the worker and the judge do to one checked
run: drawing the inputs (``fitness.problem.make_inputs``), the reference's
forward, the comparison (``fitness.compare.compare``), a large input's
fingerprint (``platforms.fingerprint``), the judge's copy of a worker's
outputs through the driver's IPC (``Platform.import_tensor``, from a child
process here), and the caching allocator's own costs: a fresh allocation of
the outputs' size (``cudaMalloc``) and giving it back (``empty_cache``).
Each part is timed ``--repeats`` times "cold" (the allocator's cache
emptied first, as kevo's processes do between phases) and "warm" (the cache
kept); the median of each is printed and written as JSON.

    python bench/check_parts.py $KB/level1/23_Softmax.py --out parts.json       # on a GPU machine
    python bench/check_parts.py problems/softmax/reference.py --device cpu --shape batch_size=8 --shape dim=64
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.shapes import apply_shapes  # noqa: E402
from fitness.compare import compare  # noqa: E402
from fitness.problem import build_model, load_problem, make_inputs  # noqa: E402
from platforms import get_platform  # noqa: E402
from platforms.fingerprint import Fingerprint  # noqa: E402


def _timed(platform, fn, cold: bool, repeats: int) -> float:
    """The median seconds of ``fn()`` (its result dropped), the cache emptied before each where ``cold``."""
    seen = []
    for _ in range(repeats):
        if cold:
            platform.release_memory()
        platform.synchronize()
        t0 = time.perf_counter()
        out = fn()
        platform.synchronize()
        seen.append(time.perf_counter() - t0)
        del out
    return statistics.median(seen)


def _producer(device: str, numel: int, described, done) -> None:  # a child: a worker's outputs, shared
    import torch

    platform = get_platform(device)
    tensor = torch.randn(numel, device=platform.device())
    platform.synchronize()
    while True:
        described.put(platform.export_tensor(tensor))
        if done.get() is None:
            return


def _ipc(platform, numel: int, repeats: int, cold: bool) -> float | None:
    """The median seconds of the judge's copy of another process's tensor of ``numel`` floats."""
    import torch

    if platform.export_tensor(torch.zeros(1, device=platform.device())) is None:
        return None  # this platform ships tensors as bytes
    ctx = multiprocessing.get_context("spawn")
    described, done = ctx.Queue(), ctx.Queue()
    child = ctx.Process(target=_producer, args=(platform.name, numel, described, done))
    child.start()
    seen = []
    try:
        for i in range(repeats):
            shared = described.get(timeout=120)
            if cold:
                platform.release_memory()
            platform.synchronize()
            t0 = time.perf_counter()
            copy = platform.import_tensor(shared, torch.float32, [numel], child.pid)
            seen.append(time.perf_counter() - t0)
            del copy
            done.put(i)
    finally:
        done.put(None)
        child.join(60)
    return statistics.median(seen)


def measure(reference: Path, device: str, shape_args: list[str], repeats: int) -> dict:
    import torch

    platform = get_platform(device)
    shapes = apply_shapes(reference, shape_args)
    problem = load_problem(reference, shapes)
    model = build_model(problem.Model, problem, 0, platform.device())
    inputs = make_inputs(problem, 1, platform.device())
    with torch.no_grad():
        out = model(*inputs)
    outs = list(out) if isinstance(out, (tuple, list)) else [out]
    other = [o.clone() for o in outs]
    numel = sum(o.numel() for o in outs)
    big = max((x for x in inputs if isinstance(x, torch.Tensor)), key=lambda x: x.numel())
    parts: dict[str, dict[str, float | None]] = {}

    def forward():
        with torch.no_grad():
            return model(*inputs)

    tests = {
        "allocate the outputs' size": lambda: torch.empty(numel, device=platform.device()),
        "draw the inputs": lambda: make_inputs(problem, 2, platform.device()),
        "reference forward": forward,
        "compare": lambda: compare(other, outs, 1e-2),
        "fingerprint the largest input": lambda: Fingerprint.of(big),
    }
    for name, fn in tests.items():
        parts[name] = {"cold": _timed(platform, fn, True, repeats), "warm": _timed(platform, fn, False, repeats)}
        print(f"{name}: {parts[name]}", flush=True)

    def give_back():  # a fresh block of the outputs' size, then back to the device
        block = torch.empty(numel, device=platform.device())
        platform.synchronize()
        del block
        t0 = time.perf_counter()
        platform.release_memory()
        return time.perf_counter() - t0

    parts["empty the cache of the outputs' size"] = {"cold": statistics.median(give_back() for _ in range(repeats))}
    del inputs, out, outs, other, big
    platform.release_memory()
    parts["copy from another process"] = {"cold": _ipc(platform, numel, repeats, True),
                                          "warm": _ipc(platform, numel, repeats, False)}
    for name in ("empty the cache of the outputs' size", "copy from another process"):
        print(f"{name}: {parts[name]}", flush=True)
    return {"reference": str(reference), "shapes": shapes, "device": platform.device_name(),
            "output_gb": numel * 4 / 1e9, "repeats": repeats, "parts_s": parts}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("reference", type=Path)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--shape", action="append", default=[], help="KNOB=VALUE, a knob of the problem's")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    report = measure(args.reference, args.device, args.shape, args.repeats)
    if args.out:
        args.out.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
