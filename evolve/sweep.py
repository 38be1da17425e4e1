"""The sweep loop: many problems (× shape variants) as one resumable job on one pool of evaluators.

``run_sweep`` takes the entries of a sweep file (``evolve.sweep_file``) and
goes through them: each problem (and variant) is a run of its own, with its
own store, in ``SWEEP_DIR/NNN-name/`` next to the config it was started from,
started or resumed here through ``evolve.session``. The runs go one after
another on one pool of Ray actors (``evolve.dispatch.pool.SharedPool``: each
actor keeps the evaluators of the current problem warm), or, with the sweep
file's ``side_by_side: N``, up to N at once, each in a thread of its own and
started in the sweep's order, their candidates sharing the actors (each
actor serves whichever problem has work). Before any run
starts, the sweep checks that this machine can evaluate its runs at all (the
GPU they ask for, the Ray cluster they join). Running the same sweep again
into the same directory (or ``kevo resume SWEEP_DIR``) skips the runs that
ended, resumes the one that was cut short and starts the rest.

Once every run of that first pass has ended, a second pass spends what the
runs that stopped at the speed of light saved (``evolve.budget``; the sweep
file's ``spend_saved``, on by default): the shares are fixed once, from the
first pass's outcomes, and kept in ``BUDGET_FILE``; each receiving run's
stored budget is raised by its share (``evolve.session.raise_budget``, a
grant recorded in its store, given once) and the run is resumed. A run whose
budget was raised after it last stopped has not ended: a sweep killed in its
second pass and started again resumes those runs, grants nothing twice and
redoes nothing. The summary (``evolve.report_sweep.sweep_summary``) is written into
the directory at the end.

A ``SweepObserver`` is told as the sweep goes (``kevo sweep``'s lines on
stderr come from one, ``evolve.progress.SweepProgress``).
"""

from __future__ import annotations

import collections
import contextlib
import copy
import dataclasses
import json
import logging
import os
import queue
import shutil
import threading
import time
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import yaml

from evolve.config import config_from_dict
from evolve.dispatch.pool import SharedPool, check_can_evaluate
from evolve.dispatch.ray import RayUnavailable
from evolve.errors import USER_ERRORS
from evolve.budget import saved, share_saved
from evolve.report_sweep import Outcome, run_outcome, sweep_summary
from evolve.session import BUDGET_EVENT, NoSeed, Observer, raise_budget, resume_run, start_run
from evolve.sweep_file import SWEEP_FILE, Entry
from evolve.sweep_file import check_same_sweep as _check_same_sweep
from platforms import PlatformUnavailable
from population_store import STORE_FILE, RunStore

log = logging.getLogger(__name__)

SUMMARY_FILE = "summary.json"
CONFIG_FILE = "config.yaml"
FAILED_FILE = "failed.json"  # a run that could not go on, with the reason
SKIPPED_FILE = "skipped.json"  # a run that got no seed from torch.compile, with the reason
BUDGET_FILE = "budget.json"  # the second pass's shares, fixed once from the first pass's outcomes
STOP_WAIT_S = 60.0  # how long an interrupted sweep waits for the runs still going to end
SECOND_PASS = "sweep: evaluations saved at the speed of light"  # the grant a run's store records


class SweepObserver:
    """Told as a sweep goes (the CLI's lines on stderr); this one tells nobody."""

    def started(self, sweep_dir: Path, entries: list[Entry]) -> None:
        """The sweep passed its checks and goes through ``entries`` into ``sweep_dir``."""

    def run(self, name: str) -> AbstractContextManager[Observer]:
        """The observer of run ``name`` while it is started or resumed; left when the run ends."""
        return contextlib.nullcontext(Observer())

    def ended(self, outcome: Outcome) -> None:
        """What one run came to (a run that had ended before this sweep went on, too)."""

    def second_pass(self, shares: dict[str, int]) -> None:
        """The runs named in ``shares`` are resumed with that many evaluations more (``evolve.budget``)."""

    def evaluators(self, usage: dict) -> None:
        """How busy the evaluators were over the sweep (``SharedPool.usage``), once every run ended."""


def run_sweep(entries: list[Entry], sweep_dir: Path, *, observer: SweepObserver | None = None) -> list[Outcome]:
    """Run every entry not ended yet; return (and store) every entry's outcome.

    Stops before anything starts, raising what ``check_can_evaluate``
    raises, when this machine cannot evaluate the runs still to do, and
    ``ConfigError`` when ``sweep_dir`` holds another sweep. Then a run that
    cannot go on is a ``failed`` outcome, stored in its directory, and the
    sweep goes on with the next: a problem that cannot run (its reference
    fails, it does not fit in memory, no seed is accepted) and a failure of
    kevo's alike (its traceback is logged, its reason names it as kevo's).
    Only an interruption stops the sweep.
    """
    observer = observer or SweepObserver()
    plan = _check_same_sweep(sweep_dir, entries)
    ended = {entry.name: _previous(entry, sweep_dir / entry.name) for entry in entries}
    _check_machine([entry for entry in entries if ended[entry.name] is None], sweep_dir)
    sweep_dir.mkdir(parents=True, exist_ok=True)
    if plan is not None:
        (sweep_dir / SWEEP_FILE).write_text(json.dumps(plan, indent=1), encoding="utf-8")
    observer.started(sweep_dir, entries)
    width = max(entry.side_by_side for entry in entries)
    with SharedPool(width) as pool:
        outcomes = _pass(entries, ended, sweep_dir, pool, observer, width)
        if all(entry.spend_saved for entry in entries):
            outcomes = _second_pass(entries, outcomes, sweep_dir, pool, observer, width)
        usage = pool.usage()
    summary = sweep_summary(outcomes)
    if usage is not None:
        summary["evaluators"] = usage
        observer.evaluators(usage)
    (sweep_dir / SUMMARY_FILE).write_text(json.dumps(summary, indent=1), encoding="utf-8")
    return outcomes


def _pass(entries: list[Entry], ended: dict[str, Outcome | None], sweep_dir: Path, pool: SharedPool,
          observer: SweepObserver, width: int) -> list[Outcome]:
    """Every entry's outcome, in the sweep's order: those in ``ended`` as they are, the rest run."""
    if width > 1:
        return _side_by_side(entries, ended, sweep_dir, pool, observer, width)
    outcomes = []
    for entry in entries:
        outcome = ended[entry.name] or _run(entry, sweep_dir / entry.name, pool, observer)
        outcomes.append(outcome)
        observer.ended(outcome)
    return outcomes


def _second_pass(entries: list[Entry], outcomes: list[Outcome], sweep_dir: Path, pool: SharedPool,
                 observer: SweepObserver, width: int) -> list[Outcome]:
    """The first pass's ``outcomes`` with those of the runs that got a share of the saved evaluations
    after they spent it: each one's budget raised (once) and the run resumed, unless it ended since."""
    shares = _shares(sweep_dir, outcomes)
    if not shares:
        return outcomes
    for name, extra in shares.items():
        raise_budget(sweep_dir / name, extra, SECOND_PASS)
    receivers = [entry for entry in entries if entry.name in shares]
    again = {entry.name: _previous(entry, sweep_dir / entry.name) for entry in receivers}
    todo = [entry for entry in receivers if again[entry.name] is None]
    if todo:
        log.info("sweep: second pass: the evaluations saved at the speed of light go to %s",
                 ", ".join(f"{entry.name} +{shares[entry.name]}" for entry in todo))
        observer.second_pass({entry.name: shares[entry.name] for entry in todo})
        again.update((o.name, o) for o in _pass(todo, {entry.name: None for entry in todo}, sweep_dir, pool,
                                                observer, width))
    return [again.get(o.name) or o for o in outcomes]


def _shares(sweep_dir: Path, outcomes: list[Outcome]) -> dict[str, int]:
    """Who gets how many of the saved evaluations: from ``BUDGET_FILE`` when the sweep fixed them
    already (a sweep started again: the outcomes have changed since), else by ``evolve.budget``'s
    rule now, kept there before any budget is raised (nothing is kept when nobody gets any)."""
    path = sweep_dir / BUDGET_FILE
    if path.is_file():
        return json.loads(path.read_text(encoding="utf-8"))["shares"]
    shares = share_saved(outcomes)
    if not shares:
        return shares
    draft = path.with_name(f".{path.name}.draft")
    draft.write_text(json.dumps({"saved": saved(outcomes), "shares": shares}, indent=1), encoding="utf-8")
    os.replace(draft, path)  # whole or not at all
    return shares


def _side_by_side(entries: list[Entry], ended: dict[str, Outcome | None], sweep_dir: Path, pool: SharedPool,
                  observer: SweepObserver, width: int) -> list[Outcome]:
    """Up to ``width`` runs at once, started in the sweep's order, each in a thread of its own;
    their outcomes in the sweep's order. A run that shared the device and failed (or got no seed)
    for lack of device memory is set aside and run again once, with the device to itself, after
    the others (``for_lack_of_memory``): its neighbours may have held that memory. An
    interruption leaves the runs in flight as a kill would (every result they committed stays; a
    resume goes on with them): each ends at its next result, or as the pool closes under it, and
    is waited for (up to ``STOP_WAIT_S``), so that its evaluators close and no run is still
    computing while the process exits."""
    outcomes = {name: outcome for name, outcome in ended.items() if outcome is not None}
    for outcome in outcomes.values():
        observer.ended(outcome)
    todo = collections.deque(entry for entry in entries if entry.name not in outcomes)
    if todo:
        first = todo[0]
        pool.connect(config_from_dict(copy.deepcopy(first.config), origin=f"{sweep_dir / SWEEP_FILE}: {first.name}"))
    done: queue.Queue = queue.Queue()
    stopping = threading.Event()

    def run(entry: Entry) -> None:
        try:
            done.put((entry, _run(entry, sweep_dir / entry.name, pool, observer, stopping)))
        except BaseException as exc:  # handed to the sweep's thread, which raises it
            done.put((entry, exc))

    live, crowded, later, retried = set(), set(), collections.deque(), set()  # live: the runs going now

    def start(entry: Entry) -> None:
        if live:  # the device is shared from now on: by this run and by those in flight
            crowded.update(live | {entry.name})
        live.add(entry.name)
        threading.Thread(target=run, args=(entry,), name=f"kevo-run-{entry.name}", daemon=True).start()

    try:
        while todo or later or live:
            while todo and len(live) < width:
                start(todo.popleft())
            if later and not live:  # what ran out of memory beside others, now with the device to itself
                start(later.popleft())
            entry, outcome = done.get()
            live.discard(entry.name)
            if isinstance(outcome, BaseException):
                raise outcome
            if entry.name in crowded and entry.name not in retried and for_lack_of_memory(outcome):
                log.warning("sweep: %s ran out of device memory beside other runs (%s); it runs again alone "
                            "once they end", entry.name, outcome.reason[:200])
                _set_aside(sweep_dir / entry.name)
                later.append(entry)
                retried.add(entry.name)
                continue
            outcomes[entry.name] = outcome
            observer.ended(outcome)
    except BaseException:
        stopping.set()  # the runs still going fail as the pool closes: that is no failure of theirs
        pool.close()
        deadline = time.monotonic() + STOP_WAIT_S
        while live and (left := deadline - time.monotonic()) > 0:
            try:
                live.discard(done.get(timeout=left)[0].name)
            except queue.Empty:
                break
        raise
    return [outcomes[entry.name] for entry in entries]


MEMORY_WORDS = ("out of memory", "out_of_memory", "outofmemoryerror", "gb is free")


def for_lack_of_memory(outcome: Outcome) -> bool:
    """Whether a run failed, or got no seed, because the device's memory ran out or too little
    of it was free: beside other runs, that may be theirs, not the problem's."""
    reason = (outcome.reason or "").lower()
    return outcome.status in ("failed", "skipped") and any(word in reason for word in MEMORY_WORDS)


def _set_aside(run_dir: Path) -> None:
    """Move a run that is to start again out of the way (kept, hidden, for a look at what failed):
    the run starts afresh in ``run_dir``."""
    aside = run_dir.with_name(f".{run_dir.name}.crowded")
    shutil.rmtree(aside, ignore_errors=True)
    os.replace(run_dir, aside)


def _run(entry: Entry, run_dir: Path, pool: SharedPool, observer: SweepObserver,
         stopping: threading.Event | None = None) -> Outcome:
    """Start (or resume) ``entry``'s run on the pool; what it came to, failures included (unless
    the sweep is ``stopping``: then its failure is raised, not recorded)."""
    try:
        with observer.run(entry.name) as progress:
            if stopping is not None:
                progress = _UntilStopped(progress, stopping)
            try:
                if (run_dir / STORE_FILE).exists():
                    log.info("sweep: resuming %s", entry.name)
                    reason = resume_run(run_dir, progress, dispatchers=pool)
                else:
                    run_dir.mkdir(parents=True, exist_ok=True)
                    config_path = run_dir / CONFIG_FILE
                    config_path.write_text(yaml.safe_dump(entry.config, sort_keys=False), encoding="utf-8")
                    log.info("sweep: starting %s", entry.name)
                    reason = start_run(config_path, run_dir, progress, dispatchers=pool)
            except Exception:
                if stopping is not None and stopping.is_set():
                    raise _Stopped() from None
                pool.after_failure()  # the next run starts on fresh evaluators
                raise
        return _outcome(entry, run_dir, "finished", reason)
    except NoSeed as exc:  # seeds: compile gave none: skipped, with the reason, and not tried again
        return _ended(run_dir, SKIPPED_FILE, Outcome(entry.name, "skipped", str(exc)))
    except USER_ERRORS as exc:  # the problem's (its files, its reference, its seeds), not kevo's
        return _ended(run_dir, FAILED_FILE, Outcome(entry.name, "failed", f"{type(exc).__name__}: {exc}"))
    except Exception as exc:  # recorded, and the sweep goes on with the next problem
        log.error("sweep: %s failed in kevo itself", entry.name, exc_info=exc)
        first = (str(exc).strip().splitlines() or [""])[0][:300]
        reason = f"kevo failed ({type(exc).__name__}: {first}); the traceback is in the log"
        return _ended(run_dir, FAILED_FILE, Outcome(entry.name, "failed", reason))


class _Stopped(BaseException):
    """The sweep stopped while this run went on: not an outcome (a resume goes on with the run)."""


class _UntilStopped:
    """A run's progress that ends the run at its next result once the sweep is stopping."""

    def __init__(self, progress: Any, stopping: threading.Event) -> None:
        self._progress, self._stopping = progress, stopping

    def result(self, candidate: Any, store: Any) -> None:
        self._progress.result(candidate, store)
        if self._stopping.is_set():
            raise _Stopped()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._progress, name)


def _ended(run_dir: Path, file: str, outcome: Outcome) -> Outcome:
    """``outcome``, kept in ``run_dir`` so that a resumed sweep does not run it again (``_previous``)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / file).write_text(json.dumps(dataclasses.asdict(outcome)), encoding="utf-8")
    return outcome


def _check_machine(entries: list[Entry], sweep_dir: Path) -> None:
    """Stop before any run starts when this machine cannot evaluate ``entries`` (one check per
    platform and cluster setting): a GPU platform it lacks, a Ray cluster that does not answer."""
    checked = set()
    for entry in entries:
        setting = json.dumps([entry.config.get("platform"), entry.config.get("cluster")], sort_keys=True)
        if setting in checked:
            continue
        checked.add(setting)
        config = config_from_dict(copy.deepcopy(entry.config), origin=f"{sweep_dir / SWEEP_FILE}: {entry.name}")
        try:
            check_can_evaluate(config)
        except PlatformUnavailable as exc:
            raise PlatformUnavailable(f"run {entry.name}: {exc}; no run was started (set platform: auto or cpu, "
                                      "or run the sweep where that GPU is)") from None
        except RayUnavailable as exc:
            raise RayUnavailable(f"run {entry.name}: {exc}; no run was started") from None


def sweep_status(entries: list[Entry], sweep_dir: Path) -> list[Outcome]:
    """Where every run of the sweep in ``sweep_dir`` stands (``kevo report`` on a sweep)."""
    outcomes = []
    for entry in entries:
        run_dir = sweep_dir / entry.name
        outcome = _previous(entry, run_dir)
        if outcome is None:
            started = (run_dir / STORE_FILE).is_file()
            outcome = _outcome(entry, run_dir, "cut short", "") if started else Outcome(entry.name, "not started")
        outcomes.append(outcome)
    return outcomes


def _previous(entry: Entry, run_dir: Path) -> Outcome | None:
    """The outcome of a run that already ended (skipped, stopped, or failed), else None: a run whose
    budget was raised after it last stopped (a second pass cut short) has not ended."""
    if entry.skip:
        return Outcome(entry.name, "skipped", entry.skip)
    for ended in (run_dir / FAILED_FILE, run_dir / SKIPPED_FILE):
        if ended.is_file():
            return Outcome(**json.loads(ended.read_text(encoding="utf-8")))
    if not (run_dir / STORE_FILE).is_file():
        return None
    with RunStore.open(run_dir / STORE_FILE, readonly=True) as store:
        stops, raised = store.events("stopped"), store.events(BUDGET_EVENT)
    if not stops or stops[-1]["data"].get("not_evaluated"):  # left pending at its wall limit: a resume
        return None  # evaluates them (and stops)
    if raised and raised[-1]["id"] > stops[-1]["id"]:
        return None
    return _outcome(entry, run_dir, "finished", stops[-1]["data"].get("reason", ""))


def _outcome(entry: Entry, run_dir: Path, status: str, reason: str) -> Outcome:
    return run_outcome(entry.name, status, reason, run_dir)
