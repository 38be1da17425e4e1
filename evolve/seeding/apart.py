"""``compile_seeds`` in a process of its own, for a driver that captures from several threads.

Inductor's configuration and torch's profiler are the process's: two captures
at once in one process would see each other's settings and count each
other's kernels (and the profiler crashed on the H200 when two runs of a
sweep timed their seeds at once). In one process captures therefore take
turns (``evolve.seeding.inductor._ONE_CAPTURE``), which would make the runs
of a sweep that go side by side wait for each other's torch.compile. A
capture asked for from a thread other than the main one (a sweep's runs)
runs here instead: a child process per call, which imports torch, captures
every configuration and writes the seeds to a file in a temporary folder
that goes with the call; several run at once on the host's cores. What the
child logs (a line per configuration captured, with its seconds) comes back
as it is written, so a capture of minutes shows where it is.

    python -m evolve.seeding.apart REQUEST.json RESULT.json     # what the child runs
"""

from __future__ import annotations

import collections
import dataclasses
import json
import logging
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from evolve.seeding.room import WAIT_S as MEMORY_WAIT_S

log = logging.getLogger(__name__)

#: The child's log lines on its stderr start with this; the parent logs them again as they come.
MARK = "kevo-capture: "
#: The driver's process id, as the child is told it (the child ends when its parent is no longer that).
PARENT_ENV = "KEVO_CAPTURE_PARENT"
#: How long one child may take (all of a problem's configurations, max-autotune's benchmarks included).
TIMEOUT_S = 3600.0


def wanted() -> bool:
    """Whether a capture asked for now should run apart: it comes from a thread other than the main one."""
    return threading.current_thread() is not threading.main_thread()


def compile_seeds_apart(problem_path: str | Path, device: str = "cuda", shapes: dict[str, int] | None = None,
                        dtype: str | None = None, variants: list[str] | None = None,
                        limit: int | None = None, timeout_s: float = TIMEOUT_S) -> list[Any]:
    """``evolve.seeding.seed.compile_seeds`` with the same arguments, run in a child process; the
    same seeds, or the same ``SeedError``."""
    from evolve.seeding.seed import CompiledSeed, SeedError

    # beside other runs' work, a configuration that runs out of memory waits for it (evolve.seeding.room)
    request = {"problem_path": str(Path(problem_path).resolve()), "device": device, "shapes": shapes,
               "dtype": dtype, "variants": variants, "limit": limit, "memory_wait_s": MEMORY_WAIT_S}
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")])),
           PARENT_ENV: str(os.getpid())}
    # named after this process: a driver killed meanwhile leaves it to the next start (fitness.boundary.sandbox)
    with tempfile.TemporaryDirectory(prefix=f"kevo-capture-{os.getpid()}-") as folder:
        asked, answered = Path(folder) / "request.json", Path(folder) / "result.json"
        asked.write_text(json.dumps(request), encoding="utf-8")
        tail = _run_child([sys.executable, "-m", "evolve.seeding.apart", str(asked), str(answered)], env,
                          timeout_s, Path(problem_path).name)
        if not answered.is_file():
            raise SeedError(f"{Path(problem_path).name}: the capture's process ended without seeds: {tail[:300]}")
        result = json.loads(answered.read_text(encoding="utf-8"))
    if "error" in result:
        raise SeedError(result["error"])
    return [CompiledSeed(**{**seed, "duplicates": tuple(seed["duplicates"]),
                            "skipped": tuple(tuple(pair) for pair in seed["skipped"])})
            for seed in result["seeds"]]


def _run_child(command: list[str], env: dict[str, str], timeout_s: float, name: str) -> str:
    """Run the child; its marked stderr lines logged here as they come. The last other line
    (or the exit code) is returned, for an error's words."""
    from evolve.seeding.seed import SeedError

    child = subprocess.Popen(command, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, text=True, errors="replace")
    last: collections.deque[str] = collections.deque(maxlen=1)

    def relay() -> None:
        assert child.stderr is not None
        for line in child.stderr:
            if line.startswith(MARK):
                log.info("%s", line[len(MARK):].rstrip())
            elif line.strip():
                last.append(line.strip())

    reader = threading.Thread(target=relay, name=f"capture-{name}", daemon=True)
    reader.start()
    try:
        code = child.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        raise SeedError(f"{name}: torch.compile took more than {timeout_s:.0f} s") from None
    finally:
        if child.poll() is None:  # past its time, or an interrupt: the child goes with the call
            child.kill()
            child.wait()
        reader.join(timeout=5)
    return last[0] if last else f"exit code {code}"


def watch_parent(parent: int, poll_s: float = 2.0) -> None:
    """End this process when its parent (the process ``parent``) is gone (a driver killed with -9, or
    stopped alone): a capture nobody waits for would hold the device's memory and cores for nothing."""

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(poll_s)
        os._exit(3)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def _child(request_path: str, result_path: str) -> int:
    from evolve.seeding.seed import SeedError, compile_seeds

    watch_parent(int(os.environ.get(PARENT_ENV) or os.getppid()))
    handler = logging.StreamHandler(sys.stderr)  # progress, relayed by the parent (_run_child)
    handler.setFormatter(logging.Formatter(MARK + "%(message)s"))
    for name in ("evolve", "operators"):
        logging.getLogger(name).addHandler(handler)
        logging.getLogger(name).setLevel(logging.INFO)

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
