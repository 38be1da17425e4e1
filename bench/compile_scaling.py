"""How Triton's compiles scale with processes compiling at once on this host, kevo aside.

Each of N processes (spawned, each with an empty Triton cache of its own) compiles
and launches K distinct variants of one row-softmax kernel (a constexpr salt makes
each a new compile), as N evaluation slots each compiling its candidates would. If
N processes take about as long as one, compiles run side by side and cannot be what
serialises slots; if the wall grows with N, the host serialises them (CPU quota,
the driver's module loads, a lock).

    python bench/compile_scaling.py --processes 1 4 12 --variants 6 --out compile_scaling.json   # on a GPU
    TRITON_INTERPRET=1 python bench/compile_scaling.py --device cpu --processes 1 2 --variants 2  # the plumbing
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import sys
import tempfile
import time
from pathlib import Path


_BARRIER = None


def _start(barrier) -> None:  # each pool process, once: torch and Triton imported before the barrier
    global _BARRIER
    _BARRIER = barrier
    import torch  # noqa: F401
    import triton  # noqa: F401


def _compile_some(args: tuple[int, int, str, str]) -> dict:
    """One process: ``variants`` compiles (each launched once), timed one by one, started
    with the others (a barrier), so that the compiles overlap as a pool of slots' would."""
    index, variants, device, cache = args
    os.environ["TRITON_CACHE_DIR"] = cache
    import torch
    import triton
    import triton.language as tl

    @triton.jit
    def row_softmax(x_ptr, out_ptr, n_cols, BLOCK: tl.constexpr, SALT: tl.constexpr):
        row = tl.program_id(0).to(tl.int64)
        cols = tl.arange(0, BLOCK)
        mask = cols < n_cols
        x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=-float("inf"))
        x = x - tl.max(x, axis=0) + SALT * 0.0
        e = tl.exp(x)
        tl.store(out_ptr + row * n_cols + cols, e / tl.sum(e, axis=0), mask=mask)

    x = torch.randn(64, 1000, device=device)
    out = torch.empty_like(x)
    times = []
    _BARRIER.wait(timeout=600)
    started = time.perf_counter()
    for v in range(variants):
        t0 = time.perf_counter()
        row_softmax[(x.shape[0],)](x, out, x.shape[1], BLOCK=1024, SALT=index * 1000 + v)
        if device != "cpu":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    if not torch.allclose(out, torch.softmax(x, dim=1), atol=1e-5):
        raise RuntimeError("the kernel is wrong: the timing would mean nothing")
    return {"process": index, "compile_s": times, "wall_s": time.perf_counter() - started}


def measure(processes: int, variants: int, device: str) -> dict:
    with tempfile.TemporaryDirectory(prefix="kevo-compile-scaling-") as root:
        jobs = [(i, variants, device, str(Path(root) / str(i))) for i in range(processes)]
        context = multiprocessing.get_context("spawn")
        with context.Pool(processes, initializer=_start, initargs=(context.Barrier(processes),)) as pool:
            results = pool.map(_compile_some, jobs, chunksize=1)
    per = sorted(t for r in results for t in r["compile_s"])
    wall = max(r["wall_s"] for r in results)  # from the barrier to the last process's last compile
    return {"processes": processes, "variants": variants, "wall_s": wall,
            "compiles_per_s": processes * variants / wall,
            "median_compile_s": per[len(per) // 2], "max_compile_s": per[-1]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--processes", type=int, nargs="+", default=[1, 4, 12])
    parser.add_argument("--variants", type=int, default=6, help="distinct compiles in each process")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    if min(args.processes) < 1 or args.variants < 1:
        parser.error("--processes and --variants must be >= 1")
    rows = []
    for n in args.processes:
        row = measure(n, args.variants, args.device)
        rows.append(row)
        print(f"{n:3d} processes x {args.variants} compiles: {row['wall_s']:.1f} s, {row['compiles_per_s']:.2f} "
              f"compiles/s, median {row['median_compile_s']:.2f} s a compile (slowest {row['max_compile_s']:.2f})",
              flush=True)
        if args.out:
            args.out.write_text(json.dumps({"cpus": os.cpu_count(), "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
