"""Profiler hints: what holds a kernel back, measured by ncu or rocprof, else the analytic roofline.

See docs/PROFILING.md. The entry points:

- ``profiler_for(platform_name, ncu_bin_path=None, rocprof_bin_path=None)``
  picks the profiler; ``profiler.profile(command, env, kernel_filter,
  timeout_s, workload)`` returns a ``ProfileRecord``;
- ``ProfileRecord.bottleneck`` is one of ``BOTTLENECK_CLASSES`` and
  ``ProfileRecord.summary`` the text for an LLM prompt.
"""

from platforms.profiling.classes import (
    AT_ROOFLINE,
    BOTTLENECK_CLASSES,
    CLASS_LABELS,
    COMPUTE_BOUND,
    LATENCY_BOUND,
    LAUNCH_BOUND,
    MEMORY_BOUND,
    UNKNOWN,
)
from platforms.profiling.classify import THRESHOLDS, Thresholds, classify, thresholds_for
from platforms.profiling.ncu import NCU_METRICS, ncu_commands, parse_ncu_csv, parse_ncu_version
from platforms.profiling.profilers import (
    NcuProfiler,
    Profiler,
    ProfilerConfigError,
    RocprofProfiler,
    RooflineProfiler,
    profiler_for,
)
from platforms.profiling.record import KernelProfile, Launch, Metric, ProfileRecord, Workload
from platforms.profiling.rocprof import COUNTER_PASSES, amd_launch, counter_passes
from platforms.profiling.rocprof_parse import kernel_base_name, merge_passes, parse_dispatches, parse_stats
from platforms.profiling.roofline import roofline_record
from platforms.profiling.runner import ProfileParseError, ProfilerFailure
from platforms.profiling.summary import build_record

__all__ = [
    "AT_ROOFLINE", "BOTTLENECK_CLASSES", "CLASS_LABELS", "COMPUTE_BOUND", "COUNTER_PASSES", "LATENCY_BOUND",
    "LAUNCH_BOUND", "MEMORY_BOUND", "NCU_METRICS", "THRESHOLDS", "UNKNOWN",
    "KernelProfile", "Launch", "Metric", "NcuProfiler", "ProfileParseError", "ProfileRecord", "Profiler",
    "ProfilerConfigError", "ProfilerFailure", "RocprofProfiler", "RooflineProfiler", "Thresholds", "Workload",
    "amd_launch", "build_record", "classify", "counter_passes", "kernel_base_name", "merge_passes",
    "ncu_commands", "parse_dispatches", "parse_ncu_csv", "parse_ncu_version", "parse_stats", "profiler_for",
    "roofline_record", "thresholds_for",
]
