"""How thoroughly a candidate is checked and timed, and the default cutoff."""

from __future__ import annotations

import dataclasses

from platforms import TimingSettings

#: Cached, unused device memory a process that evaluates keeps between steps; more goes
#: back to the device, for the other evaluations on it (a caching allocator holds on to
#: what it once needed, gigabytes at KernelBench's sizes).
RELEASE_ABOVE = 1 << 30

#: KernelBench's tolerance: the cutoff when neither the caller nor the problem names one.
DEFAULT_MAX_ABS_DIFF = 1e-2


@dataclasses.dataclass(frozen=True)
class EvalSettings:
    """How thoroughly a candidate is checked and timed. Defaults are the protocol."""

    fixed_seeds: tuple[int, ...] = (101, 102)  # the same inputs for every candidate
    fresh_inputs: int = 1  # secret random input sets per shape, new for every candidate
    init_seed: int = 42  # seeds weights before Model and before ModelNew
    # Probe inputs from a wider value domain than the problem's draw (fitness.problems.probes), one
    # call each at the main shapes; False keeps to the problem's own draws.
    probes: bool = True
    timing: TimingSettings | None = None  # None: the platform's default
    # Timed runs drawn in secret from the whole window whose outputs are checked, besides the
    # last: a kernel that cheats on half of its runs escapes 10 checks once in 1,024 evaluations.
    timed_checks: int = 10
    timeout_s: float = 300.0  # per step (import, one call, one timing window)
    # One Triton compile of a candidate's (the worker lends the lane out meanwhile): a kernel that
    # compiles longer holds its slot that long; over this it is a timeout and the worker is killed.
    compile_timeout_s: float = 60.0
    startup_timeout_s: float = 180.0
    # where memory binds, a candidate's kernels compiled before it holds memory (fitness.judge.ahead)
    compile_ahead: bool = True
    memory_limit_bytes: int = 0  # address-space cap of a CPU worker; 0: none
    screen: bool = True  # static screen (the runtime defences stay on regardless)
    # Profiling a parent (``Evaluator.profile``): False keeps to the analytic roofline.
    profiler_enabled: bool = True
    ncu_bin_path: str | None = None  # None: searched on PATH and in the vendor's directories
    rocprof_bin_path: str | None = None
    profile_timeout_s: float = 300.0  # per profiler call
