"""The worker's time step: a window of timed runs, every one on new inputs, some handed over as they end.

Run ``i`` draws its inputs from ``base_seed + i`` (warm-up runs from seeds
past the window), so no two timed runs see the same data and a kernel that
memoises answers gains nothing. Once the window's length is known, ``checks``
of its runs are drawn uniformly with a secret seed, besides the last, so a
kernel cannot know which runs are judged. Each of those runs' outputs goes to
the evaluator right after the run, outside the timed region, and the worker
waits until the evaluator has judged them (``Harness._hand_over``): the worker
never holds more than one run's outputs.

Every run of the window, and every warm-up run after the first (which may still
compile or autotune), must launch as many Triton kernels: a kernel that does the
work of several runs in one and skips others (batch-and-skip), or that skips
now and then and returns an old output, launches fewer on the runs it skips, and
is refused on the first such run whether or not that run is checked.

``TimedWindow`` gives ``platforms``' timing protocol its callbacks (``prepare``,
``run``, ``finish``, ``window``) and makes the step's reply (``protocol.Timed``).
``apart`` keeps each draw's inputs off the previous draw's addresses.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import Any

from fitness.boundary.protocol import Timed
from fitness.refusal import Refusal
from fitness.result import Status


class TimedWindow:
    """One time step's runs, given what the worker does for them:

    ``draw(seed)``: the inputs drawn from ``seed`` and their witnesses, with the
    memory poisoned; ``forward(args, i)``: run ``i``'s guarded forward; ``changed(witnesses,
    args)``: the first input the candidate changed, or None; ``hand_over(run, seed,
    outputs)``: send a checked run's outputs and wait for the evaluator's verdict; ``launched()``:
    the Triton launches of the last forward.
    """

    def __init__(self, base_seed: int, check_seed: int, checks: int, draw: Callable[[int], tuple[list, list]],
                 forward: Callable[[list, int], Any], changed: Callable[[list, list], int | None],
                 hand_over: Callable[[int, int, Any], None], launched: Callable[[], int] = lambda: 1) -> None:
        self.base_seed, self.checks = base_seed, checks
        self.draw, self.forward, self.changed, self.hand_over = draw, forward, changed, hand_over
        self.launched = launched
        self.launches: tuple[str, int] | None = None  # (the first run compared, its launches)
        self.rng = random.Random(check_seed)
        self.chosen: set[int] = set()  # the runs handed over
        self.witnesses: list = []  # of the current run's inputs
        self.clock = time.perf_counter
        # where the step's wall time goes (seconds), for kevo's own breakdowns: never judged
        self.phases = dict.fromkeys(("warm-up", "prepare", "input check", "hand-over"), 0.0)
        self.started, self.window_at = self.clock(), 0.0

    def seed_of(self, i: int) -> int:
        return self.base_seed + i if i >= 0 else self.base_seed + (1 << 20) - i

    def window(self, n_runs: int) -> None:
        """The window has ``n_runs`` runs: draw the checked ones."""
        self.window_at = self.clock()
        self.chosen.update(self.rng.sample(range(n_runs), min(self.checks, n_runs)))
        self.chosen.add(n_runs - 1)

    def prepare(self, i: int) -> list:
        t0 = self.clock()
        args, self.witnesses = self.draw(self.seed_of(i))
        if i >= 0:
            self.phases["prepare"] += self.clock() - t0
        return args

    def run(self, i: int, args: list) -> Any:
        return self.forward(args, i)

    def finish(self, i: int, args: list, outputs: Any) -> None:
        # outside the timed region: the input check and the hand-over are not the kernel's time
        t0 = self.clock()
        changed = self.changed(self.witnesses, args)
        self.witnesses = []
        if changed is not None:
            where = where_of(i)
            raise Refusal(Status.MUTATED_INPUT, f"forward changed input {changed} in {where}")
        if i != -1:  # the first warm-up run may still compile or autotune
            self._same_launches(where_of(i), self.launched())
        t1 = self.clock()
        if i in self.chosen:
            if isinstance(args, list):
                args.clear()  # the run's inputs go before its outputs are judged (fitness.judge.memory_plan)
            self.hand_over(i, self.seed_of(i), outputs)
        if i >= 0:
            self.phases["input check"] += t1 - t0
            self.phases["hand-over"] += self.clock() - t1

    def _same_launches(self, where: str, n: int) -> None:
        if self.launches is None:
            self.launches = (where, n)
        elif n != self.launches[1]:
            first, m = self.launches
            raise Refusal(Status.FORBIDDEN, f"{where} launched {n} Triton kernel(s), {first} {m}: every run of the "
                                            "timing window must launch as many (a run that skips work launches fewer)")

    def reply(self, timing: Any) -> Timed:
        """The step's reply, from ``timing`` (a ``platforms.Timing``)."""
        end = self.clock()
        window_at = self.window_at or end
        self.phases["warm-up"] = window_at - self.started
        self.phases["window"] = end - window_at
        self.phases["trace"] = timing.trace_s  # inside the window: the device trace's own cost
        for part, seconds in zip(("start", "stop", "read"), timing.trace_parts_s):
            self.phases[f"trace: {part}"] = seconds
        return Timed(timing.runs_ms, timing.wall_ms, timing.overhead_ms, timing.device_ms, sorted(self.chosen),
                     self.phases)


def where_of(i: int) -> str:
    return f"timed run {i}" if i >= 0 else f"warm-up run {-i}"


def addresses(args: list) -> set[int]:
    """Where the tensors among ``args`` start (empty ones have no address)."""
    return {x.data_ptr() for x in args if hasattr(x, "data_ptr") and x.numel() > 0}


def apart(draw: Callable[[], list], previous: set[int]) -> list:
    """``draw()``'s inputs, none of them where one of the ``previous`` draw's started.

    The allocator hands a freed block out again, so fresh inputs tend to land where the
    last ones were: a kernel that keys a cache on an input's address would take new
    data for the last. A draw that lands there is held while the same inputs are drawn
    again, which cannot take the held blocks; each draw held takes at least one of the
    previous addresses, so ``len(previous)`` redraws at most (one, nearly always: the
    memory plan counts two input sets while drawing, ``fitness.judge.memory_plan``).
    """
    held = []
    args = draw()
    while addresses(args) & previous:
        held.append(args)
        args = draw()
    return args
