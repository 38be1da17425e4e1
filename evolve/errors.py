"""The errors that mean bad input, gathered once.

``kevo`` prints one of them as one line on stderr and exits 2 (no traceback);
a sweep records one as the reason its run failed, where any other exception
is a failure of kevo's own (its traceback goes to the log). Each is raised
where it is found: a config (``ConfigError``), a problem file or its
reference (``ProblemError``, ``CutoffError``), a platform this machine lacks
(``PlatformUnavailable``), Ray or its cluster (``RayUnavailable``), a run
directory or an LLM that cannot be used (``RunError``), a search that cannot
start (``SearchError``), a model ``kevo extract`` or ``kevo apply`` cannot take
(``CaptureError``), and the command line's own (``UsageError``).
"""

from __future__ import annotations

from evolve.models.manifest import CaptureError
from evolve.config import ConfigError
from evolve.dispatch.ray import RayUnavailable
from evolve.search.loop import SearchError
from evolve.session import RunError
from fitness import CutoffError, ProblemError
from platforms import PlatformUnavailable


class UsageError(Exception):
    """Input the user can fix (a file that cannot be read or written, nothing to export)."""


USER_ERRORS: tuple[type[Exception], ...] = (
    UsageError,
    ConfigError,
    ProblemError,
    CutoffError,
    PlatformUnavailable,
    RayUnavailable,
    RunError,
    SearchError,
    CaptureError,
)
