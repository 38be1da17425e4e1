"""What a run found: the numbers (``build_report``), a plot, and the text ``kevo report`` prints;
and what a sweep's runs came to, in the field's terms (``sweep_summary``).

The report reads the store only, so it works on a finished run, a killed
one, and one that another process is still writing.

Its headline is the best over torch.compile (``vs_compile``): the ratio with
its interval from the end-of-run rounds that timed both with the device to
themselves, interleaved (``evolve.search.confirm``), eager beside it; or why
there is no clean figure. Where torch.compile is faster, it says so and by
how much. A sweep's summary gives the field's fast_p over torch.compile too.

Beside the speedups it gives the speed of light (``fitness.sol``): the best's
SOL, eager PyTorch's and torch.compile's against the same floor, and what is
left on the table (best minus floor); kernels that read below the floor are
flagged, never a plain speedup. It says whether the best can be told apart
from the next ones: from the end-of-run rounds that timed them again side by
side (``evolve.search.confirm``), else from their spreads alone.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from evolve.budget import saved, share_saved
from evolve.report_sol import sol_figures, sol_lines, standing
from evolve.report_time import evaluation_time, time_line
from evolve.search.loop import AT_SOL, STATE_KEY
from evolve.search.steering import FALLBACK_EVENT, profiling_cost, profiling_line, selector_table
from evolve.search.variation import FAILED_EVENT
from evolve.session import BUDGET_EVENT, STORE_FILE
from population_store import ACCEPTED, PENDING, Individual, RunStore

PLOT_FILE = "progress.png"
TOP = 5


def build_report(store: RunStore, run_dir: Path) -> dict[str, Any]:
    """The run as JSON-ready data: ``evaluations``, ``status_counts``, ``best`` and more.

    ``best`` is the verify-like record of the fastest accepted kernel plus its
    ``id`` and ``source_hash``, or None when no kernel was accepted.
    ``vs_compile``: the best over torch.compile, ``ratio``, ``low``, ``high`` (and more:
    ``evolve.search.confirm.against_incumbents``), or ``why`` there is none;
    ``vs_compile_tf32`` beside it where the best multiplies fp32 in TF32 or tf32x3.
    ``llm_usage`` holds the paid LLM requests, tokens and cost (in all and
    ``by_model``); ``operators_by_class`` says, per parent bottleneck class and
    operator (or LLM focus), how many children were made and how many improved
    on their parent. ``speed_of_light``: the best's SOL beside eager's and
    torch.compile's (``sol_figures``); ``below_floor``: the kernels flagged for
    reading below the floor; ``confirmed``: what timing the top kernels again
    found (``evolve.search.confirm``), else ``unconfirmed`` says why not;
    ``within_noise``: the next kernels the best is not faster than beyond their
    spreads; ``confinement``: what the OS held the workers to; ``profiling``: what profiling the
    parents cost (``evolve.search.steering.profiling_cost``); ``evaluation_time``: where the
    evaluations' time went, and the pace (``evolve.report_time``).
    """
    config = store.config()
    counts = store.status_counts()
    top = store.best(TOP)
    stopped = store.events("stopped")
    best = _record(top[0]) if top else None
    standings = standing(store, top)
    return {
        "run_dir": str(run_dir),
        "problem": config["problem"]["reference"],
        "evaluations": sum(n for status, n in counts.items() if status != PENDING),
        "max_evaluations": config["search"]["max_evaluations"],
        "pending": counts.get(PENDING, 0),
        "status_counts": counts,
        "stopped": stopped[-1]["data"]["reason"] if stopped else None,
        "best": best,
        "top": [_summary(ind) for ind in top],
        "speed_of_light": sol_figures(best, standings["vs_compile"].get("compile_ms")),
        **standings,
        "confinement": stopped[-1]["data"].get("confinement", []) if stopped else [],
        "lineage": _lineage(store, top[0]) if top else [],
        "llm_usage": store.llm_usage().to_dict(),
        "llm_failed_proposals": len(store.events(FAILED_EVENT)),
        "operators_by_class": selector_table((store.get_state(STATE_KEY) or {}).get("selector")),
        "profiler": [e["data"]["reason"] for e in store.events(FALLBACK_EVENT)],
        "profiling": profiling_cost(store.profiles()),
        "evaluation_time": evaluation_time(store.individuals()),
    }


def write_plot(store: RunStore, path: Path) -> Path:
    """Plot the best runtime so far against evaluations (completion order) into ``path`` (PNG)."""
    import matplotlib  # a heavy import only the plot needs

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    finished = sorted((i for i in store.individuals() if i.status != PENDING),
                      key=lambda i: (i.finished_at, i.id))
    xs, runtimes, best_so_far, best = [], [], [], None
    for n, ind in enumerate(finished, start=1):
        if ind.status == ACCEPTED:
            best = ind.runtime_ms if best is None else min(best, ind.runtime_ms)
            xs.append(n)
            runtimes.append(ind.runtime_ms)
            best_so_far.append(best)
    fig, ax = plt.subplots(figsize=(7, 4), dpi=100)
    if xs:
        ax.scatter(xs, runtimes, s=10, alpha=0.35, label="accepted kernel")
        ax.step(xs, best_so_far, where="post", color="C1", label="best so far")
        reference = next((i.result.get("reference_ms") for i in finished if i.status == ACCEPTED), None)
        if reference:
            ax.axhline(reference, color="grey", linestyle="--", label="reference (PyTorch)")
        ax.legend()
    else:
        ax.text(0.5, 0.5, "no accepted kernel yet", ha="center", va="center", transform=ax.transAxes)
    ax.set_yscale("log")  # runtimes of one search span orders of magnitude
    ax.set_xlabel("evaluations")
    ax.set_ylabel("runtime (ms)")
    ax.set_title(Path(store.config()["problem"]["reference"]).parent.name or "kevo run")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def print_report(report: dict[str, Any], console: Console) -> None:
    """The report as tables, for a person."""
    console.print(f"run        {report['run_dir']}", highlight=False)
    console.print(f"problem    {report['problem']}", highlight=False)
    console.print(f"evaluated  {report['evaluations']} of {report['max_evaluations']}"
                  + (f" ({report['pending']} pending)" if report["pending"] else ""), highlight=False)
    console.print(f"statuses   {format_counts(report['status_counts'])}", highlight=False)
    if report["stopped"]:
        console.print(f"stopped    {report['stopped']}", highlight=False)
    if report.get("plot"):
        console.print(f"plot       {report['plot']}", highlight=False)
    for reason in report.get("profiler", []):
        console.print(f"profiler   analytic roofline: {reason}", highlight=False)
    if line := profiling_line(report.get("profiling")):
        console.print(line, highlight=False)
    if line := time_line(report.get("evaluation_time")):
        console.print(line, highlight=False)
    if report.get("llm_usage", {}).get("requests") or report.get("llm_failed_proposals"):
        console.print(f"llm        {format_usage(report['llm_usage'])}; "
                      f"{report['llm_failed_proposals']} proposals gave no new kernel", highlight=False)
    for line in sol_lines(report):
        console.print(line, highlight=False)
    if report["top"]:
        _print_kernels(report, console)
    else:
        console.print("no accepted kernel yet")
    if report.get("operators_by_class"):
        _print_operators(report["operators_by_class"], console)


def format_usage(usage: dict[str, Any]) -> str:
    """``12 requests, 30,123 tokens (24,000 in, 6,123 out), $0.0123 (openai/gpt-4o-mini 12: $0.0123)``."""
    text = (f"{usage['requests']} requests, {usage['prompt_tokens'] + usage['completion_tokens']:,} tokens "
            f"({usage['prompt_tokens']:,} in, {usage['completion_tokens']:,} out), ${usage['cost_usd']:.4f}")
    models = ", ".join(f"{model} {u['requests']}: ${u['cost_usd']:.4f}" for model, u in usage["by_model"].items())
    return text + (f" ({models})" if models else "")


def _print_operators(rows: list[dict[str, Any]], console: Console) -> None:
    table = Table(title="what paid off, by the parent's bottleneck class", title_justify="left")
    for column in ("class", "kind", "operator / focus", "children", "improved", "rate"):
        table.add_column(column, justify="right" if column in ("children", "improved", "rate") else "left")
    for row in rows:
        table.add_row(row["bottleneck"], row["kind"], row["arm"], str(row["tries"]), str(row["improvements"]),
                      f"{row['rate']:.0%}")
    console.print(table)


def _print_kernels(report: dict[str, Any], console: Console) -> None:
    top = Table(title="fastest kernels", title_justify="left")
    for column in ("id", "gen", "operator", "runtime ms", "spread", "speedup", "sol", "max |diff|"):
        top.add_column(column, justify="right" if column not in ("operator",) else "left")
    for row in report["top"]:
        sol_text = "below floor!" if row["below_floor"] else _fmt(row["sol"], "", 2)
        top.add_row(str(row["id"]), str(row["generation"]), row["operator"], f"{row['runtime_ms']:.4g}",
                    f"{100 * row['runtime_spread']:.1f}%" if row["runtime_spread"] is not None else "-",
                    _x(row["speedup"]), sol_text, f"{row['max_abs_diff']:.2g}")
    console.print(top)
    lineage = Table(title=f"lineage of kernel {report['best']['id']}", title_justify="left")
    for column in ("id", "gen", "operator", "parents", "status", "runtime ms", "changes"):
        lineage.add_column(column)
    for row in report["lineage"]:
        runtime = f"{row['runtime_ms']:.4g}" if row["runtime_ms"] is not None else "-"
        lineage.add_row(str(row["id"]), str(row["generation"]), row["operator"],
                        ",".join(map(str, row["parents"])) or "-", row["status"], runtime, row["changes"])
    console.print(lineage)


def format_counts(counts: dict[str, int]) -> str:
    """``accepted 40, wrong 3, pending 2``: accepted first, pending last, the rest by count."""
    order = sorted(counts, key=lambda s: (s != ACCEPTED, s == PENDING, -counts[s], s))
    return ", ".join(f"{status} {counts[status]}" for status in order) or "nothing evaluated"


def _record(ind: Individual) -> dict[str, Any]:
    return {**ind.result, "id": ind.id, "source_hash": ind.source_hash}


def _summary(ind: Individual) -> dict[str, Any]:
    result = ind.result or {}
    return {"id": ind.id, "generation": ind.generation, "island": ind.island, "operator": ind.operator,
            "runtime_ms": ind.runtime_ms, "runtime_spread": result.get("runtime_spread"),
            "speedup": result.get("speedup"), "sol": result.get("sol"), "below_floor": bool(result.get("below_floor")),
            "max_abs_diff": result.get("max_abs_diff"), "source_hash": ind.source_hash}


def _lineage(store: RunStore, best: Individual) -> list[dict[str, Any]]:
    """The best kernel and its ancestors, oldest first, each with what changed from its first parent."""
    family = [*store.lineage(best.id), best]
    by_id = {ind.id: ind for ind in family}
    rows = []
    for ind in family:
        parent = by_id.get(ind.parents[0]) if ind.parents else None
        changes = "" if parent is None else ", ".join(
            f"{name} {parent.params.get(name)}→{value}"
            for name, value in ind.params.items() if parent.params.get(name) != value)
        rows.append({**dataclasses.asdict(ind), "changes": changes})
        for key in ("source", "result", "params", "created_at", "finished_at"):
            rows[-1].pop(key)
    return rows


def _x(speedup: float | None) -> str:
    return f"{speedup:.3g}x" if speedup else "-"


# --- a sweep: one line per run, and the field's figures over its problems ---------------


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
    floor_ms: float | None = None  # the problem's floor (fitness.floor), where known
    sol: float | None = None  # the best's speed of light
    eager_sol: float | None = None
    compiled_sol: float | None = None  # torch.compile's, where the run timed it on a clean clock
    vs_compile: dict[str, Any] | None = None  # the best over torch.compile (evolve.report_sol.vs_compile)
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
        standings = standing(store, best)
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

    def fast(p: float) -> float:
        return sum(1 for s in speedups if s > p) / n if n else 0.0

    geomean = _geomean(speedups)
    over_compile = [o.vs_compile["ratio"] for o in correct if (o.vs_compile or {}).get("ratio")]

    def fast_compile(p: float) -> float:
        return sum(1 for s in over_compile if s > p) / n if n else 0.0

    granted = {o.name: o.extra_evaluations for o in outcomes if o.extra_evaluations}
    return {"problems": n, "correct": len(correct), "fraction_correct": len(correct) / n if n else 0.0,
            "fast_1": fast(1.0), "fast_1.5": fast(1.5), "fast_2": fast(2.0),
            "geomean_speedup_correct": geomean,
            "vs_compile": {"problems": len(over_compile), "fast_1": fast_compile(1.0), "fast_1.5": fast_compile(1.5),
                           "fast_2": fast_compile(2.0), "geomean": _geomean(over_compile),
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
        best_sol = "below floor!" if r.get("below_floor") else _fmt(r.get("sol"), "", 2)
        lines.append(f"| {r['name']} | {r['status']} | {r['evaluations']} | {_fmt(r['best_ms'])} "
                     f"| {_over_compile(r.get('vs_compile'))} "
                     f"| {_fmt(r['reference_ms'])} | {_fmt(r['speedup'], 'x')} | {best_sol} "
                     f"| {_fmt(r.get('eager_sol'), '', 2)} | {_fmt(r.get('compiled_sol'), '', 2)} "
                     f"| {_fmt(r.get('left_ms'))} |")
    g = summary["geomean_speedup_correct"]
    lines.append("")
    lines.append(f"{summary['correct']}/{summary['problems']} correct ({100 * summary['fraction_correct']:.0f}%); "
                 f"fast_1 {100 * summary['fast_1']:.0f}%, fast_1.5 {100 * summary['fast_1.5']:.0f}%, "
                 f"fast_2 {100 * summary['fast_2']:.0f}%; geometric-mean speedup over correct: "
                 + (f"{g:.3g}x" if g else "-"))
    over = summary.get("vs_compile") or {}
    if over.get("problems"):
        lines.append(f"over torch.compile (clean clock, {over['problems']} problems): fast_1 "
                     f"{100 * over['fast_1']:.0f}%, fast_1.5 {100 * over['fast_1.5']:.0f}%, fast_2 "
                     f"{100 * over['fast_2']:.0f}%; geometric mean {over['geomean']:.3g}x")
    if over.get("slower"):
        lines.append(f"torch.compile is faster beyond noise on: {', '.join(over['slower'])}")
    if over.get("without"):
        lines.append("no clean torch.compile time: " + "; ".join(f"{name} ({why})"
                                                                  for name, why in over["without"].items()))
    if summary.get("second_pass"):
        runs = {r["name"]: r for r in summary["runs"]}
        spent = ", ".join(f"{name} +{n} ({runs[name]['extra_spent']} spent; left on the table "
                          f"{_fmt(runs[name]['left_ms_before_extra'])} -> {_fmt(runs[name]['left_ms'])} ms)"
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


def _fmt(value: float | None, unit: str = "", digits: int = 4) -> str:
    return "-" if value is None else f"{value:.{digits}g}{unit}"
