"""Profiling a candidate: its target program under a profiler, and the work a forward must do.

``profile_candidate`` writes the candidate to a temporary file and runs
``fitness.profiling.target`` under the profiler, in the environment the
sandboxed worker gets (secrets scrubbed) and confined as it is, at the shape
``fitness.profiling.shape`` picks: the problem's own, or a reduced one for a
problem whose tensors are large (the record says which, and what the profile
cost). The program touches the device only while the caller's ``exclusive``
(the device's timing lane) is held, from its first device work to its end;
its start-up (Python, torch, the candidate's import) holds nothing. The
analytic roofline needs the minimum bytes and work of one forward:

- bytes moved: the sizes of the forward's inputs and outputs, and of the
  model's parameters and buffers, at the problem's shapes (found by running
  the reference on PyTorch's ``meta`` device: no memory, no compute);
- FLOPS: unknown unless the problem file declares ``FLOPS``, an optional
  module-level expression of its shape knobs giving the useful floating-point
  operations of one forward (``FLOPS = 2 * M * N * K`` for a matmul). Without
  it the roofline judges by bytes only.
"""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import hashlib
import json
import math
import os
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

from fitness.boundary.sandbox import confined_argv, in_scratch, process_alive, worker_environment, worker_policy
from fitness.problems.problem import ProblemError, load_problem
from fitness.profiling.shape import (MIN_BLOCKS_PER_UNIT, PROFILE_MAX_BYTES, ProfileShape, grown, meta_forward,
                                     profile_shape)
from platforms import get_platform
from platforms.profiling import Profiler, ProfileRecord, Workload
from platforms.profiling.record import DRAM_PCT, GRID_BLOCKS
from platforms.profiling.roofline import roofline_metrics
from platforms.profiling.summary import summary_text
from platforms.specs import lookup

#: Seeds of the worker's defaults (fitness.judge.evaluator.EvalSettings): the
#: profiled forward sees the weights and the first fixed input set.
INIT_SEED = 42
INPUT_SEED = 101


@dataclasses.dataclass(frozen=True)
class ProblemWork:
    """The minimum traffic and work of one forward; ``reason`` says why a figure is missing."""

    bytes_moved: int | None
    flops: float | None
    dtype: str
    reason: str = ""


def problem_work(problem_path: str | Path, shapes: dict[str, int] | None = None,
                 dtype: str | None = None) -> ProblemWork:
    """Bytes a forward must move and (when declared) its FLOPS, at ``shapes``.

    >>> problem_work("problems/elementwise/reference.py", {"batch_size": 4, "dim": 100}).bytes_moved
    4800
    """
    problem = load_problem(problem_path, shapes, dtype)
    flops = declared_flops(problem.module, problem_path)
    try:
        inputs, outputs, model = meta_forward(problem, dtype)
    except (RuntimeError, NotImplementedError, TypeError, ValueError) as exc:
        reason = f"the reference does not run on the meta device ({type(exc).__name__}: {str(exc)[:120]})"
        return ProblemWork(None, flops, "", reason)
    moved = distinct_bytes(inputs) + distinct_bytes(outputs) + distinct_bytes([*model.parameters(), *model.buffers()])
    largest = max(tensors_in(inputs), key=lambda t: t.numel() * t.element_size(), default=None)
    dtype = str(largest.dtype).removeprefix("torch.") if largest is not None else ""
    return ProblemWork(moved, flops, dtype)


def declared_flops(module: Any, path: str | Path) -> float | None:
    """The FLOPs of one forward that the problem module (loaded from ``path``) declares in
    ``FLOPS``, or None where it declares none; ``ProblemError`` for a value that is not a
    positive number."""
    value = getattr(module, "FLOPS", None)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise ProblemError(f"FLOPS in {path} must be a positive number (the FLOPs of one forward), "
                           f"not {value!r}")
    return float(value)


def distinct_bytes(value: Any) -> int:
    """Bytes of the tensors in ``value``, each piece of memory once: the distinct views of one
    storage add up, to at most the storage's size (a tensor listed twice is one view; an
    expanded one is at most what it was expanded from)."""
    storages: dict[int, tuple[int, dict[tuple, int]]] = {}
    for t in tensors_in(value):
        storage = t.untyped_storage()  # fake tensors have storages too: their views share one
        _, views = storages.setdefault(storage._cdata, (storage.nbytes(), {}))
        views[(t.storage_offset(), tuple(t.shape), t.stride(), t.dtype)] = t.numel() * t.element_size()
    return sum(min(nbytes, sum(views.values())) for nbytes, views in storages.values())


def tensors_in(value: Any) -> list:
    """The tensors in ``value``: itself, or those in its lists, tuples and dicts, nested, in order."""
    import torch

    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for item in value for t in tensors_in(item)]
    if isinstance(value, dict):
        return [t for item in value.values() for t in tensors_in(item)]
    return []


def kernel_filter(source: str) -> str | None:
    """A regex matching the names of the candidate's ``@triton.jit`` kernels (None: no kernel found).

    >>> kernel_filter("import triton\\n@triton.jit\\ndef add_kernel(x): pass\\n")
    '^(add_kernel)'
    """
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    names = [node.name for node in ast.walk(tree)
             if isinstance(node, ast.FunctionDef) and any("jit" in ast.unparse(d) for d in node.decorator_list)]
    # prefix match: older Triton appends a signature suffix to the kernel name
    return "^(" + "|".join(dict.fromkeys(names)) + ")" if names else None


def target_command(problem_path: str | Path, candidate_path: str | Path, shapes: dict[str, int],
                   platform_name: str, device_index: int, runs: int, warmup: int, region: bool,
                   dtype: str | None = None, gate: str | Path | None = None) -> list[str]:
    """The ``python -m fitness.profiling.target`` command line for one candidate."""
    command = [sys.executable, "-m", "fitness.profiling.target", "--problem", str(Path(problem_path).resolve()),
               "--candidate", str(candidate_path), "--device", platform_name, "--index", str(device_index),
               "--runs", str(runs), "--warmup", str(warmup),
               "--init-seed", str(INIT_SEED), "--input-seed", str(INPUT_SEED)]
    for name, value in shapes.items():
        command += ["--shape", f"{name}={value}"]
    if dtype is not None:
        command += ["--dtype", dtype]
    if gate is not None:
        command += ["--gate", str(gate)]
    return command + (["--region"] if region else [])


Exclusive = Callable[[], AbstractContextManager[Any]]


def profile_candidate(profiler: Profiler, problem_path: str | Path, shapes: dict[str, int] | None, source: str,
                      platform_name: str, device_index: int, timeout_s: float, *, runtime_ms: float | None = None,
                      device_name: str = "", runs: int = 1, warmup: int = 1, dtype: str | None = None,
                      exclusive: Exclusive | None = None, max_bytes: int = PROFILE_MAX_BYTES,
                      shapes_seen: dict[str, ProfileShape] | None = None) -> ProfileRecord:
    """Profile one candidate (a parent) on ``platform_name``'s device ``device_index``.

    ``runtime_ms`` (the evaluator's median) and ``device_name`` feed the
    analytic roofline, which is the record whenever the profiler is missing
    or fails; it is computed at the problem's own ``shapes``. The tool runs
    at ``fitness.profiling.shape``'s shape (reduced when the tensors take more
    than ``max_bytes``), and once more, larger, when the profiled grid leaves
    the device's units idle. ``exclusive()`` (the device's timing lane) is
    held while the profiled program uses the device. ``shapes_seen`` (kept by the
    caller across a problem's parents) remembers the larger shape a profile had to take,
    so the next parent starts there: one run of the tool instead of two, while its grid
    still fills the device (checked again). A failing profiler never raises here; a bad
    problem file does (``ProblemError``).
    """
    started = time.monotonic()
    shapes = dict(shapes or {})
    work = problem_work(problem_path, shapes, dtype)
    workload = Workload(bytes_moved=work.bytes_moved, flops=work.flops, dtype=work.dtype,
                        runtime_ms=runtime_ms, device_name=device_name,
                        forwards=runs if profiler.capture_region else runs + warmup)
    if profiler.disabled_reason is not None:
        return profiler.profile([], {}, None, timeout_s, workload)
    first = profile_shape(problem_path, shapes, dtype, max_bytes)
    seen_key = json.dumps([str(problem_path), shapes, dtype, max_bytes], sort_keys=True)
    earlier = (shapes_seen or {}).get(seen_key) if first.reduced else None
    target = earlier or first
    session = _Session(profiler, problem_path, source, platform_name, device_index, (runs, warmup, dtype),
                       exclusive or contextlib.nullcontext, workload, timeout_s)
    record = session.profile(target)
    units = lookup(record.device_name or device_name).get("units")
    bigger = _unstarved(record, target, units, problem_path, dtype)
    if bigger is not None:
        starved = f"the grid at {_knobs(target)} has fewer than {MIN_BLOCKS_PER_UNIT} blocks per SM/CU"
        if time.monotonic() - started < timeout_s / 2:  # a larger run takes longer: only while far from the timeout
            again = session.profile(bigger)
            if again.measured:
                record, target = again, bigger
                record.notes.append(f"profiled again at {_knobs(bigger)}: {starved}")
            else:
                record.notes.append(f"{starved}; profiling it at {_knobs(bigger)} failed: {again.reason}")
        else:
            record.notes.append(f"{starved}; not profiled larger: this profile took over half the profiler's timeout")
    elif earlier is not None and record.measured:  # not grown: still the earlier parent's shape
        record.notes.append(f"profiled at {_knobs(target)} from the start: an earlier parent's grid filled the "
                            "device only there")
    if shapes_seen is not None and record.measured and target is not first and target is not earlier:
        shapes_seen[seen_key] = target  # grown: the next parent starts at it
    return _accounted(record, target, session, shapes, time.monotonic() - started)


def _unstarved(record: ProfileRecord, target: ProfileShape, units: int | None, problem_path: str | Path,
               dtype: str | None) -> ProfileShape | None:
    """A larger shape when ``record``, taken at a reduced shape, has a grid too small to fill ``units``."""
    if not (target.reduced and record.measured and record.kernels and units):
        return None
    grid = record.kernels[0].metrics.get(GRID_BLOCKS)
    blocks = 0 if grid is None else round(grid.value)
    items = math.prod(target.shapes[name] for name in target.outer)
    # Only a grid of whole blocks per outer item grows with the items (a persistent grid of one block
    # per SM, or one per channel, does not): profiling that larger would change nothing.
    if blocks <= 0 or blocks >= MIN_BLOCKS_PER_UNIT * units or blocks % items:
        return None
    return grown(target, problem_path, dtype, MIN_BLOCKS_PER_UNIT * units / blocks)


def _accounted(record: ProfileRecord, target: ProfileShape, session: "_Session", shapes: dict[str, int],
               seconds: float) -> ProfileRecord:
    """``record`` with the shape it was taken at and what taking it cost."""
    record.cost.update(seconds=seconds, device_s=session.device_s, tool_runs=session.tool_runs,
                       device_turns=[[round(t, 3) for t in turn] for turn in session.turns])
    if not record.measured:  # the roofline, at the problem's own shapes
        record.shapes = shapes
        return record
    record.shapes, record.scale = dict(target.shapes), target.note
    if target.why_not:
        record.notes.append(target.why_not)
    if target.reduced:
        own = roofline_metrics(session.workload, lookup(session.workload.device_name)).get(DRAM_PCT)
        if own is not None:
            record.notes.append(f"at its own shapes, {session.workload.runtime_ms:.4g} ms a forward moves its "
                                f"bytes at {own.value:.0f}% of the datasheet's DRAM bandwidth (analytic roofline)")
    record.summary = summary_text(record)
    return record


def _knobs(target: ProfileShape) -> str:
    return ", ".join(f"{name}={target.shapes[name]}" for name in target.outer) or "its own shapes"


class _Session:
    """Runs of one candidate's target program under the profiler, each gated on the device's lane."""

    def __init__(self, profiler: Profiler, problem_path: str | Path, source: str, platform_name: str,
                 device_index: int, run: tuple[int, int, str | None], exclusive: Exclusive, workload: Workload,
                 timeout_s: float) -> None:
        self.profiler, self.problem_path, self.source = profiler, problem_path, source
        self.platform_name, self.device_index, self.run = platform_name, device_index, run
        self.exclusive, self.workload, self.timeout_s = exclusive, workload, timeout_s
        platform = get_platform(platform_name, device_index)
        self.env = worker_environment(dict(os.environ), dict(platform.worker_env))
        self.device_s = 0.0
        self.turns: list[list[float]] = []  # when each run asked for the device, was let on, was done
        self.tool_runs = 0

    def profile(self, target: ProfileShape) -> ProfileRecord:
        runs, warmup, dtype = self.run
        with tempfile.TemporaryDirectory(prefix=f"kevo-profile-{os.getpid()}-") as tmp:
            candidate = Path(tmp, "candidate.py")
            candidate.write_text(self.source, encoding="utf-8")
            gate = Path(tmp, "gate")
            gate.mkdir()
            command = target_command(self.problem_path, candidate, target.shapes, self.platform_name,
                                     self.device_index, runs, warmup, self.profiler.capture_region, dtype, gate)
            command, env = confined(command, self.env, tmp, self.problem_path, self.profiler.ports)
            with _Gatekeeper(gate, self.exclusive) as keeper:
                record = self.profiler.profile(command, env, kernel_filter(self.source), self.timeout_s,
                                               self.workload)
            self.device_s += keeper.device_s
            self.turns += keeper.turns
        self.tool_runs += int(record.cost.get("tool_runs", 0))
        return record


def confined(command: list[str], env: dict[str, str], folder: str, problem_path: str | Path,
             ports: tuple[int, ...]) -> tuple[list[str], dict[str, str]]:
    """``command`` and ``env`` for the target program run as a worker is: confined by the operating system
    (``fitness.boundary.confine``) to the worker's reads (and the problem file), writes to its temporary files and
    compile caches in ``folder``; in the network it shares with the profiler, TCP only on the profiler's
    ``ports`` (where ncu's front end and the library it puts in the program talk)."""
    env = in_scratch(env, folder)
    policy = worker_policy(folder, folder, env)
    policy = dataclasses.replace(policy, readable=(*policy.readable, str(Path(problem_path).resolve())),
                                 network=False, ports=ports)
    return confined_argv(policy, command), env


class _Gatekeeper:
    """Lets each run of the gated target program (``profile_target --gate``) onto the device while
    ``exclusive()`` is held, from its ``ready`` to its ``done`` (or its end)."""

    def __init__(self, folder: Path, exclusive: Exclusive, poll_s: float = 0.005) -> None:
        self.folder, self.exclusive, self.poll_s = folder, exclusive, poll_s
        self.device_s = 0.0
        self.turns: list[list[float]] = []  # each run's [asked, let on, done], epoch seconds
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="kevo-profile-gate", daemon=True)

    def __enter__(self) -> "_Gatekeeper":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _serve(self) -> None:
        while not self._stop.is_set():
            ready = next(iter(sorted(self.folder.glob("ready.*"))), None)
            if ready is None:
                self._stop.wait(self.poll_s)
                continue
            pid = int(ready.suffix[1:])
            ready.unlink()
            asked = time.time()
            with self.exclusive():
                started, given = time.monotonic(), time.time()
                Path(self.folder, f"go.{pid}").touch()
                done = Path(self.folder, f"done.{pid}")
                while not done.exists() and process_alive(pid) and not self._stop.is_set():
                    self._stop.wait(self.poll_s)
                self.device_s += time.monotonic() - started
            self.turns.append([asked, given, time.time()])


class ProfileCache:
    """Profiles by source hash, shapes and device: each parent is profiled once per run.

    The cache holds JSON-safe dicts (``state()``), so the run's store can keep it.
    """

    def __init__(self, state: dict[str, Any] | None = None) -> None:
        self._records: dict[str, dict[str, Any]] = dict(state or {})

    @staticmethod
    def key(source: str, shapes: dict[str, int] | None, device_name: str) -> str:
        digest = hashlib.sha256(source.encode()).hexdigest()[:16]
        return f"{digest}|{json.dumps(shapes or {}, sort_keys=True)}|{device_name}"

    def get(self, source: str, shapes: dict[str, int] | None, device_name: str) -> ProfileRecord | None:
        data = self._records.get(self.key(source, shapes, device_name))
        return None if data is None else ProfileRecord.from_dict(data)

    def put(self, source: str, shapes: dict[str, int] | None, device_name: str, record: ProfileRecord) -> None:
        self._records[self.key(source, shapes, device_name)] = record.to_dict()

    def state(self) -> dict[str, Any]:
        return dict(self._records)
