"""What a sweep's runs came to: one ``Outcome`` per run, read from its store, and the field's figures
over the sweep's problems (``sweep_summary``): KernelBench's fast_p over eager, and the same over
torch.compile on the clean clock (each run's end-of-run rounds, ``evolve.report_sol.versus``).
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any

from evolve.budget import saved, share_saved
from evolve.report_sol import fmt, sol_figures, versus
from evolve.report_time import evaluation_time
from evolve.search.loop import AT_SOL
from evolve.search.steering import profiling_cost
from evolve.session import BUDGET_EVENT
from population_store import STORE_FILE, RunStore


@dataclasses.dataclass
class Outcome:
    """What one run of a sweep came to."""

    name: str
    status: str  # finished | failed | skipped (and, for a sweep not over: cut short | not started)
    reason: str = ""
    evaluations: int = 0
    best_ms: float | None = None
    reference_ms: float | None = None
    speedup: float | None = None
    max_evaluations: int | None = None  # the run's budget
    floor_ms: float | None = None  # the problem's floor (fitness.judge.floor), where known
    sol: float | None = None  # the best's speed of light
    eager_sol: float | None = None
    compiled_sol: float | None = None  # torch.compile's, where the run timed it on a clean clock
    vs_compile: dict[str, Any] | None = None  # the best over torch.compile (evolve.report_sol.versus)
    vs_compile_tf32: dict[str, Any] | None = None  # over torch.compile with TF32 allowed, where timed
    below_floor: bool = False  # the best read below the floor: flagged
    at_sol: bool = False  # stopped at the speed of light (search.stop_at_sol)
    extra_evaluations: int = 0  # granted on top of its budget (a sweep's second pass), in max_evaluations
    extra_spent: int = 0  # of those, evaluated so far
    best_ms_before_extra: float | None = None  # its best when they were granted
    profiles: int = 0  # parents profiled (evolve.search.steering.profiling_cost)
    profiling_s: float = 0.0  # what profiling them took, wall
    profiling_device_s: float = 0.0  # of it, the profiled programs on the device (others' timings waited)
    evaluation_s: float | None = None  # an evaluation's wall time, the median (evolve.report_time)
    pace_per_s: float | None = None  # results a second, from the run's first result to its last

    @property
    def correct(self) -> bool:
        return self.best_ms is not None

    @property
    def left_ms(self) -> float | None:
        """What the best leaves on the table: its runtime minus the floor."""
        return _left(self.best_ms, self.floor_ms)

    @property
    def left_ms_before_extra(self) -> float | None:
        """What it left on the table before its extra evaluations (None: it got none)."""
        return _left(self.best_ms_before_extra, self.floor_ms) if self.extra_evaluations else None


def _left(best_ms: float | None, floor_ms: float | None) -> float | None:
    return max(0.0, best_ms - floor_ms) if best_ms is not None and floor_ms else None


def run_outcome(name: str, status: str, reason: str, run_dir: Path) -> Outcome:
    """What the run in ``run_dir`` came to, from its store (a sweep's outcome of a run that ran)."""
    with RunStore.open(Path(run_dir) / STORE_FILE, readonly=True) as store:
        best, count = store.best(1), store.count()
        budget = store.config()["search"]["max_evaluations"]
        raised = [event["data"] for event in store.events(BUDGET_EVENT)]
        profiling = profiling_cost(store.profiles())
        timing = evaluation_time(store.individuals()) or {}
        standings = versus(store, best)
    outcome = Outcome(name, status, reason, evaluations=count, max_evaluations=budget,
                      at_sol=reason.startswith(AT_SOL), profiles=profiling["profiles"],
                      profiling_s=profiling["seconds"], profiling_device_s=profiling["device_s"],
                      evaluation_s=timing.get("median_s", {}).get("total"), pace_per_s=timing.get("pace_per_s"),
                      vs_compile=standings["vs_compile"], vs_compile_tf32=standings.get("vs_compile_tf32"))
    if raised:  # its budget was raised (evolve.session.raise_budget): by how much, and what it has spent
        outcome.extra_evaluations = sum(data["extra"] for data in raised)
        outcome.extra_spent = min(outcome.extra_evaluations, max(0, count - raised[0]["evaluations"]))
        outcome.best_ms_before_extra = raised[0].get("best_ms")
    if best:
        result = best[0].result
        outcome.best_ms, outcome.reference_ms = result["runtime_ms"], result.get("reference_ms")
        outcome.speedup, outcome.below_floor = result.get("speedup"), bool(result.get("below_floor"))
        figures = sol_figures(result, standings["vs_compile"].get("compile_ms"))
        if figures:
            outcome.floor_ms, outcome.sol = figures["floor_ms"], figures["best"]
            outcome.eager_sol, outcome.compiled_sol = figures["eager"], figures["compiled"]
    return outcome


def sweep_summary(outcomes: list[Outcome]) -> dict[str, Any]:
    """The field's figures over the sweep's problems (KernelBench's fast_p), and every run's outcome.

    ``fraction_correct``: problems with an accepted kernel; ``fast_1``, ``fast_1.5``,
    ``fast_2``: the fractions of all problems faster than eager PyTorch by more
    than 1×, 1.5×, 2×; ``geomean_speedup_correct``: over the problems with one.
    ``vs_compile``: the same against torch.compile, from each run's clean rounds
    (``fast_1``... over all problems, ``geomean`` over the ``problems`` with a clean
    figure), ``slower`` (the runs torch.compile beats beyond noise) and ``without``
    (each correct run with no clean figure, and why). Each run has its SOL and ``left_ms`` (best minus floor); ``below_floor``
    names the runs whose best read below the floor (flagged, not a speedup);
    ``saved_evaluations``, what runs that stopped at the speed of light did not
    spend, and ``budget_shares``, who gets it by headroom (``evolve.budget``):
    once a sweep's second pass granted them (``second_pass`` true), the shares
    granted; each run then has ``extra_evaluations`` (its share), ``extra_spent``
    (what it evaluated of it) and ``left_ms_before_extra`` beside ``left_ms``.
    ``profiling``: the parents profiled over the sweep and what that took
    (seconds, and of them the device's), each run's in its own fields.
    """
    n = len(outcomes)
    correct = [o for o in outcomes if o.correct]
    speedups = [o.speedup for o in correct if o.speedup]
    over_compile = [o.vs_compile["ratio"] for o in correct if (o.vs_compile or {}).get("ratio")]

    def fast(ratios: list[float], p: float) -> float:  # KernelBench's fast_p: over all the problems
        return sum(1 for s in ratios if s > p) / n if n else 0.0

    granted = {o.name: o.extra_evaluations for o in outcomes if o.extra_evaluations}
    return {"problems": n, "correct": len(correct), "fraction_correct": len(correct) / n if n else 0.0,
            "fast_1": fast(speedups, 1.0), "fast_1.5": fast(speedups, 1.5), "fast_2": fast(speedups, 2.0),
            "geomean_speedup_correct": _geomean(speedups),
            "vs_compile": {"problems": len(over_compile), "fast_1": fast(over_compile, 1.0),
                           "fast_1.5": fast(over_compile, 1.5), "fast_2": fast(over_compile, 2.0),
                           "geomean": _geomean(over_compile),
                           "slower": [o.name for o in correct if (o.vs_compile or {}).get("faster") == "torch.compile"],
                           "without": {o.name: o.vs_compile["why"] for o in correct
                                       if (o.vs_compile or {}).get("ratio") is None and o.vs_compile}},
            "below_floor": [o.name for o in outcomes if o.below_floor],
            "saved_evaluations": saved(outcomes), "budget_shares": granted or share_saved(outcomes),
            "second_pass": bool(granted),
            "profiling": {"profiles": sum(o.profiles for o in outcomes),
                          "seconds": sum(o.profiling_s for o in outcomes),
                          "device_s": sum(o.profiling_device_s for o in outcomes)},
            "runs": [{**dataclasses.asdict(o), "left_ms": o.left_ms, "left_ms_before_extra": o.left_ms_before_extra}
                     for o in outcomes]}


def _geomean(values: list[float]) -> float | None:
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


def format_sweep_summary(summary: dict[str, Any]) -> str:
    """``sweep_summary``'s data as a Markdown table of the runs and one line of figures."""
    lines = ["| run | status | evaluations | best ms | vs torch.compile | eager ms | speedup | SOL best | SOL eager "
             "| SOL compile | left ms |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in summary["runs"]:
        best_sol = "below floor!" if r.get("below_floor") else fmt(r.get("sol"), "", 2)
        lines.append(f"| {r['name']} | {r['status']} | {r['evaluations']} | {fmt(r['best_ms'])} "
                     f"| {_over_compile(r.get('vs_compile'))} "
                     f"| {fmt(r['reference_ms'])} | {fmt(r['speedup'], 'x')} | {best_sol} "
                     f"| {fmt(r.get('eager_sol'), '', 2)} | {fmt(r.get('compiled_sol'), '', 2)} "
                     f"| {fmt(r.get('left_ms'))} |")
    g = summary["geomean_speedup_correct"]
    lines.append("")
    lines.append(f"{summary['correct']}/{summary['problems']} correct ({100 * summary['fraction_correct']:.0f}%); "
                 f"fast_1 {100 * summary['fast_1']:.0f}%, fast_1.5 {100 * summary['fast_1.5']:.0f}%, "
                 f"fast_2 {100 * summary['fast_2']:.0f}%; geometric-mean speedup over correct: "
                 + (f"{g:.3g}x" if g else "-"))
    over = summary.get("vs_compile") or {}
    if over.get("problems"):
        lines.append(f"over torch.compile (a clean time on {over['problems']} of {summary['problems']} problems; "
                     f"fast_p over all {summary['problems']}, as KernelBench counts): fast_1 "
                     f"{100 * over['fast_1']:.0f}%, fast_1.5 {100 * over['fast_1.5']:.0f}%, fast_2 "
                     f"{100 * over['fast_2']:.0f}%; geometric mean over the {over['problems']} {over['geomean']:.3g}x")
    if over.get("slower"):
        lines.append(f"torch.compile is faster beyond noise on: {', '.join(over['slower'])}")
    if over.get("without"):
        lines.append("no clean torch.compile time: " + "; ".join(f"{name} ({why})"
                                                                  for name, why in over["without"].items()))
    if summary.get("second_pass"):
        runs = {r["name"]: r for r in summary["runs"]}
        spent = ", ".join(f"{name} +{n} ({runs[name]['extra_spent']} spent; left on the table "
                          f"{fmt(runs[name]['left_ms_before_extra'])} -> {fmt(runs[name]['left_ms'])} ms)"
                          for name, n in summary["budget_shares"].items())
        lines.append(f"{summary['saved_evaluations']} evaluations saved by runs at the speed of light; "
                     f"a second pass gave them by headroom to: {spent}")
    elif summary.get("saved_evaluations"):
        shares = ", ".join(f"{name} {n}" for name, n in summary["budget_shares"].items()) or "no run with headroom"
        lines.append(f"{summary['saved_evaluations']} evaluations saved by runs at the speed of light; "
                     f"by headroom they go to: {shares}")
    profiling = summary.get("profiling") or {}
    if profiling.get("profiles"):
        lines.append(f"profiling: {profiling['profiles']} parents, {profiling['seconds']:.1f} s "
                     f"({profiling['device_s']:.1f} s of it on the device)")
    if summary.get("below_floor"):
        lines.append(f"FLAGGED: the best of {', '.join(summary['below_floor'])} read below the floor (not a speedup)")
    return "\n".join(lines)


def _over_compile(figures: dict[str, Any] | None) -> str:
    """A run's best over torch.compile with its interval (``0.83x (0.81-0.85)``), or ``-``."""
    if not figures or figures.get("ratio") is None:
        return "-"
    return f"{figures['ratio']:.3g}x ({figures['low']:.3g}-{figures['high']:.3g})"
