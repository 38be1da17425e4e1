"""One timing lane per device: timing has the device to itself, checking shares it.

Several evaluators on one GPU (threads of one Ray actor) compile and check
candidates at the same time, but a timed window must see no other work on
the device, or the neighbours' kernels would be charged to the candidate.
``TimingLane`` is a readers-writer lock that prefers the writer: ``shared()``
around checking steps, ``exclusive()`` around timing. Once a timing waits, no
new check starts, so a timing waits at most for the checks already running.
It also keeps how long the lane was held exclusively (the share of wall time
the device spent timing: how busy the lane is).

A timing's hold can turn shared for a while (``Exclusive.sharing``): a timed
run judged as it ends (``fitness.judge.window_judge``) is device work but no
timing, so checks may run beside it; the window takes the lane back before
its next run, once the checks that came in meanwhile are over.

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
from typing import Any


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
    def exclusive(self) -> Iterator["Exclusive"]:
        """The device to itself: a timed window. What it yields can share the device for a
        while in the middle (``Exclusive.sharing``): judging a timed run needs no timing."""
        window = Exclusive(self)
        window.take()
        try:
            yield window
        finally:
            window.give_back(to_reader=False)
        with self._cond:
            self.timings += 1

    def _take_exclusive(self) -> float:
        with self._cond:
            self._writers_waiting += 1
            try:
                while self._writer or self._readers:
                    self._cond.wait()
            finally:
                self._writers_waiting -= 1
            self._writer = True
        return time.monotonic()

    def _give_back_exclusive(self, since: float, to_reader: bool) -> None:
        with self._cond:
            self.exclusive_s += time.monotonic() - since
            self._writer = False
            self._readers += 1 if to_reader else 0
            self._cond.notify_all()

    def stats(self) -> dict[str, float]:
        """Seconds since creation, seconds timing, and the busy share."""
        wall = time.monotonic() - self.created
        return {"wall_s": wall, "timing_s": self.exclusive_s, "timings": self.timings,
                "busy_share": self.exclusive_s / wall if wall > 0 else 0.0}


class Exclusive:
    """A timed window's hold of its lane. ``sharing()`` turns it into a shared hold for the
    block (the window's device work that is not timing: judging a run as it ends) and takes
    the lane to itself again after, waiting for the checks that started meanwhile; other
    timings waiting may go first. Only the exclusive stretches count as the lane busy."""

    def __init__(self, lane: TimingLane) -> None:
        self._lane, self._since = lane, 0.0

    def take(self) -> None:
        self._since = self._lane._take_exclusive()

    def give_back(self, to_reader: bool) -> None:
        self._lane._give_back_exclusive(self._since, to_reader)

    @contextlib.contextmanager
    def sharing(self, beside: Any = None) -> Iterator[None]:
        """``beside``: another hold the window keeps with the lane (the device's lock between processes,
        ``platforms.device_lock.Turn``), given back first and taken again after the lane: a window that
        took the lane meanwhile must not wait for it while this one waits for the lane."""
        if beside is not None:
            beside.release()
        self.give_back(to_reader=True)  # at once: no other timing can come in between
        try:
            yield
        finally:
            self._lane._release_shared()
            self.take()
            if beside is not None:
                beside.acquire()  # in the order every window takes them: the lane, then the device's lock


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


def device_alone(lane: "TimingLane | NoLane", platform: Any) -> Callable[[], contextlib.AbstractContextManager]:
    """A factory for holding the device alone outside a timed window (a profile, the peaks): ``lane``
    held exclusively, then ``platform``'s lock between processes (``platforms.device_lock``), in the
    order every timed window takes them."""
    from platforms.device_lock import window

    return both(lane.exclusive, lambda: window(platform))


class NoLane:
    """The lane of an evaluator alone on its device: nothing to wait for."""

    @contextlib.contextmanager
    def shared(self) -> Iterator[Hold]:
        hold = Hold()
        hold.acquire()
        yield hold

    @contextlib.contextmanager
    def exclusive(self) -> Iterator["NoLane"]:
        yield self

    @contextlib.contextmanager
    def sharing(self, beside: Any = None) -> Iterator[None]:
        yield
