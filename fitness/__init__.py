"""Evaluation of candidate kernels: the protocol of DESIGN.md, in one entry point.

``Evaluator(reference, platform).evaluate(source) -> EvalResult``. Knows
nothing of Ray, SQLite or LLMs.
"""

from fitness.compare import CutoffError
from fitness.evaluator import Evaluator
from fitness.incumbent import Incumbent, Job
from fitness.prepared import PreparedProblem
from fitness.problem import NoRoomNow, ProblemError, load_problem, shape_knobs
from fitness.result import EvalResult, Status
from fitness.screen import screen
from fitness.settings import DEFAULT_MAX_ABS_DIFF, EvalSettings

__all__ = [
    "DEFAULT_MAX_ABS_DIFF",
    "CutoffError",
    "EvalResult",
    "EvalSettings",
    "Evaluator",
    "Incumbent",
    "Job",
    "PreparedProblem",
    "NoRoomNow",
    "ProblemError",
    "Status",
    "load_problem",
    "screen",
    "shape_knobs",
]
