"""A problem's floor on a device: the time below which no kernel can go.

A forward must read its inputs and the model's parameters and buffers and
write its outputs, each at least once (the compulsory bytes), and do the
matrix work of the reference (its FLOPs). So no kernel runs faster than

    floor_ms = max(bytes / bandwidth, flops / peak rate for the work's dtype)

with the device's achievable figures (``platforms.peaks``: measured, or the
datasheet). The larger term names the bound: ``memory`` or ``compute``. SOL
(speed of light) is ``floor_ms / runtime_ms`` (``sol``): 1 at the floor.

Where the figures come from:

- bytes: the sizes of the actual tensors at the problem's shapes and dtype,
  each piece of memory counted once within the inputs, within the parameters
  and buffers, and within the outputs (``distinct_bytes``: a tensor passed or returned
  twice counts once, a broadcast view no more than the memory under it);
  across the three nothing is deduplicated, so an output that is a view of
  an input counts as both (an in-place forward reads and writes it).
- FLOPs: the problem's own ``FLOPS`` when it declares one (read as
  ``fitness.profiling.candidate`` reads it), else ``torch.utils.flop_counter.FlopCounterMode``
  over the reference's forward. It counts matmuls, convolutions and
  attention; elementwise work and reductions count 0, which is right for a
  floor: they are memory bound on every GPU kevo supports.
- the trace: the model and its inputs are built under ``FakeTensorMode`` on
  the problem's device (shapes, dtypes and devices, no memory, no compute),
  so KernelBench's multi-GB problems are counted in a fraction of a second.
  A reference that fake tensors cannot run (one that reads a value, say) is
  run for real, once, on the device: that costs its memory, as checking it
  would. A small one (``floor_for``: under ``REAL_COUNT_BYTES``) is run for
  real from the start, under a counting mode of its own: fake tensors and
  ``FlopCounterMode`` import torch's compiler (1-3 s a process), which costs
  more than one forward at that size.
- fp32 matrix work is counted at the faster of true fp32 and TF32 (what
  Triton's ``tl.dot`` does with fp32 operands by default; fp32-accurate
  schemes such as ``tf32x3`` also run above the true-fp32 rate). A problem
  whose cutoff rejects TF32 can therefore not reach its floor: its SOL reads
  low, never above 1 (problems/matmul, true fp32 at 4096: 0.14 for cuBLAS on
  an H200). ``floor_of(..., tf32=False)`` counts true fp32.

Caches. kevo times a kernel with a cold cache (``Platform.flush_cache``
before each run), so its inputs and parameters come from memory. Its outputs
need not get there inside the run: a write lands in the last-level cache
(60 MB of L2 on an H200; the L2 and the 256 MB Infinity Cache on an MI300X)
and reaches memory later. For a problem whose outputs fit in that cache,
``floor_ms`` (which charges every output byte to memory) is a bound that a
correct kernel may beat. ``cached_floor_ms`` leaves out outputs up to the
cache's size (all of them when the size is unknown): no correct run should
go below it.
``below_floor`` flags a runtime under ``cached_floor_ms`` by more than
``BELOW_FLOOR_MARGIN``, the floor's own uncertainty. SOL uses ``floor_ms``.
"""

from __future__ import annotations

import contextlib
import dataclasses
from typing import Any

from fitness.problems.problem import Problem, build_model, make_inputs
from fitness.profiling.candidate import INIT_SEED, INPUT_SEED, declared_flops, distinct_bytes, tensors_in
from platforms.base import Platform
from platforms.peaks import Peaks, achievable_peaks, device_key, read_cached

#: How far below ``Floor.cached_floor_ms`` a runtime must be before ``below_floor`` says so.
#: The floor's own uncertainty: a measured bandwidth or matmul rate a few percent under what
#: some kernel reaches (on an H200 a fused read-only reduction ran 2% above the measured
#: bandwidth, see ``platforms.peaks``; clocks differ from one run to the next), and the
#: median of a timed window. A runtime below this is a wrong floor or a wrong kernel.
BELOW_FLOOR_MARGIN = 0.10

MEMORY, COMPUTE = "memory", "compute"

#: A problem whose inputs and outputs take fewer bytes is counted by running it for real
#: (``floor_for``): cheaper than importing the fake-tensor machinery.
REAL_COUNT_BYTES = 256 << 20


@dataclasses.dataclass(frozen=True)
class Work:
    """What one forward of a problem must move and compute."""

    input_bytes: int
    parameter_bytes: int  # parameters and buffers of the reference Model
    output_bytes: int
    flops: float
    flops_source: str  # "declared" (the problem's FLOPS) or "counted" (FlopCounterMode)
    dtype: str  # of the largest floating-point input or parameter ("" when there is none)
    traced: str  # "fake" (FakeTensorMode) or "real" (run on the device)
    note: str = ""
    scan_terms: int = 1  # the longest running sum (cumsum, ...) the forward takes: its last output sums as many

    @property
    def bytes(self) -> int:
        return self.input_bytes + self.parameter_bytes + self.output_bytes


@dataclasses.dataclass(frozen=True)
class Floor:
    """The floor of one problem at one set of shapes on one device (see the module's docstring)."""

    floor_ms: float
    bound: str  # MEMORY or COMPUTE
    bytes: int
    flops: float
    bandwidth_gbs: float
    peak_tflops: float | None  # the rate the FLOPs were counted at (None: none known for the dtype)
    source: str  # where bandwidth and rate come from: "measured" or "datasheet"
    cached_floor_ms: float  # with outputs that fit in the last-level cache left out
    note: str = ""
    how: dict[str, Any] = dataclasses.field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def count_work(problem: Problem, device: str = "cpu", fake: bool = True) -> Work:
    """The compulsory bytes and the FLOPs of one forward of ``problem``'s reference on ``device``
    (``fake``: traced with fake tensors where they can run it; else run for real).

    >>> from fitness.problems.problem import load_problem
    >>> w = count_work(load_problem("problems/matmul/reference.py", {"M": 2, "K": 3, "N": 4}))
    >>> w.bytes, w.flops, w.traced
    (104, 48.0, 'fake')
    """
    if not fake:
        return _count(problem, device, fake=False)
    try:
        return _fake_count(problem, device)
    except (RuntimeError, NotImplementedError, TypeError, ValueError, AssertionError) as exc:
        why = f"fake tensors cannot run the reference ({type(exc).__name__}: {str(exc).splitlines()[0][:160]})"
        return dataclasses.replace(_count(problem, device, fake=False), note=f"{why}; run for real on {device}")


def reduction_terms(problem: Problem, device: str, output_elements: int) -> float:
    """How many products each output element sums, on average: the reference's FLOPs (counted
    with fake tensors, or declared) over two per output element; at least 1, and at least the
    length of the longest running sum it takes (a cumsum's last output sums its whole row:
    FLOPs, one add an output, do not tell). 1.0 where the
    reference cannot be traced with fake tensors (it is not run for real here: at a problem's
    own sizes that would be one more forward beside the references already made).

    >>> from fitness.problems.problem import load_problem
    >>> reduction_terms(load_problem("problems/matmul/reference.py", {"M": 2, "K": 3, "N": 4}), "cpu", 8)
    3.0
    """
    try:
        work = _fake_count(problem, device)
        flops = work.flops
    except (RuntimeError, NotImplementedError, TypeError, ValueError, AssertionError):
        return 1.0
    return max(1.0, flops / (2 * max(1, output_elements)), float(work.scan_terms))


#: Counts with fake tensors, by loaded problem (its module, kept so that its id is not reused), dtype
#: and device: the cutoff's terms and the floor ask for the same one when a problem is prepared.
_FAKE_WORK: dict[tuple, tuple[Any, Work]] = {}


def _fake_count(problem: Problem, device: str) -> Work:
    key = (id(problem.module), problem.dtype, device)
    if key not in _FAKE_WORK:
        if len(_FAKE_WORK) >= 64:
            _FAKE_WORK.clear()
        _FAKE_WORK[key] = (problem.module, _count(problem, device, fake=True))
    return _FAKE_WORK[key][1]


def _count(problem: Problem, device: str, fake: bool) -> Work:
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.utils.flop_counter import FlopCounterMode

    # A module built under FakeTensorMode cannot be moved or cast (its fake parameters
    # cannot be swapped), so the fake model is built on the meta device, cast there as
    # build_model casts, and given fake parameters and buffers of the same shapes on ``device``.
    model = build_model(problem.Model, problem, INIT_SEED, "meta" if fake else device)
    # torch counts the attention kernels of GPUs, not the CPU's: the same formula for it.
    cpu_attention = getattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu", None)
    mapping = {cpu_attention: _attention_flops} if cpu_attention is not None else None
    counter = FlopCounterMode(display=False, custom_mapping=mapping) if fake else _flop_count(mapping)
    scans = _scans()
    with FakeTensorMode(allow_non_fake_inputs=True) if fake else contextlib.nullcontext():
        if fake:
            _materialise(model, device)
        inputs = make_inputs(problem, INPUT_SEED, device)
        with torch.no_grad(), counter, scans:
            outputs = model(*inputs)
    weights = list(model.parameters()) + list(model.buffers())
    declared = declared_flops(problem.module, problem.path)
    floating = [t for t in tensors_in(inputs) + weights if t.is_floating_point()]
    largest = max(floating, key=lambda t: t.numel() * t.element_size(), default=None)
    return Work(distinct_bytes(inputs), distinct_bytes(weights), distinct_bytes(outputs),
                float(declared if declared is not None else counter.get_total_flops()),
                "declared" if declared is not None else "counted",
                str(largest.dtype).removeprefix("torch.") if largest is not None else "",
                "fake" if fake else "real", scan_terms=scans.longest)


def _scans() -> Any:
    """A dispatch mode that notes the longest running sum or product the forward takes."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    aten = torch.ops.aten
    running = {aten.cumsum, aten.cumprod, aten.logcumsumexp, aten._logcumsumexp}

    class Scans(TorchDispatchMode):
        longest = 1

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            if func._overloadpacket in running and args and isinstance(args[0], torch.Tensor):
                x, dim = args[0], (args[1] if len(args) > 1 else kwargs.get("dim", -1))
                if x.dim():
                    self.longest = max(self.longest, int(x.shape[dim]))
            return func(*args, **kwargs)

    return Scans()


def _flop_count(mapping: dict | None) -> Any:
    """A dispatch mode that counts FLOPs as ``FlopCounterMode`` does (torch's formulas, ``mapping``
    added), without its module tracking: entering that, and dispatching through any mode,
    imports torch's compiler to disable it, which a count of real tensors does not need."""
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils.flop_counter import flop_registry, shape_wrapper

    registry = {**flop_registry, **{op: shape_wrapper(f) for op, f in (mapping or {}).items()}}

    class Counting(TorchDispatchMode):
        total = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            formula = registry.get(func._overloadpacket)
            if formula is None:  # an op without a formula may decompose into ops with one
                with self:
                    out = func.decompose(*args, **kwargs)
                if out is not NotImplemented:
                    return out
            out = func(*args, **kwargs)
            if formula is not None:
                self.total += formula(*args, **kwargs, out_val=out)
            return out

        def get_total_flops(self) -> int:
            return self.total

    # torch wraps every mode's dispatch to keep its compiler out, importing the compiler on the
    # first call unless the function says it has its wrapper already (torch._compile): it does.
    raw = getattr(Counting.__torch_dispatch__, "__wrapped__", None)
    if raw is not None:
        setattr(raw, "__dynamo_disable", raw)
    return Counting()


def _attention_flops(query_shape, key_shape, value_shape, *_args, out_shape=None, **_kwargs) -> int:
    from torch.utils.flop_counter import sdpa_flop_count

    return sdpa_flop_count(query_shape, key_shape, value_shape)


def _materialise(model: Any, device: str) -> None:
    """Replace ``model``'s meta parameters and buffers with (fake) tensors on ``device``;
    a parameter shared between modules stays shared."""
    import torch

    made: dict[int, Any] = {}
    for module in model.modules():
        for slots, wrap in ((module._parameters, True), (module._buffers, False)):
            for name, tensor in slots.items():
                if tensor is None:
                    continue
                if id(tensor) not in made:  # the meta tensor is kept, so its id is not reused
                    empty = torch.empty_like(tensor, device=device)
                    made[id(tensor)] = (tensor, torch.nn.Parameter(empty, tensor.requires_grad) if wrap else empty)
                slots[name] = made[id(tensor)][1]


def floor_of(work: Work, peaks: Peaks, tf32: bool = True) -> Floor:
    """The floor of ``work`` at ``peaks`` (pure: no device is touched).

    >>> from platforms.peaks import Peaks
    >>> peaks = Peaks("gpu", 1000.0, {"float32": 50.0, "tf32": 400.0}, "measured", cache_bytes=0)
    >>> f = floor_of(Work(8_000_000, 0, 4_000_000, 0.0, "counted", "float32", "fake"), peaks)
    >>> f.floor_ms, f.bound
    (0.012, 'memory')
    """
    rate, precision = peaks.rate_for(work.dtype, tf32) if work.flops else (None, "")
    memory_ms = work.bytes / peaks.bandwidth_gbs / 1e6
    compute_ms = work.flops / rate / 1e9 if rate else 0.0
    held = work.output_bytes if peaks.cache_bytes is None else min(work.output_bytes, peaks.cache_bytes)
    cached_memory_ms = (work.bytes - held) / peaks.bandwidth_gbs / 1e6
    notes = [work.note] if work.note else []
    if work.flops and not rate:
        notes.append(f"no matmul rate known for {work.dtype or 'this work'}: the floor is the memory's alone")
    how = {
        "device": peaks.device_name, "bytes": {"inputs": work.input_bytes, "parameters": work.parameter_bytes,
                                               "outputs": work.output_bytes},
        "flops": work.flops, "flops_source": work.flops_source, "traced": work.traced, "dtype": work.dtype,
        "precision": precision, "memory_ms": memory_ms, "compute_ms": compute_ms,
        "bandwidth_gbs": peaks.bandwidth_gbs, "peak_tflops": rate, "source": peaks.source,
        "cache_bytes": peaks.cache_bytes, "peaks": peaks.detail,
    }
    return Floor(max(memory_ms, compute_ms), COMPUTE if compute_ms > memory_ms else MEMORY, work.bytes,
                 work.flops, peaks.bandwidth_gbs, rate, peaks.source, max(cached_memory_ms, compute_ms),
                 "; ".join(notes), how)


def problem_floor(problem: Problem, peaks: Peaks, device: str = "cpu", tf32: bool = True) -> Floor:
    """The floor of ``problem`` (as loaded: its shapes and dtype) on ``device`` with ``peaks``."""
    return floor_of(count_work(problem, device), peaks, tf32)


def floor_for(problem: Problem, platform: Platform, size_bytes: int | None = None) -> tuple[Floor | None, str]:
    """(the floor of ``problem`` on ``platform``'s device with its achievable peaks, ""), or
    (None, why) where there is none: no peaks known for the device (``PeaksUnavailable``),
    or the reference cannot be counted. Peaks are measured on first use and cached by
    device (``platforms.peaks.achievable_peaks``). ``size_bytes``: what the problem's inputs
    and outputs take, where known; under ``REAL_COUNT_BYTES`` it is counted for real."""
    try:
        peaks = achievable_peaks(platform)
        fake = size_bytes is None or size_bytes >= REAL_COUNT_BYTES
        return floor_of(count_work(problem, str(platform.device()), fake), peaks), ""
    except RuntimeError as exc:  # PeaksUnavailable; a reference that fails when run for real to be counted
        return None, f"{type(exc).__name__}: {(str(exc).splitlines() or [''])[0][:300]}"


def measure_peaks_alone(platform: Platform, alone: Any) -> None:
    """Measure the device's peaks now, with ``alone()`` held (the timing lane's ``exclusive``:
    no other evaluation's work on the device), unless they are cached already: measured
    beside another slot's checks they would read low, and the cache would keep that.
    A device with no peaks at all is left to ``floor_for`` to say."""
    if read_cached(device_key(platform)) is not None:
        return
    with alone():
        try:
            achievable_peaks(platform)
        except (RuntimeError, OSError):  # PeaksUnavailable, a cache it cannot write: floor_for says why
            pass


def sol(floor_ms: float, runtime_ms: float) -> float:
    """Speed of light: the fraction of the floor a runtime reaches, in [0, 1].

    A runtime below the floor reads 1 (``below_floor`` says whether to trust it).

    >>> sol(0.25, 1.0), sol(0.25, 0.2)
    (0.25, 1.0)
    """
    if runtime_ms <= 0:
        raise ValueError(f"runtime_ms must be positive, not {runtime_ms!r}")
    return min(1.0, max(0.0, floor_ms / runtime_ms))


def below_floor(floor: Floor, runtime_ms: float) -> bool:
    """True when ``runtime_ms`` is below what any correct run can reach: under the floor
    with cached outputs left out, by more than ``BELOW_FLOOR_MARGIN``.

    >>> f = Floor(1.0, "memory", 1000, 0.0, 1.0, None, "measured", cached_floor_ms=0.8)
    >>> below_floor(f, 0.75), below_floor(f, 0.7)
    (False, True)
    """
    return runtime_ms < floor.cached_floor_ms * (1 - BELOW_FLOOR_MARGIN)
