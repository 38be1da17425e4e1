"""Runtime guard of the worker: what the candidate's own code may call.

The static screen reads names; packages re-export modules under other names
(``torch.cuda.tunable.mp`` is multiprocessing, ``torch.amp.autocast_mode.np``
is NumPy), so a list of names can never be complete. The guard looks at what
is actually called, from frames whose code is the candidate's:

- an audit hook (``sys.addaudithook``, which cannot be removed) refuses
  process creation, ctypes, sockets, file opens, ``exec``/``compile``, frame
  and object-graph introspection and imports of modules outside the
  allowlist, when the nearest frame outside the standard library is the
  candidate's (Triton's compiler may still run ``ptxas``);
- a profile hook, while the candidate runs, refuses calls from candidate
  frames into anything but torch, Triton, math, the candidate itself and
  harmless builtins.

Each refusal is recorded before the error is raised, so catching it does not
help the candidate.
"""

from __future__ import annotations

import builtins
import functools
import os
import sys
import sysconfig
import threading
from typing import Any

from fitness.screen import ALLOWED_IMPORTS, FORBIDDEN_BUILTINS

_STDLIB_DIRS = tuple(
    os.path.realpath(p) + os.sep
    for p in {sysconfig.get_paths()["stdlib"], sysconfig.get_paths()["platstdlib"]}
)
_SITE_DIRS = tuple(
    os.path.realpath(p) + os.sep
    for p in {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
)
# Audit events a candidate's code never needs.
_BLOCKED_PREFIXES = (
    "os.", "subprocess.", "ctypes.", "socket.", "shutil.", "sys.", "gc.", "signal.",
    "_thread.", "threading.", "object.", "function.", "code.", "cpython.", "marshal.",
    "pickle.", "urllib.", "http.", "ftplib.", "smtplib.", "telnetlib.", "webbrowser.",
    "tempfile.", "glob.", "pathlib.", "shelve.", "sqlite3.", "mmap.", "fcntl.", "resource.",
    "syslog.", "winreg.", "msvcrt.", "_posixsubprocess.",
)
_BLOCKED_EVENTS = frozenset({"open", "exec", "compile", "builtins.input", "builtins.breakpoint"})
# Process creation is refused even when a library does it for the candidate,
# unless Triton's compiler is the caller.
_PROCESS_EVENTS = ("os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork",
                   "os.forkpty", "subprocess.Popen", "_posixsubprocess.fork_exec", "os.kill",
                   "os.killpg")


# Standard-library files a candidate's code may call into: annotations
# (``Optional[torch.Tensor]``) run typing's code.
_STDLIB_CALLABLE = frozenset({"typing.py", "__future__.py"})


@functools.lru_cache(maxsize=8192)
def _real(filename: str) -> str:
    """``os.path.realpath``, once per file name. The hooks ask about the same few files
    all the time, and realpath costs a system call per path component: at every audited
    event of a timed run (a Triton launch raises some) the run would pay for it. A
    candidate cannot change what a loaded file's name resolves to (it may not touch
    the file system)."""
    return os.path.realpath(filename)


def _package_of(filename: str) -> str:
    """'torch', 'triton', 'numpy', ... for a file under site-packages; '' otherwise."""
    path = _real(filename)
    for site in _SITE_DIRS:
        if path.startswith(site):
            return path[len(site):].split(os.sep, 1)[0]
    return ""


def _is_stdlib(filename: str) -> bool:
    if filename.startswith("<frozen"):
        return True
    path = _real(filename)
    return path.startswith(_STDLIB_DIRS) and not path.startswith(_SITE_DIRS)


class Guard:
    """Installed once per worker; ``active`` while candidate code may run."""

    def __init__(self) -> None:
        self.candidate_files: set[str] = set()
        self.active = False
        self.violations: list[str] = []
        self._allowed_packages = frozenset({"torch", "triton"})
        self._harness_thread = threading.get_ident()
        self._in_hook = False
        sys.addaudithook(self._audit)

    # -- which code is the candidate's ----------------------------------------

    def _is_candidate(self, frame: Any) -> bool:
        return frame is not None and frame.f_code.co_filename in self.candidate_files

    def _origin(self, frame: Any) -> Any:
        """The nearest frame outside the standard library."""
        while frame is not None and _is_stdlib(frame.f_code.co_filename):
            frame = frame.f_back
        return frame

    def refuse(self, what: str) -> None:
        self.violations.append(what)
        raise PermissionError(f"kevo: a candidate may not {what}")

    # -- the audit hook ---------------------------------------------------------

    def _audit(self, event: str, args: tuple) -> None:
        if not self.active or self._in_hook:
            return
        blocked = event in _BLOCKED_EVENTS or event.startswith(_BLOCKED_PREFIXES)
        if not blocked and event != "import":
            return
        self._in_hook = True
        try:
            origin = self._origin(sys._getframe(1))
            if event == "import":
                if self._is_candidate(origin):
                    top = str(args[0]).split(".")[0] if args else ""
                    if top not in ALLOWED_IMPORTS:
                        self.refuse(f"import {args[0]}")
                return
            if self._is_candidate(origin):
                self.refuse(f"cause the audit event {event}")
            if event.startswith(_PROCESS_EVENTS):
                package = _package_of(origin.f_code.co_filename) if origin is not None else ""
                if package != "triton" and not self._is_harness(origin):
                    self.refuse(f"start a process ({event}) through {package or 'another module'}")
        finally:
            self._in_hook = False

    def _is_harness(self, frame: Any) -> bool:
        return frame is not None and os.path.dirname(_real(frame.f_code.co_filename)) == os.path.dirname(_real(__file__))

    # -- the profile hook -------------------------------------------------------

    def _profile(self, frame: Any, event: str, arg: Any) -> None:
        if event == "c_call":
            if frame.f_code.co_filename in self.candidate_files:
                self._check_builtin(arg)
        elif event == "call":
            caller = frame.f_back
            if caller is not None and caller.f_code.co_filename in self.candidate_files:
                self._check_python(frame.f_code.co_filename, frame.f_code.co_name)

    def _check_builtin(self, fn: Any) -> None:
        owner = getattr(fn, "__self__", None)
        module = getattr(fn, "__module__", None)
        if module is None and owner is not None:
            module = type(owner).__module__ if not isinstance(owner, type(sys)) else owner.__name__
        module = module or ""
        name = getattr(fn, "__name__", "?")
        top = module.split(".")[0]
        if top == "builtins" or module == "":
            if name in FORBIDDEN_BUILTINS or owner is builtins and name in FORBIDDEN_BUILTINS:
                self.refuse(f"call {name}")
            return
        if top not in self._allowed_packages and top != "math":
            self.refuse(f"call {module}.{name}")

    def _check_python(self, filename: str, name: str) -> None:
        if filename in self.candidate_files:
            return
        if _package_of(filename) in self._allowed_packages:
            return
        if _is_stdlib(filename) and os.path.basename(filename) in _STDLIB_CALLABLE:
            return
        where = _package_of(filename) or os.path.basename(filename)
        self.refuse(f"call {name} from {where}")

    # -- while a kernel compiles --------------------------------------------------

    def on_candidate_code(self, callback: Any) -> "_Watching":
        """Context in which the first start of any candidate function calls ``callback()``.

        While a worker compiles with the device lent out (``fitness.lane``), only
        Triton's compiler may run; candidate code running there (a compile-time
        function, a hook) ends the loan. On Python 3.12 and later this costs one
        callback per code object (``sys.monitoring``, other code disabled at its
        first start); before, a profile hook sees every call.
        """
        return _Watching(self, callback)

    # -- running candidate code -------------------------------------------------

    def running(self, profile: bool = True) -> "_Running":
        """Context in which candidate code runs; ``profile`` also checks every call.

        Timed runs leave the profile hook off (it would be charged to the
        candidate's runtime); the audit hook stays on everywhere.
        """
        return _Running(self, profile)


class _Running:
    def __init__(self, guard: Guard, profile: bool) -> None:
        self.guard, self.profile = guard, profile

    def __enter__(self) -> Guard:
        self.guard.active = True
        if self.profile:
            sys.setprofile(self.guard._profile)
        return self.guard

    def __exit__(self, *exc: object) -> None:
        if self.profile:
            sys.setprofile(None)
        self.guard.active = False


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


class _Watching:
    def __init__(self, guard: Guard, callback: Any) -> None:
        self.guard, self.callback = guard, callback
        self.fired = False
        self.tool: int | None = None
        self.previous: Any = None

    def _seen(self) -> None:
        if not self.fired:
            self.fired = True
            self.callback()

    def _start(self, code: Any, offset: int) -> Any:
        if code.co_filename in self.guard.candidate_files:
            self._seen()
            return None
        return sys.monitoring.DISABLE  # never the candidate's: no more events from this code

    def _profile(self, frame: Any, event: str, arg: Any) -> None:
        if event == "call" and frame.f_code.co_filename in self.guard.candidate_files:
            self._seen()

    def __enter__(self) -> "_Watching":
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
