"""The patched model under torch.compile: a region's kernel as a custom operator that Inductor keeps
as it is, while it compiles the rest of the model as torch.compile would.

``KernelBackend(model, kernels)`` is a ``torch.compile`` backend. Each graph Dynamo traces is cut
into regions as ``kevo extract`` cut it (``evolve.models.fusion``); a region whose spec key
(``evolve.models.regions.region_spec``) has a kernel in ``kernels`` and is ``active`` runs that
kernel's ``ModelNew`` (holding the model's own parameters) behind an operator of the ``kevo``
library; Inductor (``compile_fx``, torch.compile's default backend) compiles the graph around it.
Each set of active kernels is compiled once per graph, on the forward that first meets it, and
switching ``active`` switches what runs: ``kevo apply`` times the model with and without each
kernel on one Dynamo capture. With no kernel active the graph is torch.compile's own.

For inference: the operators have no backward (run the model under ``torch.no_grad()``).

The module ``kevo apply --module DIR`` writes holds the kernels and their regions' problems and
calls ``load_kernels`` and ``KernelBackend`` (kevo installed; no run directory needed)::

    import kevo_mymodel
    model = kevo_mymodel.patch(model)         # torch.compile(model, backend=...) with the kernels in
"""

from __future__ import annotations

import copy
import dataclasses
import itertools
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from evolve.models.fusion import RegionCall, find_regions, partition
from evolve.models.regions import NotWritable, TensorStats, bind_state, describe, region_spec, write_back


@dataclasses.dataclass
class RegionKernel:
    """An accepted kernel for the regions of one spec key."""

    key: str  # the region's spec key
    label: str  # its problem file's name, for messages
    cls: type  # the kernel's ModelNew
    problem: Any  # the region's problem (``fitness.problems.problem.Problem``): ModelNew's constructor arguments
    lower_precision: bool = False  # its dots may multiply fp32 below fp32 (TF32, tf32x3)


_LIBRARY: Any = None
_NAMES = itertools.count()


def _operator(module: Any, inputs: int, outs: list[Any], label: str) -> Any:
    """A new ``kevo::regionN`` operator of ``inputs`` tensors that runs ``module`` and returns its
    outputs as the region's were traced (``outs``: their fake values): same shapes, dtypes and
    strides, never a view of an argument (what Inductor assumes of an operator's outputs)."""
    import torch

    global _LIBRARY
    if _LIBRARY is None:
        _LIBRARY = torch.library.Library("kevo", "FRAGMENT")
    name = f"region{next(_NAMES)}"
    _LIBRARY.define(f"{name}({', '.join(f'Tensor x{i}' for i in range(inputs))}) -> Tensor[]")
    declared = [(tuple(o.shape), tuple(o.stride()), o.dtype) for o in outs]

    def run(*xs: Any) -> list[Any]:
        got = module(*xs)
        got = tuple(got) if isinstance(got, (tuple, list)) else (got,)
        if len(got) != len(declared) or any(tuple(g.shape) != d[0] for g, d in zip(got, declared)):
            raise RuntimeError(f"kevo: the kernel of region {label} returned shapes "
                               f"{[tuple(g.shape) for g in got]}, the region's are {[d[0] for d in declared]}")
        held = {x.untyped_storage().data_ptr() for x in xs}
        return [g if tuple(g.stride()) == stride and g.dtype == dtype and g.untyped_storage().data_ptr() not in held
                else torch.empty_strided(shape, stride, dtype=dtype, device=g.device).copy_(g)
                for g, (shape, stride, dtype) in zip(got, declared)]

    def fake(*xs: Any) -> list[Any]:
        return [torch.empty_strided(shape, stride, dtype=dtype, device=xs[0].device) for shape, stride, dtype in declared]

    _LIBRARY.impl(name, run, "CompositeExplicitAutograd")
    torch.library.register_fake(f"kevo::{name}", fake, lib=_LIBRARY)
    return getattr(torch.ops.kevo, name).default


def _region_module(op: Any, picks: list[int], mutated: list[int]) -> Any:
    """What stands in a graph for a region: the operator on the region's activations (``picks``), the
    new values of the arguments the region writes (``mutated``) copied into them (``write_back``)."""
    import torch

    class KernelRegion(torch.nn.Module):
        def forward(self, *args: Any) -> tuple:
            return write_back(tuple(op(*[args[i] for i in picks])), args, mutated)

    return KernelRegion()


def _value(node: Any) -> Any:
    return node.meta.get("example_value", node.meta.get("val"))


class _Graph:
    """One graph Dynamo traced: which of its regions have a kernel, and its compiled variants."""

    def __init__(self, owner: "KernelBackend", gm: Any, example_inputs: list[Any]) -> None:
        self.owner, self.gm, self.inputs = owner, gm, example_inputs
        placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
        self.values = dict(zip((n.name for n in placeholders), example_inputs))
        self.state = {n.name: owner.state[id(v)] for n, v in zip(placeholders, example_inputs) if id(v) in owner.state}
        self.variants: dict[frozenset[str], Any] = {}
        self.current: tuple[int, Any] = (-1, None)  # (the owner's version, the variant it runs)
        self.ops: dict[int, tuple[Any, list[int], list[int]]] = {}  # region -> (operator, its inputs, what it writes)
        self.matched: dict[int, str] = {}  # region index -> key with a kernel
        probe = self._copy()
        for r, call in enumerate(partition(probe, find_regions(probe.graph))):
            key = self._spec(call)
            if key is not None and key[0].key in owner.kernels:
                self.matched[r] = key[0].key
                self.ops[r] = self._make(call, *key)

    def _copy(self) -> Any:
        from torch import fx

        return fx.GraphModule(self.gm, copy.deepcopy(self.gm.graph))

    def _held(self, node: Any) -> Any:
        """What a node held at the capture: a graph input's example, or another node's traced value."""
        return self.values.get(node.name) if node.op == "placeholder" else _value(node)

    def _spec(self, call: RegionCall) -> tuple[Any, list[Any]] | None:
        """The region's spec (its key) and what its arguments held at the capture: the model's
        parameters and buffers as they are, an activation by its traced shape and dtype."""
        import torch

        where = [self.state.get(n.name) if n.op == "placeholder" else None for n in call.inputs]
        stats, held = [], []
        for node, place in zip(call.inputs, where):
            value = self._held(node)
            held.append(value if place is not None else None)
            if place is not None:
                stats.append(describe(value))
            elif isinstance(value, torch.Tensor):
                stats.append(TensorStats(tuple(int(s) for s in value.shape), str(value.dtype).removeprefix("torch."),
                                         "draw"))
            else:
                stats.append(None)
        try:
            spec = region_spec(call, where, stats)
        except NotWritable:
            return None
        return spec, held

    def _make(self, call: RegionCall, spec: Any, held: list[Any]) -> tuple[Any, list[int], list[int]]:
        from fitness.problems.problem import build_model

        kernel = self.owner.kernels[spec.key]
        device = next((v.device for v in self.inputs if hasattr(v, "device")), "cpu")
        module = build_model(kernel.cls, kernel.problem, 0, str(device))
        bind_state(module, held, spec.roles, f"region {kernel.label}")
        out = next(n for n in call.module.graph.nodes if n.op == "output")
        outs = [_value(n) for n in out.args[0]] + [self._held(call.inputs[i]) for i in spec.mutated]
        picks = [i for i, role in enumerate(spec.roles) if role == "input"]
        return _operator(module, len(picks), outs, kernel.label), picks, spec.mutated

    def __call__(self, *args: Any) -> Any:
        if self.current[0] != self.owner.version:  # ``active`` changed since the last forward
            keys = frozenset(k for k in self.matched.values() if k in self.owner.active)
            if keys not in self.variants:
                self.variants[keys] = self._compile(keys)
            self.current = (self.owner.version, self.variants[keys])
        return self.current[1](*args)

    def _compile(self, keys: frozenset[str]) -> Any:
        from torch._inductor import config
        from torch._inductor.compile_fx import compile_fx

        gm = self._copy()
        if keys:
            calls = partition(gm, find_regions(gm.graph))
            for r, key in self.matched.items():
                if key in keys:
                    gm.delete_submodule(calls[r].submodule)
                    gm.add_submodule(calls[r].submodule, _region_module(*self.ops[r]))
            gm.recompile()
        with config.patch(fallback_random=self.owner.exact_random):
            return compile_fx(gm, self.inputs)


class KernelBackend:
    """A ``torch.compile`` backend for ``model``: Inductor, with the ``active`` keys' kernels in
    place of their regions (see the module doc). ``active`` may change between forwards."""

    def __init__(self, model: Any, kernels: Iterable[RegionKernel], active: Iterable[str] | None = None,
                 exact_random: bool = False) -> None:
        self.kernels = {k.key: k for k in kernels}
        self.exact_random = exact_random  # draws as eager draws (Inductor's fallback_random), for a check
        self.version = 0
        self.active = set(self.kernels if active is None else active)
        self.state = {id(t): ("parameter", n) for n, t in model.named_parameters()}
        self.state.update({id(t): ("buffer", n) for n, t in model.named_buffers()})
        self.graphs: list[_Graph] = []

    @property
    def active(self) -> set[str]:
        """The keys whose kernels run (a copy: assign a new set to change it)."""
        return set(self._active)

    @active.setter
    def active(self, keys: Iterable[str]) -> None:
        self._active, self.version = frozenset(keys), self.version + 1

    def __call__(self, gm: Any, example_inputs: list[Any]) -> Any:
        graph = _Graph(self, gm, list(example_inputs))
        self.graphs.append(graph)
        return graph

    def found(self) -> dict[str, int]:
        """Per key with a kernel: the regions of the traced graphs it matches (after a forward)."""
        counts: dict[str, int] = {}
        for graph in self.graphs:
            for key in graph.matched.values():
                counts[key] = counts.get(key, 0) + 1
        return counts


def compile_with(model: Any, kernels: Iterable[RegionKernel], active: Iterable[str] | None = None,
                 exact_random: bool = False) -> tuple[Any, KernelBackend]:
    """``model`` under torch.compile with the kernels' backend (static shapes), and the backend."""
    import torch

    backend = KernelBackend(model, kernels, active, exact_random)
    return torch.compile(model, backend=backend, dynamic=False), backend


# -- the module kevo apply writes --------------------------------------------------------------

#: The file that lists a written module's kernels: key, label, kernel file, problem file.
KERNELS_FILE = "kernels.json"

_INIT = '''"""{model}'s kernels from kevo apply, as custom operators under torch.compile (inference only).

Kernels: {labels}.
Measured by kevo apply on {device}: {figure}.

    import {package}
    model = {package}.patch(model)     # torch.compile(model) with the kernels in their regions
    with torch.no_grad():
        out = model(x)

The model must be the one kevo extract took apart, at the same shapes: a region that does not
match keeps torch.compile's code. Needs kevo importable (its evolve package), no run directory.
"""

from pathlib import Path

from evolve.models.compiled import compile_with, load_kernels

HERE = Path(__file__).resolve().parent


def backend(model):
    """A torch.compile backend for ``model`` with the kernels in (``torch.compile(model, backend=...,
    dynamic=False)``); ``backend.found()`` says which regions matched after a forward."""
    from evolve.models.compiled import KernelBackend

    return KernelBackend(model, load_kernels(HERE))


def patch(model):
    """``model`` under torch.compile, the kernels in place of their regions."""
    return compile_with(model, load_kernels(HERE))[0]
'''


def write_module(folder: Path, package: str, chosen: list[tuple[str, str, str, Path]], model: str, device: str,
                 figure: str) -> Path:
    """A package ``folder/package`` holding the ``chosen`` kernels, each (key, label, kernel source,
    its region's problem file), and ``patch(model)``; its path."""
    where = Path(folder) / package
    where.mkdir(parents=True, exist_ok=True)
    listed = []
    for i, (key, label, source, problem) in enumerate(chosen):
        (where / f"kernel_{i}.py").write_text(source, encoding="utf-8")
        (where / f"problem_{i}.py").write_text(Path(problem).read_text(encoding="utf-8"), encoding="utf-8")
        listed.append({"key": key, "label": label, "kernel": f"kernel_{i}.py", "problem": f"problem_{i}.py"})
    (where / KERNELS_FILE).write_text(json.dumps(listed, indent=1) + "\n", encoding="utf-8")
    (where / "__init__.py").write_text(_INIT.format(model=model, package=package, device=device, figure=figure,
                                                    labels=", ".join(k[1] for k in chosen) or "none"),
                                       encoding="utf-8")
    return where


def load_kernels(folder: str | Path) -> list[RegionKernel]:
    """The kernels a module written by ``write_module`` holds."""
    from fitness.problems.problem import load_problem
    from fitness.profiling.target import load_candidate

    folder = Path(folder)
    listed = json.loads((folder / KERNELS_FILE).read_text(encoding="utf-8"))
    return [RegionKernel(k["key"], k["label"], load_candidate(folder / k["kernel"]),
                         load_problem(folder / k["problem"])) for k in listed]
