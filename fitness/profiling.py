"""Profiling a candidate: its target program under a profiler, and the work a forward must do.

``profile_candidate`` writes the candidate to a temporary file and runs
``fitness.profile_target`` under the profiler, in the environment the
sandboxed worker gets (secrets scrubbed). The analytic roofline needs the
minimum bytes and work of one forward:

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
import dataclasses
import hashlib
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from fitness.problem import ProblemError, load_problem
from fitness.sandbox import worker_environment
from platforms import get_platform
from platforms.profiling import Profiler, ProfileRecord, Workload

#: Seeds of the worker's defaults (fitness.evaluator.EvalSettings): the
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
    import torch

    problem = load_problem(problem_path, shapes, dtype)
    flops = declared_flops(problem.module, problem_path)
    try:
        with torch.device("meta"), torch.no_grad():
            inputs = problem.get_inputs()
            model = problem.Model(*problem.get_init_inputs())
            if dtype is not None:
                cast = getattr(torch, dtype)
                inputs = [x.to(cast) if isinstance(x, torch.Tensor) and x.is_floating_point() else x for x in inputs]
                model = model.to(cast)
            outputs = model(*inputs)
    except (RuntimeError, NotImplementedError, TypeError, ValueError) as exc:
        reason = f"the reference does not run on the meta device ({type(exc).__name__}: {str(exc)[:120]})"
        return ProblemWork(None, flops, "", reason)
    tensors = tensors_in(inputs) + tensors_in(outputs) + list(model.parameters()) + list(model.buffers())
    largest = max(tensors_in(inputs), key=lambda t: t.numel() * t.element_size(), default=None)
    dtype = str(largest.dtype).removeprefix("torch.") if largest is not None else ""
    return ProblemWork(sum(t.numel() * t.element_size() for t in tensors), flops, dtype)


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
                   dtype: str | None = None) -> list[str]:
    """The ``python -m fitness.profile_target`` command line for one candidate."""
    command = [sys.executable, "-m", "fitness.profile_target", "--problem", str(Path(problem_path).resolve()),
               "--candidate", str(candidate_path), "--device", platform_name, "--index", str(device_index),
               "--runs", str(runs), "--warmup", str(warmup),
               "--init-seed", str(INIT_SEED), "--input-seed", str(INPUT_SEED)]
    for name, value in shapes.items():
        command += ["--shape", f"{name}={value}"]
    if dtype is not None:
        command += ["--dtype", dtype]
    return command + (["--region"] if region else [])


def profile_candidate(profiler: Profiler, problem_path: str | Path, shapes: dict[str, int] | None, source: str,
                      platform_name: str, device_index: int, timeout_s: float, *, runtime_ms: float | None = None,
                      device_name: str = "", runs: int = 3, warmup: int = 1,
                      dtype: str | None = None) -> ProfileRecord:
    """Profile one candidate (a parent) on ``platform_name``'s device ``device_index``.

    ``runtime_ms`` (the evaluator's median) and ``device_name`` feed the
    analytic roofline, which is the record whenever the profiler is missing
    or fails. A failing profiler never raises here; a bad problem file does
    (``ProblemError``).
    """
    shapes = dict(shapes or {})
    work = problem_work(problem_path, shapes, dtype)
    workload = Workload(bytes_moved=work.bytes_moved, flops=work.flops, dtype=work.dtype,
                        runtime_ms=runtime_ms, device_name=device_name,
                        forwards=runs if profiler.capture_region else runs + warmup)
    if profiler.disabled_reason is not None:
        return profiler.profile([], {}, None, timeout_s, workload)
    platform = get_platform(platform_name, device_index)
    env = worker_environment(dict(os.environ), dict(platform.worker_env))
    with tempfile.TemporaryDirectory(prefix="kevo-profile-") as tmp:
        candidate = Path(tmp, "candidate.py")
        candidate.write_text(source, encoding="utf-8")
        command = target_command(problem_path, candidate, shapes, platform_name, device_index, runs, warmup,
                                 profiler.capture_region, dtype)
        return profiler.profile(command, env, kernel_filter(source), timeout_s, workload)


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
