"""The checked timed runs of one time step, most of them judged after the timing lane is released.

A timed window's checked runs hand their outputs over as they end; the
evaluator takes its own copy on the device (``Platform.import_tensor``: the
worker can no longer touch it) and answers at once. Judging a run (the
reference's outputs for its seed, and the comparison) is device work that
needs no timing of its own, so up to ``keep`` runs' copies are set aside and
judged once the window is over, with the device shared again
(``fitness.judge.lane``): the candidate holds the lane for little more than its
timing window. ``keep`` follows the memory: as many output sets as fit in
``SET_ASIDE_BYTES`` (the memory plan counts them, ``fitness.judge.prepared``), so a
problem whose outputs are gigabytes keeps none and judges every run as it
arrives. A run that arrives when ``keep`` are set aside is judged there and
then, and a wrong one ends the window (``Stop``). Judged there, it still
needs no timing: the window's hold of the lane is shared meanwhile
(``sharing``, ``fitness.judge.lane.Exclusive.sharing``), so other evaluations'
checks go on while the worker waits for the answer, and the lane is the
window's again before the worker's next run.

The verdict is the same as if every run had been judged on arrival: the
first wrong run in run order decides it, and the largest difference over the
runs judged is reported.

>>> window = WindowJudge(100, keep=1, judge=lambda seed, outputs: Comparison("accepted", 0.0))  # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

from fitness.boundary.protocol import Answer, Continue, Stop, TimedRun
from fitness.boundary.sandbox import WorkerGone
from fitness.judge.compare import Comparison
from fitness.result import Status

#: Device memory an evaluator may hold for set-aside outputs (per evaluator, i.e. per slot).
SET_ASIDE_BYTES = 2 << 30
#: At most this many runs set aside (a time step checks 11 runs unless every run is checked).
MAX_SET_ASIDE = 16


def set_aside_runs(output_bytes: int) -> int:
    """How many checked runs' outputs of ``output_bytes`` each are set aside at most."""
    return min(MAX_SET_ASIDE, SET_ASIDE_BYTES // max(1, output_bytes))


class WindowJudge:
    """The judge of one time step's checked runs, drawn from ``base_seed + run``.

    ``hand(handed, outputs)`` is the channel's interim callback; ``finish()``
    judges what was set aside (call it with the device shared, after the
    window); then ``failure()`` and ``worst()`` give the verdict.
    ``judge(seed, outputs)`` judges one run's outputs; ``sharing()`` is entered
    around a run judged as it arrives (the window's ``Exclusive.sharing``).
    """

    def __init__(self, base_seed: int, keep: int, judge: Callable[[int, list], Comparison]) -> None:
        self.base_seed, self.keep, self._judge = base_seed, keep, judge
        self.sharing: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext
        self.judged: list[int] = []  # the runs handed over, in order
        self._kept: list[tuple[int, list]] = []
        self._verdicts: dict[int, Comparison] = {}

    def hand(self, handed: TimedRun, outputs: list) -> Answer:
        """A checked run's outputs (this process's own copy), as the run ends. A forged
        hand-over raises ``WorkerGone``."""
        if (not isinstance(handed, TimedRun) or (self.judged and handed.run <= self.judged[-1])
                or handed.seed != self.base_seed + handed.run):
            raise WorkerGone(Status.FORBIDDEN, "the worker handed over a timed run on inputs it was not given")
        self.judged.append(handed.run)
        if len(self._kept) < self.keep:
            self._kept.append((handed.run, outputs))
            return Continue()
        with self.sharing():
            verdict = self._verdicts[handed.run] = self._judge(handed.seed, outputs)
        return Continue() if verdict.status == "accepted" else Stop()

    @property
    def set_aside(self) -> int:
        """Runs waiting for ``finish``."""
        return len(self._kept)

    def finish(self) -> None:
        """Judge the runs set aside, in run order, up to the first wrong one (a later run
        judged wrong on arrival is not reached then: the earlier failure decides)."""
        kept, self._kept = self._kept, []
        for run, outputs in kept:
            if any(r < run and v.status != "accepted" for r, v in self._verdicts.items()):
                break
            self._verdicts[run] = self._judge(self.base_seed + run, outputs)
            if self._verdicts[run].status != "accepted":
                break

    def failure(self) -> tuple[int, Comparison] | None:
        """(run, verdict) of the first run in run order judged wrong, or None."""
        wrong = sorted((run, v) for run, v in self._verdicts.items() if v.status != "accepted")
        return wrong[0] if wrong else None

    def worst(self) -> float:
        """The largest difference over the runs judged."""
        return max((v.max_abs_diff for v in self._verdicts.values()), default=0.0)

    @property
    def checked(self) -> int:
        """Runs judged so far."""
        return len(self._verdicts)
