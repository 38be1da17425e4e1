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

On a GPU each round also times the incumbent, torch.compile of the reference
(``fitness.Incumbent``), with the device to itself and eager PyTorch beside
it, and, where the best multiplies fp32 below fp32 (TF32 or tf32x3 dots),
torch.compile with TF32 allowed too. From those (``vs_compile``, and
``vs_compile_tf32``): the best over torch.compile in each round (compiled /
best), the median, lowest and highest; its seed's too; eager beside them.
That is the headline of a run: no time taken while other work shared the
device is a ratio's denominator. Where there is none, ``why`` says so.

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
from fitness import Incumbent, Job
from operators.seeds.precision import lower_precision_dots
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
    platform = (top[0].result or {}).get("platform", "")
    rounds = rounds_for(configured, platform)
    seed = seed_of(store, top[0])
    kernels = top + ([seed] if seed.id not in {k.id for k in top} else [])
    incumbents = incumbents_for(platform, top[0].source)
    jobs: list[Job] = [*(kernel.source for kernel in kernels), *incumbents]
    if rounds <= 0 or len(jobs) < 2:
        return None
    log.info("timing the %d fastest kernels and the best's seed again, %s beside them: %d rounds", len(kernels),
             " and ".join(i.describe() for i in incumbents) or "nothing", rounds)
    n = len(jobs)
    for r in range(rounds):
        for i, job in enumerate(jobs):
            dispatcher.submit(-(1 + r * n + i), job)
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
    data = summarise(kernels, timed[:len(kernels)], seed.id)
    data.update(against_incumbents(data, incumbents, timed[len(kernels):], platform))
    if len(done) < rounds:
        data["cut_short"] = {"rounds_planned": rounds, "why": "the run's wall limit"}
    store.record_event(CONFIRMED_EVENT, data)
    return data


def incumbents_for(platform: str, best_source: str) -> list[Incumbent]:
    """What the rounds time beside the kernels: torch.compile on a GPU, and torch.compile with TF32
    allowed too where the best multiplies fp32 below fp32; nothing elsewhere (``NO_INCUMBENT``)."""
    if platform not in GPU_PLATFORMS:
        return []
    return [Incumbent(), *([Incumbent(tf32=True)] if lower_precision_dots(best_source) else [])]


#: Why a platform's rounds time no incumbent.
NO_INCUMBENT = ("torch.compile is timed on a GPU only: on the CPU platform kevo's times are Triton's "
                "interpreter, and nothing compares with them")


def against_incumbents(data: dict[str, Any], incumbents: list[Incumbent], timed: list[list[Any]],
                       platform: str) -> dict[str, Any]:
    """``vs_compile`` (and ``vs_compile_tf32`` where it was timed) from the rounds: ``timed[j][r]`` is
    ``incumbents[j]``'s record in round ``r``, ``data`` what ``summarise`` made of the kernels' rounds.
    Each is ``ratio`` (the median over rounds of torch.compile's time over the best's), ``low``, ``high``,
    ``compile_ms``, ``eager_ms`` (medians), ``vs_eager`` (the best over eager, from the same rounds),
    ``seed`` (the best's seed over torch.compile, where it was timed), ``rounds``; or ``why`` alone."""
    if not incumbents:
        return {"vs_compile": {"why": NO_INCUMBENT if platform not in GPU_PLATFORMS else "not timed"}}
    rows = {row["role"]: row for row in data["kernels"]}
    out: dict[str, Any] = {}
    for incumbent, records in zip(incumbents, timed):
        key = "vs_compile_tf32" if incumbent.tf32 else "vs_compile"
        out[key] = _against(incumbent, records, rows.get("best"), rows.get("seed"))
    return out


def _against(incumbent: Incumbent, records: list[Any], best: dict[str, Any] | None,
             seed: dict[str, Any] | None) -> dict[str, Any]:
    failed = [r for r in records if r.status.value != "accepted" or not r.runtime_ms]
    if failed:
        return {"why": failed[0].reason or f"{incumbent.describe()} was not timed ({failed[0].status.value})"}
    if best is None or any(ms is None for ms in best["runtime_ms"]):
        return {"why": "the best was not accepted in every round of timing again"}
    compile_ms = [r.runtime_ms for r in records]
    eager_ms = [r.reference_ms for r in records]
    figures: dict[str, Any] = {**_ratios(compile_ms, best["runtime_ms"]), "rounds": len(records),
                               "compile_ms": statistics.median(compile_ms), "eager_ms": statistics.median(eager_ms),
                               "best_ms": statistics.median(best["runtime_ms"]),
                               "vs_eager": _ratios(eager_ms, best["runtime_ms"]), "seed": None,
                               "faster": _beyond_noise(records, best), "output_note": records[0].reason}
    if seed is not None and all(ms is not None for ms in seed["runtime_ms"]):
        figures["seed"] = _ratios(compile_ms, seed["runtime_ms"])
    return figures


def _ratios(over: list[float], under: list[float]) -> dict[str, float]:
    """``over / under`` round by round: the median, the lowest and the highest."""
    ratios = [o / u for o, u in zip(over, under)]
    return {"ratio": statistics.median(ratios), "low": min(ratios), "high": max(ratios)}


def _beyond_noise(records: list[Any], best: dict[str, Any]) -> str:
    """Who is faster beyond noise in every round: ``kevo``, ``torch.compile``, or ``neither``."""
    rounds = list(zip(best["runtime_ms"], best["runtime_spread"], records))
    if all(faster(b, bs, r.runtime_ms, r.runtime_spread) for b, bs, r in rounds):
        return "kevo"
    if all(faster(r.runtime_ms, r.runtime_spread, b, bs) for b, bs, r in rounds):
        return "torch.compile"
    return "neither"


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


def seed_of(store: RunStore, individual: Individual) -> Individual:
    """The generation-0 kernel ``individual`` descends from through first parents."""
    while individual.parents:
        individual = store.get(individual.parents[0])
    return individual
