"""The incumbent: torch.compile of the reference, timed by the judge's own clock.

What a user already has, for free, is ``torch.compile``: every speed kevo
reports is against it, with eager PyTorch beside it. ``Incumbent`` is a job an
evaluator takes in place of a candidate (``Evaluator.time_incumbent``); the end
of a run times it interleaved with its best kernels (``evolve.search.confirm``).

The reference is trusted code, so it runs in the judge's own process, never in
the worker. Its model at the main shapes is compiled once per problem and
precision (``torch.compile`` with its defaults: what a user gets), its output
compared with the reference's on the first fixed inputs (the max |diff| is kept;
it is never a rejection: a user's torch.compile is what it is), and then eager
and the compiled model are timed back to back in one turn of the device: the
timing lane held exclusively (nothing else of this process on the device) and
the device's lock across processes, by ``time_runs``, the protocol candidates
are timed by. A time taken while other work shared the device is never a
ratio's denominator: this is the clean time the ratios use.

It times what it is asked to on any platform; on the CPU the times mean
little (torch.compile writes C++ there, kevo's kernels run in Triton's
interpreter), so a run asks for it on a GPU only (``evolve.search.confirm``).

``Incumbent(tf32=True)`` compiles and runs with fp32 matmuls allowed TF32
(``torch.set_float32_matmul_precision("high")``): what a user gets with one
line, and the fair comparison for a kernel that multiplies fp32 in TF32 or
tf32x3. The precision is a process-wide setting of torch, so it is set only
while the lane is held exclusively (no reference of another evaluation of this
process is computed meanwhile) and restored before the lane is given back.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from collections.abc import Iterator
from typing import Any

from fitness.judge.compare import compare
from fitness.judge.prepared import PreparedProblem
from fitness.problems.problem import make_inputs
from fitness.result import EvalResult, Status
from platforms.device_lock import window as device_window

log = logging.getLogger(__name__)

#: ``torch.set_float32_matmul_precision`` for each ``Incumbent.tf32``.
MATMUL_PRECISION = {False: "highest", True: "high"}


@dataclasses.dataclass(frozen=True)
class Incumbent:
    """torch.compile of the reference, to be timed (a job for an evaluator, beside candidates' sources).

    >>> Incumbent(), Incumbent(tf32=True).describe()
    (Incumbent(tf32=False), 'torch.compile with TF32 matmuls allowed')
    """

    tf32: bool = False  # fp32 matmuls allowed TF32 (torch.set_float32_matmul_precision("high"))

    def describe(self) -> str:
        return "torch.compile with TF32 matmuls allowed" if self.tf32 else "torch.compile"


#: What an evaluator is given: a candidate's source, or the incumbent.
Job = str | Incumbent


@contextlib.contextmanager
def matmul_precision(tf32: bool) -> Iterator[None]:
    """fp32 matmuls in ``MATMUL_PRECISION[tf32]`` for the block, the process's own setting restored after."""
    import torch

    before = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision(MATMUL_PRECISION[tf32])
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(before)


def time_incumbent(prepared: PreparedProblem, lane: Any, job: Incumbent, base: dict[str, Any]) -> EvalResult:
    """The incumbent's record: ``runtime_ms`` and ``runtime_spread`` torch.compile's, ``reference_ms``
    eager PyTorch's in the same turn of the device, ``max_abs_diff`` the compiled output's against the
    reference's (``reason`` says so where it is outside the cutoff). ``lane`` is the evaluator's timing
    lane (``fitness.judge.lane``). A failure of torch.compile itself is a ``runtime_error`` record that says so."""
    import torch

    main, seed = prepared.main, prepared.settings.fixed_seeds[0]
    # compiling is mostly host work: beside others' checks, unless the precision must change for the process
    with lane.exclusive() if job.tf32 else lane.shared(), _precision(job):
        try:
            compiled = _compiled(prepared, job)
            inputs = make_inputs(main.problem, seed, prepared.device)
            with torch.no_grad():
                out = compiled(*inputs)
            prepared.platform.synchronize()
        except Exception as exc:  # noqa: BLE001 - Dynamo and Inductor fail in many ways; each is a finding
            log.warning("%s: %s failed: %s", prepared.reference_path.name, job.describe(), exc)
            return EvalResult(Status.RUNTIME_ERROR, f"{job.describe()} failed: {type(exc).__name__}: "
                              f"{str(exc)[:300]}", **base)
        outs = [o.detach() for o in (out if isinstance(out, (tuple, list)) else [out])]
        del out, inputs
        comparison = compare(outs, prepared.reference_outputs(main, seed), prepared.cutoff)
        del outs
    with lane.exclusive(), device_window(prepared.platform), _precision(job):  # the device to itself
        eager = prepared.timing_in_process(main.model)
        timing = prepared.timing_in_process(compiled)
    reason = "" if comparison.status == "accepted" else \
        f"{job.describe()}'s output is outside the cutoff: {comparison.reason}"
    return EvalResult(Status.ACCEPTED, reason, max_abs_diff=comparison.max_abs_diff, runtime_ms=timing.median_ms,
                      runtime_spread=timing.spread, reference_ms=eager.median_ms, **base)


def _precision(job: Incumbent) -> contextlib.AbstractContextManager[None]:
    """TF32 allowed for the block where ``job`` asks (``matmul_precision``); the process's own setting else."""
    return matmul_precision(True) if job.tf32 else contextlib.nullcontext()


def _compiled(prepared: PreparedProblem, job: Incumbent) -> Any:
    """The main shapes' reference model under torch.compile (its defaults), once per problem and precision
    (the caller holds the lane: one thread at a time)."""
    import torch

    compiled = prepared.incumbents.get(job.tf32)
    if compiled is None:
        compiled = prepared.incumbents[job.tf32] = torch.compile(prepared.main.model)
    return compiled
