"""A region of a model written as a KernelBench problem file.

``describe(tensor)`` records what a region's argument looked like in the real
model (shape, dtype, and the range of its values); ``region_spec`` turns a
region's graph (``evolve.capture.fusion.RegionCall``) and those descriptions
into a ``RegionSpec``, and ``render`` writes it out: ``Model(nn.Module)``
whose parameters and buffers are the region's (created in the order the
region reads them, so a ``ModelNew`` that makes the same ones in the same
order can be handed the model's own), ``forward`` the region's operators as
Dynamo traced them (in-place forms made out-of-place: a problem must not
change its inputs), ``get_inputs()`` drawing each activation like the real one
(``torch.randn(shape) * std + mean`` kept inside the observed min and max; a
constant, a lower-triangular mask, booleans and integers as such), and a
module-level integer constant per distinct size, so ``--shape`` and held-out
shapes reach every tensor of that size.

Two regions with the same spec key (same operators, sizes, dtypes and
parameter shapes) are one problem: a repeated block is written once.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
from typing import Any

from evolve.capture.fusion import RegionCall, inplace_free


class NotWritable(Exception):
    """A region that cannot be a problem file (an argument that is not a tensor, a submodule call)."""


@dataclasses.dataclass(frozen=True)
class TensorStats:
    """What an argument of a region held in the real model (finite values only)."""

    shape: tuple[int, ...]
    dtype: str  # torch's name: float32, bool, int64, ...
    form: str  # draw | constant | tril | bool | int
    mean: float = 0.0
    std: float = 0.0
    lo: float = 0.0
    hi: float = 0.0


def describe(value: Any) -> TensorStats | None:
    """The ``TensorStats`` of ``value`` (None for anything but a tensor)."""
    import torch

    if not isinstance(value, torch.Tensor):
        return None
    shape, dtype = tuple(int(s) for s in value.shape), str(value.dtype).removeprefix("torch.")
    if value.dtype == torch.bool:
        return TensorStats(shape, dtype, "bool", mean=float(value.float().mean()) if value.numel() else 0.0)
    if value.numel() == 0:
        return TensorStats(shape, dtype, "constant")
    if not value.is_floating_point():
        return TensorStats(shape, dtype, "int", lo=float(value.min()), hi=float(value.max()))
    data = value.detach().double()
    finite = data[torch.isfinite(data)]
    if finite.numel() == 0:
        return TensorStats(shape, dtype, "constant")
    lo, hi = float(finite.min()), float(finite.max())
    if lo == hi:
        return TensorStats(shape, dtype, "constant", mean=lo, lo=lo, hi=hi)
    if value.dim() >= 2 and lo == 0.0 and hi == 1.0 and torch.equal(data, torch.tril(torch.ones_like(data))):
        return TensorStats(shape, dtype, "tril", lo=0.0, hi=1.0)
    std = float(finite.std()) if finite.numel() > 1 else 0.0
    return TensorStats(shape, dtype, "draw", float(finite.mean()), std, lo, hi)


@dataclasses.dataclass
class RegionSpec:
    """A region ready to be written: its code and what its tensors look like."""

    forward: str  # ``def forward(self, x0, ...):`` and its body, unindented
    roles: list[str]  # per argument of the region: input, parameter or buffer
    inputs: list[TensorStats]  # the tensors forward takes, in order
    state: list[tuple[str, str, TensorStats]]  # (attribute p0/b0, parameter/buffer, stats), in order
    names: list[str]  # where each state tensor is in the model (``layer1.0.conv1.weight``)
    key: str  # same key, same problem

    def sizes(self) -> dict[int, str]:
        """A constant's name per distinct size of 2 or more, in order of first appearance: the
        first input's first size is ``batch_size``, the others ``dim1``, ``dim2``, ..."""
        names: dict[int, str] = {}
        for stats in [*self.inputs, *(s for _, _, s in self.state)]:
            for at, size in enumerate(stats.shape):
                if size >= 2 and size not in names:
                    first = stats is self.inputs[0] and at == 0
                    names[size] = "batch_size" if first else f"dim{len(names) + 1 - ('batch_size' in names.values())}"
        return names

    def init_sizes(self) -> list[str]:
        """The sizes the parameters and buffers are made with: ``Model``'s constructor arguments."""
        sizes = self.sizes()
        return list(dict.fromkeys(sizes[s] for _, _, stats in self.state for s in stats.shape if s in sizes))


def _role(where: tuple[str, str] | None, stats: TensorStats) -> str:
    """A parameter or buffer stays one where a constructor can make one like it with what a
    candidate's constructor may call (random fills and constants: ``fitness.trace``); a mask,
    indices or flags become an input of forward."""
    return where[0] if where is not None and stats.form in ("draw", "constant") else "input"


def region_spec(call: RegionCall, state: list[tuple[str, str] | None], args: list[TensorStats | None]) -> RegionSpec:
    """The spec of a captured region: ``state[i]`` says whether argument ``i`` is one of the
    model's parameters or buffers (``("parameter", name)``) or an activation (None), ``args[i]``
    what it held. ``NotWritable`` if an argument is not a tensor or the region calls a submodule."""
    from torch import fx

    if call.region.kind == "opaque":
        raise NotWritable(f"{call.region.name}: a submodule call, not operators")
    placeholders = [n for n in call.module.graph.nodes if n.op == "placeholder"]
    if any(stats is None for stats in args):
        raise NotWritable(f"{call.region.name}: an argument is not a tensor")
    roles = [_role(where, stats) for where, stats in zip(state, args)]
    if all(where is not None for where in state):
        raise NotWritable(f"{call.region.name}: reads no activation (it updates the model's state only)")
    graph, env = fx.Graph(), {}
    inputs, held, names = [], [], []
    for node, role, stats in zip(placeholders, roles, args):
        if role == "input":
            env[node] = graph.placeholder(f"x{len(inputs)}")
            inputs.append(stats)
    for node, role, where, stats in zip(placeholders, roles, state, args):
        if role != "input":
            prefix = "p" if role == "parameter" else "b"
            attr = f"{prefix}{sum(1 for a, _, _ in held if a[0] == prefix)}"
            env[node] = graph.get_attr(attr)
            held.append((attr, role, stats))
            names.append(where[1])
    count = 0
    for node in call.module.graph.nodes:
        if node.op in ("placeholder",):
            continue
        args_, kwargs = fx.map_arg(node.args, env.__getitem__), fx.map_arg(node.kwargs, env.__getitem__)
        if node.op == "output":
            outs = args_[0]
            graph.output(outs[0] if isinstance(outs, (tuple, list)) and len(outs) == 1 else outs)
            continue
        if node.op not in ("call_function", "call_method"):
            raise NotWritable(f"{call.region.name}: a {node.op} node ({node.target})")
        target, args_, kwargs = inplace_free(node.target, args_, kwargs, node.op == "call_method")
        env[node] = graph.create_node(node.op, target, args_, kwargs, name=f"t{count}")
        count += 1
    code = graph.python_code(root_module="self").src.strip()
    code = re.sub(r";  (?:\w+ = )+None$", "", code, flags=re.MULTILINE)  # FX's early frees: noise in a problem
    forward = re.sub(r"^def forward\(self, ([^)]*)\):", lambda m: "def forward(self, "
                     + ", ".join(a.split(":")[0].strip() for a in m.group(1).split(",")) + "):", code)
    shapes = [(s.shape, s.dtype) for s in inputs] + [(s.shape, s.dtype, kind) for _, kind, s in held]
    key = hashlib.sha256(f"{forward}\n{shapes}".encode()).hexdigest()[:16]
    return RegionSpec(forward, roles, inputs, held, names, key)


def _shape(shape: tuple[int, ...], sizes: dict[int, str]) -> str:
    parts = [sizes.get(s, str(s)) for s in shape]
    return f"({parts[0]},)" if len(parts) == 1 else f"({', '.join(parts)})"



def _g(x: float) -> str:
    return f"{x:.6g}"


def _make(stats: TensorStats, sizes: dict[int, str]) -> str:
    """The expression that makes a tensor like ``stats``'s (on the current default device)."""
    shape, dtype = _shape(stats.shape, sizes), f"torch.{stats.dtype}"
    if stats.form == "bool":
        return f"torch.rand{shape} < {_g(stats.mean)}"
    if stats.form == "int":
        return f"torch.randint({int(stats.lo)}, {int(stats.hi) + 1}, {shape}, dtype={dtype})"
    if stats.form == "constant":
        return f"torch.full({shape}, {_g(stats.mean)}, dtype={dtype})"
    if stats.form == "tril":
        return f"torch.tril(torch.ones({shape}, dtype={dtype}))"
    cast = "" if stats.dtype == "float32" else f".to({dtype})"
    mean = f" + {_g(stats.mean)}" if stats.mean >= 0 else f" - {_g(-stats.mean)}"
    return f"(torch.randn{shape} * {_g(stats.std)}{mean}).clamp({_g(stats.lo)}, {_g(stats.hi)}){cast}"


def _fill(stats: TensorStats, sizes: dict[int, str]) -> str:
    """A parameter or buffer like ``stats``'s, made with what a candidate's constructor may call too
    (a copied ``__init__`` is how a ``ModelNew`` makes the same ones): a constant, or a random fill,
    uniform over the observed range where the values spread like a uniform draw, else normal."""
    shape, dtype = _shape(stats.shape, sizes), f"torch.{stats.dtype}"
    if stats.form == "constant":
        return f"torch.full({shape}, {_g(stats.mean)}, dtype={dtype})"
    if stats.std >= 0.8 * (stats.hi - stats.lo) / 12 ** 0.5:
        return f"torch.empty({shape}, dtype={dtype}).uniform_({_g(stats.lo)}, {_g(stats.hi)})"
    return f"torch.empty({shape}, dtype={dtype}).normal_({_g(stats.mean)}, {_g(stats.std)})"


def render(spec: RegionSpec, doc: str) -> str:
    """The problem file's text, with ``doc`` as its docstring."""
    sizes = spec.sizes()
    init = []
    for (attr, kind, stats), name in zip(spec.state, spec.names):
        make = _fill(stats, sizes)
        if kind == "parameter":
            init.append(f"        self.{attr} = nn.Parameter({make})  # {name}")
        else:
            init.append(f'        self.register_buffer("{attr}", {make})  # {name}')
    body = "\n".join("    " + line if line else "" for line in spec.forward.splitlines())
    prelude = [f"{name} = float({name!r})" for name in ("inf", "nan") if re.search(rf"\b{name}\b", spec.forward)]
    if re.search(r"\bdevice\(", spec.forward):
        prelude.append("from torch import device")
    constants = "\n".join(f"{name} = {size}" for size, name in sizes.items())
    inputs = "".join(f"\n        {_make(s, sizes)}," for s in spec.inputs)
    args = "".join(f", {name}" for name in spec.init_sizes())
    lines = [f'"""{doc}"""', "", "import torch", "import torch.nn as nn", *prelude, "", "",
             "class Model(nn.Module):",
             f"    def __init__(self{args}):",
             "        # the model's parameters and buffers there, drawn like them (kevo apply hands over the real ones)",
             "        super().__init__()", *init, "", body, "", "", constants, "", "",
             "def get_inputs():", f"    return [{inputs}\n    ]", "", "",
             "def get_init_inputs():", f"    return [{args[2:]}]", ""]
    return "\n".join(lines)


def bind_state(module: Any, tensors: list[Any], roles: list[str], label: str) -> None:
    """Hand ``module`` (a region's ``Model``, or a kernel's ``ModelNew``) the model's own
    parameters and buffers: its parameters, in the order it made them, share the storage of
    ``tensors`` of role ``parameter`` in order, and its buffers those of role ``buffer`` (a
    module with no buffers computes without them). ``NotWritable`` names ``label`` where the
    counts or shapes differ."""
    params = [p for _, p in module.named_parameters()]
    wanted = [t for t, r in zip(tensors, roles) if r == "parameter"]
    if len(params) != len(wanted) or any(p.shape != t.shape for p, t in zip(params, wanted)):
        raise NotWritable(f"{label}: its module makes parameters of shapes {[tuple(p.shape) for p in params]}, the "
                          f"region has {[tuple(t.shape) for t in wanted]} (a ModelNew makes the same parameters "
                          f"as the problem's Model, in the same order)")
    for param, real in zip(params, wanted):
        param.data = real.data
    buffers = list(module.named_buffers())
    wanted = [t for t, r in zip(tensors, roles) if r == "buffer"]
    if not buffers:
        return
    if len(buffers) != len(wanted) or any(b.shape != t.shape for (_, b), t in zip(buffers, wanted)):
        raise NotWritable(f"{label}: its module holds buffers of shapes {[tuple(b.shape) for _, b in buffers]}, "
                          f"the region has {[tuple(t.shape) for t in wanted]}")
    for (name, _), real in zip(buffers, wanted):
        owner, _, attr = name.rpartition(".")
        module.get_submodule(owner)._buffers[attr] = real
