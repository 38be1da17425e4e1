"""Runtime trace of a candidate's forward: PyTorch may allocate, view and
copy, but the computing must happen in Triton kernels.

Runs in the worker. Violations are recorded before the error is raised, so a
candidate that catches the error is refused all the same.
"""

from __future__ import annotations

from torch.utils._python_dispatch import TorchDispatchMode

# aten operators a candidate's forward may call: allocation, views, layout
# and dtype copies, and constant fills for initialising outputs.
ALLOWED_OPS = frozenset(
    """
    empty empty_like empty_strided new_empty new_empty_strided empty_permuted
    zeros zeros_like new_zeros ones ones_like new_ones full full_like new_full
    fill_ zero_ arange scalar_tensor lift_fresh lift_fresh_copy
    view _unsafe_view reshape view_as as_strided expand expand_as permute
    transpose t unsqueeze squeeze flatten unflatten select slice narrow unbind
    split split_with_sizes chunk alias detach movedim contiguous resolve_conj
    resolve_neg view_as_real view_as_complex
    clone copy_ _to_copy to
    sym_size sym_stride sym_numel sym_storage_offset is_same_size
    """.split()
)
# Operators Triton's launcher itself uses (the interpreter stages tensors
# through host storage); allowed only while a Triton launch is under way.
LAUNCH_OPS = frozenset({"set_", "cpu", "_to_copy", "copy_", "new_empty", "empty"})


# Random initialisation a constructor may do (nn.Linear, nn.Parameter(torch.randn(...))).
INIT_OPS = frozenset(
    """
    uniform_ normal_ randn rand randint random_ randperm bernoulli_ exponential_
    log_normal_ cauchy_ geometric_ rand_like randn_like randint_like
    """.split()
)


def op_name(func) -> str:
    """``aten::mm.default`` -> ``mm``."""
    return func.name().split("::")[-1].split(".")[0]


class ForbiddenOp(RuntimeError):
    pass


class ComputeTrace(TorchDispatchMode):
    """Refuses aten operators that compute, recording each refusal."""

    def __init__(self, extra_ops: frozenset[str] = frozenset()) -> None:
        super().__init__()
        self.violations: list[str] = []
        self.launch_depth = 0
        self.allowed = ALLOWED_OPS | extra_ops

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = op_name(func)
        allowed = name in self.allowed or (self.launch_depth > 0 and name in LAUNCH_OPS)
        if not allowed:
            self.violations.append(name)
            raise ForbiddenOp(f"PyTorch computed with aten.{name}; the work must be done in Triton kernels")
        return func(*args, **(kwargs or {}))



#: Why a window whose profiler record is missing is refused.
UNRECORDED = "the profiler's record of the timed runs is incomplete: their PyTorch operators cannot be checked"


def host_violations(host_ops: list[list[str]]) -> list[str]:
    """The operators outside ``ALLOWED_OPS`` that timed runs dispatched, from the profiler's record
    of each run (``platforms.timeline.DeviceTimeline.host_ops``): the dispatch trace's rule, applied
    after the runs instead of during them.

    >>> host_violations([["empty", "zeros"], ["empty_strided", "mm"]])
    ['mm']
    """
    return [name for run in host_ops for name in run if name not in ALLOWED_OPS]
