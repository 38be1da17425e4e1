"""AMD profilers: counter passes per architecture, commands per tool, counters to kevo metrics.

A profile is one kernel-trace run for timing (counter collection serialises
dispatches and inflates times) plus one run per counter pass. Passes respect
what the hardware can count at once: the SQ counters; the TCC counters;
``FETCH_SIZE`` alone and ``WRITE_SIZE`` alone on gfx942/gfx950 (together
they need more TCC counters than one pass has: status 38, "exceeds
hardware limit", or a hang on MI300). gfx90a collects the two together
(the MI250X fixture does). TCC memory-request counters are ``TCC_EA_*`` on
gfx90a and ``TCC_EA0_*`` on gfx942/gfx950.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from platforms.profiling.record import (
    BLOCK_THREADS,
    COMPUTE_PCT,
    DRAM_BYTES,
    DRAM_PCT,
    DURATION_NS,
    GRID_BLOCKS,
    L2_HIT_PCT,
    REGISTERS,
    TENSOR_PCT,
    Launch,
    Metric,
    metric,
)
from platforms.profiling.rocprof_parse import Dispatch

ROCPROF_FLAVOURS = ("rocprofv3", "rocprofv2", "rocprof")

_SQ = ("SQ_WAVES", "SQ_INSTS_VALU", "SQ_ACTIVE_INST_VALU", "SQ_VALU_MFMA_BUSY_CYCLES", "GRBM_GUI_ACTIVE")
COUNTER_PASSES: dict[str, tuple[tuple[str, ...], ...]] = {
    "gfx90a": (_SQ, ("TCC_HIT_sum", "TCC_MISS_sum", "TCC_EA_RDREQ_sum", "TCC_EA_WRREQ_sum"),
               ("FETCH_SIZE", "WRITE_SIZE")),
    "gfx942": (_SQ, ("TCC_HIT_sum", "TCC_MISS_sum", "TCC_EA0_RDREQ_sum", "TCC_EA0_WRREQ_sum"),
               ("FETCH_SIZE",), ("WRITE_SIZE",)),
    "gfx950": (_SQ, ("TCC_HIT_sum", "TCC_MISS_sum", "TCC_EA0_RDREQ_sum", "TCC_EA0_WRREQ_sum"),
               ("FETCH_SIZE",), ("WRITE_SIZE",)),
}
# An unknown architecture gets no TCC pass (its counter names are not known)
# and the most cautious split of the derived byte counters.
_DEFAULT_PASSES = (_SQ, ("FETCH_SIZE",), ("WRITE_SIZE",))
_EA_BYTES = 64  # bytes per TCC EA request, the common case (32-byte requests exist: an approximation)


def counter_passes(arch: str | None) -> tuple[tuple[str, ...], ...]:
    """The counter passes for an architecture (``gfx90a``, ``gfx942``, ``gfx950``)."""
    return COUNTER_PASSES.get((arch or "").split(":")[0], _DEFAULT_PASSES)


def flavour_of(path: str) -> str:
    """Which AMD profiler a binary is, from its file name."""
    name = path.rsplit("/", 1)[-1]
    for flavour in ROCPROF_FLAVOURS:
        if name.startswith(flavour):
            return flavour
    raise ValueError(f"{path}: not a rocprof binary (expected a name starting with rocprofv3, rocprofv2 "
                     "or rocprof)")


def trace_command(flavour: str, binary: str, run_dir: str, command: list[str], kernel_filter: str | None) -> list[str]:
    """The timing run: a kernel trace, written as CSV under ``run_dir``."""
    if flavour == "rocprofv3":
        argv = [binary, "--kernel-trace", "--output-format", "csv", "-d", run_dir, "-o", "trace"]
        if kernel_filter:
            argv += ["--kernel-include-regex", kernel_filter]
        return argv + ["--"] + list(command)
    if flavour == "rocprofv2":
        return [binary, "--kernel-trace", "--plugin", "file", "-d", run_dir, "-o", "trace"] + list(command)
    return [binary, "--stats", "--timestamp", "on", "-o", f"{run_dir}/results.csv"] + list(command)


def counter_command(flavour: str, binary: str, run_dir: str, counters: tuple[str, ...], command: list[str],
                    kernel_filter: str | None, input_file: str) -> list[str]:
    """One counter pass. rocprof v1/v2 read their counters from ``input_file`` (see ``input_file_text``)."""
    if flavour == "rocprofv3":
        argv = [binary, "--pmc", *counters, "--output-format", "csv", "-d", run_dir, "-o", "counters"]
        if kernel_filter:
            argv += ["--kernel-include-regex", kernel_filter]
        return argv + ["--"] + list(command)
    if flavour == "rocprofv2":
        return [binary, "-i", input_file, "--plugin", "file", "-d", run_dir, "-o", "counters"] + list(command)
    return [binary, "-i", input_file, "--timestamp", "on", "-o", f"{run_dir}/results.csv"] + list(command)


def input_file_text(counters: tuple[str, ...]) -> str:
    """A rocprof v1/v2 input file for one pass (``pmc: A B``)."""
    return "pmc: " + " ".join(counters) + "\n"


_V3_SUFFIXES = ("kernel_trace.csv", "counter_collection.csv")
_NOT_DISPATCHES = ("stats", "copy", "hsa", "hip", "agent_info", "memory")


def dispatch_files(flavour: str, run_dir: Path) -> list[Path]:
    """The per-dispatch CSV files one run wrote under ``run_dir`` (stats and API traces left out)."""
    files = sorted(p for p in run_dir.rglob("*.csv") if p.is_file())
    if flavour == "rocprofv3":
        return [p for p in files if p.name.endswith(_V3_SUFFIXES)]
    return [p for p in files if not any(word in p.name for word in _NOT_DISPATCHES)]


def amd_launch(dispatch: Dispatch, specs: dict[str, Any]) -> Launch:
    """kevo metrics of one dispatch from its counters and the device's specs.

    DRAM bytes are FETCH_SIZE + WRITE_SIZE (KiB, derived from TCC EA
    requests), else the EA requests at 64 bytes each; DRAM % divides them by
    the time and the datasheet bandwidth. Compute % is the larger of VALU and
    MFMA busy: ``SQ_ACTIVE_INST_VALU * 4 / SIMDs`` and
    ``SQ_VALU_MFMA_BUSY_CYCLES / (CUs * 4)``, both per cycle of
    ``GRBM_GUI_ACTIVE`` of one XCD (the counter sums over XCDs on MI300).
    These are approximations; the AMD thresholds allow for it.
    """
    c = dispatch.counters
    metrics: dict[str, Metric] = {}
    duration = dispatch.duration_ns
    if duration is not None and duration > 0:
        metrics[DURATION_NS] = metric(DURATION_NS, duration)
    dram = _dram_bytes(c)
    if dram is not None:
        metrics[DRAM_BYTES] = metric(DRAM_BYTES, dram)
        if duration and specs.get("mem_bw_gbs"):
            metrics[DRAM_PCT] = metric(DRAM_PCT, 100 * dram / (duration * 1e-9) / (specs["mem_bw_gbs"] * 1e9))
    units, xcds = specs.get("units"), specs.get("xcds") or 1
    cycles = c.get("GRBM_GUI_ACTIVE")
    if units and cycles:
        per_xcd = cycles / xcds
        busy = []
        if "SQ_ACTIVE_INST_VALU" in c:
            busy.append(100 * c["SQ_ACTIVE_INST_VALU"] * 4 / (4 * units) / per_xcd)
        if "SQ_VALU_MFMA_BUSY_CYCLES" in c:
            mfma = 100 * c["SQ_VALU_MFMA_BUSY_CYCLES"] / (units * 4) / per_xcd
            metrics[TENSOR_PCT] = metric(TENSOR_PCT, mfma)
            busy.append(mfma)
        if busy:
            metrics[COMPUTE_PCT] = metric(COMPUTE_PCT, max(busy))
    hits, misses = c.get("TCC_HIT_sum"), c.get("TCC_MISS_sum")
    if hits is not None and misses is not None and hits + misses > 0:
        metrics[L2_HIT_PCT] = metric(L2_HIT_PCT, 100 * hits / (hits + misses))
    if dispatch.grid_size and dispatch.workgroup_size:
        metrics[GRID_BLOCKS] = metric(GRID_BLOCKS, -(-dispatch.grid_size // dispatch.workgroup_size))
        metrics[BLOCK_THREADS] = metric(BLOCK_THREADS, dispatch.workgroup_size)
    if dispatch.vgprs is not None:
        metrics[REGISTERS] = metric(REGISTERS, dispatch.vgprs)
    return Launch(dispatch.kernel, metrics)


def _dram_bytes(c: dict[str, float]) -> float | None:
    if "FETCH_SIZE" in c or "WRITE_SIZE" in c:
        return (c.get("FETCH_SIZE", 0.0) + c.get("WRITE_SIZE", 0.0)) * 1024
    for prefix in ("TCC_EA0_", "TCC_EA_"):
        if f"{prefix}RDREQ_sum" in c or f"{prefix}WRREQ_sum" in c:
            return (c.get(f"{prefix}RDREQ_sum", 0.0) + c.get(f"{prefix}WRREQ_sum", 0.0)) * _EA_BYTES
    return None
