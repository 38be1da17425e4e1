"""The shape a parent is profiled at: the problem's own, or a reduced one that keeps the kernel's behaviour.

A hardware profiler replays each launch once per counter pass and saves and
restores the program's device memory around every replay (ncu on the H200
fixture: 10 passes; ``profiler__replayer_bytes_mem_backed_up`` grows with the
program's allocations). At KernelBench's own shapes (a 6.4 GB tensor for
24_LogSoftmax) that is tens of GB copied per launch, and a second copy of the
problem's tensors next to the evaluators'. So a problem whose tensors
(inputs, outputs, parameters, buffers: ``problem_work``'s bytes) exceed
``PROFILE_MAX_BYTES`` is profiled at a reduced shape, through the same
shape overrides as ``--shape`` and held-out shapes (``fitness.problems.problem``):

- only an **outer** knob shrinks: a module-level integer whose change moves
  the leading dimension of inputs and outputs and nothing else (no other
  dimension, no parameter or buffer, no dtype). Rows of a softmax, images of
  a batch, the batch of a batched matmul. The inner dimensions (the reduced
  row, the channels, the image, the matrix a row multiplies) and the dtype
  stay, so every program of the kernel does the work it does at the own
  shape, with the same block sizes and the same compiled specialisation;
  what changes is how many such programs there are;
- the new size keeps the own size's divisibility by 2, 4, 8, 16 where it can
  (Triton specialises integer arguments on divisibility by 16, and
  vectorised loads follow alignment), and is never 1 (also specialised);
- fewer programs could leave SMs idle, which would make a memory-bound kernel
  read as latency-bound: ``fitness.profiling.candidate`` checks the profiled grid and
  profiles once more, larger, when it has fewer than ``MIN_BLOCKS_PER_UNIT``
  blocks per SM/CU (``grown``).

A problem without an outer knob (its sizes are literals, or every knob
reshapes an inner dimension too) is profiled at its own shapes, and the
record says so. Everything here runs the reference on PyTorch's ``meta``
device: no memory, no compute.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any

from fitness.problems.problem import Problem, load_problem, shape_knobs

#: A problem whose tensors take more than this is profiled at a reduced shape.
PROFILE_MAX_BYTES = 512 << 20
#: A reduced shape must give the profiled kernel at least this many blocks per SM/CU,
#: so that a one-program-per-row kernel still fills the device (its tail at most 1/8 of a run).
MIN_BLOCKS_PER_UNIT = 8
#: An outer knob shrinks only while the tensors that do not follow it (a matmul's B, a conv's weights)
#: stay under this share of the total: past it, what each item's work reads changes.
MAX_FIXED_SHARE = 1 / 8
#: A shape made larger to fill the grid (``grown``) takes at most this many times ``PROFILE_MAX_BYTES``.
MAX_GROWN = 8
_ALIGN = 16  # Triton's divisibility specialisation of integer arguments
NO_OUTER = ("no outer knob to shrink (a module-level integer that changes only the leading dimension of inputs "
            "and outputs)")


@dataclasses.dataclass(frozen=True)
class Layout:
    """Shapes and element sizes of a forward's tensors, from a run on the ``meta`` device."""

    inputs: tuple[tuple[tuple[int, ...], int], ...]
    outputs: tuple[tuple[tuple[int, ...], int], ...]
    state: tuple[tuple[tuple[int, ...], int], ...]  # parameters and buffers

    @property
    def bytes(self) -> int:
        return sum(math.prod(shape) * size for group in (self.inputs, self.outputs, self.state)
                   for shape, size in group)


@dataclasses.dataclass(frozen=True)
class ProfileShape:
    """The overrides a parent is profiled at, and how they came from the problem's own."""

    shapes: dict[str, int]
    own_bytes: int | None  # the problem's tensors at its own (main) shapes; None: unknown
    bytes: int | None  # at ``shapes``
    outer: dict[str, int] = dataclasses.field(default_factory=dict)  # knob -> its own value, for those reduced
    max_bytes: int = PROFILE_MAX_BYTES
    kept: str = ""  # why a problem above the limit keeps its own shapes

    @property
    def reduced(self) -> bool:
        return bool(self.outer)

    @property
    def note(self) -> str:
        """One line: what was reduced (empty at the own shapes)."""
        if not self.outer:
            return ""
        knobs = ", ".join(f"{name}={self.shapes[name]} of {own}" for name, own in self.outer.items())
        text = f"{knobs}: {size_text(self.bytes)} of tensors instead of {size_text(self.own_bytes)}"
        if self.bytes is not None and self.bytes > self.max_bytes:
            text += f" (the smallest its outer knobs allow; {size_text(self.max_bytes)} was aimed at)"
        return text

    @property
    def why_not(self) -> str:
        """Why a problem above the limit is profiled at its own shapes (empty otherwise)."""
        if self.outer or self.own_bytes is None or self.own_bytes <= self.max_bytes:
            return ""
        return f"profiled at its own shapes ({size_text(self.own_bytes)} of tensors): {self.kept or NO_OUTER}"


def profile_shape(problem_path: str | Path, shapes: dict[str, int] | None = None, dtype: str | None = None,
                  max_bytes: int = PROFILE_MAX_BYTES) -> ProfileShape:
    """The shape to profile the problem at ``shapes`` with: its own when its tensors fit in
    ``max_bytes``, else its outer knobs shrunk until they do (or as far as they go).

    >>> profile_shape("problems/softmax/reference.py", {"batch_size": 4, "dim": 100}).reduced
    False
    """
    shapes = dict(shapes or {})
    layout = layout_at(problem_path, shapes, dtype)
    if layout is None:
        return ProfileShape(shapes, None, None, max_bytes=max_bytes)
    own = layout.bytes
    knobs = {k.name: k.value for k in shape_knobs(problem_path)} | shapes
    current, outer, kept = dict(shapes), {}, ""
    for name in sorted(knobs, key=lambda n: -knobs[n]):
        if layout.bytes <= max_bytes:
            break
        value = knobs[name]
        probe = layout_at(problem_path, {**current, name: value // 2}, dtype) if value >= 3 else None
        if probe is None or not leading_only(layout, probe):
            continue
        per_item = (layout.bytes - probe.bytes) / (value - value // 2)
        fixed = max(0.0, layout.bytes - per_item * value)  # what does not follow the knob (a matmul's B)
        if per_item <= 0 or fixed > layout.bytes * MAX_FIXED_SHARE:
            kept = kept or (f"the tensors that do not follow its outer knob {name} are over "
                            f"{MAX_FIXED_SHARE:.1%} of the total: shrinking it would change what each item's "
                            "work reads (a matrix product into a matrix-vector one)")
            continue
        fits = int((max_bytes - fixed) // per_item)
        size = smaller_size(value, max(fits, math.ceil(fixed * (1 / MAX_FIXED_SHARE - 1) / per_item)))
        smaller = layout_at(problem_path, {**current, name: size}, dtype) if size else None
        if smaller is None or not leading_only(layout, smaller):
            continue
        if smaller.bytes > layout.bytes / 2:
            kept = kept or f"shrinking its outer knob {name} would not halve them"
            continue
        current[name], layout, outer[name] = size, smaller, value
    return ProfileShape(current, own, layout.bytes, outer, max_bytes, kept)


def grown(shape: ProfileShape, problem_path: str | Path, dtype: str | None, factor: float) -> ProfileShape | None:
    """``shape`` with its largest reduced knob ``factor`` times larger: at most its own size, and
    tensors of at most ``MAX_GROWN`` times the limit; None when that changes nothing."""
    if not shape.outer:
        return None
    name = max(shape.outer, key=lambda n: shape.outer[n])
    now, own = shape.shapes[name], shape.outer[name]
    size = larger_size(own, math.ceil(now * factor))
    if shape.bytes:
        cap = int(now * MAX_GROWN * shape.max_bytes / shape.bytes)
        size = min(size, smaller_size(own, cap) or own) if cap < size else size
    if size <= now:
        return None
    shapes = {**shape.shapes, name: size}
    layout = layout_at(problem_path, shapes, dtype)
    outer = {n: own for n, own in shape.outer.items() if shapes[n] < own}
    return ProfileShape(shapes, shape.own_bytes, None if layout is None else layout.bytes, outer, shape.max_bytes)


def smaller_size(own: int, at_most: int) -> int | None:
    """The largest size of at most ``at_most`` (below ``own``, at least 2) with ``own``'s divisibility
    by 2, 4, 8, 16, or as much of it as fits; None when ``own`` is too small to shrink.

    >>> smaller_size(4096, 170), smaller_size(112, 4), smaller_size(16, 1), smaller_size(2, 1)
    (160, 4, 2, None)
    """
    if own <= 2:
        return None
    at_most = max(2, min(at_most, own - 1))
    align = math.gcd(own, _ALIGN)
    while align > 1 and at_most // align * align < 2:
        align //= 2
    return at_most // align * align


def larger_size(own: int, at_least: int) -> int:
    """The smallest size of at least ``at_least`` with ``own``'s divisibility by 2, 4, 8, 16, at most ``own``.

    >>> larger_size(4096, 1100), larger_size(112, 20), larger_size(112, 500)
    (1104, 32, 112)
    """
    align = math.gcd(own, _ALIGN)
    return min(own, -(-at_least // align) * align)


def leading_only(a: Layout, b: Layout) -> bool:
    """True when ``b`` differs from ``a`` in the leading dimension of some inputs or outputs and nowhere else."""
    if a.state != b.state:
        return False
    changed = False
    for x, y in ((a.inputs, b.inputs), (a.outputs, b.outputs)):
        if len(x) != len(y):
            return False
        for (shape_x, size_x), (shape_y, size_y) in zip(x, y):
            if size_x != size_y or len(shape_x) != len(shape_y) or shape_x[1:] != shape_y[1:]:
                return False
            changed = changed or shape_x[:1] != shape_y[:1]
    return changed


def layout_at(problem_path: str | Path, shapes: dict[str, int], dtype: str | None = None) -> Layout | None:
    """The forward's tensors at ``shapes``, on the ``meta`` device; None when the problem does not
    load or run there at those shapes (the caller then keeps the own shapes)."""
    try:
        inputs, outputs, model = meta_forward(load_problem(problem_path, shapes, dtype), dtype)
    except Exception:  # noqa: BLE001 - a problem file is user input; a shape it refuses is not one to profile at
        return None
    state = list(model.parameters()) + list(model.buffers())
    return Layout(_shapes(inputs), _shapes(outputs), _shapes(state))


def meta_forward(problem: Problem, dtype: str | None = None) -> tuple[list[Any], Any, Any]:
    """(inputs, outputs, model) of one forward of ``problem`` on PyTorch's ``meta`` device (shapes
    and dtypes, no memory, no compute), floating-point values cast to ``dtype``; raises what the
    problem's code raises there."""
    import torch

    with torch.device("meta"), torch.no_grad():
        inputs = problem.get_inputs()
        model = problem.Model(*problem.get_init_inputs())
        if dtype is not None:
            cast = getattr(torch, dtype)
            inputs = [x.to(cast) if isinstance(x, torch.Tensor) and x.is_floating_point() else x for x in inputs]
            model = model.to(cast)
        return inputs, model(*inputs), model


def _shapes(value: Any) -> tuple[tuple[tuple[int, ...], int], ...]:
    import torch

    if isinstance(value, torch.Tensor):
        return ((tuple(value.shape), value.element_size()),)
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, (list, tuple)):
        return tuple(item for part in value for item in _shapes(part))
    return ()


def size_text(n: float | None) -> str:
    """``12 GiB``, ``480 MiB``, ``3.2 KiB``; ``unknown`` for None.

    >>> size_text(12 << 30), size_text(480 << 20)
    ('12 GiB', '480 MiB')
    """
    if n is None:
        return "unknown"
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            value = n / scale
            return f"{value:.0f} {unit}" if value >= 100 else f"{value:.3g} {unit}"
    return f"{n:.0f} B"
