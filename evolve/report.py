"""What a run found: the numbers (``build_report``), a plot, and the text ``kevo report`` prints
(a sweep's runs, in the field's terms: ``evolve.report_sweep``).

The report reads the store only, so it works on a finished run, a killed
one, and one that another process is still writing.

Its headline is the best over torch.compile (``vs_compile``): the ratio with
its interval from the end-of-run rounds that timed both with the device to
themselves, interleaved (``evolve.search.confirm``), eager beside it; or why
there is no clean figure. Where torch.compile is faster, it says so and by
how much.

Beside the speedups it gives the speed of light (``fitness.judge.sol``): the best's
SOL, eager PyTorch's and torch.compile's against the same floor, and what is
left on the table (best minus floor); kernels that read below the floor are
flagged, never a plain speedup. It says whether the best can be told apart
from the next ones: from the end-of-run rounds that timed them again side by
side (``evolve.search.confirm``), else from their spreads alone.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from evolve.report_sol import fmt, seed_note, sol_figures, sol_lines, standing
from evolve.report_time import evaluation_time, pace, pace_line, time_line
from evolve.search.loop import STATE_KEY
from evolve.search.steering import FALLBACK_EVENT, profiling_cost, profiling_line, selector_table
from evolve.search.variation import FAILED_EVENT
from population_store import ACCEPTED, PENDING, Individual, RunStore

PLOT_FILE = "progress.png"
TOP = 5


def build_report(store: RunStore, run_dir: Path) -> dict[str, Any]:
    """The run as JSON-ready data: ``evaluations``, ``status_counts``, ``best`` and more.

    ``best`` is the verify-like record of the fastest accepted kernel plus its
    ``id`` and ``source_hash``, or None when no kernel was accepted.
    ``vs_compile``: the best over torch.compile, ``ratio``, ``low``, ``high`` (and more:
    ``evolve.search.confirm.against_incumbents``), or ``why`` there is none;
    ``vs_compile_tf32`` beside it where the best multiplies fp32 in TF32 or tf32x3; ``seed_note``: why a
    seed from torch.compile may not match it (``evolve.report_sol.seed_note``), or "".
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
    evaluations' time went (``evolve.report_time``); ``pace``: evaluations per second over the whole run and
    from the first result to the last (``evolve.report_time.pace``).
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
        "seed_note": seed_note(run_dir),
        "confinement": stopped[-1]["data"].get("confinement", []) if stopped else [],
        "lineage": _lineage(store, top[0]) if top else [],
        "llm_usage": store.llm_usage().to_dict(),
        "llm_failed_proposals": len(store.events(FAILED_EVENT)),
        "operators_by_class": selector_table((store.get_state(STATE_KEY) or {}).get("selector")),
        "profiler": [e["data"]["reason"] for e in store.events(FALLBACK_EVENT)],
        "profiling": profiling_cost(store.profiles()),
        "evaluation_time": evaluation_time(store.individuals()),
        "pace": pace(store),
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
    if line := pace_line(report.get("pace")):
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
        sol_text = "below floor!" if row["below_floor"] else fmt(row["sol"], "", 2)
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
