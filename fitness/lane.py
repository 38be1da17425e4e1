"""One timing lane per device: timing has the device to itself, checking shares it.

Several evaluators on one GPU (threads of one Ray actor) compile and check
candidates at the same time, but a timed window must see no other work on
the device, or the neighbours' kernels would be charged to the candidate.
``TimingLane`` is a readers-writer lock that prefers the writer: ``shared()``
around checking steps, ``exclusive()`` around timing. Once a timing waits, no
new check starts, so a timing waits at most for the checks already running.
It also keeps how long the lane was held exclusively (the share of wall time
the device spent timing: how busy the lane is).

A check's hold can be given back while its worker compiles a kernel
(``Hold.release()``, then ``Hold.acquire()``): compiling is host work, and a timing that waited for every
compile in flight would serialise the compiles of all slots behind it. The
worker makes sure the device is idle on its side before it asks.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator


class TimingLane:
    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._readers = 0
        self._writer = False
        self._writers_waiting = 0
        self.created = time.monotonic()
        self.exclusive_s = 0.0  # total time timing held the lane
        self.timings = 0

    @contextlib.contextmanager
    def shared(self) -> Iterator["Hold"]:
        """Device work that may overlap other checks but never a timing."""
        hold = Hold(self._acquire_shared, self._release_shared)
        hold.acquire()
        try:
            yield hold
        finally:
            if hold.held:
                hold.release()

    def _acquire_shared(self) -> None:
        with self._cond:
            while self._writer or self._writers_waiting:
                self._cond.wait()
            self._readers += 1

    def _release_shared(self) -> None:
        with self._cond:
            self._readers -= 1
            if self._readers == 0:
                self._cond.notify_all()

    @contextlib.contextmanager
    def exclusive(self) -> Iterator[None]:
        """The device to itself: a timed window."""
        with self._cond:
            self._writers_waiting += 1
            try:
                while self._writer or self._readers:
                    self._cond.wait()
            finally:
                self._writers_waiting -= 1
            self._writer = True
        started = time.monotonic()
        try:
            yield
        finally:
            with self._cond:
                self.exclusive_s += time.monotonic() - started
                self.timings += 1
                self._writer = False
                self._cond.notify_all()

    def stats(self) -> dict[str, float]:
        """Seconds since creation, seconds timing, and the busy share."""
        wall = time.monotonic() - self.created
        return {"wall_s": wall, "timing_s": self.exclusive_s, "timings": self.timings,
                "busy_share": self.exclusive_s / wall if wall > 0 else 0.0}


class Hold:
    """One shared hold of a lane, which can be released and taken again (a compile's loan);
    the lane hands it how to take and give back a share of itself."""

    def __init__(self, take: Callable[[], None] | None = None, give_back: Callable[[], None] | None = None) -> None:
        self._take, self._give_back = take, give_back
        self.held = False

    def acquire(self) -> None:
        if self._take is not None:
            self._take()
        self.held = True

    def release(self) -> None:
        if self._give_back is not None:
            self._give_back()
        self.held = False


def both(first: Callable[[], contextlib.AbstractContextManager],
         then: Callable[[], contextlib.AbstractContextManager]) -> Callable[[], contextlib.AbstractContextManager]:
    """A context manager factory that enters ``first()`` then ``then()``, and leaves them in reverse."""

    @contextlib.contextmanager
    def entered() -> Iterator[None]:
        with first(), then():
            yield

    return entered


class NoLane:
    """The lane of an evaluator alone on its device: nothing to wait for."""

    @contextlib.contextmanager
    def shared(self) -> Iterator[Hold]:
        hold = Hold()
        hold.acquire()
        yield hold

    @contextlib.contextmanager
    def exclusive(self) -> Iterator[None]:
        yield
