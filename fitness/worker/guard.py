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

What the candidate may not do, a library it calls may not do for it: while a
candidate's frame is anywhere on the stack, the audit hook refuses any
socket or other network event, a file opened or changed for writing outside
the directories the worker may write (``confine_files``: its scratch
directory, the compile caches; the paths ``fitness.boundary.confine`` gives the OS),
and a file opened for reading outside Python's, the libraries' and those
directories. Where a library reads or writes in C, no audit event is raised:
the profile hook (off in timed runs) refuses the candidate's own calls into
such functions (``torch.save``, ``torch.hub``, ``torch.from_file``); deeper
in a library, and in timed runs, the operating system (``fitness.boundary.confine``)
stops the writes and sockets the guard cannot see. Where the guard sees the
attempt it names it, so the verdict is ``forbidden``.

Each refusal is recorded before the error is raised, so catching it does not
help the candidate.
"""

from __future__ import annotations

import builtins
import functools
import os
import sys
import sysconfig
import tempfile
import threading
from typing import Any

from fitness.boundary import confine
from fitness.boundary.screen import ALLOWED_IMPORTS, FORBIDDEN_BUILTINS
from fitness.worker.compile_watch import CandidateCodeWatch

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
    "syslog.", "winreg.", "msvcrt.", "_posixsubprocess.", "ssl.", "nntplib.", "poplib.", "imaplib.",
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

# While a candidate's frame is on the stack, whoever asks:
# - the network, refused;
_NETWORK_PREFIXES = ("socket.", "urllib.", "http.", "ftplib.", "smtplib.", "telnetlib.", "webbrowser.",
                     "nntplib.", "poplib.", "imaplib.", "ssl.")
# - events that change the file system: (argument, whether it is written) for each path they name;
_FS_EVENTS: dict[str, tuple[tuple[int, bool], ...]] = {
    "os.mkdir": ((0, True),), "os.rename": ((0, True), (1, True)), "os.remove": ((0, True),),
    "os.rmdir": ((0, True),), "os.truncate": ((0, True),), "os.chmod": ((0, True),), "os.chown": ((0, True),),
    "os.link": ((0, False), (1, True)), "os.symlink": ((1, True),), "os.utime": ((0, True),),
    "os.setxattr": ((0, True),), "os.removexattr": ((0, True),), "shutil.copyfile": ((0, False), (1, True)),
    "shutil.copytree": ((0, False), (1, True)), "shutil.move": ((0, True), (1, True)),
    "shutil.rmtree": ((0, True),), "shutil.chown": ((0, True),), "shutil.make_archive": ((0, True),),
    "shutil.unpack_archive": ((0, False), (1, True)),
}
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
# - library modules that do file or network I/O in C, where no audit event is raised, when the
#   candidate calls them (paths under site-packages; a trailing / takes the whole package);
_IO_MODULES = ("torch/serialization.py", "torch/hub.py", "torch/jit/_serialization.py", "torch/package/",
               "torch/utils/cpp_extension.py", "torch/utils/model_zoo.py", "torch/utils/file_baton.py",
               "torch/utils/data/", "torch/utils/tensorboard/", "torch/distributed/", "torch/multiprocessing/",
               "torch/storage.py",
               "numpy/lib/_npyio_impl.py", "numpy/lib/npyio.py", "numpy/_core/memmap.py", "numpy/core/memmap.py")
# - built-in functions that read or write a file they are given by name, when the candidate calls them.
_IO_BUILTINS = frozenset({"from_file", "fromfile", "tofile"})
# Of these modules, only these functions (TypedStorage.from_file; its other methods are harmless).
_IO_ONLY = {"torch/storage.py": _IO_BUILTINS}


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


@functools.lru_cache(maxsize=8192)
def _io_module(filename: str) -> str:
    """'torch/serialization.py' for a file of ``_IO_MODULES``; '' otherwise."""
    path = _real(filename)
    for site in _SITE_DIRS:
        if path.startswith(site):
            relative = path[len(site):].replace(os.sep, "/")
            return relative if relative.startswith(_IO_MODULES) else ""
    return ""


def _roots(paths: Any) -> tuple[str, ...]:
    """Real paths, each ending with a separator, for ``_beneath``."""
    return tuple(dict.fromkeys(os.path.realpath(p).rstrip(os.sep) + os.sep for p in paths if p))


def _beneath(real: str, roots: tuple[str, ...]) -> bool:
    return (real + os.sep).startswith(roots)


def _python_dirs() -> tuple[str, ...]:
    """Where the interpreter and the libraries are read from: the prefixes, the standard
    library, site-packages and every directory on ``sys.path`` (kevo's own included)."""
    paths = [sys.prefix, sys.base_prefix, sys.exec_prefix, *sysconfig.get_paths().values()]
    paths += [p for p in sys.path if p and os.path.isdir(p)]
    return _roots(paths)


def _writes(mode: Any, flags: Any) -> bool:
    """Whether an ``open`` audit event's mode or flags write."""
    return (isinstance(mode, str) and any(c in mode for c in "wax+")) or (
        isinstance(flags, int) and bool(flags & _WRITE_FLAGS))


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
        # where a library may write, and read, for a candidate (confine_files); until told, this
        # process's temp folder (a worker's is its scratch directory) and the compile caches
        temp = tempfile.gettempdir()
        self._writable = _roots(confine.writable_dirs(temp, temp, dict(os.environ)) + confine.device_nodes())
        self._readable = _python_dirs() + _roots(["/sys", f"/proc/{os.getpid()}"])
        sys.addaudithook(self._audit)

    def confine_files(self, writable: Any) -> None:
        """Let libraries that a candidate calls write beneath ``writable`` (and read there,
        besides where Python and the libraries live); nowhere else. The worker passes
        what ``fitness.boundary.confine`` gave the operating system."""
        self._writable = _roots(writable)

    # -- which code is the candidate's ----------------------------------------

    def _is_candidate(self, frame: Any) -> bool:
        return frame is not None and frame.f_code.co_filename in self.candidate_files

    def _origin(self, frame: Any) -> Any:
        """The nearest frame outside the standard library."""
        while frame is not None and _is_stdlib(frame.f_code.co_filename):
            frame = frame.f_back
        return frame

    def _below_candidate(self, frame: Any) -> bool:
        """Whether a candidate's frame is ``frame`` or any of its callers."""
        files = self.candidate_files
        while frame is not None:
            if frame.f_code.co_filename in files:
                return True
            frame = frame.f_back
        return False

    def _via(self, frame: Any) -> str:
        """The library ``frame`` belongs to, in words."""
        if frame is None:
            return "the standard library"
        return _package_of(frame.f_code.co_filename) or os.path.basename(frame.f_code.co_filename)

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
            if (event == "open" or event in _FS_EVENTS or event.startswith(_NETWORK_PREFIXES)) \
                    and self._below_candidate(origin):
                self._check_library(event, args, origin)
        finally:
            self._in_hook = False

    def _check_library(self, event: str, args: tuple, origin: Any) -> None:
        """``event`` asked for by a library while a candidate's frame is on the stack."""
        if event.startswith(_NETWORK_PREFIXES):
            self.refuse(f"use the network ({event}) through {self._via(origin)}")
        if event == "open":
            path, mode, flags = (tuple(args) + (None, None, 0))[:3]
            self._check_path(path, _writes(mode, flags), origin)
            return
        for index, write in _FS_EVENTS[event]:
            if index < len(args):
                self._check_path(args[index], write, origin)

    def _check_path(self, path: Any, write: bool, origin: Any) -> None:
        if path is None or isinstance(path, int):
            return  # a descriptor already open (its opening was checked), or the working directory
        try:
            name = os.fsdecode(path)
        except TypeError:
            return
        real = os.path.realpath(name)  # not cached: a link made since must be followed now
        if _beneath(real, self._writable):
            return
        if not write and (_beneath(real, self._readable)
                          or real in {os.path.realpath(f) for f in self.candidate_files}):
            return
        self.refuse(f"{'write' if write else 'read'} {name} through {self._via(origin)}")

    def _is_harness(self, frame: Any) -> bool:
        """Whether ``frame`` is the worker's own code (fitness/worker/, this module's room)."""
        return frame is not None and os.path.dirname(_real(frame.f_code.co_filename)) == os.path.dirname(_real(__file__))

    # -- the profile hook -------------------------------------------------------

    def _profile(self, frame: Any, event: str, arg: Any) -> None:
        # Called at every call of the forward: each attribute read here shows in the checks'
        # wall time (reading the callee's f_code at every call, not only the candidate's
        # calls, made the interpreter's forward 40% slower).
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
        if name in _IO_BUILTINS:
            self.refuse(f"call {module}.{name}")
        if top not in self._allowed_packages and top != "math":
            self.refuse(f"call {module}.{name}")

    def _check_python(self, filename: str, name: str) -> None:
        if filename in self.candidate_files:
            return
        if _package_of(filename) in self._allowed_packages:
            io = _io_module(filename)
            if io and name != "<module>" and name in _IO_ONLY.get(io, (name,)):
                self.refuse(f"call {name} from {io} (file or network I/O)")
            return
        if _is_stdlib(filename) and os.path.basename(filename) in _STDLIB_CALLABLE:
            return
        where = _package_of(filename) or os.path.basename(filename)
        self.refuse(f"call {name} from {where}")

    # -- while a kernel compiles --------------------------------------------------

    def on_candidate_code(self, callback: Any) -> CandidateCodeWatch:
        """Context in which the first start of any candidate function calls ``callback()``.

        While a worker compiles with the device lent out (``fitness.judge.lane``), only
        Triton's compiler may run; candidate code running there (a compile-time
        function, a hook) ends the loan. On Python 3.12 and later this costs one
        callback per code object (``sys.monitoring``, other code disabled at its
        first start); before, a profile hook sees every call.
        """
        return CandidateCodeWatch(self.candidate_files, callback)

    # -- running candidate code -------------------------------------------------

    def running(self, profile: bool = True) -> "_Running":
        """Context in which candidate code runs; ``profile`` also checks every call.

        Timed runs leave the profile hook off (it would be charged to the
        candidate's runtime); the audit hook stays on everywhere.
        """
        return _Running(self, self._profile if profile else None)


class _Running:
    """A plain class, not a generator context: it wraps every timed forward."""

    def __init__(self, guard: Guard, hook: Any) -> None:
        self.guard, self.hook = guard, hook

    def __enter__(self) -> Guard:
        self.guard.active = True
        if self.hook is not None:
            sys.setprofile(self.hook)
        return self.guard

    def __exit__(self, *exc: object) -> None:
        if self.hook is not None:
            sys.setprofile(None)
        self.guard.active = False
