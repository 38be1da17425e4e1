"""``kevo apply``'s report as text: each region's outcome, the model's check, the times and the bound."""

from __future__ import annotations

from evolve.models.apply import ApplyReport
from evolve.report_sol import compile_line


def applied_lines(r: ApplyReport) -> list[str]:
    """The lines ``kevo apply`` prints (``--json`` prints ``ApplyReport.to_dict()``).

    >>> from evolve.models.apply import RegionOutcome
    >>> region = RegionOutcome("00_linear.py", 0.6, 1, 0, "000-00_linear#4", 0.5, None, None,
    ...                        "kept its own code: its kernel is 0.5x of it")
    >>> print("\\n".join(applied_lines(ApplyReport("m.py", "unchanged", "no kernel is faster", [region], None, None,
    ...                                            "", 3, 0.0, None, None))))
    status     unchanged
    reason     no kernel is faster
       60.0%  x0/1 00_linear.py: kept its own code: its kernel is 0.5x of it
    """
    lines = [f"status     {r.status}"]
    if r.reason:
        lines.append(f"reason     {r.reason}")
    for g in r.regions:
        diff = f", max_abs_diff {g.max_abs_diff:.3g} (cutoff {g.cutoff:.3g})" if g.max_abs_diff is not None else ""
        alone = f"{g.speedup:.3g}x alone" if g.speedup is not None else "its speedup alone unknown"
        what = f"kernel {g.kernel}, {alone}{diff}" if g.applied else g.note
        lines.append(f"  {g.share:6.1%}  x{g.applied}/{g.count} {g.problem}: {what}")
    if r.cutoff is not None:
        lines.append(f"model      max_abs_diff {r.max_abs_diff:.3g} (cutoff {r.cutoff:.3g}: {r.cutoff_rule}), "
                     f"{r.checks} fresh input sets")
    if r.patched_ms:
        lines.append(f"eager      {r.eager_ms:.4g} ms")
        lines.append("compiled   " + (f"{r.compiled_ms:.4g} ms" if r.compiled_ms else "-"))
        lines.append(f"patched    {r.patched_ms:.4g} ms under torch.compile: {r.speedup:.3f}x over eager"
                     + (f", {r.speedup_compiled:.3f}x over torch.compile" if r.speedup_compiled else ""))
    if r.vs_compile:
        lines.append("vs compile " + compile_line(r.vs_compile, subject="patched model", winner="the patched model"))
    if r.vs_compile_tf32:
        lines.append("           " + compile_line(r.vs_compile_tf32, tf32=True, subject="patched model",
                                                  winner="the patched model"))
    if r.covered:
        bound = f"{r.bound:.3g}x" if r.bound else "unbounded"
        expected = f"; {r.expected:.3g}x with the kernels' own speedups" if r.expected else ""
        lines.append(f"bound      {bound} (Amdahl: the patched regions are {r.covered:.1%} of the model){expected}")
    if r.module:
        lines.append(f"module     {r.module} (import it; patch(model))")
    return lines
