"""The bottleneck classes a profile ends in: names only, so ``operators`` can import them cheaply."""

from __future__ import annotations

MEMORY_BOUND = "memory_bound"  # DRAM traffic is the limiter: move fewer bytes
COMPUTE_BOUND = "compute_bound"  # the SM / CU pipes are the limiter: do less work per result
LATENCY_BOUND = "latency_bound"  # neither is busy: too few warps in flight (occupancy) or stalls
LAUNCH_BOUND = "launch_bound"  # the GPU time per forward is below the cost of launching it
AT_ROOFLINE = "at_roofline"  # a unit runs at its peak: only a different algorithm gains more
UNKNOWN = "unknown"  # nothing measured tells the classes apart

BOTTLENECK_CLASSES: tuple[str, ...] = (
    MEMORY_BOUND, COMPUTE_BOUND, LATENCY_BOUND, LAUNCH_BOUND, AT_ROOFLINE, UNKNOWN,
)

CLASS_LABELS: dict[str, str] = {
    MEMORY_BOUND: "memory-bound",
    COMPUTE_BOUND: "compute-bound",
    LATENCY_BOUND: "latency/occupancy-bound",
    LAUNCH_BOUND: "launch-bound",
    AT_ROOFLINE: "at the roofline",
    UNKNOWN: "unclassified",
}
