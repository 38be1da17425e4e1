"""What a device can reach: the bandwidth and the matmul rates behind a problem's floor.

``fitness.judge.floor`` divides a problem's compulsory bytes by a bandwidth and its
FLOPs by a rate. ``Peaks`` holds both, from one of two sources, and says which:

- ``measured`` (``measure_peaks``): memory bandwidth as the best of three
  access mixes over 1 GiB buffers (a copy: one read, one write; an add: two
  reads, one write; a sum: reads only), since memory reaches a different rate
  for each: on an H200, copy 4.24, add 4.39 and torch's sum 4.08 TB/s, while
  Inductor's fused reduction of KernelBench's HingeLoss read 4 GiB at 4.49
  TB/s, so the figure can sit ~2% under the best read-only kernel
  (``fitness.judge.floor.BELOW_FLOOR_MARGIN`` allows for it). And the dense rate of
  an 8192-cube ``torch.matmul`` per precision: ``float32`` (true fp32),
  ``tf32``, ``float16``, ``bfloat16`` (H200: 51, 360, 760, 790 TFLOP/s).
  Each is timed with kevo's own protocol (``platforms.timing.time_runs``: a
  cold cache, the whole device synchronised, the median run), so a floor and
  a kernel's runtime are measured alike; the buffers are far larger than any
  last-level cache. Figures are cached on disk (``cache_path``), keyed by
  platform, device name, torch, its CUDA/HIP runtime and the driver
  (``device_key``): one measurement (about 10 s on an H200) per machine setup.
- ``datasheet`` (``datasheet_peaks``): the vendor's figures from
  ``platforms.specs``, used when nothing can be measured (``achievable_peaks``
  says why in ``Peaks.detail``). They are above what any kernel reaches, so a
  floor from them is lower: safe for ``fitness.judge.floor.below_floor``, loose for SOL.

The CPU (Triton's interpreter) has no datasheet: its figures are always
measured, a memcpy bandwidth and a matmul per precision (``tf32`` does not
apply), so the CPU path runs end to end. They describe the CPU itself: an
interpreted Triton kernel sits orders of magnitude above that floor, so SOL
on the CPU says nothing of a kernel, only that every path works. So the CPU
is measured small and short (32 MiB buffers, matmuls of 256 and 64, a window
of a few runs: about a quarter of a second), not with the GPU's settings
(about 10 s on a 2-core machine, for figures nobody reads).

Nothing happens at import: torch loads and the cache's location (the
``KEVO_PEAKS_CACHE`` variable, else ``$XDG_CACHE_HOME/kevo/peaks.json``,
else ``~/.cache/kevo/peaks.json``) is read when a function is called.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import re
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

from platforms.base import Platform
from platforms.device_lock import cache_folder, window
from platforms.specs import lookup
from platforms.timing import TimingSettings, time_runs

log = logging.getLogger(__name__)

#: The precisions a rate is known for; ``tf32`` is fp32 operands on a tensor core.
PRECISIONS = ("float32", "tf32", "float16", "bfloat16")
#: Names ``Peaks.source`` takes.
MEASURED, DATASHEET = "measured", "datasheet"
#: The environment variable naming the cache file (read at call time).
CACHE_ENV = "KEVO_PEAKS_CACHE"
#: Bumped when what is measured, or how, changes: older entries are then measured again.
CACHE_VERSION = 2

# Timing of a measurement: long enough for clocks to settle, a few dozen runs.
_SETTINGS = TimingSettings(warmup_ms=100.0, window_ms=300.0, min_runs=10, max_runs=200)
# Sizes: far above any last-level cache (H200 L2 60 MB, MI300X Infinity Cache 256 MB).
_GPU_BUFFER_BYTES = 1 << 30  # each of three
_GPU_MATMUL_N = 8192
# The CPU's: small and short (see the module's docstring); its figures only let the CPU path run.
_CPU_SETTINGS = TimingSettings(warmup_ms=0.0, window_ms=10.0, min_runs=3, max_runs=10, device_trace=False)
_CPU_BUFFER_BYTES = 32 << 20
_CPU_MATMUL_N = {"float32": 256, "float16": 64, "bfloat16": 64}


class PeaksUnavailable(RuntimeError):
    """Neither a measurement nor a datasheet gives this device's peaks; the message says why."""


@dataclasses.dataclass(frozen=True)
class Peaks:
    """Memory bandwidth (GB/s) and dense matmul rates (TFLOP/s per precision) of one device.

    ``cache_bytes`` is the last-level cache a run's output can stay in (the L2,
    and AMD's Infinity Cache with it), None where unknown. ``detail`` says how
    each figure was obtained.
    """

    device_name: str
    bandwidth_gbs: float
    tflops: dict[str, float]
    source: str  # MEASURED or DATASHEET
    cache_bytes: int | None = None
    key: str = ""
    detail: dict[str, Any] = dataclasses.field(default_factory=dict)

    def rate_for(self, dtype: str, tf32: bool = True) -> tuple[float | None, str]:
        """(TFLOP/s, the precision it is the rate of) for matmul work in ``dtype``; (None, "")
        when no rate is known (float64, integers).

        fp32 work takes the faster of true fp32 and, with ``tf32``, TF32 (what
        Triton's ``tl.dot`` does with fp32 operands unless told otherwise).

        >>> Peaks("x", 1000.0, {"float32": 50.0, "tf32": 400.0}, MEASURED).rate_for("float32")
        (400.0, 'tf32')
        >>> Peaks("x", 1000.0, {"float32": 50.0, "tf32": 400.0}, MEASURED).rate_for("float32", tf32=False)
        (50.0, 'float32')
        """
        names = ("float32", "tf32") if dtype == "float32" and tf32 else (dtype,)
        known = [(self.tflops[n], n) for n in names if self.tflops.get(n)]
        return max(known) if known else (None, "")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Peaks:
        fields = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in fields})


def datasheet_peaks(device_name: str) -> Peaks | None:
    """The vendor's figures for ``device_name`` (``platforms.specs``), or None for a device
    the table does not know (every CPU).

    >>> p = datasheet_peaks("NVIDIA H200")
    >>> p.bandwidth_gbs, p.tflops["tf32"], p.cache_bytes
    (4800, 494.7, 62914560)
    """
    specs = lookup(device_name)
    if not specs:
        return None
    fp32 = max(specs["fp32_tflops"], specs.get("fp32_matrix_tflops") or 0)
    rates = {"float32": fp32, "tf32": specs.get("tf32_tflops"), "float16": specs["fp16_tflops"],
             "bfloat16": specs["bf16_tflops"]}
    cache_mb = specs["l2_mb"] + (specs.get("infinity_cache_mb") or 0)
    return Peaks(device_name, specs["mem_bw_gbs"], {k: v for k, v in rates.items() if v},
                 DATASHEET, int(cache_mb * 2**20), detail={"specs": specs["name"], "reference": specs["source"]})


def cache_path() -> Path:
    """Where measured peaks are kept: ``$KEVO_PEAKS_CACHE``, else the user's cache directory."""
    named = os.environ.get(CACHE_ENV)
    return Path(named).expanduser() if named else cache_folder() / "peaks.json"


def device_key(platform: Platform) -> str:
    """What a measurement depends on: platform, device, torch, its runtime and the driver.

    >>> from platforms import get_platform
    >>> device_key(get_platform("cpu")).startswith("v2|cpu|")
    True
    """
    import torch

    runtime = f"cuda {torch.version.cuda}" if torch.version.cuda else f"hip {torch.version.hip}" \
        if torch.version.hip else "cpu"
    driver = _driver_version() if platform.name != "cpu" else "-"
    return (f"v{CACHE_VERSION}|{platform.name}|{platform.device_name()}|torch {torch.__version__}|{runtime}|"
            f"driver {driver}")


def read_cached(key: str, path: Path | None = None) -> Peaks | None:
    """The peaks measured under ``key``, or None. An unreadable cache file is said once and
    treated as empty (the next measurement replaces it)."""
    entry = _load(path or cache_path()).get(key)
    return None if entry is None else Peaks.from_dict(entry)


def write_cached(peaks: Peaks, path: Path | None = None) -> Path:
    """Add ``peaks`` (under ``peaks.key``) to the cache file, replacing it whole (atomic)."""
    path = path or cache_path()
    entries = _load(path)
    entries[peaks.key] = peaks.to_dict()
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", dir=path.parent, prefix=".peaks-", suffix=".json",
                                     delete=False, encoding="utf-8") as tmp:
        json.dump(entries, tmp, indent=1, sort_keys=True)
    os.replace(tmp.name, path)
    return path


def _load(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    try:
        entries = json.loads(text)
    except json.JSONDecodeError as exc:
        log.warning("peaks cache %s is not JSON (%s): measuring again", path, exc)
        return {}
    if not isinstance(entries, dict):
        log.warning("peaks cache %s does not hold an object: measuring again", path)
        return {}
    return entries


def achievable_peaks(platform: Platform, *, measure: bool = True, path: Path | None = None,
                     measurer: Callable[[Platform], Peaks] | None = None) -> Peaks:
    """The peaks of ``platform``'s device: cached, else measured (and cached), else the datasheet.

    With ``measure=False`` nothing is measured: the cache, else the datasheet.
    A measurement that fails (out of memory, a library that refuses) falls
    back to the datasheet with a warning and the reason in ``detail``; a device
    with neither raises ``PeaksUnavailable``. ``measurer`` replaces
    ``measure_peaks`` (tests).
    """
    key = device_key(platform)
    cached = read_cached(key, path)
    if cached is not None:
        return cached
    why = "not measured (measure=False) and not in the cache"
    if measure:
        try:
            peaks = dataclasses.replace((measurer or measure_peaks)(platform), key=key)
        except RuntimeError as exc:  # torch's OutOfMemoryError and library failures are RuntimeErrors
            why = f"measurement failed: {type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"
            log.warning("peaks of %s: %s; using the datasheet", platform.device_name(), why)
        else:
            write_cached(peaks, path)
            return peaks
    sheet = datasheet_peaks(platform.device_name())
    if sheet is None:
        raise PeaksUnavailable(f"no peaks for {platform.device_name()!r}: {why}, and platforms/specs.py has no "
                               f"entry for it (add one, or let kevo measure it)")
    return dataclasses.replace(sheet, key=key, detail={**sheet.detail, "why_datasheet": why})


def measure_peaks(platform: Platform, settings: TimingSettings | None = None) -> Peaks:
    """Measure ``platform``'s achievable bandwidth and matmul rates now (seconds on a GPU, a
    fraction of one on the CPU); ``settings``: the timing (default: the platform's kind's)."""
    import torch

    device = platform.device()
    on_cpu = platform.name == "cpu"
    settings = settings or (_CPU_SETTINGS if on_cpu else _SETTINGS)
    started = time.perf_counter()
    n_bytes = _CPU_BUFFER_BYTES if on_cpu else min(_GPU_BUFFER_BYTES, platform.free_memory() // 12)
    a = torch.ones(n_bytes // 4, dtype=torch.float32, device=device)
    b, c = torch.ones_like(a), torch.empty_like(a)
    patterns = {  # name: (work, bytes it moves); kernels differ in which mix they run fastest
        "copy_gbs": (lambda: c.copy_(a), 2 * n_bytes),
        "add_gbs": (lambda: torch.add(a, b, out=c), 3 * n_bytes),
        "read_gbs": (lambda: a.sum(), n_bytes),
    }
    bandwidths = {name: moved / _median_ms(platform, work, settings) / 1e6 for name, (work, moved) in patterns.items()}
    del a, b, c, patterns
    rates, sizes = {}, {}
    for precision in PRECISIONS:
        if on_cpu and precision == "tf32":
            continue
        n = _CPU_MATMUL_N[precision] if on_cpu else _GPU_MATMUL_N
        rates[precision] = _matmul_tflops(platform, precision, n, settings)
        sizes[precision] = n
    detail = {**{name: float(f"{gbs:.4g}") for name, gbs in bandwidths.items()}, "buffer_bytes": n_bytes,
              "matmul_n": sizes, "timing": "platforms.timing.time_runs (cold cache, median)",
              "measured_s": round(time.perf_counter() - started, 1),
              "measured_at": time.strftime("%Y-%m-%dT%H:%M:%S")}
    return Peaks(platform.device_name(), max(bandwidths.values()), rates, MEASURED,
                 _cache_bytes(platform), detail=detail)


def _median_ms(platform: Platform, work: Callable[[], Any], settings: TimingSettings) -> float:
    with window(platform):
        return time_runs(platform, lambda _i, _args: work(), settings).median_ms


def _matmul_tflops(platform: Platform, precision: str, n: int, settings: TimingSettings) -> float:
    import torch

    dtype = torch.float32 if precision == "tf32" else getattr(torch, precision)
    a = torch.randn(n, n, device=platform.device()).to(dtype)
    b = torch.randn(n, n, device=platform.device()).to(dtype)
    before = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("high" if precision == "tf32" else "highest")
    try:
        ms = _median_ms(platform, lambda: torch.matmul(a, b), settings)
    finally:
        torch.set_float32_matmul_precision(before)
    return float(f"{2 * n**3 / ms / 1e9:.4g}")


def _cache_bytes(platform: Platform) -> int | None:
    """The last-level cache of the device: the specs table's (L2 and Infinity Cache), else what
    the runtime reports; a CPU's largest cache from sysfs."""
    if platform.name == "cpu":
        return _cpu_last_level_cache()
    specs = lookup(platform.device_name())
    if specs:
        return int((specs["l2_mb"] + (specs.get("infinity_cache_mb") or 0)) * 2**20)
    import torch

    return int(getattr(torch.cuda.get_device_properties(platform.device()), "L2_cache_size", 0)) or None


def _cpu_last_level_cache() -> int | None:
    sizes = []
    for index in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*"):
        try:
            text = (index / "size").read_text().strip()
        except OSError:
            continue
        match = re.fullmatch(r"(\d+)([KMG]?)", text)
        if match:
            sizes.append(int(match[1]) * {"": 1, "K": 2**10, "M": 2**20, "G": 2**30}[match[2]])
    return max(sizes, default=None)


def _driver_version() -> str:
    """The kernel driver's version (NVIDIA's or amdgpu's), "unknown" where it cannot be read."""
    for path, pattern in (("/proc/driver/nvidia/version", r"Kernel Module(?: for \S+)?\s+([\d.]+)"),
                          ("/sys/module/amdgpu/version", r"(\S+)")):
        try:
            match = re.search(pattern, Path(path).read_text())
        except OSError:
            continue
        if match:
            return match[1]
    return "unknown"
