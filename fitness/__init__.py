"""Evaluation of candidate kernels: the protocol of DESIGN.md, in one entry point.

``Evaluator(reference, platform).evaluate(source) -> EvalResult``. Knows
nothing of Ray, SQLite or LLMs.

fitness/ is built along the sandbox line, in rooms (docs/ARCHITECTURE.md):

- ``fitness.worker``: what runs in the sandboxed worker, beside untrusted code;
- ``fitness.boundary``: the line itself: the static screen, the worker process
  and its confinement, the protocol's messages, the bytes on the pipe;
- ``fitness.problems``: a problem file loaded at its shapes, and its inputs;
- ``fitness.judge``: the trusted side that reaches a verdict;
- ``fitness.profiling``: a candidate under a hardware profiler.

What every room speaks lives here, at the top: ``result`` (the record and its
statuses), ``settings`` (how thoroughly to check and time), ``refusal`` (a
candidate's known failures, and how an exception is told). These import no
room.

The names below are loaded when first asked for (``from fitness import
Evaluator``), so that a process which imports one room (the worker, started
as ``python -m fitness.worker``) does not load the judge with this package.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fitness.boundary.screen import screen
    from fitness.judge.compare import CutoffError
    from fitness.judge.evaluator import Evaluator
    from fitness.judge.incumbent import Incumbent, Job
    from fitness.judge.prepared import PreparedProblem
    from fitness.problems.problem import NoRoomNow, ProblemError, load_problem, shape_knobs
    from fitness.result import EvalResult, Status
    from fitness.settings import DEFAULT_MAX_ABS_DIFF, EvalSettings

#: Each public name, and the module that defines it.
_WHERE = {
    "DEFAULT_MAX_ABS_DIFF": "fitness.settings",
    "CutoffError": "fitness.judge.compare",
    "EvalResult": "fitness.result",
    "EvalSettings": "fitness.settings",
    "Evaluator": "fitness.judge.evaluator",
    "Incumbent": "fitness.judge.incumbent",
    "Job": "fitness.judge.incumbent",
    "PreparedProblem": "fitness.judge.prepared",
    "NoRoomNow": "fitness.problems.problem",
    "ProblemError": "fitness.problems.problem",
    "Status": "fitness.result",
    "load_problem": "fitness.problems.problem",
    "screen": "fitness.boundary.screen",
    "shape_knobs": "fitness.problems.problem",
}

__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    """A public name, imported from its room the first time it is asked for.

    >>> import fitness
    >>> fitness.Status.ACCEPTED.value
    'accepted'
    """
    where = _WHERE.get(name)
    if where is None:
        raise AttributeError(f"module 'fitness' has no attribute {name!r}")
    value = getattr(importlib.import_module(where), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_WHERE))
