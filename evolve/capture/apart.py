"""``compile_seeds`` in a process of its own, for a driver that captures from several threads.

Inductor's configuration and torch's profiler are the process's: two captures
at once in one process would see each other's settings and count each
other's kernels (and the profiler crashed on the H200 when two runs of a
sweep timed their seeds at once). In one process captures therefore take
turns (``evolve.capture.inductor._ONE_CAPTURE``), which would make the runs
of a sweep that go side by side wait for each other's torch.compile. A
capture asked for from a thread other than the main one (a sweep's runs)
runs here instead: a child process per call, which imports torch, captures
every configuration and writes the seeds to a file in a temporary folder
that goes with the call; several run at once on the host's cores.

    python -m evolve.capture.apart REQUEST.json RESULT.json     # what the child runs
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

from evolve.capture.room import WAIT_S as MEMORY_WAIT_S

#: How long one child may take (all of a problem's configurations, max-autotune's benchmarks included).
TIMEOUT_S = 3600.0


def wanted() -> bool:
    """Whether a capture asked for now should run apart: it comes from a thread other than the main one."""
    return threading.current_thread() is not threading.main_thread()


def compile_seeds_apart(problem_path: str | Path, device: str = "cuda", shapes: dict[str, int] | None = None,
                        dtype: str | None = None, variants: list[str] | None = None,
                        limit: int | None = None, timeout_s: float = TIMEOUT_S) -> list[Any]:
    """``evolve.capture.seed.compile_seeds`` with the same arguments, run in a child process; the
    same seeds, or the same ``SeedError``."""
    from evolve.capture.seed import CompiledSeed, SeedError

    # beside other runs' work, a configuration that runs out of memory waits for it (evolve.capture.room)
    request = {"problem_path": str(Path(problem_path).resolve()), "device": device, "shapes": shapes,
               "dtype": dtype, "variants": variants, "limit": limit, "memory_wait_s": MEMORY_WAIT_S}
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")]))}
    # named after this process: a driver killed meanwhile leaves it to the next start (fitness.sandbox)
    with tempfile.TemporaryDirectory(prefix=f"kevo-capture-{os.getpid()}-") as folder:
        asked, answered = Path(folder) / "request.json", Path(folder) / "result.json"
        asked.write_text(json.dumps(request), encoding="utf-8")
        try:
            done = subprocess.run([sys.executable, "-m", "evolve.capture.apart", str(asked), str(answered)],
                                  env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.PIPE, text=True, timeout=timeout_s)
        except subprocess.TimeoutExpired:
            raise SeedError(f"{Path(problem_path).name}: torch.compile took more than {timeout_s:.0f} s") from None
        if not answered.is_file():
            tail = (done.stderr or "").strip().splitlines()[-1:] or [f"exit code {done.returncode}"]
            raise SeedError(f"{Path(problem_path).name}: the capture's process ended without seeds: {tail[0][:300]}")
        result = json.loads(answered.read_text(encoding="utf-8"))
    if "error" in result:
        raise SeedError(result["error"])
    return [CompiledSeed(**{**seed, "duplicates": tuple(seed["duplicates"]),
                            "skipped": tuple(tuple(pair) for pair in seed["skipped"])})
            for seed in result["seeds"]]


def _child(request_path: str, result_path: str) -> int:
    from evolve.capture.seed import SeedError, compile_seeds

    request = json.loads(Path(request_path).read_text(encoding="utf-8"))
    try:
        seeds = compile_seeds(**request)
        result: dict[str, Any] = {"seeds": [dataclasses.asdict(seed) for seed in seeds]}
    except SeedError as exc:
        result = {"error": str(exc)}
    Path(result_path).write_text(json.dumps(result), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(_child(*sys.argv[1:3]))
