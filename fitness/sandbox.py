"""The worker process as seen from the trusted side: start, talk, kill.

One ``WorkerProcess`` is one sandboxed Python process (see
``fitness.worker``). A worker that crashes, hangs or is caught tampering is
killed, and the next request starts a fresh one.
"""

from __future__ import annotations

import logging
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable

from fitness import wire

log = logging.getLogger(__name__)

# Environment variables whose names say they hold a secret never reach a worker.
_SECRET_NAME = re.compile(
    r"(KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|AUTH|COOKIE|SESSION|PRIVATE|SIGNATURE)",
    re.IGNORECASE,
)
_SECRET_PREFIXES = (
    "OPENAI_", "ANTHROPIC_", "AZURE_", "AWS_", "GOOGLE_", "GEMINI_", "VERTEX", "COHERE_",
    "MISTRAL_", "GROQ_", "TOGETHER", "HF_", "HUGGING", "LITELLM_", "DEEPSEEK_", "XAI_",
    "OPENROUTER_", "FIREWORKS_", "REPLICATE_", "WANDB_", "GITHUB_", "GH_", "SSH_", "GPG_",
)
_PACKAGE_ROOT = str(Path(__file__).resolve().parents[1])


def worker_environment(base: dict[str, str], extra: dict[str, str]) -> dict[str, str]:
    """``base`` without anything that looks like a secret, plus ``extra``.

    >>> env = worker_environment({"PATH": "/bin", "OPENAI_API_KEY": "sk-x", "HF_TOKEN": "t"}, {})
    >>> sorted(env)
    ['PATH', 'PYTHONPATH']
    """
    env = {
        name: value
        for name, value in base.items()
        if not _SECRET_NAME.search(name) and not name.upper().startswith(_SECRET_PREFIXES)
    }
    env.update(extra)
    path = env.get("PYTHONPATH", "")
    env["PYTHONPATH"] = _PACKAGE_ROOT + (os.pathsep + path if path else "")
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


def _spill_root() -> str | None:
    """Shared memory when it has room for large outputs, else the temp dir."""
    try:
        stat = os.statvfs("/dev/shm")
    except OSError:
        return None
    return "/dev/shm" if stat.f_bavail * stat.f_frsize > (8 << 30) else None


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
        self._open_shared = open_shared
        parent_read, child_write = os.pipe()
        child_read, parent_write = os.pipe()
        self.log = tempfile.NamedTemporaryFile(prefix="kevo-worker-", suffix=".log", delete=False)
        self.workdir = tempfile.mkdtemp(prefix="kevo-worker-")
        self.spill_dir = tempfile.mkdtemp(prefix="kevo-spill-", dir=_spill_root())
        argv = [sys.executable, "-m", "fitness.worker", str(child_read), str(child_write),
                platform_name, str(index), str(memory_limit), self.spill_dir]
        self.process = subprocess.Popen(
            argv,
            pass_fds=(child_read, child_write),
            env=worker_environment(dict(os.environ), env_extra),
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
            raise RuntimeError(f"the evaluation worker failed to start: {gone.reason}") from None
        self.device_name = hello.get("device_name", "")

    def alive(self) -> bool:
        return self.process.poll() is None

    def log_tail(self, limit: int = 2000) -> str:
        try:
            with open(self.log.name, "rb") as f:
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
        if self._open_shared is None:
            raise ValueError("a shared device tensor where none was expected")
        return self._open_shared(shared, dtype, shape, self.process.pid)

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
        try:
            os.unlink(self.log.name)
        except OSError:
            pass
        self.log.close()
        shutil.rmtree(self.spill_dir, ignore_errors=True)
        shutil.rmtree(self.workdir, ignore_errors=True)
