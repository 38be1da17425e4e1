"""The run's fastest kernels timed again, side by side, when the search stops.

A kernel's runtime in the store comes from one timed window, at whatever
clock its device had then. When a run stops, its ``TOP`` fastest kernels and
the seed the fastest descends from (through first parents) are evaluated
again in rounds, interleaved (A B C S, A B C S, ...), so that a drift of
the device touches them alike. From the rounds (``CONFIRMED_EVENT`` in the
store, which ``kevo report`` shows):

- the best's speedup over its seed with an interval: seed / best in each
  round; the median, the lowest and the highest over the rounds;
- which of the next kernels the best cannot be told apart from: those it is
  not faster than beyond noise (``evolve.search.population.faster``) in every
  round;
- any kernel that is not accepted when judged again (a flaky kernel).

Each evaluation is a whole one (checks, then timing) through the run's
dispatcher; with a pool of evaluators a round's kernels may run on different
devices of the same kind at once. ``search.confirm_rounds`` sets the rounds:
by default ``DEFAULT_ROUNDS`` on a GPU (``cuda``, ``rocm``) and none
elsewhere: the CPU's times are the interpreter's and say nothing of a kernel
(the report says it was not done).

The rounds keep to the run's wall limit (``search.max_wall_time_s``): at it,
what is still being timed is given up, and only the rounds that finished
are recorded (``cut_short`` says how many were planned); with none, nothing
is. On the H200, eight level-1 runs side by side spent up to 96 s in these
rounds after a search that had stopped within its 90 s.
"""

from __future__ import annotations

import logging
import statistics
import time
from typing import Any

from evolve.dispatch.base import Dispatcher
from evolve.search.population import faster
from population_store import Individual, RunStore

log = logging.getLogger(__name__)

CONFIRMED_EVENT = "confirmed"
TOP = 3  # the fastest kernels timed again, besides the best's seed
DEFAULT_ROUNDS = 3
GPU_PLATFORMS = ("cuda", "rocm")  # where the rounds are on by default


def rounds_for(configured: int | None, platform: str) -> int:
    """The rounds to time again in: ``configured`` (``search.confirm_rounds``), else
    ``DEFAULT_ROUNDS`` on a GPU and 0 elsewhere.

    >>> rounds_for(None, "cuda"), rounds_for(None, "cpu"), rounds_for(2, "cpu")
    (3, 0, 2)
    """
    if configured is not None:
        return configured
    return DEFAULT_ROUNDS if platform in GPU_PLATFORMS else 0


def confirm_top(store: RunStore, dispatcher: Dispatcher, configured: int | None,
                deadline: float | None = None) -> dict[str, Any] | None:
    """Time the run's fastest kernels and the best's seed again, interleaved, and record what the
    rounds say (``CONFIRMED_EVENT``); None (and nothing recorded) with no rounds or nothing to compare,
    or when ``deadline`` (``time.monotonic``) came before a round was done."""
    top = store.best(TOP)
    if not top:
        return None
    rounds = rounds_for(configured, (top[0].result or {}).get("platform", ""))
    seed = _seed_of(store, top[0])
    kernels = top + ([seed] if seed.id not in {k.id for k in top} else [])
    if rounds <= 0 or len(kernels) < 2:
        return None
    log.info("timing the %d fastest kernels and the best's seed again: %d rounds", len(kernels), rounds)
    n = len(kernels)
    for r in range(rounds):
        for i, kernel in enumerate(kernels):
            dispatcher.submit(-(1 + r * n + i), kernel.source)
    verdicts: dict[int, Any] = {}
    while dispatcher.in_flight:
        if deadline is not None and not dispatcher.ready():
            left = deadline - time.monotonic()
            if left <= 0 or not dispatcher.wait(left):
                dispatcher.cancel()  # the wall limit: what is being timed is given up
                break
        key, result = dispatcher.next_result()
        verdicts[key] = result
    done = [r for r in range(rounds) if all(-(1 + r * n + i) in verdicts for i in range(n))]
    if len(done) < rounds:
        log.info("wall limit: %d of %d rounds of timing again finished", len(done), rounds)
    if not done:
        return None
    timed = [[verdicts[-(1 + r * n + i)] for r in done] for i in range(n)]
    data = summarise(kernels, timed, seed.id)
    if len(done) < rounds:
        data["cut_short"] = {"rounds_planned": rounds, "why": "the run's wall limit"}
    store.record_event(CONFIRMED_EVENT, data)
    return data


def summarise(kernels: list[Individual], timed: list[list[Any]], seed_id: int) -> dict[str, Any]:
    """What the rounds say: ``timed[i][r]`` is kernel ``i``'s verdict in round ``r`` (``kernels[0]``
    the best)."""
    rows = []
    for kernel, verdicts in zip(kernels, timed):
        role = "best" if kernel is kernels[0] else "seed" if kernel.id == seed_id else "next"
        rows.append({"id": kernel.id, "role": role, "statuses": [v.status.value for v in verdicts],
                     "runtime_ms": [v.runtime_ms for v in verdicts],
                     "runtime_spread": [v.runtime_spread for v in verdicts]})
    failed = [{"id": row["id"], "statuses": row["statuses"],
               "reasons": [v.reason[:300] for v in verdicts if v.status.value != "accepted"]}
              for row, verdicts in zip(rows, timed) if any(s != "accepted" for s in row["statuses"])]
    best = rows[0]
    data: dict[str, Any] = {"rounds": len(timed[0]), "best": best["id"], "seed": seed_id, "kernels": rows,
                            "failed": failed, "speedup_over_seed": None, "indistinct": []}
    if failed and failed[0]["id"] == best["id"]:
        return data  # a best not accepted again: nothing to compare it by
    seed = next(row for row in rows if row["id"] == seed_id)
    if seed["id"] != best["id"] and not any(row["id"] == seed_id for row in failed):
        ratios = [s / b for s, b in zip(seed["runtime_ms"], best["runtime_ms"])]
        data["speedup_over_seed"] = {"median": statistics.median(ratios), "low": min(ratios), "high": max(ratios)}
    data["indistinct"] = [row["id"] for row in rows[1:] if not _told_apart(best, row)]
    return data


def _told_apart(best: dict[str, Any], other: dict[str, Any]) -> bool:
    """Whether ``best`` is faster than ``other`` beyond noise in every round (a failed round: no)."""
    return all(b is not None and o is not None and faster(b, bs, o, os)
               for b, bs, o, os in zip(best["runtime_ms"], best["runtime_spread"], other["runtime_ms"],
                                       other["runtime_spread"]))


def _seed_of(store: RunStore, individual: Individual) -> Individual:
    """The generation-0 kernel ``individual`` descends from through first parents."""
    while individual.parents:
        individual = store.get(individual.parents[0])
    return individual
