"""The watch for candidate code while Triton compiles with the device lent out.

While a worker compiles with the timing lane lent (``fitness.worker.loan``), only
Triton's compiler may run; candidate code running there (a compile-time
function, a hook) ends the loan. On Python 3.12 and later this costs one
callback per code object (``sys.monitoring``, other code disabled at its first
start); before, a profile hook sees every call.
"""

from __future__ import annotations

import sys
from typing import Any

_MONITORING_TOOL: list[int] = []  # the sys.monitoring tool id, once claimed


def _monitoring_tool() -> int | None:
    monitoring = getattr(sys, "monitoring", None)
    if monitoring is None:
        return None
    if not _MONITORING_TOOL:
        for tool in (5, 4, 3):
            if monitoring.get_tool(tool) is None:
                monitoring.use_tool_id(tool, "kevo compile watch")
                _MONITORING_TOOL.append(tool)
                break
        else:
            return None
    return _MONITORING_TOOL[0]


class CandidateCodeWatch:
    """Calls ``callback()`` at the first start of any function of ``candidate_files``
    (a set the guard keeps up to date), once (``Guard.on_candidate_code``)."""

    def __init__(self, candidate_files: set[str], callback: Any) -> None:
        self.candidate_files, self.callback = candidate_files, callback
        self.fired = False
        self.tool: int | None = None
        self.previous: Any = None

    def _seen(self) -> None:
        if not self.fired:
            self.fired = True
            self.callback()

    def _start(self, code: Any, offset: int) -> Any:
        if code.co_filename in self.candidate_files:
            self._seen()
            return None
        return sys.monitoring.DISABLE  # never the candidate's: no more events from this code

    def _profile(self, frame: Any, event: str, arg: Any) -> None:
        if event == "call" and frame.f_code.co_filename in self.candidate_files:
            self._seen()

    def __enter__(self) -> "CandidateCodeWatch":
        self.tool = _monitoring_tool()
        if self.tool is not None:
            events = sys.monitoring.events
            sys.monitoring.register_callback(self.tool, events.PY_START, self._start)
            sys.monitoring.register_callback(self.tool, events.PY_RESUME, self._start)
            sys.monitoring.set_events(self.tool, events.PY_START | events.PY_RESUME)
        else:
            self.previous = sys.getprofile()
            sys.setprofile(self._profile)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.tool is not None:
            sys.monitoring.set_events(self.tool, 0)
            sys.monitoring.register_callback(self.tool, sys.monitoring.events.PY_START, None)
            sys.monitoring.register_callback(self.tool, sys.monitoring.events.PY_RESUME, None)
        else:
            sys.setprofile(self.previous)
