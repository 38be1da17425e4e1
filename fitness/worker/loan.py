"""The worker's side of a compile's loan: the device's timing lane lent out while Triton compiles.

``fitness.judge.lane`` holds the evaluator's side. A load or a call step may lend the
lane (``Load.lend``, ``Call.lend``): compiling is host work, and a timing of
another evaluator on the device need not wait for it. The worker tells the
evaluator ``Compiling`` when a loan starts and ``Compiled`` when it ends
(``fitness.boundary.protocol``), waiting for its word each time.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from fitness.boundary.protocol import Compiled, Compiling
from fitness.worker.guard import Guard
from fitness.worker.instrument import same_hooks, triton_hooks


class CompileLoan:
    """The loans of one worker: ``tell(message)`` sends ``Compiling`` or ``Compiled`` to the
    evaluator and waits for its answer; ``hooks`` are Triton's hooks as the worker found
    them; ``own_threads`` the worker's own threads (the harness's, and the parent watch)."""

    def __init__(self, platform: Any, guard: Guard, hooks: tuple, own_threads: set[int],
                 tell: Callable[[Compiling | Compiled], None]) -> None:
        self.platform, self.guard, self.hooks, self.own_threads, self.tell = platform, guard, hooks, own_threads, tell
        self.lending = False  # whether this step may lend the device out while a kernel compiles
        self.lent_s = 0.0  # seconds the device was lent out in this step (the evaluator keeps its own count)

    def start_step(self, lend: bool) -> None:
        """A new step, which may lend the lane or not."""
        self.lending, self.lent_s = lend, 0.0

    @contextlib.contextmanager
    def compiling(self) -> Iterator[None]:
        """Around one Triton compile: lend the device's lane out while it runs.

        The lane is lent only once this worker's device work so far has
        finished, and taken back (the evaluator waits for any timing in
        progress) before anything else of the candidate's runs: the first start
        of candidate code inside the compile (a compile-time function, a hook)
        ends the loan. A step that holds the device to itself (timing) never
        lends it; nor does a worker whose Triton hooks the candidate has
        changed, or while another thread runs Python (one of the candidate's
        could launch work while the lane is lent).
        """
        if not self.lending or not same_hooks(self.hooks, triton_hooks()) or self._other_threads():
            yield
            return
        self.platform.synchronize()
        started = time.monotonic()
        self.tell(Compiling())
        lent = True

        def take_back() -> None:
            nonlocal lent
            if lent:
                lent = False
                self.lent_s += time.monotonic() - started
                self.tell(Compiled())

        self.lending = False  # one loan at a time
        try:
            with self.guard.on_candidate_code(take_back):
                yield
        finally:
            take_back()
            self.lending = True

    def _other_threads(self) -> bool:
        """Whether a thread besides this one and the worker's own has Python frames."""
        return bool(set(sys._current_frames()) - self.own_threads - {threading.get_ident()})
