"""From measured throughputs to a bottleneck class, with thresholds per platform.

The rule reads DRAM throughput and the busiest compute pipe, never the
busiest *memory unit*: a tensor-core GEMM keeps L1/shared memory busy
(ncu's "Memory Throughput" 94% on an H200 bf16 GEMM) while DRAM idles (16%)
and the tensor pipe runs at 97%; "memory throughput ≥ compute throughput"
would call it memory-bound. See docs/PROFILING.md.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from platforms.profiling.classes import (
    AT_ROOFLINE,
    COMPUTE_BOUND,
    LATENCY_BOUND,
    LAUNCH_BOUND,
    MEMORY_BOUND,
    UNKNOWN,
)
from platforms.profiling.record import (
    COMPUTE_PCT,
    DRAM_PCT,
    DURATION_NS,
    GRID_BLOCKS,
    OCCUPANCY_PCT,
    TENSOR_PCT,
    THEORETICAL_OCCUPANCY_PCT,
)


@dataclasses.dataclass(frozen=True)
class Thresholds:
    """Where the classes begin, as fractions of peak (and microseconds for launches)."""

    roofline: float  # a unit at or above this fraction of its peak is saturated
    busy: float  # the busier unit at or above this fraction is the limiter
    launch_us: float  # GPU time per forward below this: launch overhead dominates


#: NVIDIA's fractions come from ncu's own percentages of sustained peak; the
#: AMD ones are derived from counters and datasheet peaks and are cruder (the
#: ROCm work kevo grew from used 85% where its ncu side used 95%). The
#: launch figures are estimates of a Triton launch from Python (~10 µs on
#: CUDA; HIP's launch path is slower).
THRESHOLDS: dict[str, Thresholds] = {
    "cuda": Thresholds(roofline=0.95, busy=0.60, launch_us=10.0),
    "rocm": Thresholds(roofline=0.85, busy=0.50, launch_us=15.0),
    "cpu": Thresholds(roofline=0.95, busy=0.60, launch_us=0.0),
}


def thresholds_for(platform_name: str) -> Thresholds:
    try:
        return THRESHOLDS[platform_name]
    except KeyError:
        raise ValueError(f"no bottleneck thresholds for platform {platform_name!r} "
                         f"(known: {', '.join(THRESHOLDS)})") from None


def classify(metrics: Mapping[str, float], thresholds: Thresholds, units: int | None = None) -> tuple[str, str]:
    """(class, why) for one kernel or one forward, from kevo-named metric values.

    ``metrics`` holds plain numbers under the names of ``platforms.profiling.record``;
    ``units`` is the device's SM/CU count when known (a grid smaller than it
    leaves units idle).

    >>> classify({"duration_ns": 60_000, "dram_pct": 84.3, "compute_pct": 17.9}, THRESHOLDS["cuda"])[0]
    'memory_bound'
    """
    duration = metrics.get(DURATION_NS)
    if duration is not None and duration < thresholds.launch_us * 1e3:
        return LAUNCH_BOUND, (f"{duration / 1e3:.1f} µs of GPU time, under the ~{thresholds.launch_us:g} µs "
                              "a launch costs")
    dram, compute = metrics.get(DRAM_PCT), metrics.get(COMPUTE_PCT)
    if dram is None and compute is None:
        return UNKNOWN, "neither DRAM nor compute throughput was measured"
    busy, roof = 100 * thresholds.busy, 100 * thresholds.roofline
    side = "DRAM" if compute is None or (dram is not None and dram >= compute) else "compute"
    top = dram if side == "DRAM" else compute
    if top >= roof:
        return AT_ROOFLINE, f"{side} throughput at {top:.0f}% of peak (saturated at {roof:.0f}%)"
    if side == "DRAM" and top >= busy:
        other = "" if compute is None else f", compute {compute:.0f}%"
        return MEMORY_BOUND, f"DRAM throughput {dram:.0f}% of peak{other}"
    if compute is not None and compute >= busy:
        tensor = metrics.get(TENSOR_PCT)
        pipe = f", tensor pipe {tensor:.0f}%" if tensor is not None else ""
        return COMPUTE_BOUND, f"compute throughput {compute:.0f}% of peak{pipe}, DRAM {_pct(dram)}"
    if compute is None:
        return UNKNOWN, (f"DRAM throughput {dram:.0f}% of peak and the compute side unmeasured "
                         "(a problem can declare FLOPS)")
    if dram is None:
        return UNKNOWN, f"compute throughput {compute:.0f}% of peak and DRAM traffic unmeasured"
    return LATENCY_BOUND, _latency_reason(metrics, dram, compute, units)


def _latency_reason(metrics: Mapping[str, float], dram: float, compute: float, units: int | None) -> str:
    parts = [f"DRAM {dram:.0f}% and compute {compute:.0f}% of peak: neither is busy"]
    blocks = metrics.get(GRID_BLOCKS)
    if blocks is not None and units and blocks < units:
        parts.append(f"a grid of {blocks:.0f} blocks leaves {units - blocks:.0f} of {units} units idle")
    achieved = metrics.get(OCCUPANCY_PCT)
    if achieved is not None:
        theoretical = metrics.get(THEORETICAL_OCCUPANCY_PCT)
        limit = f" (launch allows {theoretical:.0f}%)" if theoretical is not None else ""
        parts.append(f"achieved occupancy {achieved:.0f}%{limit}")
    return "; ".join(parts)


def _pct(value: float | None) -> str:
    return "unmeasured" if value is None else f"{value:.0f}%"
