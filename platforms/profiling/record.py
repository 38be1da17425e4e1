"""The profile record every profiler returns, whatever tool produced it.

Metrics are stored under kevo's own names (below) in base units, so the
classifier, the selector and an LLM prompt read the same thing from ncu,
rocprofv3 or the analytic roofline. Records are JSON-safe through
``to_dict`` / ``from_dict`` and go into the run's store with the evaluation.
"""

from __future__ import annotations

import dataclasses
from typing import Any

# kevo's metric names; every value is in the unit next to it.
DURATION_NS = "duration_ns"  # ns: GPU time of one launch (median over launches)
DRAM_PCT = "dram_pct"  # %: DRAM throughput, of the device's peak bandwidth
COMPUTE_PCT = "compute_pct"  # %: busiest SM/CU side (ncu: issue or tensor pipe; AMD VALU/MFMA busy)
TENSOR_PCT = "tensor_pct"  # %: tensor pipe (NVIDIA) or MFMA (AMD) busy
MEMORY_UNITS_PCT = "memory_units_pct"  # %: busiest memory unit incl. L1/shared (ncu); NOT DRAM
OCCUPANCY_PCT = "occupancy_pct"  # %: achieved warps in flight, of the maximum
THEORETICAL_OCCUPANCY_PCT = "theoretical_occupancy_pct"  # %: what the launch allows
REGISTERS = "registers_per_thread"  # registers (NVIDIA) or arch VGPRs (AMD)
DRAM_BYTES = "dram_bytes"  # bytes read + written to DRAM by one launch
L2_HIT_PCT = "l2_hit_pct"  # %
GRID_BLOCKS = "grid_blocks"  # blocks (workgroups) launched
BLOCK_THREADS = "block_threads"  # threads (work-items) per block

UNITS: dict[str, str] = {
    DURATION_NS: "ns", DRAM_PCT: "%", COMPUTE_PCT: "%", TENSOR_PCT: "%", MEMORY_UNITS_PCT: "%",
    OCCUPANCY_PCT: "%", THEORETICAL_OCCUPANCY_PCT: "%", REGISTERS: "register/thread",
    DRAM_BYTES: "byte", L2_HIT_PCT: "%", GRID_BLOCKS: "block", BLOCK_THREADS: "thread",
}


#: What a profile cost, in ``ProfileRecord.cost`` (a key is left out when not known):
#: ``seconds``: wall time of the whole profile, on the evaluator that took it;
#: ``device_s``: of that, the time the profiled program had the device to itself
#: (timings of other candidates on that device waited);
#: ``tool_runs``: runs of the tool (ncu: profile and export; rocprof: the trace and each counter pass);
#: ``replay_passes``: passes ncu replayed each launch for (``profiler__replayer_passes``);
#: ``replay_bytes``: device memory ncu saved and restored around those replays, all launches
#: (``profiler__replayer_bytes_mem_backed_up``): it grows with the profiled program's allocations.
COST_KEYS = ("seconds", "device_s", "tool_runs", "replay_passes", "replay_bytes")


@dataclasses.dataclass(frozen=True)
class Metric:
    """One measured value and its unit."""

    value: float
    unit: str

    def to_dict(self) -> dict[str, Any]:
        return {"value": self.value, "unit": self.unit}


@dataclasses.dataclass
class Launch:
    """One kernel launch as a tool reported it, before launches are grouped by kernel."""

    kernel: str
    metrics: dict[str, Metric]


@dataclasses.dataclass(frozen=True)
class Workload:
    """What the analytic roofline needs, and how many forwards the profiled program ran.

    ``bytes_moved`` and ``flops`` are the minimum traffic and work of one
    forward; ``runtime_ms`` its measured time (the evaluator's median).
    """

    bytes_moved: int | None = None
    flops: float | None = None
    dtype: str = ""  # dtype of the work (``float32``, ``bfloat16``, ...): picks the compute peak
    runtime_ms: float | None = None
    device_name: str = ""
    forwards: int = 1  # forwards whose launches the profiler sees


@dataclasses.dataclass
class KernelProfile:
    """One kernel of the profiled program: its launches grouped, and its class."""

    name: str
    launches: int
    total_ns: float  # GPU time of all its launches
    metrics: dict[str, Metric]  # median over its launches
    bottleneck: str
    why: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name, "launches": self.launches, "total_ns": self.total_ns,
            "metrics": {k: m.to_dict() for k, m in self.metrics.items()},
            "bottleneck": self.bottleneck, "why": self.why,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> KernelProfile:
        return cls(data["name"], int(data["launches"]), float(data["total_ns"]),
                   _metrics_from(data["metrics"]), data["bottleneck"], data["why"])


@dataclasses.dataclass
class ProfileRecord:
    """What a profiler measured, with which tool, and the bottleneck class it implies.

    ``reason`` is empty when the hardware profiler worked; otherwise it says
    why it did not and the class comes from the analytic roofline.
    ``summary`` is the text an LLM prompt shows.
    """

    tool: str  # ncu | rocprofv3 | rocprofv2 | rocprof | roofline
    tool_version: str
    device_name: str
    bottleneck: str
    why: str  # one line: what in the metrics decided the class
    metrics: dict[str, Metric]  # headline figures (the dominant kernel's, or the roofline's)
    kernels: list[KernelProfile] = dataclasses.field(default_factory=list)
    reason: str = ""
    notes: list[str] = dataclasses.field(default_factory=list)  # degraded parts, e.g. a skipped counter pass
    summary: str = ""
    shapes: dict[str, int] = dataclasses.field(default_factory=dict)  # the overrides the profiled program ran at
    scale: str = ""  # how that shape was reduced from the problem's own (empty: profiled at its own shapes)
    cost: dict[str, float] = dataclasses.field(default_factory=dict)  # what taking it cost: see COST_KEYS

    @property
    def measured(self) -> bool:
        """True when a hardware profiler produced this record."""
        return not self.reason and self.tool != "roofline"

    def value(self, name: str) -> float | None:
        metric = self.metrics.get(name)
        return None if metric is None else metric.value

    def kernel(self, name: str) -> KernelProfile:
        """The kernel whose name starts with ``name``; ``KeyError`` if none does."""
        for kernel in self.kernels:
            if kernel.name.startswith(name):
                return kernel
        raise KeyError(f"no kernel named {name!r} in the profile (kernels: "
                       f"{', '.join(k.name[:40] for k in self.kernels) or 'none'})")

    def to_dict(self) -> dict[str, Any]:
        return {
            "tool": self.tool, "tool_version": self.tool_version, "device_name": self.device_name,
            "bottleneck": self.bottleneck, "why": self.why,
            "metrics": {k: m.to_dict() for k, m in self.metrics.items()},
            "kernels": [k.to_dict() for k in self.kernels],
            "reason": self.reason, "notes": list(self.notes), "summary": self.summary,
            "shapes": dict(self.shapes), "scale": self.scale, "cost": dict(self.cost),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ProfileRecord:
        return cls(
            tool=data["tool"], tool_version=data["tool_version"], device_name=data["device_name"],
            bottleneck=data["bottleneck"], why=data["why"], metrics=_metrics_from(data["metrics"]),
            kernels=[KernelProfile.from_dict(k) for k in data.get("kernels", [])],
            reason=data.get("reason", ""), notes=list(data.get("notes", [])),
            summary=data.get("summary", ""), shapes=dict(data.get("shapes", {})), scale=data.get("scale", ""),
            cost={k: float(v) for k, v in data.get("cost", {}).items()},
        )


def _metrics_from(data: dict[str, Any]) -> dict[str, Metric]:
    return {name: Metric(float(m["value"]), str(m["unit"])) for name, m in data.items()}


def metric(name: str, value: float) -> Metric:
    """A kevo metric with its standard unit."""
    return Metric(float(value), UNITS[name])
