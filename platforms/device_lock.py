"""One timed window at a time on a GPU, whichever process times it.

Inside one process the timing lane (``fitness.judge.lane``) keeps a timed window
alone on the device. Other processes on the same GPU do not see that lane:
a second kevo run or sweep, or a capture timing eager and torch.compile'd
code for a seed (``evolve.seeding``, in a child process for a sweep's runs).
Two windows at once would each charge the other's kernels to their own
candidate. ``DeviceLock.exclusive()`` is an advisory file lock (``flock``)
named after the device's UUID, taken around every timed window: windows on
one GPU take turns across processes. Only windows take it, so checks and
compiles in one process still overlap another's window (the lane keeps them
apart inside a process).

The lock files live in ``$KEVO_LOCK_DIR``, else ``$XDG_CACHE_HOME/kevo/locks``,
else ``~/.cache/kevo/locks`` (one empty file per device, kept: like Triton's
cache, not in the temporary folder). Where none can be made (a read-only
home), windows go unlocked, as before.

A process holds a device's lock once: its threads take turns for it, and a
thread that holds it may take it again inside (a reference timed inside a
candidate's window), so the process never waits on itself.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

#: The environment variable naming the folder of lock files (read at call time).
LOCK_DIR_ENV = "KEVO_LOCK_DIR"


def cache_folder() -> Path:
    """kevo's folder in the user's cache: ``$XDG_CACHE_HOME/kevo``, else ``~/.cache/kevo``."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "kevo"


def lock_dir() -> Path:
    named = os.environ.get(LOCK_DIR_ENV)
    return Path(named).expanduser() if named else cache_folder() / "locks"


#: Per lock file: (this process's turn for it, [its descriptor while held, how deep it is held]).
_HELD: dict[str, tuple[threading.RLock, list]] = {}
_HELD_GUARD = threading.Lock()


class DeviceLock:
    """The timed-window lock of the device called ``name`` (its UUID, say)."""

    def __init__(self, name: str) -> None:
        self.name = re.sub(r"[^A-Za-z0-9_.-]", "_", name)[:120] or "device"
        self.waited_s = 0.0  # time spent waiting for other processes' windows

    @property
    def path(self) -> Path:
        return lock_dir() / f"{self.name}.lock"

    @contextlib.contextmanager
    def exclusive(self) -> Iterator[None]:
        """The device's windows to this caller until the block ends."""
        key = self.acquire()
        try:
            yield
        finally:
            self.release(key)

    def acquire(self) -> str:
        """Take this process's turn (its threads one at a time; again inside: deeper) and, at the
        first depth, the file lock; returns the key ``release`` takes."""
        path = str(self.path)
        with _HELD_GUARD:
            turn, state = _HELD.setdefault(path, (threading.RLock(), [None, 0]))
        turn.acquire()
        try:
            if state[1] == 0:
                state[0] = self._take(Path(path))
        except BaseException:
            turn.release()
            raise
        state[1] += 1
        return path

    def release(self, key: str) -> None:
        """One depth of ``acquire`` given back; the file lock with the last."""
        turn, state = _HELD[key]
        state[1] -= 1
        if state[1] == 0 and state[0] is not None:
            os.close(state[0])  # closing the descriptor releases the lock
            state[0] = None
        turn.release()

    def _take(self, path: Path) -> int | None:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            log.debug("no device lock at %s (%s): the window goes unlocked", path, exc)
            return None
        started = time.monotonic()
        fcntl.flock(fd, fcntl.LOCK_EX)
        self.waited_s += time.monotonic() - started
        return fd


class Turn:
    """A timed window's hold of its device's lock, which it may give back for a while and take
    again (``release``, then ``acquire``): a window whose lane hold turns shared while it judges a
    run (``fitness.judge.lane.Exclusive.sharing``) gives its turn back too, or another window that took
    the lane meanwhile would wait for this turn while this window waits for the lane."""

    def __init__(self, lock: DeviceLock | None) -> None:
        self._lock, self._keys = lock, []

    def acquire(self) -> None:
        if self._lock is not None:
            self._keys.append(self._lock.acquire())

    def release(self) -> None:
        if self._keys:
            self._lock.release(self._keys.pop())

    def __enter__(self) -> "Turn":
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def window(platform: Any) -> Turn:
    """Around a timed window on ``platform``'s device: its ``DeviceLock`` held, if it has one."""
    return Turn(platform.device_lock())
