"""What ``kevo export`` writes: the best kernel's source under a header that describes it as it is.

The source is the kernel exactly as it was judged (its ``source_hash`` is that
of the text below the header). The header says where it comes from, how fast
it was and against what: the best over torch.compile from the end-of-run
rounds, or why there is no clean figure (``evolve.report_sol.versus``);
where torch.compile is faster, it says so. It also gives the precision each
``tl.dot`` multiplies at, from the code itself: comments a kernel inherits
from its seed may name another one (a seed that says ``ieee`` whose
descendant was mutated to ``tf32x3``), and the header says so where they do.
"""

from __future__ import annotations

from evolve.report_sol import compile_line, versus
from evolve.search.confirm import seed_of
from operators.seeds.precision import dot_precisions, lower_precision_dots
from population_store import Individual, RunStore

HEADER_MARK = "# kevo export:"


def export_text(store: RunStore, kernel: Individual) -> tuple[str, str]:
    """``kernel``'s source under its header (``HEADER_MARK`` lines, then a blank line), and how it stands
    against torch.compile, as the header says it (``compile_line``)."""
    figures = versus(store, [kernel])
    return "\n".join(_header_lines(store, kernel, figures)) + "\n\n" + kernel.source, \
        compile_line(figures["vs_compile"])


def _header_lines(store: RunStore, kernel: Individual, figures: dict) -> list[str]:
    """The header's lines, each a comment (``figures``: ``versus``)."""
    result = kernel.result or {}
    lines = [f"{HEADER_MARK} kernel {kernel.id} of {store.path.parent.name} (generation {kernel.generation}, "
             f"{kernel.operator}), source hash {kernel.source_hash[:12]}",
             f"# accepted on {result.get('device_name') or result.get('platform', '?')}: {kernel.runtime_ms:.4g} ms "
             f"median, max |diff| {result.get('max_abs_diff') or 0.0:.3g}"
             + (f" under the cutoff {result['cutoff']:.3g}" if result.get("cutoff") is not None else ""),
             f"# vs torch.compile: {compile_line(figures['vs_compile'])}"]
    if figures.get("vs_compile_tf32"):
        lines.append(f"# vs torch.compile: {compile_line(figures['vs_compile_tf32'], tf32=True)}")
    lines.extend(_precision_lines(store, kernel))
    return lines


def _precision_lines(store: RunStore, kernel: Individual) -> list[str]:
    """What the kernel's dots multiply at, and whether its seed said otherwise."""
    dots = dot_precisions(kernel.source)
    unset = [d for d in lower_precision_dots(kernel.source) if d not in dots]
    if not dots and not unset:
        return []
    said = ", ".join(f"{name.split('.input_precision')[0]} {value}" for name, value in dots.items())
    if unset:
        said += (", " if said else "") + f"{len(unset)} tl.dot with no precision written (TF32 for fp32 operands)"
    lines = [f"# dot precision: {said}"]
    seed = seed_of(store, kernel)
    if seed.id != kernel.id and dot_precisions(seed.source) != dots:
        lines.append("# (comments below were written for its seed, whose dots multiplied at "
                     + ", ".join(sorted(set(dot_precisions(seed.source).values())) or ["Triton's default"])
                     + ": the code is what holds)")
    return lines
