"""What a run's report says of the speed of light and of noise (``evolve.report`` shows it).

- ``sol_figures``: the best's SOL (``fitness.judge.sol``) beside eager PyTorch's
  and torch.compile's, against the same floor, and what is left on the table
  (best minus floor). torch.compile's time is the one the end-of-run rounds
  took, with the device to itself (``vs_compile``); none else is used.
- ``versus``: the best over torch.compile with its interval (``vs_compile``), or
  why there is no clean figure; ``compile_line`` says it as the report prints it.
- ``standing``: the kernels flagged for reading below the floor; what timing
  the top kernels again side by side found (``evolve.search.confirm``), or
  why they were not; and, from the verdicts' spreads alone, the next kernels
  the best is not faster than beyond noise
  (``evolve.search.population.faster``).
- ``sol_lines``: those, as ``kevo report`` prints them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from evolve.search.confirm import CONFIRMED_EVENT, GPU_PLATFORMS, NO_INCUMBENT, rounds_for
from evolve.search.population import faster
from evolve.session import RECORDING_FILE
from fitness.judge.floor import sol
from population_store import ACCEPTED, Individual, RunStore


def sol_figures(best: dict[str, Any] | None, compiled_ms: float | None = None) -> dict[str, Any] | None:
    """The best's speed of light beside eager PyTorch's (its ``reference_ms``) and torch.compile's
    (``compiled_ms``, where the run timed it on a clean clock: ``vs_compile``), all against the best's floor, and what is left on the
    table (best minus floor); None without an accepted best with a floor.

    >>> f = sol_figures({"floor_ms": 1.0, "runtime_ms": 2.0, "reference_ms": 4.0, "sol": 0.5, "bound": "memory"}, 2.5)
    >>> f["best"], f["eager"], f["compiled"], f["left_ms"]
    (0.5, 0.25, 0.4, 1.0)
    """
    if not best or best.get("floor_ms") is None:
        return None
    floor_ms = best["floor_ms"]
    return {"floor_ms": floor_ms, "bound": best.get("bound"), "source": (best.get("floor") or {}).get("source"),
            "best": best.get("sol"), "eager": sol(floor_ms, best["reference_ms"]) if best.get("reference_ms") else None,
            "compiled_ms": compiled_ms, "compiled": sol(floor_ms, compiled_ms) if compiled_ms else None,
            "left_ms": max(0.0, best["runtime_ms"] - floor_ms), "below_floor": bool(best.get("below_floor")),
            "below_floor_reason": best.get("below_floor_reason", "")}


def versus(store: RunStore, top: list[Individual]) -> dict[str, Any]:
    """``vs_compile`` (and ``vs_compile_tf32`` where it was timed): the best of ``top`` over torch.compile
    from the end-of-run rounds (``evolve.search.confirm``), or ``{"why": ...}`` where there is no clean figure."""
    confirmed = store.events(CONFIRMED_EVENT)
    best = top[0].result if top else None
    why = "" if confirmed or not top else _why_unconfirmed(store.config(), best, store.events("stopped"))
    return _versus(confirmed[-1]["data"] if confirmed else None, best, why)


def _versus(confirmed: dict[str, Any] | None, best: dict[str, Any] | None, why_unconfirmed: str) -> dict[str, Any]:
    if confirmed and confirmed.get("vs_compile"):
        return {key: confirmed[key] for key in ("vs_compile", "vs_compile_tf32") if key in confirmed}
    if best is None:
        why = "no kernel was accepted"
    elif best.get("platform") not in GPU_PLATFORMS:
        why = NO_INCUMBENT
    elif confirmed:
        why = "this run's rounds of timing again were recorded before kevo timed torch.compile in them"
    else:
        why = why_unconfirmed
    return {"vs_compile": {"why": why}}


def seed_note(run_dir: Path) -> str:
    """Why a run's seed from torch.compile may not match torch.compile, from what its capture recorded
    (``seeds: compile``): the default configuration gave no Triton-only seed (an extern library, ATen), or the
    seed has no fast path at the main shapes (``operators.seeds.fast_path``); "" where neither, or no capture."""
    try:
        recording = json.loads((Path(run_dir) / RECORDING_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return ""
    if not isinstance(recording, dict) or not isinstance(recording.get("skipped") or {}, dict):
        return ""
    skipped = recording.get("skipped") or {}
    variant = recording.get("variant", "default")
    if variant != "default" and skipped.get("default"):
        return (f"torch.compile's own code is not Triton only ({skipped['default'][:160]}): the seed is Inductor's "
                f"{variant} configuration")
    if variant == "default" and "fast_path" not in recording and skipped.get("default_fast_path"):
        return f"the seed holds torch.compile's general code only ({skipped['default_fast_path'][:160]})"
    return ""


def compile_line(figures: dict[str, Any] | None, tf32: bool = False, subject: str = "best",
                 winner: str = "kevo's kernel") -> str:
    """One ``vs_compile`` as a person reads it: ``subject``'s ratio with its interval and who is faster
    (``winner`` where it is ``kevo``), or why there is none.

    >>> compile_line({"ratio": 0.8, "low": 0.78, "high": 0.82, "rounds": 3, "faster": "torch.compile",
    ...               "vs_eager": {"ratio": 2.0, "low": 1.9, "high": 2.1}, "seed": None})
    'best 0.8x torch.compile (0.78-0.82x over 3 rounds): torch.compile is faster, by 25%; 2x eager'
    >>> compile_line({"ratio": 1.3, "low": 1.2, "high": 1.4, "rounds": 3, "faster": "kevo"}, subject="patched model",
    ...              winner="the patched model")
    'patched model 1.3x torch.compile (1.2-1.4x over 3 rounds): the patched model is faster beyond noise'
    >>> compile_line({"same": "it stays torch.compile's own"}, subject="model")
    "model: it stays torch.compile's own"
    >>> compile_line({"why": "not timed"})
    'no clean torch.compile time: not timed'
    """
    what = "torch.compile with TF32 allowed" if tf32 else "torch.compile"
    if figures and figures.get("same"):
        return f"{subject}: {figures['same']}"
    if not figures or figures.get("ratio") is None:
        return f"no clean {what} time: {(figures or {}).get('why', 'not timed')}"
    ratio = figures["ratio"]
    text = (f"{subject} {ratio:.3g}x {what} ({figures['low']:.3g}-{figures['high']:.3g}x over "
            f"{figures['rounds']} rounds): ")
    if figures.get("faster") == "kevo":
        text += f"{winner} is faster beyond noise"
    elif figures.get("faster") == "torch.compile" or ratio < 1:
        text += f"{what} is faster, by {100 * (1 / ratio - 1):.3g}%"
        if figures.get("faster") != "torch.compile":
            text += " (within noise)"
    else:
        text += f"not faster than {what} beyond noise"
    if figures.get("vs_eager"):
        text += f"; {figures['vs_eager']['ratio']:.3g}x eager"
    if figures.get("seed"):
        text += f"; its seed {figures['seed']['ratio']:.3g}x {what}"
    return text


def _why_unconfirmed(config: dict[str, Any], best: dict[str, Any] | None, stopped: list) -> str:
    if rounds_for(config["search"].get("confirm_rounds"), (best or {}).get("platform", "")) == 0:
        return "the top kernels were not timed again (search.confirm_rounds is 0 here: set it to time them again)"
    if not stopped:
        return "the top kernels are timed again when the run stops"
    return "the top kernels were not timed again (the run stopped at its wall limit, or had only one kernel)"


def standing(store: RunStore, top: list[Individual]) -> dict[str, Any]:
    """``below_floor`` (ids of the kernels flagged), ``confirmed`` (the last rounds' data, or None),
    ``unconfirmed`` (why there are none, or ""), ``within_noise`` (ids among ``top[1:]``, the run's
    fastest after the best, that the best is not faster than beyond their spreads)."""
    confirmed, stopped = store.events(CONFIRMED_EVENT), store.events("stopped")
    best = top[0].result if top else None
    unconfirmed = "" if confirmed or not top else _why_unconfirmed(store.config(), best, stopped)
    return {
        **_versus(confirmed[-1]["data"] if confirmed else None, best, unconfirmed),
        "below_floor": [i.id for i in store.individuals(ACCEPTED) if (i.result or {}).get("below_floor")],
        "confirmed": confirmed[-1]["data"] if confirmed else None,
        "unconfirmed": unconfirmed,
        "within_noise": [i.id for i in top[1:]
                         if not faster(top[0].runtime_ms, _spread(top[0]), i.runtime_ms, _spread(i))],
    }


def _spread(ind: Individual) -> float:
    return (ind.result or {}).get("runtime_spread") or 0.0


def sol_lines(report: dict[str, Any]) -> list[str]:
    """The report's lines on the speed of light, the flagged kernels, how sure the best is, and the confinement."""
    lines, figures = [], report.get("speed_of_light")
    if report.get("best"):
        lines.append(f"vs compile {compile_line(report.get('vs_compile'))}")
        if report.get("vs_compile_tf32"):
            lines.append(f"vs compile {compile_line(report['vs_compile_tf32'], tf32=True)}")
        if report.get("seed_note"):
            lines.append(f"seed       {report['seed_note']}")
    if figures:
        others = ", ".join(f"{name} {_two(figures[key])}" for name, key in
                           (("eager", "eager"), ("torch.compile", "compiled")) if figures[key] is not None)
        lines.append(f"sol        best {_two(figures['best'])}" + (f", {others}" if others else "")
                     + f" of the speed of light: floor {figures['floor_ms']:.4g} ms ({figures['bound']} bound, "
                     f"{figures['source']} peaks); {figures['left_ms']:.4g} ms left on the table")
    for kernel in report.get("below_floor", []):
        why = figures["below_floor_reason"] if figures and report["best"]["id"] == kernel else ""
        lines.append(f"FLAGGED    kernel {kernel} read below the floor: not a plain speedup"
                     + (f" ({why})" if why else ""))
    confirmed = report.get("confirmed")
    if confirmed:
        over = confirmed["speedup_over_seed"]
        text = f"confirmed  {confirmed['rounds']} interleaved rounds"
        if confirmed.get("cut_short"):
            text += f" of {confirmed['cut_short']['rounds_planned']} (cut at {confirmed['cut_short']['why']})"
        if over:
            text += (f": kernel {confirmed['best']} {over['median']:.3g}x over its seed {confirmed['seed']} "
                     f"({over['low']:.3g}x-{over['high']:.3g}x)")
        if confirmed["indistinct"]:
            text += f"; it cannot be told apart from kernel(s) {', '.join(map(str, confirmed['indistinct']))}"
        for failed in confirmed["failed"]:
            text += f"; kernel {failed['id']} was not accepted again ({', '.join(failed['statuses'])})"
            if failed.get("reasons"):  # runs recorded before the reasons were kept have none
                text += f": {failed['reasons'][0][:160]}"
        lines.append(text)
    elif report.get("unconfirmed"):
        lines.append(f"unconfirmed {report['unconfirmed']}")
    if not confirmed and report.get("within_noise"):
        ids = ", ".join(map(str, report["within_noise"]))
        lines.append(f"noise      the best is not faster than kernel(s) {ids} beyond their timing spreads")
    if report.get("confinement"):
        lines.append(f"confined   {', '.join(report['confinement'])}")
    return lines


def _two(value: float | None) -> str:
    return "-" if value is None else f"{value:.2g}"


def fmt(value: float | None, unit: str = "", digits: int = 4) -> str:
    """``value`` in ``digits`` significant digits with ``unit``, or ``-`` for none."""
    return "-" if value is None else f"{value:.{digits}g}{unit}"
