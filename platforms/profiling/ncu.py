"""Nsight Compute: the command kevo runs and a parser for ncu's CSV pages.

kevo profiles into a report file and exports it with ``--import --csv
--page raw --print-units base``, but the parser reads every CSV layout ncu
writes (the raw page with its units row; the details page, one metric per
row; ``--print-summary per-kernel``) and whatever is mixed into the stream:
``==PROF==`` / ``==WARNING==`` lines, the program's own output, thousands
separators, ``n/a`` and ``no data``.
"""

from __future__ import annotations

import csv
import dataclasses
import math
import re

from platforms.profiling.record import (
    BLOCK_THREADS,
    COMPUTE_PCT,
    DRAM_BYTES,
    DRAM_PCT,
    DURATION_NS,
    GRID_BLOCKS,
    L2_HIT_PCT,
    MEMORY_UNITS_PCT,
    OCCUPANCY_PCT,
    REGISTERS,
    TENSOR_PCT,
    THEORETICAL_OCCUPANCY_PCT,
    Launch,
    Metric,
    metric,
)
from platforms.profiling.runner import ProfileParseError, parse_version

#: The metrics kevo asks ncu for: what the bottleneck class and the prompt's
#: figures read (``platforms.profiling.classify``, ``summary``), nothing else.
#: Time; DRAM throughput and the compute side of the class; the tensor pipe
#: (the compute-bound reason); achieved and theoretical occupancy and registers
#: (the latency-bound reason). The grid and block sizes come with every launch.
#: The compute side is the busier of instruction issue and the tensor pipe
#: (``COMPUTE_PARTS``), not ``sm__throughput``: that breakdown alone took ncu 9
#: replay passes on an H100 where each of these takes 1 (docs/RESULTS.md, "The profiler"),
#: and on the recorded H200 kernels the two agree on every class
#: (tests/test_profile_scale.py). Every name here is a column of real ncu output
#: (tests/fixtures/profilers/ncu_h200). Left out, though the parser still reads
#: them when present: ``sm__throughput``, the memory-units throughput (never used
#: for the class: see docs/PROFILING.md), DRAM bytes, the L2 hit rate and the
#: occupancy limiters.
NCU_METRICS: tuple[str, ...] = (
    "gpu__time_duration.sum",
    "dram__throughput.avg.pct_of_peak_sustained_elapsed",
    "sm__issue_active.avg.pct_of_peak_sustained_elapsed",
    "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed",
    "sm__warps_active.avg.pct_of_peak_sustained_active",
    "sm__maximum_warps_per_active_cycle_pct",
    "launch__registers_per_thread",
)
#: Where ``sm__throughput`` is missing, ``compute_pct`` is the largest of these (each a share of
#: the elapsed cycles' peak, like it): instruction issue, and the tensor pipe, which issues few
#: instructions for its work (a bf16 GEMM: 16% issue, 93% tensor pipe).
COMPUTE_PARTS: tuple[str, ...] = (
    "sm__issue_active.avg.pct_of_peak_sustained_elapsed",
    "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed",
)

# raw metric name -> kevo name; earlier entries win when both are present
_RAW_NAMES: tuple[tuple[str, str], ...] = (
    ("gpu__time_duration.sum", DURATION_NS),
    ("dram__throughput.avg.pct_of_peak_sustained_elapsed", DRAM_PCT),
    ("gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed", DRAM_PCT),  # SpeedOfLight section
    ("sm__throughput.avg.pct_of_peak_sustained_elapsed", COMPUTE_PCT),
    ("gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed", MEMORY_UNITS_PCT),
    ("sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed", TENSOR_PCT),
    ("sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active", TENSOR_PCT),
    ("sm__warps_active.avg.pct_of_peak_sustained_active", OCCUPANCY_PCT),
    ("sm__maximum_warps_per_active_cycle_pct", THEORETICAL_OCCUPANCY_PCT),
    ("launch__registers_per_thread", REGISTERS),
    ("lts__t_sector_hit_rate.pct", L2_HIT_PCT),
)
# details-page (human) metric name and the unit it must have -> kevo name
_DETAIL_NAMES: dict[tuple[str, str], str] = {
    ("Duration", "ns"): DURATION_NS,
    ("DRAM Throughput", "%"): DRAM_PCT,
    ("Compute (SM) Throughput", "%"): COMPUTE_PCT,
    ("Memory Throughput", "%"): MEMORY_UNITS_PCT,
    ("Achieved Occupancy", "%"): OCCUPANCY_PCT,
    ("Theoretical Occupancy", "%"): THEORETICAL_OCCUPANCY_PCT,
    ("Registers Per Thread", "register/thread"): REGISTERS,
    ("L2 Hit Rate", "%"): L2_HIT_PCT,
}
_RAW_KEVO = dict(_RAW_NAMES)
_BYTES = ("dram__bytes_read.sum", "dram__bytes_write.sum")
# what the replays cost, in every raw page ncu 2025 writes
_PASSES = "profiler__replayer_passes"
_BACKED_UP = "profiler__replayer_bytes_mem_backed_up.sum"
_DEVICE = "device__attribute_display_name"
# unit -> (base unit, factor); ncu scales units unless --print-units base
_BASE_UNITS: dict[str, tuple[str, float]] = {
    "ns": ("ns", 1.0), "nsecond": ("ns", 1.0), "us": ("ns", 1e3), "usecond": ("ns", 1e3),
    "ms": ("ns", 1e6), "msecond": ("ns", 1e6), "s": ("ns", 1e9), "second": ("ns", 1e9),
    "byte": ("byte", 1.0), "Kbyte": ("byte", 1e3), "Mbyte": ("byte", 1e6), "Gbyte": ("byte", 1e9),
    "Tbyte": ("byte", 1e12), "KB": ("byte", 1e3), "MB": ("byte", 1e6), "GB": ("byte", 1e9),
    "hz": ("hz", 1.0), "Khz": ("hz", 1e3), "Mhz": ("hz", 1e6), "Ghz": ("hz", 1e9),
}
_NCU_VERSION = re.compile(r"Version\s+(\d+(?:\.\d+)+)")
_NUMBER = re.compile(r"^[+-]?(\d{1,3}(,\d{3})+|\d*)(\.\d+)?([eE][+-]?\d+)?$")


@dataclasses.dataclass
class NcuReport:
    """The launches of an ncu CSV export and the device it names (when it does)."""

    launches: list[Launch]
    device_name: str = ""
    replay_passes: int | None = None  # the most passes a launch was replayed for (raw page only)
    replay_bytes: float | None = None  # device memory saved and restored around replays, all launches


def ncu_commands(ncu: str, report: str, command: list[str], kernel_filter: str | None,
                 launch_count: int = 64, metrics: tuple[str, ...] = NCU_METRICS) -> tuple[list[str], list[str]]:
    """(profile, export) commands: profile the candidate's kernels into ``report``, then print its CSV.

    Only the region between ``cudaProfilerStart`` and ``cudaProfilerStop``
    is profiled (the target's warm-up and input set-up are not), clocks are
    left as they are, only ``metrics`` are collected, and at most
    ``launch_count`` launches are replayed.
    """
    profile = [ncu, "--target-processes", "all", "--profile-from-start", "off", "--clock-control", "none",
               "--metrics", ",".join(metrics), "--launch-count", str(launch_count),
               "--export", report, "--force-overwrite"]
    if kernel_filter:
        profile += ["--kernel-name", f"regex:{kernel_filter}"]
    export = [ncu, "--import", report if report.endswith(".ncu-rep") else report + ".ncu-rep",
              "--csv", "--page", "raw", "--print-units", "base"]
    return profile + list(command), export


def parse_ncu_csv(text: str) -> NcuReport:
    """The launches in ncu CSV output (any page layout), noise around it ignored."""
    rows = _csv_rows(text)
    header, body = rows[0], rows[1:]
    if "Metric Name" in header and "Metric Value" in header:
        return NcuReport(_details_launches(header, body))
    if "Metric Name" in header and "Average" in header:
        return _summary_report(header, body)
    return _raw_report(header, body)


def _csv_rows(text: str) -> list[list[str]]:
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines)
                  if line.startswith('"') and '"Kernel Name"' in line), None)
    if start is None:
        raise ProfileParseError("no ncu CSV header (a line with \"Kernel Name\") in the output")
    kept = [line for line in lines[start:] if line.startswith('"') and not line.startswith('"==')]
    rows = list(csv.reader(kept))
    width = len(rows[0])
    # The details page leaves the rule columns off metric rows: pad those;
    # a line of the program's own output that happens to start with a quote
    # has far fewer cells and is dropped.
    return [rows[0]] + [row + [""] * (width - len(row)) for row in rows[1:] if width // 2 < len(row) <= width]


def _raw_report(header: list[str], body: list[list[str]]) -> NcuReport:
    col = {name: i for i, name in enumerate(header)}
    units = [""] * len(header)
    if body and not body[0][col["Kernel Name"]]:
        units, body = body[0], body[1:]
    report = NcuReport([])
    for row in body:
        values: dict[str, Metric] = {}
        for raw, _kevo in _RAW_NAMES + tuple((b, "") for b in (*_BYTES, *COMPUTE_PARTS, _PASSES, _BACKED_UP)):
            if raw in col:
                value = _metric(row[col[raw]], units[col[raw]])
                if value is not None:
                    values[raw] = value
        report.launches.append(_launch(row[col["Kernel Name"]], values, row, col))
        if _DEVICE in col:
            report.device_name = report.device_name or row[col[_DEVICE]]
        if _PASSES in values:
            report.replay_passes = max(report.replay_passes or 0, int(values[_PASSES].value))
        if _BACKED_UP in values:
            report.replay_bytes = (report.replay_bytes or 0.0) + values[_BACKED_UP].value
    return report


def _details_launches(header: list[str], body: list[list[str]]) -> list[Launch]:
    col = {name: i for i, name in enumerate(header)}
    by_id: dict[str, tuple[list[str], dict[str, Metric]]] = {}
    for row in body:
        first, values = by_id.setdefault(row[col["ID"]], (row, {}))
        name = row[col["Metric Name"]]
        kevo = _DETAIL_NAMES.get((name, _base_unit(row[col["Metric Unit"]]))) or _RAW_KEVO.get(name)
        value = _metric(row[col["Metric Value"]], row[col["Metric Unit"]])
        if kevo is not None and value is not None and kevo not in values:
            values[kevo] = value
    return [_launch(first[col["Kernel Name"]], values, first, col, named=True) for first, values in by_id.values()]


def _summary_report(header: list[str], body: list[list[str]]) -> NcuReport:
    col = {name: i for i, name in enumerate(header)}
    groups: dict[tuple[str, ...], tuple[list[str], dict[str, Metric]]] = {}
    device = ""
    for row in body:
        key = (row[col["Kernel Name"]], row[col["Block Size"]], row[col["Grid Size"]])
        first, values = groups.setdefault(key, (row, {}))
        if row[col["Metric Name"]] == _DEVICE:
            device = device or row[col["Average"]]
        value = _metric(row[col["Average"]], row[col["Metric Unit"]])
        if value is not None:
            values[row[col["Metric Name"]]] = value
    launches = []
    for first, values in groups.values():
        launch = _launch(first[col["Kernel Name"]], values, first, col)
        count = _number(first[col["Invocations"]]) or 1
        launches.extend(Launch(launch.kernel, dict(launch.metrics)) for _ in range(int(count)))
    return NcuReport(launches, device)


def _launch(kernel: str, values: dict[str, Metric], row: list[str], col: dict[str, int],
            named: bool = False) -> Launch:
    """A launch with kevo names from raw (or, ``named``, already kevo-named) values."""
    metrics: dict[str, Metric] = {}
    if named:
        metrics.update(values)
    else:
        for raw, kevo in _RAW_NAMES:
            if raw in values and kevo not in metrics:
                metrics[kevo] = values[raw]
        if all(b in values for b in _BYTES):
            metrics[DRAM_BYTES] = metric(DRAM_BYTES, sum(values[b].value for b in _BYTES))
        parts = [values[p].value for p in COMPUTE_PARTS if p in values]
        if COMPUTE_PCT not in metrics and parts:
            metrics[COMPUTE_PCT] = metric(COMPUTE_PCT, max(parts))
    for column, kevo in (("Grid Size", GRID_BLOCKS), ("Block Size", BLOCK_THREADS)):
        if column in col:
            size = _dims(row[col[column]])
            if size is not None:
                metrics[kevo] = metric(kevo, size)
    return Launch(kernel, metrics)


def _dims(text: str) -> int | None:
    parts = [_number(p) for p in text.strip("() ").split(",")] if text else []
    if not parts or any(p is None for p in parts):
        return None
    return int(math.prod(parts))


def _base_unit(unit: str) -> str:
    return _BASE_UNITS.get(unit, (unit, 1.0))[0]


def _metric(text: str, unit: str) -> Metric | None:
    value = _number(text)
    if value is None:
        return None
    base, factor = _BASE_UNITS.get(unit, (unit, 1.0))
    return Metric(value * factor, base)


def _number(text: str) -> float | None:
    """A number as ncu prints it (``1,648,864``, ``94.46``, ``2.1e-03``); None for text or ``n/a``."""
    text = text.strip()
    if not text or not _NUMBER.match(text) or not any(c.isdigit() for c in text):
        return None
    return float(text.replace(",", ""))


def parse_ncu_version(text: str) -> str:
    """``2025.3.1.0`` from ``ncu --version`` output."""
    return parse_version(text, _NCU_VERSION)
