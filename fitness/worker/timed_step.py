"""The worker's time step: a window of timed runs, every one on new inputs, some handed over as they end.

Run ``i`` draws its inputs from ``base_seed + i`` (warm-up runs from seeds
past the window), so no two timed runs see the same data and a kernel that
memoises answers gains nothing. Once the window's length is known, ``checks``
of its runs are drawn uniformly with a secret seed, besides the last, so a
kernel cannot know which runs are judged. Each of those runs' outputs goes to
the evaluator right after the run, outside the timed region, and the worker
waits until the evaluator has judged them (``Harness._hand_over``): the worker
never holds more than one run's outputs.

``TimedWindow`` gives ``platforms``' timing protocol its callbacks (``prepare``,
``run``, ``finish``, ``window``) and makes the step's reply (``protocol.Timed``).
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
    outputs)``: send a checked run's outputs and wait for the evaluator's verdict.
    """

    def __init__(self, base_seed: int, check_seed: int, checks: int, draw: Callable[[int], tuple[list, list]],
                 forward: Callable[[list, int], Any], changed: Callable[[list, list], int | None],
                 hand_over: Callable[[int, int, Any], None]) -> None:
        self.base_seed, self.checks = base_seed, checks
        self.draw, self.forward, self.changed, self.hand_over = draw, forward, changed, hand_over
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
            where = f"timed run {i}" if i >= 0 else "a warm-up run"
            raise Refusal(Status.MUTATED_INPUT, f"forward changed input {changed} in {where}")
        t1 = self.clock()
        if i in self.chosen:
            if isinstance(args, list):
                args.clear()  # the run's inputs go before its outputs are judged (fitness.judge.memory_plan)
            self.hand_over(i, self.seed_of(i), outputs)
        if i >= 0:
            self.phases["input check"] += t1 - t0
            self.phases["hand-over"] += self.clock() - t1

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
