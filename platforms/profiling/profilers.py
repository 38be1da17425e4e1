"""The profilers behind one interface, and the choice of one for a platform.

``profiler.profile(command, env, kernel_filter, timeout_s, workload)`` runs
``command`` (the target program, see ``fitness.profiling.target``) under the
tool and returns a ``ProfileRecord``. A tool that fails (missing, timed
out, nonzero exit, unreadable output) is not an error: the record comes
from the analytic roofline and carries the reason, and the profiler
remembers it (``disabled_reason``) so later calls go straight to the
roofline instead of failing again every round.
"""

from __future__ import annotations

import abc
import logging
import os
import re
import shutil
import tempfile
from pathlib import Path

from platforms.profiling.classify import thresholds_for
from platforms.profiling.ncu import ncu_commands, parse_ncu_csv, parse_ncu_version
from platforms.profiling.record import Launch, ProfileRecord, Workload
from platforms.profiling.rocprof import (
    ROCPROF_FLAVOURS,
    amd_launch,
    counter_command,
    counter_passes,
    dispatch_files,
    flavour_of,
    input_file_text,
    trace_command,
)
from platforms.profiling.rocprof_parse import Dispatch, kernel_base_name, merge_passes, parse_dispatches
from platforms.profiling.roofline import roofline_record
from platforms.profiling.runner import (
    ProfileParseError,
    ProfilerFailure,
    error_line,
    parse_version,
    run_tool,
    version_output,
)
from platforms.profiling.summary import build_record
from platforms.specs import lookup

log = logging.getLogger(__name__)

#: Where vendor installs put the tools when they are not on PATH.
_NCU_DIRS = ("/usr/local/cuda/bin", "/opt/nvidia/nsight-compute")
_ROCM_DIRS = ("/opt/rocm/bin",)


class ProfilerConfigError(ValueError):
    """A configured profiler path is unusable; the message names the config key."""


class Profiler(abc.ABC):
    """Runs a program under a profiling tool and reads back a ``ProfileRecord``."""

    tool: str = ""
    #: True when the tool profiles only what the target brackets with the
    #: profiler API (cudaProfilerStart/Stop), so warm-up runs are not seen.
    capture_region: bool = False
    #: The TCP ports where the tool and the program it profiles talk (the program may use no other).
    ports: tuple[int, ...] = ()

    def __init__(self, platform_name: str) -> None:
        self.platform_name = platform_name
        self.thresholds = thresholds_for(platform_name)
        #: Why this run uses the analytic roofline instead of the tool (None: the tool is in use).
        self.disabled_reason: str | None = None

    def profile(self, command: list[str], env: dict[str, str], kernel_filter: str | None,
                timeout_s: float, workload: Workload | None = None) -> ProfileRecord:
        """Profile ``command``'s kernels matching ``kernel_filter`` (a regex on kernel names).

        ``workload`` feeds the roofline fallback and says how many forwards
        the command runs. Never raises for a failing tool: see the module doc.
        """
        workload = workload or Workload()
        if self.disabled_reason is not None:
            return roofline_record(workload, self.thresholds, self.disabled_reason)
        try:
            return self._profile(command, env, kernel_filter, timeout_s, workload)
        except ProfilerFailure as failure:
            self.disabled_reason = f"{self.tool} failed: {failure.reason}"
            log.warning("%s; kevo uses the analytic roofline for the rest of this run", self.disabled_reason)
            return roofline_record(workload, self.thresholds, self.disabled_reason)

    @abc.abstractmethod
    def _profile(self, command: list[str], env: dict[str, str], kernel_filter: str | None,
                 timeout_s: float, workload: Workload) -> ProfileRecord:
        """The tool's record; raises ``ProfilerFailure`` for a known failure."""


class RooflineProfiler(Profiler):
    """No hardware profiler: every record is the analytic roofline, with the reason."""

    tool = "roofline"

    def __init__(self, platform_name: str, reason: str) -> None:
        super().__init__(platform_name)
        self.disabled_reason = reason

    def _profile(self, command, env, kernel_filter, timeout_s, workload) -> ProfileRecord:
        raise AssertionError("a RooflineProfiler never runs a tool")


class NcuProfiler(Profiler):
    """Nsight Compute on the candidate's kernels, a small metric set, clocks left alone."""

    tool = "ncu"
    capture_region = True
    ports = tuple(range(49152, 49152 + 64))  # ncu's --port and --max-connections: it talks to the program there

    def __init__(self, binary: str, platform_name: str = "cuda", launch_count: int = 64) -> None:
        super().__init__(platform_name)
        self.binary = binary
        self.launch_count = launch_count
        self._version: str | None = None

    @property
    def version(self) -> str:
        if self._version is None:
            self._version = parse_ncu_version(version_output([self.binary, "--version"]))
        return self._version

    def _profile(self, command, env, kernel_filter, timeout_s, workload) -> ProfileRecord:
        with tempfile.TemporaryDirectory(prefix=f"kevo-ncu-{os.getpid()}-") as tmp:
            report = os.path.join(tmp, "profile")
            profile_argv, export_argv = ncu_commands(self.binary, report, command, kernel_filter,
                                                     self.launch_count)
            run = run_tool(profile_argv, env, timeout_s, cwd=tmp)
            if not os.path.exists(report + ".ncu-rep"):
                raise ProfilerFailure(f"ncu wrote no report ({error_line(run)})")
            exported = run_tool(export_argv, env, timeout_s, cwd=tmp)
        try:
            parsed = parse_ncu_csv(exported.stdout)
        except ProfileParseError as exc:
            raise ProfilerFailure(f"cannot read ncu's CSV: {exc}") from None
        launches = _matching(parsed.launches, kernel_filter)
        record = build_record("ncu", self.version, parsed.device_name or workload.device_name, launches,
                              self.thresholds, workload.forwards)
        record.cost["tool_runs"] = 2
        if parsed.replay_passes is not None:
            record.cost["replay_passes"] = parsed.replay_passes
        if parsed.replay_bytes is not None:
            record.cost["replay_bytes"] = parsed.replay_bytes
        return record


class RocprofProfiler(Profiler):
    """rocprofv3, falling back to rocprof v2 and then v1 when one fails.

    A tool that fails is dropped for the rest of the run (``failures`` says
    why); a counter pass that fails or hangs is skipped for the rest of the
    run and noted in each record, the timing and the other passes kept.
    """

    capture_region = False

    def __init__(self, tools: list[tuple[str, str]], platform_name: str = "rocm", arch: str | None = None) -> None:
        super().__init__(platform_name)
        if not tools:
            raise ValueError("RocprofProfiler needs at least one (flavour, binary) pair")
        self.tools = list(tools)
        self.arch = arch
        self.failures: list[str] = []
        self.skipped_passes: dict[tuple[str, ...], str] = {}
        self._versions: dict[str, str] = {}

    @property
    def tool(self) -> str:  # type: ignore[override]
        return self.tools[0][0] if self.tools else "rocprof"

    def _profile(self, command, env, kernel_filter, timeout_s, workload) -> ProfileRecord:
        while self.tools:
            flavour, binary = self.tools[0]
            try:
                return self._run(flavour, binary, command, env, kernel_filter, timeout_s, workload)
            except ProfilerFailure as failure:
                self.failures.append(f"{flavour}: {failure.reason}")
                log.warning("%s failed (%s); trying the next AMD profiler", flavour, failure.reason)
                self.tools.pop(0)
        raise ProfilerFailure("; ".join(self.failures))

    def _run(self, flavour, binary, command, env, kernel_filter, timeout_s, workload) -> ProfileRecord:
        specs = lookup(workload.device_name)
        notes = [f"fell back from {failure}" for failure in self.failures]
        with tempfile.TemporaryDirectory(prefix=f"kevo-rocprof-{os.getpid()}-") as tmp:
            trace_dir = Path(tmp, "trace")
            trace_dir.mkdir()
            run_tool(trace_command(flavour, binary, str(trace_dir), command, kernel_filter), env, timeout_s, cwd=tmp)
            timing = _read_dispatches(flavour, trace_dir)
            passes = []
            for i, counters in enumerate(counter_passes(self.arch or specs.get("arch"))):
                if counters in self.skipped_passes:
                    notes.append(f"counters {' '.join(counters)} not collected: {self.skipped_passes[counters]}")
                    continue
                try:
                    passes.append(self._pass(flavour, binary, Path(tmp, f"pass{i}"), counters, command, env,
                                             kernel_filter, timeout_s))
                except ProfilerFailure as failure:
                    self.skipped_passes[counters] = failure.reason
                    notes.append(f"counters {' '.join(counters)} not collected (skipped for the rest of the "
                                 f"run): {failure.reason}")
        launches = [amd_launch(d, specs) for d in merge_passes(timing, passes)]
        record = build_record(flavour, self._version(flavour, binary), workload.device_name,
                              _matching(launches, kernel_filter), self.thresholds, workload.forwards, notes)
        record.cost["tool_runs"] = 1 + len(passes)
        return record

    def _pass(self, flavour, binary, run_dir: Path, counters, command, env, kernel_filter, timeout_s) -> list[Dispatch]:
        run_dir.mkdir()
        input_file = run_dir.with_suffix(".txt")
        input_file.write_text(input_file_text(counters))
        argv = counter_command(flavour, binary, str(run_dir), counters, command, kernel_filter, str(input_file))
        run_tool(argv, env, timeout_s, cwd=str(run_dir.parent))
        return _read_dispatches(flavour, run_dir)

    def _version(self, flavour: str, binary: str) -> str:
        if flavour not in self._versions:
            self._versions[flavour] = parse_version(version_output([binary, "--version"]))
        return self._versions[flavour]


def _read_dispatches(flavour: str, run_dir: Path) -> list[Dispatch]:
    dispatches: list[Dispatch] = []
    tables = 0
    for path in dispatch_files(flavour, run_dir):
        try:
            dispatches.extend(parse_dispatches(path.read_text(errors="replace")))
            tables += 1
        except ProfileParseError:
            continue  # a CSV that is not a dispatch table (an API trace, say)
    if not tables:
        raise ProfilerFailure(f"{flavour} wrote no per-dispatch CSV under {run_dir.name}/")
    return dispatches


def _matching(launches: list[Launch], kernel_filter: str | None) -> list[Launch]:
    if kernel_filter is None:
        kept = launches
    else:
        pattern = re.compile(kernel_filter)
        kept = [l for l in launches if pattern.match(l.kernel) or pattern.match(kernel_base_name(l.kernel))]
    if not kept:
        raise ProfilerFailure(f"no kernel launch matching {kernel_filter!r} was profiled "
                              f"({len(launches)} other launches)")
    return kept


def _configured(path: str, key: str) -> str:
    if not (os.path.isfile(path) and os.access(path, os.X_OK)):
        raise ProfilerConfigError(f"{key}: {path} is not an executable file; fix the path or remove the key "
                                  "to let kevo search PATH")
    return path


def _find(name: str, dirs: tuple[str, ...]) -> str | None:
    """``name`` on PATH, else in one of ``dirs`` or a versioned folder below one (newest first)."""
    found = shutil.which(name)
    if found:
        return found
    for folder in dirs:
        candidates = [Path(folder, name)] + sorted(Path(folder).glob(f"*/{name}"), reverse=True)
        for candidate in candidates:
            if candidate.is_file() and os.access(candidate, os.X_OK):
                return str(candidate)
    return None


def profiler_for(platform_name: str, ncu_bin_path: str | None = None, rocprof_bin_path: str | None = None,
                 enabled: bool = True, arch: str | None = None) -> Profiler:
    """The profiler for a platform: its vendor's tool when one is found, else the roofline.

    A configured path must exist (``ProfilerConfigError`` otherwise); without
    one, PATH and the vendor's install directories are searched. On ROCm a
    configured ``rocprof_bin_path`` is the only tool tried; found tools are
    tried in the order rocprofv3, rocprofv2, rocprof.

    >>> profiler_for("cpu").disabled_reason
    'no hardware profiler on the cpu platform'
    """
    if not enabled:
        return RooflineProfiler(platform_name, "the hardware profiler is off (profiler.enabled: false)")
    if platform_name == "cuda":
        binary = _configured(ncu_bin_path, "profiler.ncu_bin_path") if ncu_bin_path else _find("ncu", _NCU_DIRS)
        if binary is None:
            return RooflineProfiler(platform_name, "ncu not found on PATH (install Nsight Compute or set "
                                                   "profiler.ncu_bin_path)")
        return NcuProfiler(binary, platform_name)
    if platform_name == "rocm":
        if rocprof_bin_path:
            path = _configured(rocprof_bin_path, "profiler.rocprof_bin_path")
            try:
                tools = [(flavour_of(path), path)]
            except ValueError as exc:
                raise ProfilerConfigError(f"profiler.rocprof_bin_path: {exc}") from None
        else:
            tools = [(f, p) for f in ROCPROF_FLAVOURS if (p := _find(f, _ROCM_DIRS)) is not None]
        if not tools:
            return RooflineProfiler(platform_name, "no rocprofv3, rocprofv2 or rocprof found on PATH or in "
                                                   "/opt/rocm/bin (set profiler.rocprof_bin_path)")
        return RocprofProfiler(tools, platform_name, arch)
    if platform_name == "cpu":
        return RooflineProfiler(platform_name, "no hardware profiler on the cpu platform")
    raise ValueError(f"unknown platform {platform_name!r} for a profiler (cuda, rocm or cpu)")
