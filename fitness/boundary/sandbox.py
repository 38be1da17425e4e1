"""The worker process as seen from the trusted side: start, talk, kill.

One ``WorkerProcess`` is one sandboxed Python process (see
``fitness.worker``), confined by the operating system from its start
(``fitness.boundary.confine``). A worker that crashes, hangs or is caught tampering is
killed, and the next request starts a fresh one.

A worker's files live in two directories named after the process that owns
it (``kevo-worker-PID-*`` in the temp folder: its scratch directory, which is
its ``TMPDIR`` and holds its log; ``kevo-spill-PID-*``: large outputs on their
way to the evaluator), removed when the worker is closed or its owner exits.
Those of an owner that was killed are removed by the next worker started on
the machine.
"""

from __future__ import annotations

import functools
import logging
import os
import pwd
import re
import secrets
import shutil
import signal
import subprocess
import sys
import sysconfig
import tempfile
import time
import weakref
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Callable

from fitness.boundary import confine, wire
from fitness.boundary.keys import without_secrets

log = logging.getLogger(__name__)

_PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])  # the folder that holds fitness/
# The packages of kevo a worker imports (tests/test_architecture.py pins its modules): all it may read of the checkout.
_WORKER_PACKAGES = ("fitness", "platforms")
# Where the environment says the GPU toolchain is (a CUDA or ROCm install, ptxas, libcuda): read wherever it is.
_TOOLCHAIN = ("CUDA_HOME", "CUDA_PATH", "ROCM_PATH", "TRITON_PTXAS_PATH", "TRITON_LIBCUDA_PATH", "TRITON_LIBDEVICE_PATH")
# kevo's temporary folders, named after the process that owns them: a worker's kevo-worker-<owner pid>-<random>
# and kevo-spill-<owner pid>-<random>, a capture's kevo-capture-<owner pid>-<random> (evolve.seeding.apart),
# a profile's kevo-profile-<pid>-, kevo-ncu-<pid>- and kevo-rocprof-<pid>- (fitness.profiling.candidate,
# platforms.profiling), and kevo apply's kevo-apply-<pid>- (evolve.models.apply). A process killed
# before its own cleanup (SIGKILL, or a SIGTERM that Python does not turn into an exception) leaves
# them; the next process that starts a worker removes those whose owner is gone.
_OWNED = re.compile(r"kevo-(?:worker|spill|capture|profile|ncu|rocprof|apply)-(\d+)-[^/]+")


#: The compile caches a worker keeps in its scratch directory (by variable, the folder there). Shared, one
#: candidate's file under a key another compiles would reach that one's verdict, or torch.compile's (the
#: incumbent's time): Triton's binaries and C modules, the kernels Triton takes in place of its own compile
#: (TRITON_OVERRIDE_DIR), Inductor's graphs and code. (CUDA's JIT cache is not: Triton and Inductor load cubins.)
OWN_CACHES = {"TRITON_CACHE_DIR": "triton", "TRITON_DUMP_DIR": "triton-dump", "TRITON_OVERRIDE_DIR": "triton-override",
              "TORCHINDUCTOR_CACHE_DIR": "inductor"}


def worker_environment(base: dict[str, str], extra: dict[str, str]) -> dict[str, str]:
    """``base`` without anything that looks like a secret, plus ``extra``.

    >>> env = worker_environment({"PATH": "/bin", "OPENAI_API_KEY": "sk-x", "HF_TOKEN": "t"}, {})
    >>> sorted(env)
    ['PATH', 'PYTHONPATH', 'PYTHONUNBUFFERED']
    """
    env = without_secrets(base)
    env.update(extra)
    path = env.get("PYTHONPATH", "")
    env["PYTHONPATH"] = _PACKAGE_ROOT + (os.pathsep + path if path else "")
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


def in_scratch(env: dict[str, str], scratch: str) -> dict[str, str]:
    """``env`` with a confined program's temporary files in its ``scratch`` directory, no bytecode written next
    to the libraries, and its compile caches there too, so that none is another's
    (``fitness.worker.harness.Harness.use_cache``)."""
    return dict(env, TMPDIR=scratch, PYTHONDONTWRITEBYTECODE="1",
                **{name: os.path.join(scratch, folder) for name, folder in OWN_CACHES.items()})


def confined_argv(policy: confine.Policy, program: list[str]) -> list[str]:
    """The command that runs ``program`` confined to ``policy`` (``fitness.boundary.confine``'s bootstrap)."""
    return [sys.executable, "-I", confine.__file__, policy.to_json(), "--", *program]


def worker_policy(scratch: str, spill: str, env: dict[str, str]) -> confine.Policy:
    """What a worker started with ``env`` may write and read (``fitness.boundary.confine``): it
    writes its ``scratch`` and ``spill`` directories and the compile caches; it reads all but
    /proc (there only its own files and the system's), /dev (only the nodes it opens), the
    user's home, kevo's checkout and this process's working directory, and beneath those
    only Python and its libraries, the GPU toolchain the environment names (``_TOOLCHAIN``,
    ``LD_LIBRARY_PATH``), the packages of kevo it imports and what it writes."""
    writable = confine.writable_dirs(scratch, spill, env)
    try:
        account = pwd.getpwuid(os.getuid()).pw_dir
    except KeyError:  # a user id with no account (a container's)
        account = ""
    hidden = ("/proc", "/dev", env.get("HOME", ""), os.path.expanduser("~"), account, _PACKAGE_ROOT, os.getcwd())
    kevo = tuple(os.path.join(_PACKAGE_ROOT, name) for name in _WORKER_PACKAGES)
    toolchain = [env.get(name, "") for name in _TOOLCHAIN] + env.get("LD_LIBRARY_PATH", "").split(os.pathsep)
    readable = (*_python_dirs(), *filter(None, toolchain), *kevo, *writable)
    return confine.Policy(writable, tuple(dict.fromkeys(hidden)), readable)


def _python_dirs() -> tuple[str, ...]:
    """Where this interpreter and its libraries live: its prefixes, its install paths, and the
    directories on ``sys.path`` but those in kevo's checkout or the working directory (a script's
    folder, a test's). A worker's ``sys.path`` is the same but for kevo's checkout."""
    own = (_PACKAGE_ROOT, os.path.realpath(os.getcwd()))
    paths = [p for p in sys.path if p and os.path.isdir(p)
             and not any(os.path.commonpath([os.path.realpath(p), d]) == d for d in own)]
    return (sys.prefix, sys.exec_prefix, sys.base_prefix, sys.base_exec_prefix,
            os.path.dirname(os.path.realpath(sys.executable)), *sysconfig.get_paths().values(), *paths)


def _spill_root() -> str | None:
    """Shared memory when it has room for large outputs, else the temp dir."""
    try:
        stat = os.statvfs("/dev/shm")
    except OSError:
        return None
    return "/dev/shm" if stat.f_bavail * stat.f_frsize > (8 << 30) else None


def process_alive(pid: int) -> bool:
    """Whether process ``pid`` exists on this machine (another user's counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process
    return True


@functools.cache
def _remove_leftovers() -> None:
    """Once per process: ``remove_orphaned_folders``."""
    remove_orphaned_folders()


def remove_orphaned_folders(owners: Sequence[int] = (), wait_s: float = 0.0, mine: bool = False) -> None:
    """Remove kevo's temporary folders whose owner is gone (a run killed with SIGKILL leaves
    them; a worker whose owner dies removes what it can, but its confinement keeps it from
    removing its own scratch directory). ``owners``: processes just killed (a driver's actors),
    waited for up to ``wait_s`` first, so that their folders go too. ``mine``: this process's
    own too (it is about to exit: a thread stopped mid-way, a capture cut short, left them)."""
    deadline = time.monotonic() + wait_s
    while any(process_alive(pid) for pid in owners) and time.monotonic() < deadline:
        time.sleep(0.05)
    roots = {tempfile.gettempdir(), "/dev/shm"}
    for root in roots:
        try:
            names = os.listdir(root)
        except OSError:
            continue
        for name in names:
            match = _OWNED.fullmatch(name)
            owner = int(match.group(1)) if match else 0
            if match and ((owner == os.getpid() and mine) or (owner != os.getpid() and not process_alive(owner))):
                shutil.rmtree(os.path.join(root, name), ignore_errors=True)


def _remove(*paths: str) -> None:
    for path in paths:
        shutil.rmtree(path, ignore_errors=True)


@functools.cache
def _say_confinement(in_force: str) -> None:
    """Once per process and kind: a worker confined less than fully says so."""
    if not in_force:
        log.warning("the evaluation worker did not say what confines it")
    elif "unavailable" in in_force or "open:" in in_force or in_force.startswith(("guard only", "none")):
        log.warning("the evaluation worker runs with less confinement than kevo asks for: %s "
                    "(docs/EVALUATION.md, 'Confinement by the operating system')", in_force)
    else:
        log.info("evaluation workers are confined: %s", in_force)


class WorkerGone(Exception):
    """The worker died, hung or broke protocol; ``status`` says which."""

    def __init__(self, status: str, reason: str) -> None:
        super().__init__(reason)
        self.status, self.reason = status, reason


class WorkerProcess:
    """A running worker and the pipes to it."""

    def __init__(self, platform_name: str, index: int, env_extra: dict[str, str],
                 startup_timeout: float, memory_limit: int = 0,
                 open_shared: Callable[[dict, Any, list, int], Any] | None = None) -> None:
        # open_shared(shared, dtype, shape, worker_pid): our copy of a device tensor the worker shared
        self.open_shared = open_shared  # how shared tensors are opened; the evaluator that adopts this worker sets its own
        _remove_leftovers()
        owner = os.getpid()
        self.workdir = tempfile.mkdtemp(prefix=f"kevo-worker-{owner}-")
        self.spill_dir = tempfile.mkdtemp(prefix=f"kevo-spill-{owner}-", dir=_spill_root())
        # gone when the worker is closed, or else when this process exits
        self._remove_files = weakref.finalize(self, _remove, self.workdir, self.spill_dir)
        self.log_path = os.path.join(self.workdir, "worker.log")
        self.log = open(self.log_path, "wb")
        env = in_scratch(worker_environment(dict(os.environ), env_extra), self.workdir)
        self.policy = policy = worker_policy(self.workdir, self.spill_dir, env)
        for path in policy.writable[2:]:
            try:
                os.makedirs(path, exist_ok=True)  # a cache the worker's toolchain would make
            except OSError:
                pass  # not ours to make: the worker cannot write there
        parent_read, child_write = os.pipe()
        child_read, parent_write = os.pipe()
        argv = confined_argv(policy, [sys.executable, "-m", "fitness.worker", str(child_read), str(child_write),
                                      platform_name, str(index), str(memory_limit), self.spill_dir, self.workdir])
        self.process = subprocess.Popen(
            argv,
            pass_fds=(child_read, child_write),
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            cwd=self.workdir,
        )
        os.close(child_read)
        os.close(child_write)
        self.read_fd, self.write_fd = parent_read, parent_write
        try:
            hello, _ = self._receive(startup_timeout)
        except WorkerGone as gone:
            self.stop()
            raise RuntimeError(f"the evaluation worker failed to start: {gone.reason}") from None
        self.device_name = hello.get("device_name", "")
        # what the operating system holds it to (fitness.boundary.confine), said by the worker itself
        self.confinement = str(hello.get("confinement", ""))
        _say_confinement(self.confinement)

    def alive(self) -> bool:
        return self.process.poll() is None

    def log_tail(self, limit: int = 2000) -> str:
        try:
            with open(self.log_path, "rb") as f:
                f.seek(0, os.SEEK_END)
                f.seek(max(0, f.tell() - limit))
                return f.read().decode(errors="replace").strip()
        except OSError:
            return ""

    def _death(self) -> WorkerGone:
        try:
            code = self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.kill()
            code = self.process.returncode
        if code is not None and code < 0:
            how = f"killed by {signal.Signals(-code).name}"
        else:
            how = f"exited with code {code}"
        tail = self.log_tail(600).splitlines()
        detail = f"; last output: {tail[-1][:200]}" if tail else ""
        return WorkerGone("crashed", f"worker process {how}{detail}")

    def _open(self, shared: dict, dtype: Any, shape: list) -> Any:
        if self.open_shared is None:
            raise ValueError("a shared device tensor where none was expected")
        return self.open_shared(shared, dtype, shape, self.process.pid)

    def _receive(self, timeout: float) -> tuple[dict[str, Any], list]:
        try:
            return wire.receive(self.read_fd, timeout, self.spill_dir, self._open)
        except wire.ChannelTimeout:
            self.kill()
            raise WorkerGone("timeout", f"no answer within {timeout:g} s; the worker was killed") from None
        except (wire.ChannelClosed, OSError):
            raise self._death() from None
        except ValueError as exc:
            self.kill()
            raise WorkerGone("forbidden", f"the worker sent a malformed message ({exc})") from None

    def request(self, message: dict[str, Any], timeout: float) -> tuple[dict[str, Any], list]:
        """Send one step and wait for its answer; raises ``WorkerGone``."""
        return self.answer(self.send(message), timeout)

    def send(self, message: dict[str, Any]) -> str:
        """Start one step; ``answer`` with what this returns waits for it (the worker
        works meanwhile). Raises ``WorkerGone``."""
        nonce = secrets.token_hex(16)
        try:
            wire.send(self.write_fd, {**message, "nonce": nonce})
        except OSError:
            raise self._death() from None
        return nonce

    def answer(self, nonce: str, timeout: float) -> tuple[dict[str, Any], list]:
        """The reply to the step ``send`` started; raises ``WorkerGone``."""
        reply, tensors = self._receive(timeout)
        if reply.get("nonce") != nonce:
            self.kill()
            raise WorkerGone("forbidden", "a message on the worker channel did not come from the harness")
        if reply.get("fatal"):
            self._reap()
        if reply.get("status") == "internal_error":
            raise RuntimeError(f"kevo's worker failed (a bug of kevo):\n{reply.get('reason')}")
        return reply, tensors

    def _reap(self) -> None:
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.kill()

    def kill(self) -> None:
        if self.process.poll() is None:
            try:
                os.killpg(self.process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.process.wait()

    def stop(self) -> None:
        """Kill the worker now and clean up after it."""
        self.kill()
        self.close()

    def close(self) -> None:
        for fd in (self.read_fd, self.write_fd):
            try:
                os.close(fd)
            except OSError:
                pass
        if self.process.poll() is None:
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.kill()
        self.log.close()
        self._remove_files()
