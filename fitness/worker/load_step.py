"""The worker's load step: a candidate's module imported once per source, its ``ModelNew``
built at each variant's shapes; and its warm step (``warm``): the kernels compiled ahead.

Both run candidate code under the worker's guard (``fitness.worker.guard``); the
constructor runs inside a dispatch trace too (``fitness.worker.trace``): it may create
and initialise parameters, not precompute answers with PyTorch.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import os
import sys
from collections.abc import Iterator
from types import ModuleType
from typing import Any

from fitness.problems.problem import Problem, build_model, load_problem, make_inputs
from fitness.refusal import HarnessFault, Refusal, classify, describe, forbidden_reason
from fitness.result import Status
from fitness.worker.guard import Guard


def import_candidate(source: str, digest: str, directory: str, guard: Guard) -> ModuleType:
    """The module of ``source`` (``digest``: its hash), written to ``directory`` and imported
    with the guard on; refused (``compile_error``) if it does not import or defines no
    class ModelNew."""
    path = os.path.join(directory, f"candidate_{digest}.py")
    with open(path, "w", encoding="utf-8") as f:
        f.write(source)
    name = f"kevo_candidate_{digest}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # Triton reads a kernel's source through its module
    guard.candidate_files.add(path)
    try:
        with guard.running():
            spec.loader.exec_module(module)
    except SyntaxError as exc:
        raise Refusal(Status.COMPILE_ERROR, f"does not compile: line {exc.lineno}: {exc.msg}")
    except Exception as exc:
        raise Refusal(Status.COMPILE_ERROR, f"failed to import: {describe(exc)}")
    if not isinstance(getattr(module, "ModelNew", None), type):
        raise Refusal(Status.COMPILE_ERROR, "defines no class ModelNew")
    return module


def build_candidate(model_cls: type, problem: Problem, init_seed: int, device: Any, trace: Any, guard: Guard,
                    platform: Any) -> Any:
    """``model_cls`` built for ``problem`` on ``device``, inside ``trace`` and the guard;
    a failure of the candidate's is refused (``classify``), PyTorch doing the work is
    ``forbidden``."""

    @contextlib.contextmanager
    def guarded() -> Iterator[None]:
        with trace, guard.running():
            yield

    try:
        model = build_model(model_cls, problem, init_seed, device, around=guarded)
    except HarnessFault:
        raise
    except BaseException as exc:  # the candidate's failure, whatever it raised
        if trace.violations:
            raise Refusal(Status.FORBIDDEN, "in __init__: " + forbidden_reason(trace.violations))
        raise classify(exc, "building ModelNew", platform)
    if trace.violations:
        raise Refusal(Status.FORBIDDEN, "in __init__: " + forbidden_reason(trace.violations))
    return model


#: The device memory (bytes) a warm step may take beyond what the worker holds: the candidate's
#: tensors are on ``meta`` there, and one that allocates on the device itself stops the step.
WARM_ROOM = 256 << 20


def warm(harness: Any, step: Any) -> tuple[int, str]:
    """The warm step ``step`` (``fitness.boundary.protocol.Warm``): its source imported as a module of its own (so
    that nothing it keeps at module level, a buffer on ``meta`` or an autotuner's pick, reaches the
    evaluation's import), its ModelNew built and run on ``meta`` at each of its shapes under the
    guard, with ``harness.dry`` set: each Triton launch compiles its kernel and launches nothing
    (``fitness.worker.instrument``), so the evaluation's import finds every kernel in Triton's cache. A
    candidate that cannot run on ``meta`` (it reads a value, it autotunes) ends the step there.
    Returns the variants whose forward ran to its end, and what ended the step before, if anything."""
    import torch

    harness.use_cache(step.cache)
    digest = "ahead_" + hashlib.sha256(step.source.encode()).hexdigest()[:16]
    module = import_candidate(step.source, digest, harness.tmpdir, harness.guard)
    reached, stopped = 0, ""
    harness.dry = True
    try:
        with harness.platform.memory_capped(WARM_ROOM):
            for shapes in step.shapes:
                problem = load_problem(step.problem, shapes, step.dtype, source=step.problem_source)
                try:
                    model = build_model(module.ModelNew, problem, step.init_seed, "meta", around=harness.guard.running)
                    args = make_inputs(problem, 0, "meta")
                    with harness.guard.running(), torch.no_grad():
                        model(*args)
                except (Refusal, HarnessFault):
                    raise
                except Exception as exc:  # noqa: BLE001 - the candidate's code on meta: whatever it raises ends the step
                    stopped = describe(exc)[:500]
                    break
                reached += 1
    finally:
        harness.dry = False
        sys.modules.pop(module.__name__, None)
    return reached, stopped
