"""The analytic roofline: what the work of a forward implies at its measured time.

No profiler runs. From the bytes a forward must move, the work it must do
(when the problem declares it) and the evaluator's measured runtime, the
achieved fractions of the device's peak bandwidth and compute follow from
the specs table. It is the fallback whenever a hardware profiler is missing
or failed, and its figures are against datasheet peaks, so they read lower
than ncu's sustained-peak percentages.
"""

from __future__ import annotations

from typing import Any

from platforms.profiling.classes import UNKNOWN
from platforms.profiling.classify import Thresholds, classify
from platforms.profiling.record import COMPUTE_PCT, DRAM_BYTES, DRAM_PCT, DURATION_NS, Metric, ProfileRecord, Workload, metric
from platforms.profiling.summary import summary_text
from platforms.specs import lookup

#: dtype of the work -> the specs figure that bounds it (TFLOPS).
_PEAK_FOR_DTYPE = {
    "float32": ("fp32_tflops", "fp32_matrix_tflops"),
    "bfloat16": ("bf16_tflops",),
    "float16": ("bf16_tflops",),  # every GPU in the table runs fp16 and bf16 at the same dense rate
}


def peak_tflops(specs: dict[str, Any], dtype: str) -> float | None:
    """The highest dense rate ``specs`` lists for work in ``dtype`` (None when unknown).

    For fp32 that is the larger of the vector and the matrix rate (AMD's MFMA
    runs true fp32), so a fraction never exceeds 1 on hardware that can do better
    than its vector peak.
    """
    figures = [specs[key] for key in _PEAK_FOR_DTYPE.get(dtype, ()) if specs.get(key)]
    return max(figures) if figures else None


def roofline_metrics(workload: Workload, specs: dict[str, Any]) -> dict[str, Metric]:
    """DRAM and compute fractions of peak a forward achieves at its measured runtime."""
    metrics: dict[str, Metric] = {}
    if workload.runtime_ms is None or workload.runtime_ms <= 0:
        return metrics
    seconds = workload.runtime_ms * 1e-3
    metrics[DURATION_NS] = metric(DURATION_NS, workload.runtime_ms * 1e6)
    if workload.bytes_moved is not None and specs.get("mem_bw_gbs"):
        metrics[DRAM_BYTES] = metric(DRAM_BYTES, workload.bytes_moved)
        metrics[DRAM_PCT] = metric(DRAM_PCT, 100 * workload.bytes_moved / seconds / (specs["mem_bw_gbs"] * 1e9))
    peak = peak_tflops(specs, workload.dtype)
    if workload.flops is not None and peak:
        metrics[COMPUTE_PCT] = metric(COMPUTE_PCT, 100 * workload.flops / seconds / (peak * 1e12))
    return metrics


def roofline_record(workload: Workload, thresholds: Thresholds, reason: str = "") -> ProfileRecord:
    """The record of the analytic roofline; ``reason`` says why no hardware profile was taken."""
    specs = lookup(workload.device_name)
    metrics = roofline_metrics(workload, specs)
    if workload.runtime_ms is None:
        bottleneck, why = UNKNOWN, "no measured runtime to compare with the device's peaks"
    elif not specs:
        bottleneck, why = UNKNOWN, f"no specs for device {workload.device_name or '(unnamed)'!r}"
    elif workload.bytes_moved is None and workload.flops is None:
        bottleneck, why = UNKNOWN, "the bytes and work of a forward are unknown"
    else:
        bottleneck, why = classify({k: m.value for k, m in metrics.items()}, thresholds, specs.get("units"))
    record = ProfileRecord("roofline", "analytic", workload.device_name, bottleneck, why, metrics, reason=reason)
    record.summary = summary_text(record)
    return record
