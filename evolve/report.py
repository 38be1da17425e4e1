"""What a run found: the numbers (``build_report``), a plot, and the text ``kevo report`` prints;
and what a sweep's runs came to, in the field's terms (``sweep_summary``).

The report reads the store only, so it works on a finished run, a killed one,
and one that another process is still writing.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from evolve.search.loop import STATE_KEY
from evolve.search.steering import FALLBACK_EVENT, selector_table
from evolve.search.variation import FAILED_EVENT
from population_store import ACCEPTED, PENDING, Individual, RunStore

PLOT_FILE = "progress.png"
TOP = 5


def build_report(store: RunStore, run_dir: Path) -> dict[str, Any]:
    """The run as JSON-ready data: ``evaluations``, ``status_counts``, ``best`` and more.

    ``best`` is the verify-like record of the fastest accepted kernel plus its
    ``id`` and ``source_hash``, or None when no kernel was accepted.
    ``llm_usage`` holds the paid LLM requests, tokens and cost (in all and
    ``by_model``); ``operators_by_class`` says, per parent bottleneck class and
    operator (or LLM focus), how many children were made and how many improved
    on their parent.
    """
    config = store.config()
    counts = store.status_counts()
    top = store.best(TOP)
    stopped = store.events("stopped")
    return {
        "run_dir": str(run_dir),
        "problem": config["problem"]["reference"],
        "evaluations": sum(n for status, n in counts.items() if status != PENDING),
        "max_evaluations": config["search"]["max_evaluations"],
        "pending": counts.get(PENDING, 0),
        "status_counts": counts,
        "stopped": stopped[-1]["data"]["reason"] if stopped else None,
        "best": _record(top[0]) if top else None,
        "top": [_summary(ind) for ind in top],
        "lineage": _lineage(store, top[0]) if top else [],
        "llm_usage": store.llm_usage().to_dict(),
        "llm_failed_proposals": len(store.events(FAILED_EVENT)),
        "operators_by_class": selector_table((store.get_state(STATE_KEY) or {}).get("selector")),
        "profiler": [e["data"]["reason"] for e in store.events(FALLBACK_EVENT)],
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
    if report.get("llm_usage", {}).get("requests") or report.get("llm_failed_proposals"):
        console.print(f"llm        {format_usage(report['llm_usage'])}; "
                      f"{report['llm_failed_proposals']} proposals gave no new kernel", highlight=False)
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
    for column in ("id", "gen", "operator", "runtime ms", "speedup", "max |diff|"):
        top.add_column(column, justify="right" if column not in ("operator",) else "left")
    for row in report["top"]:
        top.add_row(str(row["id"]), str(row["generation"]), row["operator"], f"{row['runtime_ms']:.4g}",
                    _x(row["speedup"]), f"{row['max_abs_diff']:.2g}")
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
            "runtime_ms": ind.runtime_ms, "speedup": result.get("speedup"),
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

    @property
    def correct(self) -> bool:
        return self.best_ms is not None


def sweep_summary(outcomes: list[Outcome]) -> dict[str, Any]:
    """The field's figures over the sweep's problems (KernelBench's fast_p), and every run's outcome.

    ``fraction_correct``: problems with an accepted kernel; ``fast_1``, ``fast_1.5``,
    ``fast_2``: the fractions of all problems faster than eager PyTorch by more
    than 1×, 1.5×, 2×; ``geomean_speedup_correct``: over the problems with one.
    """
    n = len(outcomes)
    correct = [o for o in outcomes if o.correct]
    speedups = [o.speedup for o in correct if o.speedup]

    def fast(p: float) -> float:
        return sum(1 for s in speedups if s > p) / n if n else 0.0

    geomean = math.exp(sum(math.log(s) for s in speedups) / len(speedups)) if speedups else None
    return {"problems": n, "correct": len(correct), "fraction_correct": len(correct) / n if n else 0.0,
            "fast_1": fast(1.0), "fast_1.5": fast(1.5), "fast_2": fast(2.0),
            "geomean_speedup_correct": geomean,
            "runs": [dataclasses.asdict(o) for o in outcomes]}


def format_sweep_summary(summary: dict[str, Any]) -> str:
    """``sweep_summary``'s data as a Markdown table of the runs and one line of figures."""
    lines = ["| run | status | evaluations | best ms | eager ms | speedup |", "|---|---|---|---|---|---|"]
    for r in summary["runs"]:
        lines.append(f"| {r['name']} | {r['status']} | {r['evaluations']} | {_fmt(r['best_ms'])} "
                     f"| {_fmt(r['reference_ms'])} | {_fmt(r['speedup'], 'x')} |")
    g = summary["geomean_speedup_correct"]
    lines.append("")
    lines.append(f"{summary['correct']}/{summary['problems']} correct ({100 * summary['fraction_correct']:.0f}%); "
                 f"fast_1 {100 * summary['fast_1']:.0f}%, fast_1.5 {100 * summary['fast_1.5']:.0f}%, "
                 f"fast_2 {100 * summary['fast_2']:.0f}%; geometric-mean speedup over correct: "
                 + (f"{g:.3g}x" if g else "-"))
    return "\n".join(lines)


def _fmt(value: float | None, unit: str = "") -> str:
    return "-" if value is None else f"{value:.4g}{unit}"
