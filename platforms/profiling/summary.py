"""Launches to a record: group by kernel, classify, and write the prompt text."""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from platforms.profiling.classes import CLASS_LABELS
from platforms.profiling.classify import Thresholds, classify
from platforms.profiling.record import (
    BLOCK_THREADS,
    COMPUTE_PCT,
    DRAM_PCT,
    DURATION_NS,
    GRID_BLOCKS,
    OCCUPANCY_PCT,
    REGISTERS,
    TENSOR_PCT,
    THEORETICAL_OCCUPANCY_PCT,
    KernelProfile,
    Launch,
    Metric,
    ProfileRecord,
    metric,
)
from platforms.specs import lookup

#: One line per class for the prompt: what usually helps.
ADVICE: dict[str, str] = {
    "memory_bound": "move fewer bytes: fuse passes, vectorise and coalesce loads, avoid re-reading data.",
    "compute_bound": "do less work per result or use faster units: tensor cores (tl.dot), cheaper math, "
                     "larger tiles that reuse operands.",
    "latency_bound": "keep more work in flight: more programs or warps, fewer registers or less shared "
                     "memory per program, more pipeline stages.",
    "launch_bound": "the kernel is too small for its launch: do more per launch, fuse launches.",
    "at_roofline": "a unit is saturated: only a different algorithm (fewer bytes or fewer FLOPs) gains more.",
    "unknown": "no class: try any direction.",
}


def build_record(tool: str, tool_version: str, device_name: str, launches: Sequence[Launch],
                 thresholds: Thresholds, forwards: int = 1, notes: Sequence[str] = ()) -> ProfileRecord:
    """The record of a profiled program from its launches, ``forwards`` forwards' worth.

    Each kernel gets the median of its launches' metrics and its own class;
    the record gets the class of the kernel with the most GPU time, except
    that a forward whose total GPU time is under the launch threshold is
    launch-bound. ``duration_ns`` of the record is the GPU time of one forward.
    """
    if not launches:
        raise ValueError(f"{tool} reported no kernel launch")
    units = lookup(device_name).get("units")
    kernels = [_kernel(name, group, thresholds, units) for name, group in _by_kernel(launches).items()]
    kernels.sort(key=lambda k: -k.total_ns)
    per_forward = sum(k.total_ns for k in kernels) / max(forwards, 1)
    headline = dict(kernels[0].metrics)
    headline[DURATION_NS] = metric(DURATION_NS, per_forward)
    bottleneck, why = classify({k: m.value for k, m in headline.items()}, thresholds, units)
    record = ProfileRecord(tool, tool_version, device_name, bottleneck, why, headline, kernels,
                           notes=list(notes))
    record.summary = summary_text(record)
    return record


def _by_kernel(launches: Sequence[Launch]) -> dict[str, list[Launch]]:
    groups: dict[str, list[Launch]] = {}
    for launch in launches:
        groups.setdefault(launch.kernel, []).append(launch)
    return groups


def _kernel(name: str, launches: list[Launch], thresholds: Thresholds, units: int | None) -> KernelProfile:
    names = dict.fromkeys(n for launch in launches for n in launch.metrics)
    medians: dict[str, Metric] = {}
    for n in names:
        present = [launch.metrics[n] for launch in launches if n in launch.metrics]
        medians[n] = Metric(statistics.median([m.value for m in present]), present[0].unit)
    durations = [launch.metrics[DURATION_NS].value for launch in launches if DURATION_NS in launch.metrics]
    total = sum(durations) * len(launches) / len(durations) if durations else 0.0
    bottleneck, why = classify({k: m.value for k, m in medians.items()}, thresholds, units)
    return KernelProfile(name, len(launches), total, medians, bottleneck, why)


def summary_text(record: ProfileRecord, max_kernels: int = 4) -> str:
    """A few lines for an LLM prompt: the class, why, the kernels, what usually helps."""
    source = f"{record.tool} {record.tool_version}".strip()
    where = f" on {record.device_name}" if record.device_name else ""
    lines = [f"Profile ({source}{where}): {CLASS_LABELS[record.bottleneck]}: {record.why}."]
    if record.reason:
        lines.append(f"(No hardware profile: {record.reason}.)")
    if record.scale:
        lines.append(f"Profiled at a reduced shape ({record.scale}): times and grids are at that shape.")
    duration = record.value(DURATION_NS)
    if duration is not None:
        lines.append(f"GPU time per forward: {duration / 1e3:.1f} µs.")
    for kernel in record.kernels[:max_kernels]:
        lines.append(f"- {_short(kernel.name)} x{kernel.launches}: {_figures(kernel.metrics)}; "
                     f"{CLASS_LABELS[kernel.bottleneck]}")
    if len(record.kernels) > max_kernels:
        lines.append(f"- ... and {len(record.kernels) - max_kernels} more kernels")
    lines.append(f"What usually helps: {ADVICE[record.bottleneck]}")
    return "\n".join(lines)


_FIGURES = (
    (DURATION_NS, "{:.1f} µs", 1e-3), (DRAM_PCT, "DRAM {:.0f}%", 1), (COMPUTE_PCT, "compute {:.0f}%", 1),
    (TENSOR_PCT, "tensor {:.0f}%", 1), (OCCUPANCY_PCT, "occupancy {:.0f}%", 1),
    (THEORETICAL_OCCUPANCY_PCT, "(launch allows {:.0f}%)", 1), (REGISTERS, "{:.0f} regs/thread", 1),
    (GRID_BLOCKS, "grid {:.0f}", 1), (BLOCK_THREADS, "x {:.0f} threads", 1),
)


def _figures(metrics: dict[str, Metric]) -> str:
    return " ".join(fmt.format(metrics[name].value * scale)
                    for name, fmt, scale in _FIGURES if name in metrics) or "no figures"


def _short(name: str, limit: int = 80) -> str:
    return name if len(name) <= limit else name[: limit - 3] + "..."
