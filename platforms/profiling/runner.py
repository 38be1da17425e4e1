"""Running a profiler under a hard timeout, and the failures a profiler can have.

Every tool call goes through ``run_tool``: its own process group, killed
whole when the time is up (rocprofv3 is known to hang on some counter sets,
and a hung profiler must not hang the search), or when the process that runs
it ends its work (``stop_tools``: an actor closing with a profile in flight
stops the tool, so that the profile's temporary folder goes with it).
"""

from __future__ import annotations

import dataclasses
import os
import re
import signal
import subprocess
import threading
import time

_running: set[subprocess.Popen] = set()  # the tool calls in flight in this process (run_tool)
_stopped: set[int] = set()  # the pids stop_tools killed
_lock = threading.Lock()


class ProfilerFailure(Exception):
    """A known failure of a profiler tool (missing, timed out, failed, unreadable output)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class ProfileParseError(ValueError):
    """A profiler's output is not in any format kevo reads; the message says what was expected."""


@dataclasses.dataclass(frozen=True)
class ToolRun:
    """A finished tool call."""

    argv: list[str]
    returncode: int
    stdout: str
    stderr: str
    seconds: float


def run_tool(argv: list[str], env: dict[str, str] | None, timeout_s: float, cwd: str | None = None,
             check: bool = True) -> ToolRun:
    """Run ``argv``; raise ``ProfilerFailure`` on a timeout, a missing binary or (``check``) a nonzero exit."""
    name = os.path.basename(argv[0])
    if timeout_s <= 0:
        raise ProfilerFailure(f"no time left to run {name} (the profile's timeout is spent)")
    start = time.monotonic()
    try:
        process = subprocess.Popen(argv, env=env, cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, start_new_session=True, text=True, errors="replace")
    except OSError as exc:
        raise ProfilerFailure(f"cannot run {argv[0]}: {exc.strerror or exc}") from None
    with _lock:
        _running.add(process)
    try:
        stdout, stderr = process.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        _kill_group(process)
        raise ProfilerFailure(f"{name} did not finish within {timeout_s:g} s and was killed") from None
    finally:
        with _lock:
            _running.discard(process)
            stopped = process.pid in _stopped
            _stopped.discard(process.pid)
    if stopped:
        raise ProfilerFailure(f"{name} was stopped: the work it profiled for has ended")
    run = ToolRun(list(argv), process.returncode, stdout, stderr, time.monotonic() - start)
    if check and run.returncode != 0:
        raise ProfilerFailure(f"{name} exited with code {run.returncode}: {error_line(run)}")
    return run


def stop_tools() -> int:
    """Kill every tool call in flight in this process (each whole process group); each raises
    ``ProfilerFailure`` in the thread that made it. How many there were."""
    with _lock:
        running = list(_running)
        _stopped.update(p.pid for p in running)
    for process in running:
        if process.returncode is not None:  # already ended (and reaped): its pid may be another's now
            continue
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return len(running)


def _kill_group(process: subprocess.Popen) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    process.communicate()


_ERROR = re.compile(r"error|ERR_|fail|denied|permission|exceeds", re.IGNORECASE)


def error_line(run: ToolRun, limit: int = 300) -> str:
    """The line of a failed run that most likely says why (an error line, else the last line), and
    the profiled program's own last line where the tool's line only says that the program failed.

    >>> error_line(ToolRun([], 1, "", "profile_target: no candidate file x\\n==ERROR== The application returned "
    ...                    "an error code (2).\\n", 1.0))
    '==ERROR== The application returned an error code (2). (the program: profile_target: no candidate file x)'
    """
    lines = [line.strip() for line in (run.stderr + "\n" + run.stdout).splitlines() if line.strip()]
    if not lines:
        return "no output"
    chosen = next((line for line in lines if _ERROR.search(line)), lines[-1])
    own = [line for line in lines if not line.startswith("==")]  # ncu's and rocprof's lines start with ==
    if chosen.startswith("==") and own:
        return f"{chosen[:limit]} (the program: {own[-1][:limit]})"
    return chosen[:limit]


_VERSION = re.compile(r"(\d+\.\d+(?:\.\d+)*)")


def version_output(argv: list[str], timeout_s: float = 30.0) -> str:
    """What ``argv`` (e.g. ``ncu --version``) prints; empty when it cannot run."""
    try:
        run = run_tool(argv, None, timeout_s, check=False)
    except ProfilerFailure:
        return ""
    return run.stdout + "\n" + run.stderr


def parse_version(text: str, pattern: re.Pattern[str] = _VERSION) -> str:
    """The first version number in ``text`` (group 1 of ``pattern``), or ``"unknown"``."""
    match = pattern.search(text)
    return match.group(1) if match else "unknown"
