"""Where a run's evaluation time went, from the verdicts in its store.

Every verdict carries ``walls_s`` (``fitness.result.EvalResult``): the
seconds its evaluation spent in each part (the worker's steps, the
reference's outputs, the comparisons, the timed window, and the waits for
the device's timing lane and its lock across processes). The report gives
the median of each part over the run's evaluations, and the pace: results
per second from the first result to the last, and how many evaluations were
in flight on average meanwhile: their seconds over that span, the wait for
the memory plan's room included (an actor holds them then), so under the
slots where the breeding or the queue left slots idle; and how many were
evaluating, that wait left out, so under the memory plan's limit where
memory held them back.
"""

from __future__ import annotations

import statistics
from typing import Any

from population_store import PENDING, Individual, RunStore

#: The parts the report's line names, largest first; the rest are in the JSON.
SHOWN = 6


def evaluation_time(individuals: list[Individual]) -> dict[str, Any] | None:
    """``{"evaluations", "median_s": {part: s}, "pace_per_s", "in_flight", "evaluating"}`` over the finished individuals that
    carry ``walls_s``; None where none does (a store written before verdicts carried it)."""
    finished = [i for i in individuals if i.status != PENDING and i.result]
    walls = [i.result["walls_s"] for i in finished if isinstance(i.result.get("walls_s"), dict)]
    if not walls:
        return None
    median = median_parts(walls)
    ends = sorted(i.finished_at for i in finished if i.finished_at)
    span = ends[-1] - ends[0] if len(ends) > 1 else 0.0
    pace = (len(ends) - 1) / span if span > 0 else None
    # evaluations in flight on average over that span: their seconds (waits for memory too) over its length
    evaluating = sum(w.get("total", 0.0) for w in walls)
    busy = evaluating + sum(w.get("wait: memory plan", 0.0) for w in walls)
    figures = {"evaluations": len(walls), "median_s": median, "pace_per_s": pace,
               "in_flight": busy / span if span > 0 else None, "evaluating": evaluating / span if span > 0 else None}
    admitted = at_once([i.result.get("admitted_s") for i in finished])
    if admitted is not None:  # each verdict's place under the memory plan, where verdicts say when
        figures["admitted"], figures["admitted_most"], figures["none_admitted_s"], figures["admitted_span_s"] = admitted
    return figures


def pace(store: RunStore) -> dict[str, Any] | None:
    """The run's evaluations per second two ways: ``whole_run_per_s`` over the wall of its sessions
    (each from its ``kevo run`` or ``kevo resume`` starting, Ray and the evaluators' start-up included,
    to its last result or event: a session killed with -9 ends there), ``whole_run_s``, ``sessions``;
    and ``first_to_last_per_s``, from the first result to the last. None before a result."""
    finished = sorted(i.finished_at for i in store.individuals() if i.status != PENDING and i.finished_at)
    if not finished:
        return None
    events = store.events()
    starts = sorted(e["data"].get("began_at", e["created_at"]) for e in events if e["kind"] in ("started", "resumed"))
    moments = sorted([*finished, *(e["created_at"] for e in events)])
    wall = 0.0
    for at, start in enumerate(starts):
        until = starts[at + 1] if at + 1 < len(starts) else float("inf")
        wall += max((m for m in moments if start <= m < until), default=start) - start
    span = finished[-1] - finished[0]
    return {"whole_run_s": wall, "sessions": len(starts),
            "whole_run_per_s": len(finished) / wall if wall > 0 else None,
            "first_to_last_per_s": (len(finished) - 1) / span if span > 0 else None}


def pace_line(figures: dict[str, Any] | None) -> str:
    """One line for ``kevo report``: the two rates, each named.

    >>> pace_line({"whole_run_s": 118.0, "sessions": 1, "whole_run_per_s": 0.41, "first_to_last_per_s": 1.1})
    'pace       0.41 evaluations/s over the whole run (118 s, 1 session); 1.10/s from the first result to the last'
    """
    if not figures or not figures.get("whole_run_per_s"):
        return ""
    sessions = figures["sessions"]
    line = (f"pace       {figures['whole_run_per_s']:.2f} evaluations/s over the whole run "
            f"({figures['whole_run_s']:.0f} s, {sessions} session{'s' if sessions != 1 else ''})")
    if figures.get("first_to_last_per_s"):
        line += f"; {figures['first_to_last_per_s']:.2f}/s from the first result to the last"
    return line


def at_once(spans: list) -> tuple[float, int, float, float] | None:
    """(the evaluations holding a place on average, the most at once, the seconds none held one, the
    seconds from the first admission to the last release) from [admitted, released] spans; None without
    two spans that say when. The seconds with none admitted are the places' empty time: what a search at a
    problem's own sizes, where the memory plan lets few run at once, loses to candidates not ready
    (compiling ahead, being bred).

    >>> at_once([[0.0, 2.0], [1.0, 3.0], [3.5, 4.0], None])
    (1.125, 2, 0.5, 4.0)
    """
    edges = sorted((t, step) for s in spans if isinstance(s, list) and len(s) == 2 for t, step in zip(s, (1, -1)))
    if len(edges) < 4 or edges[-1][0] <= edges[0][0]:
        return None
    held, now, last, most, empty = 0.0, 0, edges[0][0], 0, 0.0
    for t, step in edges:
        held += now * (t - last)
        empty += (t - last) if now == 0 else 0.0
        now, last = now + step, t
        most = max(most, now)
    span = edges[-1][0] - edges[0][0]
    return held / span, most, empty, span


def median_parts(walls: list[dict[str, float]]) -> dict[str, float]:
    """The median seconds of each part over evaluations' ``walls_s`` (a part one lacks counts 0).

    >>> median_parts([{"total": 3.0, "step call": 1.0}, {"total": 5.0}, {"total": 4.0, "step call": 3.0}])
    {'step call': 1.0, 'total': 4.0}
    """
    parts = sorted({part for w in walls for part in w})
    return {part: statistics.median(w.get(part, 0.0) for w in walls) for part in parts}


def time_line(figures: dict[str, Any] | None) -> str:
    """One line for ``kevo report``: the median evaluation and its largest parts, and the pace.

    >>> time_line({"evaluations": 3, "median_s": {"total": 4.0, "step call": 1.5, "wait: lane": 2.0},
    ...            "pace_per_s": 0.25})
    'time       4.00 s an evaluation (median of 3): wait: lane 2.00, step call 1.50; 0.25 results/s from the first to the last'
    """
    if not figures:
        return ""
    median = figures["median_s"]
    parts = sorted(((s, p) for p, s in median.items() if p != "total" and s >= 0.005), reverse=True)[:SHOWN]
    line = (f"time       {median.get('total', 0.0):.2f} s an evaluation (median of {figures['evaluations']})"
            + (": " + ", ".join(f"{p} {s:.2f}" for s, p in parts) if parts else ""))
    if figures.get("pace_per_s"):
        line += f"; {figures['pace_per_s']:.2f} results/s from the first to the last"
    if figures.get("in_flight"):
        line += f", {figures['in_flight']:.1f} in flight on average"
        if figures.get("admitted") is not None:
            line += (f" ({figures['admitted']:.1f} holding a place under the memory plan, "
                     f"{figures['admitted_most']} at most")
            if figures.get("none_admitted_s", 0.0) >= 0.05 * figures.get("admitted_span_s", 0.0) > 0:
                line += f"; none for {figures['none_admitted_s']:.1f} s of {figures['admitted_span_s']:.1f}"
            line += ")"
        elif figures.get("evaluating") is not None and figures["evaluating"] < figures["in_flight"] - 0.05:
            line += f" ({figures['evaluating']:.1f} evaluating, the rest waiting for the memory plan)"
    return line
