"""A whole model under torch.compile's graph capture and the profiler: its regions and their time.

``capture(problem, platform)`` builds the problem's ``Model`` on the platform's
device and compiles it with a backend of ours: Dynamo traces each graph of the
forward (recurrent layers included), ``evolve.models.fusion`` cuts it into
regions and puts each behind a submodule, and the graph then runs as it is,
eagerly, every region going through an observer the caller hands in. The
same capture serves ``kevo extract`` (observers that record the inputs a
region sees and mark its time for the profiler) and ``kevo apply`` (one that
runs the region's kernel instead).

``profile(captured, ...)`` runs the forward under ``torch.profiler`` (CPU
activities on the CPU; the device's kernels on a GPU) and attributes every
operator's time to the region whose mark encloses it; what no region encloses
(views between regions, code Dynamo left outside its graphs) still counts in
the model's total. Each region's time is its median over the profiled forwards
(and so is the time outside them), so that a forward slowed by other work on
the machine does not make one region look hot.
"""

from __future__ import annotations

import contextlib
import dataclasses
import statistics
from collections.abc import Callable, Iterator
from typing import Any

from evolve.models.fusion import RegionCall, find_regions, partition
from fitness.problems.problem import Problem, build_model
from platforms import Platform
from platforms.device_lock import window as device_window

#: (graph index, region index): a region of one captured graph.
Key = tuple[int, int]
#: What runs a region: (key, the region's own module, its arguments) -> its outputs.
Observer = Callable[[Key, Any, tuple], Any]
_MARK = "kevo_region:"
_FORWARD = "kevo_forward"


@dataclasses.dataclass
class CapturedGraph:
    """One graph Dynamo traced, cut into regions."""

    index: int
    module: Any  # the fx.GraphModule, each region behind a submodule
    calls: list[RegionCall]
    state: dict[str, tuple[str, str]]  # placeholder's name -> ("parameter" | "buffer", its name in the model)

    def state_of(self, call: RegionCall) -> list[tuple[str, str] | None]:
        """For each argument of a region: the model's parameter or buffer it is, or None (an activation)."""
        return [self.state.get(n.name) if n.op == "placeholder" else None for n in call.inputs]


class _Observed:
    """A region's submodule, run through the capture's current observer."""

    def __init__(self, capture: "Captured", key: Key, inner: Any) -> None:
        self.capture, self.key, self.inner = capture, key, inner

    def __call__(self, *args: Any) -> Any:
        return self.capture.observer(self.key, self.inner, args)


def _plain(key: Key, inner: Any, args: tuple) -> Any:
    return inner(*args)


class Captured:
    """The model, compiled through our backend; ``graphs`` fill in on the first forward."""

    def __init__(self, model: Any) -> None:
        import torch

        self.model = model
        self.graphs: list[CapturedGraph] = []
        self.observer: Observer = _plain
        self._state = {id(t): ("parameter", n) for n, t in model.named_parameters()}
        self._state.update({id(t): ("buffer", n) for n, t in model.named_buffers()})
        self.compiled = torch.compile(model, backend=self._backend, dynamic=False)

    def _backend(self, gm: Any, example_inputs: list[Any]) -> Any:
        placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
        state = {node.name: self._state[id(value)] for node, value in zip(placeholders, example_inputs)
                 if id(value) in self._state}
        calls = partition(gm, find_regions(gm.graph))
        graph = CapturedGraph(len(self.graphs), gm, calls, state)
        for r, call in enumerate(calls):
            gm.delete_submodule(call.submodule)
            setattr(gm, call.submodule, _Observed(self, (graph.index, r), call.module))
        gm.recompile()
        self.graphs.append(graph)
        return gm.forward

    @contextlib.contextmanager
    def observed(self, observer: Observer) -> Iterator[None]:
        """Every region runs through ``observer`` inside the block."""
        previous, self.observer = self.observer, observer
        try:
            yield
        finally:
            self.observer = previous

    def __call__(self, *inputs: Any) -> Any:
        import torch

        with torch.no_grad(), torch._dynamo.config.patch(allow_rnn=True):
            return self.compiled(*inputs)

    def region(self, key: Key) -> RegionCall:
        return self.graphs[key[0]].calls[key[1]]

    def keys(self) -> list[Key]:
        return [(g.index, r) for g in self.graphs for r in range(len(g.calls))]


def capture(problem: Problem, platform: Platform, seed: int = 0) -> Captured:
    """The problem's ``Model`` built on ``platform``'s device from ``seed`` (as kevo builds a
    reference), ready to be compiled through the region backend on its first call."""
    import torch

    torch._dynamo.reset()
    return Captured(build_model(problem.Model, problem, seed, platform.device()))


@dataclasses.dataclass
class RegionTime:
    """A region's device time in each profiled forward (all its calls in that forward)."""

    per_forward: list[float]  # ms, one per forward
    calls: int = 0  # over all the forwards

    @property
    def ms(self) -> float:
        """Its time per forward: the median over the forwards, so that one forward slowed by
        something else on the machine does not make a region look hot."""
        return statistics.median(self.per_forward)


@dataclasses.dataclass
class Profile:
    """Where a forward's device time went: per region, and in all (per forward)."""

    regions: dict[Key, RegionTime]
    total_ms: float  # the model's device time per forward: the regions' medians and the median of the rest
    forwards: int
    device: str  # "cpu" (operators' CPU time) or the GPU's kernels

    def region_ms(self, key: Key) -> float:
        """The region's time per forward."""
        return self.regions[key].ms if key in self.regions else 0.0


def profile(captured: Captured, inputs: list[Any], platform: Platform, forwards: int = 3,
            warmup: int = 1) -> Profile:
    """Run the captured model ``warmup`` then ``forwards`` times on ``inputs``, the latter
    under the profiler, and attribute the device time (see the module doc)."""
    import torch.profiler as tp

    for _ in range(warmup):
        captured(*inputs)
    platform.synchronize()
    on_cpu = platform.device() == "cpu"
    activities = [tp.ProfilerActivity.CPU] + ([] if on_cpu else [tp.ProfilerActivity.CUDA])

    def marked(key: Key, inner: Any, args: tuple) -> Any:
        with tp.record_function(f"{_MARK}{key[0]}:{key[1]}"):
            return inner(*args)

    with captured.observed(marked), tp.profile(activities=activities) as prof:
        for _ in range(forwards):
            with tp.record_function(_FORWARD):
                captured(*inputs)
        platform.synchronize()
    runs: list[dict[Key, RegionTime]] = []
    outside: list[float] = []  # per forward, the time no region's mark encloses
    for event in prof.events():
        if event.cpu_parent is None and event.name == _FORWARD and str(event.device_type).endswith("CPU"):
            regions: dict[Key, RegionTime] = {}
            total = _attribute(event, None, regions, on_cpu)
            runs.append(regions)
            outside.append(total / 1e3 - sum(r.per_forward[0] for r in regions.values()))
    merged: dict[Key, RegionTime] = {}
    for at, regions in enumerate(runs):
        for key, entry in regions.items():
            into = merged.setdefault(key, RegionTime([0.0] * len(runs)))
            into.per_forward[at] += entry.per_forward[0]
            into.calls += entry.calls
    total_ms = (statistics.median(outside) if outside else 0.0) + sum(r.ms for r in merged.values())
    return Profile(merged, total_ms, len(runs) or forwards, "cpu" if on_cpu else platform.device_name())


def _time_us(event: Any, on_cpu: bool) -> float:
    return float(event.cpu_time_total if on_cpu else event.device_time_total)


def _attribute(event: Any, region: Key | None, regions: dict[Key, RegionTime], on_cpu: bool) -> float:
    """Microseconds of device time under ``event``, each operator's added to the region that
    encloses it (``region``, or a mark found below)."""
    name = event.name
    if name.startswith(_MARK):
        g, r = name[len(_MARK):].split(":")
        key = (int(g), int(r))
        spent = sum(_attribute(child, key, regions, on_cpu) for child in event.cpu_children)
        if not on_cpu:
            spent = _time_us(event, on_cpu)  # the kernels launched under the mark, whatever launched them
        entry = regions.setdefault(key, RegionTime([0.0]))
        entry.per_forward[0] += spent / 1e3
        entry.calls += 1
        return spent
    if name.startswith("aten::") or not event.cpu_children:
        return _time_us(event, on_cpu) if name.startswith("aten::") or not on_cpu else 0.0
    return sum(_attribute(child, region, regions, on_cpu) for child in event.cpu_children)


def observe(captured: Captured, inputs: list[Any], describe: Callable[[Any], Any],
            forwards: int = 2) -> dict[Key, list[Any]]:
    """``forwards`` forwards (a second one meets a graph Dynamo compiles again for a model that
    changes its own state), each region's arguments described (``describe(arg)``) at its first call."""
    seen: dict[Key, list[Any]] = {}

    def record(key: Key, inner: Any, args: tuple) -> Any:
        if key not in seen:
            seen[key] = [describe(a) for a in args]
        return inner(*args)

    with captured.observed(record):
        for _ in range(forwards):
            captured(*inputs)
    return seen


def time_forward(platform: Platform, forward: Callable[..., Any], problem: Problem, seed: int = 1000) -> float:
    """``forward(*inputs)``'s median time under kevo's timing protocol (``platforms.time_runs``:
    cold cache, whole-device synchronisation, the device's trace where there is one), on fresh
    inputs for every run, drawn before it from ``seed + run``."""
    return timed_forward(platform, forward, problem, seed).median_ms


def timed_forward(platform: Platform, forward: Callable[..., Any], problem: Problem, seed: int = 1000) -> Any:
    """``time_forward``'s window whole (``platforms.timing.Timing``: the runs, and where the device
    trace has them, each run's span and the device's busy time in it)."""
    import torch

    from fitness.problems.problem import make_inputs
    from platforms import time_runs

    def run(_i: int, args: list[Any]) -> Any:
        with torch.no_grad():
            return forward(*args)

    with device_window(platform):
        return time_runs(platform, run, platform.timing,
                         lambda i: make_inputs(problem, seed + i, platform.device()))
