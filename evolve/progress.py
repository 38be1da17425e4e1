"""The live progress line of ``kevo run`` and ``kevo resume``, and ``kevo sweep``'s lines, on stderr.

On a terminal it is one line redrawn in place (rich); otherwise (a log file,
CI) a line is written at the first result, at every new best kernel and at
most every ``interval_s`` seconds besides, so logs stay short. A sweep shows
each run's line in turn, and one line for how each run ended; runs that go
side by side write plain lines, each named after its run.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from rich.console import Console
from rich.live import Live
from rich.text import Text

from evolve.config import Config
from evolve.search.population import Candidate
from evolve.report import format_counts
from evolve.report_sweep import Outcome
from evolve.session import Observer
from evolve.sweep import SweepObserver
from evolve.sweep_file import Entry
from population_store import PENDING, RunStore


class Progress(Observer):
    """Shows evaluations, the best runtime and speedup, status counts and evaluations/s."""

    def __init__(self, console: Console, interval_s: float = 10.0, label: str = "", live: bool = True) -> None:
        self.console, self.interval_s = console, interval_s
        self.label, self.live = label, live
        self._live: Live | None = None
        self._line = self._shown = ""
        self._total = 0
        self._done_at_start = 0
        self._started = self._last_shown = time.monotonic()
        self._best_id: int | None = None
        self.run_dir: Path | None = None

    def started(self, run_dir: Path, store: RunStore, config: Config) -> None:
        self.run_dir = run_dir
        self._total = config.search.max_evaluations
        self._done_at_start = _done(store.status_counts())
        self._started = time.monotonic()
        self.console.print(f"kevo: run directory {run_dir}", highlight=False)
        if self.console.is_terminal and self.live:
            self._live = Live(Text(""), console=self.console, refresh_per_second=4, transient=False)
            self._live.start()

    def result(self, candidate: Candidate, store: RunStore) -> None:
        counts = store.status_counts()
        best = store.best(1)
        now = time.monotonic()
        done = _done(counts)
        rate = (done - self._done_at_start) / max(now - self._started, 1e-9)
        self._line = self.label + _line(done, self._total, best[0].result if best else None, counts, rate)
        new_best = bool(best) and best[0].id != self._best_id
        self._best_id = best[0].id if best else None
        if self._live is not None:
            self._live.update(Text(self._line))
        elif new_best or now - self._last_shown >= self.interval_s or done == self._done_at_start + 1:
            self._show(now)

    def close(self) -> None:
        """Stop redrawing; the last line stays (off a terminal: written, unless it was)."""
        if self._live is not None:
            self._live.stop()
            self._live = None
        elif self._line != self._shown:
            self._show(time.monotonic())

    def _show(self, now: float) -> None:
        self._last_shown, self._shown = now, self._line
        self.console.print(self._line, highlight=False)


class SweepProgress(SweepObserver):
    """``kevo sweep``'s lines: where the runs go, each run's progress line, and how each ended."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self._side_by_side = False
        self._lock = threading.Lock()

    def started(self, sweep_dir: Path, entries: list[Entry]) -> None:
        self._side_by_side = max(entry.side_by_side for entry in entries) > 1
        at_once = f", up to {max(e.side_by_side for e in entries)} at once" if self._side_by_side else ""
        self.console.print(f"kevo sweep: {len(entries)} run(s) into {sweep_dir}{at_once}", highlight=False)

    @contextlib.contextmanager
    def run(self, name: str) -> Iterator[Progress]:
        if self._side_by_side:  # several runs' lines at once: plain, named (one live line at a time)
            progress = Progress(self.console, label=f"{name}: ", live=False)
        else:
            progress = Progress(self.console)
        try:
            yield progress
        finally:
            with self._lock:
                progress.close()

    def ended(self, outcome: Outcome) -> None:
        best = f"{outcome.speedup:.3g}x" if outcome.speedup else "no correct kernel"
        # a finished run without a correct kernel says why it stopped (the wall limit before its seeds were judged)
        said = outcome.reason and (outcome.status != "finished" or not outcome.speedup)
        self.console.print(f"kevo sweep: {outcome.name}: {outcome.status}, {best}"
                           + (f" ({outcome.reason})" if said else ""), highlight=False)

    def second_pass(self, shares: dict[str, int]) -> None:
        given = ", ".join(f"{name} +{extra}" for name, extra in shares.items())
        self.console.print(f"kevo sweep: second pass, the evaluations saved at the speed of light go to: {given}",
                           highlight=False)

    def evaluators(self, usage: dict) -> None:
        nodes = usage["results_by_node"]
        where = f" on {len(nodes)} Ray node(s)" if nodes else ""
        self.console.print(f"kevo sweep: evaluators busy {100 * usage['busy_share']:.0f}% of the time they were up"
                           f"{where}; sweep wall {usage['wall_s']:.0f} s", highlight=False)


def _done(counts: dict[str, int]) -> int:
    return sum(n for status, n in counts.items() if status != PENDING)


def _line(done: int, total: int, best: dict | None, counts: dict[str, int], rate: float) -> str:
    if best is None:
        best_text = "no accepted kernel yet"
    else:
        speedup = f" ({best['speedup']:.3g}x)" if best.get("speedup") else ""
        best_text = f"best {best['runtime_ms']:.4g} ms{speedup}"
    return f"{done}/{total} evaluated · {best_text} · {format_counts(counts)} · {rate:.2f} eval/s"
