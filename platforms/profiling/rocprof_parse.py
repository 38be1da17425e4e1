"""Readers for the CSV that AMD's profilers write, across tools and ROCm releases.

One tolerant reader for per-dispatch tables, whatever wrote them:

- rocprofv3 ``kernel_trace.csv`` (2024: numeric ``Agent_Id``; 2025 / ROCm 7:
  ``"Agent N"``, ``Stream_Id``, ``Accum_VGPR_Count``) and
  ``counter_collection.csv``, long format: one row per (dispatch, counter),
  with or without ``Kernel_Id`` and timestamps;
- rocprof v1 ``results.csv``, wide format: one row per dispatch, counters as
  columns, ``BeginNs``/``EndNs``/``DurationNs`` when ``--timestamp on``;
- rocprof v2, wide like v1 with v3-style column names.

And one for the ``--stats`` tables (``Name,Calls,TotalDurationNs,...``).
"""

from __future__ import annotations

import csv
import dataclasses
import io
import re

from platforms.profiling.runner import ProfileParseError


@dataclasses.dataclass
class Dispatch:
    """One kernel dispatch: its name, timing and counters as read."""

    index: int  # dispatch id (or row index) in its file
    kernel: str
    duration_ns: float | None
    counters: dict[str, float]
    grid_size: int | None = None  # work-items
    workgroup_size: int | None = None
    vgprs: int | None = None


@dataclasses.dataclass(frozen=True)
class KernelStat:
    """One row of a ``--stats`` table (kernels, or API calls)."""

    name: str
    calls: int
    total_ns: float
    average_ns: float | None


# lower-cased column aliases -> meaning
_KERNEL = ("kernel_name", "kernelname", "kernel-name")
_INDEX = ("dispatch_id", "index", "dispatch-id")
_START = ("start_timestamp", "beginns", "begin_ns", "start")
_END = ("end_timestamp", "endns", "end_ns", "end")
_DURATION = ("durationns", "duration_ns", "duration")
_GRID = ("grid_size", "grd")
_WORKGROUP = ("workgroup_size", "wgr")
_VGPRS = ("vgpr_count", "arch_vgpr", "vgpr")
_GRID_XYZ = ("grid_size_x", "grid_size_y", "grid_size_z")
_WORKGROUP_XYZ = ("workgroup_size_x", "workgroup_size_y", "workgroup_size_z")
#: Columns of a wide table that describe the dispatch, not count anything.
_METADATA = frozenset(
    _KERNEL + _INDEX + _START + _END + _DURATION + _GRID + _WORKGROUP + _VGPRS + _GRID_XYZ + _WORKGROUP_XYZ + (
        "kind", "agent_id", "gpu-id", "queue_id", "queue-id", "queue-index", "stream_id", "thread_id", "tid",
        "pid", "process_id", "kernel_id", "correlation_id", "lds_block_size", "lds", "scratch_size", "scr",
        "accum_vgpr_count", "accum_vgpr", "sgpr_count", "sgpr", "wave_size", "sig", "obj", "dispatchns",
        "completens", "private_segment_size", "group_segment_size", "lds_per_workgroup",
        "scratch_per_workitem", "arch_vgpr_count",
    ))


def _rows(text: str) -> tuple[list[str], list[dict[str, str]]]:
    start = next((i for i, line in enumerate(text.splitlines()) if "," in line), None)
    if start is None:
        raise ProfileParseError("not a CSV table: no line with a comma")
    reader = csv.DictReader(io.StringIO("\n".join(text.splitlines()[start:])))
    header = [h.strip() for h in (reader.fieldnames or [])]
    rows = [{(k or "").strip(): (v or "").strip() for k, v in row.items() if k is not None} for row in reader]
    return header, rows


def _find(header: list[str], aliases: tuple[str, ...]) -> str | None:
    lowered = {h.lower(): h for h in header}
    return next((lowered[a] for a in aliases if a in lowered), None)


def _number(text: str | None) -> float | None:
    if text is None:
        return None
    try:
        return float(text.replace(",", "")) if text else None
    except ValueError:
        return None


def parse_dispatches(text: str) -> list[Dispatch]:
    """The dispatches of a rocprofv3 / v2 / v1 per-dispatch CSV (long or wide)."""
    header, rows = _rows(text)
    kernel_col = _find(header, _KERNEL)
    if kernel_col is None:
        raise ProfileParseError(f"no kernel-name column in the table (columns: {', '.join(header[:8])}...)")
    if "Counter_Name" in header and "Counter_Value" in header:
        return _long(header, rows, kernel_col)
    return [_dispatch(header, row, kernel_col, i, _wide_counters(header, row)) for i, row in enumerate(rows)]


def _long(header: list[str], rows: list[dict[str, str]], kernel_col: str) -> list[Dispatch]:
    by_dispatch: dict[str, Dispatch] = {}
    key_col = _find(header, ("dispatch_id", "correlation_id"))
    for i, row in enumerate(rows):
        key = row[key_col] if key_col else str(i)
        dispatch = by_dispatch.get(key)
        if dispatch is None:
            dispatch = by_dispatch[key] = _dispatch(header, row, kernel_col, len(by_dispatch), {})
        value = _number(row["Counter_Value"])
        if value is not None:
            # one row per (dispatch, counter), or per counter instance: sum instances
            name = row["Counter_Name"]
            dispatch.counters[name] = dispatch.counters.get(name, 0.0) + value
    return sorted(by_dispatch.values(), key=lambda d: d.index)


def _wide_counters(header: list[str], row: dict[str, str]) -> dict[str, float]:
    counters = {}
    for column in header:
        if column.lower() not in _METADATA:
            value = _number(row.get(column))
            if value is not None:
                counters[column] = value
    return counters


def _dispatch(header: list[str], row: dict[str, str], kernel_col: str, position: int,
              counters: dict[str, float]) -> Dispatch:
    def get(aliases: tuple[str, ...]) -> float | None:
        column = _find(header, aliases)
        return _number(row.get(column)) if column else None

    index = get(_INDEX)
    duration = get(_DURATION)
    start, end = get(_START), get(_END)
    if duration is None and start is not None and end is not None:
        duration = end - start
    grid, workgroup = get(_GRID), get(_WORKGROUP)
    if grid is None and _find(header, _GRID_XYZ[:1]):
        grid = _product([get((a,)) for a in _GRID_XYZ])
        workgroup = _product([get((a,)) for a in _WORKGROUP_XYZ])
    vgprs = get(_VGPRS)
    return Dispatch(int(index) if index is not None else position, row[kernel_col], duration, counters,
                    None if grid is None else int(grid), None if workgroup is None else int(workgroup),
                    None if vgprs is None else int(vgprs))


def _product(values: list[float | None]) -> float | None:
    if any(v is None for v in values):
        return None
    result = 1.0
    for v in values:
        result *= v
    return result


def parse_stats(text: str) -> list[KernelStat]:
    """Rows of a ``--stats`` table (rocprofv3 ``*_stats.csv``, rocprof v1 ``results.stats.csv``)."""
    header, rows = _rows(text)
    if not {"Name", "Calls", "TotalDurationNs"} <= set(header):
        raise ProfileParseError("not a stats table: expected Name, Calls, TotalDurationNs columns")
    stats = []
    for row in rows:
        calls, total = _number(row["Calls"]), _number(row["TotalDurationNs"])
        if calls is None or total is None:
            raise ProfileParseError(f"stats row for {row['Name'][:60]!r} has no call count or total")
        stats.append(KernelStat(row["Name"], int(calls), total, _number(row.get("AverageNs"))))
    return stats


_TEMPLATE = re.compile(r"<[^<>]*>")


def kernel_base_name(name: str) -> str:
    """The bare function name, so a truncated or mangled name joins the full one.

    >>> kernel_base_name("void addition_kernel<float>(float*, float const*, int)")
    'addition_kernel'
    >>> kernel_base_name("__amd_rocclr_fillBufferAligned.kd")
    '__amd_rocclr_fillBufferAligned'
    """
    base = name.strip()
    while _TEMPLATE.search(base):
        base = _TEMPLATE.sub("", base)
    base = base.split("(", 1)[0].strip()
    base = base.rsplit(" ", 1)[-1]
    return base[:-3] if base.endswith(".kd") else base


def merge_passes(timing: list[Dispatch], passes: list[list[Dispatch]]) -> list[Dispatch]:
    """``timing``'s dispatches with the counters of each pass added.

    Each pass is a separate run of the program, so dispatch ids need not
    agree; the n-th dispatch of a kernel in one run is the n-th in another.
    """
    merged = [dataclasses.replace(d, counters=dict(d.counters)) for d in timing]
    slots: dict[tuple[str, int], Dispatch] = {}
    seen: dict[str, int] = {}
    for dispatch in merged:
        base = kernel_base_name(dispatch.kernel)
        slots[(base, seen.get(base, 0))] = dispatch
        seen[base] = seen.get(base, 0) + 1
    for counted in passes:
        seen = {}
        for dispatch in counted:
            base = kernel_base_name(dispatch.kernel)
            target = slots.get((base, seen.get(base, 0)))
            seen[base] = seen.get(base, 0) + 1
            if target is not None:
                target.counters.update(dispatch.counters)
    return merged
