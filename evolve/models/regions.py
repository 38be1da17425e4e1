"""A region of a model written as a KernelBench problem file.

``describe(tensor)`` records what a region's argument looked like in the real
model (shape, dtype, and the range of its values); ``region_spec`` turns a
region's graph (``evolve.models.fusion.RegionCall``) and those descriptions
into a ``RegionSpec``, and ``render`` writes it out: ``Model(nn.Module)``
whose parameters and buffers are the region's (created in the order the
region reads them, so a ``ModelNew`` that makes the same ones in the same
order can be handed the model's own), ``forward`` the region's operators as
Dynamo traced them (in-place forms made out-of-place: a problem must not
change its inputs; what a region writes into its arguments, it returns after
its own outputs, and ``write_back`` puts a kernel's values where the region
would have written them), ``get_inputs()`` drawing each activation like the
real one (``torch.randn(shape) * std + mean`` kept inside the observed min and
max; a constant, a lower-triangular mask, booleans and integers as such; a
complex tensor as its real and imaginary parts), and a module-level integer
constant per distinct size, so ``--shape`` and held-out shapes reach every
tensor of that size.

Two regions with the same spec key (same operators, sizes, dtypes and
parameter shapes) are one problem: a repeated block is written once.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import operator
import re
from typing import Any

from evolve.models.fusion import RegionCall, inplace_free


class NotWritable(Exception):
    """A region that cannot be a problem file (an argument that is not a tensor, a submodule call)."""


@dataclasses.dataclass(frozen=True)
class TensorStats:
    """What an argument of a region held in the real model (finite values only)."""

    shape: tuple[int, ...]
    dtype: str  # torch's name: float32, bool, int64, ...
    form: str  # draw | constant | tril | bool | int | complex | other (not drawn: sparse, quantized)
    mean: float = 0.0
    std: float = 0.0
    lo: float = 0.0
    hi: float = 0.0


def describe(value: Any) -> TensorStats | None:
    """The ``TensorStats`` of ``value`` (None for anything but a tensor). Its moments are taken a
    slice at a time, so describing a weight of gigabytes costs a slice of it, not copies of it."""
    import torch

    if not isinstance(value, torch.Tensor):
        return None
    shape, dtype = tuple(int(s) for s in value.shape), str(value.dtype).removeprefix("torch.")
    if value.is_sparse or value.is_quantized or value.layout != torch.strided:
        return TensorStats(shape, dtype, "other")
    if value.dtype == torch.bool:
        return TensorStats(shape, dtype, "bool", mean=float(value.float().mean()) if value.numel() else 0.0)
    if value.numel() == 0:
        return TensorStats(shape, dtype, "constant")
    if value.is_complex():  # drawn as its real and imaginary parts, pooled
        n, mean, std, lo, hi = _moments(torch.view_as_real(value.detach().resolve_conj()))
        return TensorStats(shape, dtype, "complex", mean, std, lo, hi) if n else TensorStats(shape, dtype, "constant")
    if not value.is_floating_point():
        return TensorStats(shape, dtype, "int", lo=float(value.min()), hi=float(value.max()))
    n, mean, std, lo, hi = _moments(value.detach())
    if n == 0:
        return TensorStats(shape, dtype, "constant")
    if lo == hi:
        return TensorStats(shape, dtype, "constant", mean=lo, lo=lo, hi=hi)
    if value.dim() >= 2 and lo == 0.0 and hi == 1.0 and torch.equal(value, torch.tril(torch.ones_like(value))):
        return TensorStats(shape, dtype, "tril", lo=0.0, hi=1.0)
    return TensorStats(shape, dtype, "draw", mean, std, lo, hi)


def _moments(value: Any, step: int = 1 << 21) -> tuple[int, float, float, float, float]:
    """(count, mean, std, min, max) of the finite values of ``value``, in double, ``step``
    elements at a time (Chan's update joins the slices' moments)."""
    import torch

    count, mean, m2, lo, hi = 0, 0.0, 0.0, math.inf, -math.inf
    for part in value.reshape(-1).split(step):
        part = part.double()
        finite = torch.isfinite(part)
        if not bool(finite.all()):
            part = part[finite]
        k = part.numel()
        if not k:
            continue
        var, pmean = (float(v) for v in torch.var_mean(part, correction=0))
        pm2 = var * k
        delta, total = pmean - mean, count + k
        mean += delta * k / total
        m2 += pm2 + delta * delta * count * k / total
        count = total
        lo, hi = min(lo, float(part.min())), max(hi, float(part.max()))
    return count, mean, (math.sqrt(m2 / (count - 1)) if count > 1 else 0.0), lo, hi


@dataclasses.dataclass
class RegionSpec:
    """A region ready to be written: its code and what its tensors look like."""

    forward: str  # ``def forward(self, x0, ...):`` and its body, unindented
    roles: list[str]  # per argument of the region: input, parameter or buffer
    inputs: list[TensorStats]  # the tensors forward takes, in order
    state: list[tuple[str, str, TensorStats]]  # (attribute p0/b0, parameter/buffer, stats), in order
    names: list[str]  # where each state tensor is in the model (``layer1.0.conv1.weight``)
    key: str  # same key, same problem
    # the arguments (by index) the region writes in place: forward returns their new values after its own outputs
    mutated: list[int] = dataclasses.field(default_factory=list)

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
    candidate's constructor may call (random fills and constants: ``fitness.worker.trace``); a mask,
    indices or flags become an input of forward."""
    return where[0] if where is not None and stats.form in ("draw", "constant", "complex") else "input"


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
    if any(stats.form == "other" for stats in args):
        raise NotWritable(f"{call.region.name}: an argument is a tensor of a layout not drawn "
                          f"({', '.join(s.dtype for s in args if s.form == 'other')})")
    roles = [_role(where, stats) for where, stats in zip(state, args)]
    if all(where is not None for where in state):
        raise NotWritable(f"{call.region.name}: reads no activation, only the model's parameters and buffers "
                          "(the same every forward, or an update of the model's state)")
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
    outs, mutated = _rewrite(call, placeholders, graph, env)
    outs += [env[placeholders[i]] for i in mutated]  # what it wrote into its arguments, as outputs too
    if not outs:
        raise NotWritable(f"{call.region.name}: computes nothing the model reads")
    graph.output(outs[0] if len(outs) == 1 else tuple(outs))
    code = graph.python_code(root_module="self").src.strip()
    code = re.sub(r";  (?:\w+ = )+None$", "", code, flags=re.MULTILINE)  # FX's early frees: noise in a problem
    forward = re.sub(r"^def forward\(self, ([^)]*)\):", lambda m: "def forward(self, "
                     + ", ".join(a.split(":")[0].strip() for a in m.group(1).split(",")) + "):", code)
    shapes = [(s.shape, s.dtype) for s in inputs] + [(s.shape, s.dtype, kind) for _, kind, s in held]
    key = hashlib.sha256(f"{forward}\n{shapes}".encode()).hexdigest()[:16]
    return RegionSpec(forward, roles, inputs, held, names, key, mutated)



def _rewrite(call: RegionCall, placeholders: list[Any], graph: Any, env: dict) -> tuple[list[Any], list[int]]:
    """The region's operators into ``graph`` (its arguments already in ``env``), none writing into
    an argument: an in-place operator becomes its out-of-place form (or runs on a copy where it has
    none, ``x[i] = v`` say), and what reads the tensor after it reads the new value. The region's
    outputs, and the arguments it wrote (their indices), whose new values the caller returns too."""
    from torch import fx

    from evolve.models.fusion import VIEW, classify

    index = {node: i for i, node in enumerate(placeholders)}
    mutated: list[int] = []
    for count, node in enumerate(n for n in call.module.graph.nodes if n.op != "placeholder"):
        args, kwargs = fx.map_arg(node.args, env.__getitem__), fx.map_arg(node.kwargs, env.__getitem__)
        if node.op == "output":
            outs = args[0]
            return list(outs) if isinstance(outs, (tuple, list)) else [outs], mutated
        if node.op not in ("call_function", "call_method"):
            raise NotWritable(f"{call.region.name}: a {node.op} node ({node.target})")
        target, new_args, new_kwargs = inplace_free(node.target, args, kwargs, node.op == "call_method")
        converted = target is not node.target or new_args is not args or new_kwargs is not kwargs
        written = node.args[0] if (converted or _writes(node)) and node.args else None
        base = written
        while isinstance(base, fx.Node) and base.op != "placeholder" and classify(base) == VIEW and base.args:
            base = base.args[0]
        if isinstance(base, fx.Node) and base in index and base is not written:
            raise NotWritable(f"{call.region.name}: writes in place into a view of its argument {index[base]}")
        if written in index and not converted:  # no out-of-place form: on a copy
            copy = graph.call_method("clone", (env[written],))
            new_args = (copy, *new_args[1:])
        env[node] = graph.create_node(node.op, target, new_args, new_kwargs, name=f"t{count}")
        if isinstance(written, fx.Node) and (converted or written in index):
            env[written] = new_args[0] if node.target is operator.setitem else env[node]
            if written in index and index[written] not in mutated:
                mutated.append(index[written])
    raise NotWritable(f"{call.region.name}: its graph has no output")


def _writes(node: Any) -> bool:
    """``node`` writes into its first argument and has no out-of-place form (``x[i] = v``,
    ``x.copy_(y)``, ``x.zero_()``)."""
    if node.target is operator.setitem:
        return True
    name = str(node.target) if node.op == "call_method" else getattr(node.target, "__name__", "")
    return name.endswith("_") and not name.endswith("__")


def _shape(shape: tuple[int, ...], sizes: dict[int, str], pair: bool = False) -> str:
    """The shape as a tuple of the problem's constants (``pair``: with a last size of 2, the real and
    imaginary parts of a complex tensor)."""
    parts = [sizes.get(s, str(s)) for s in shape] + (["2"] if pair else [])
    return f"({parts[0]},)" if len(parts) == 1 else f"({', '.join(parts)})"


def _parts_dtype(stats: TensorStats) -> str:
    return {"complex32": "float16", "complex64": "float32", "complex128": "float64"}.get(stats.dtype, "float32")


def _g(x: float) -> str:
    return f"{x:.6g}"


def _make(stats: TensorStats, sizes: dict[int, str]) -> str:
    """The expression that makes a tensor like ``stats``'s (on the current default device)."""
    shape, dtype = _shape(stats.shape, sizes), f"torch.{stats.dtype}"
    mean = f" + {_g(stats.mean)}" if stats.mean >= 0 else f" - {_g(-stats.mean)}"
    if stats.form == "bool":
        return f"torch.rand{shape} < {_g(stats.mean)}"
    if stats.form == "int":
        return f"torch.randint({int(stats.lo)}, {int(stats.hi) + 1}, {shape}, dtype={dtype})"
    if stats.form == "constant":
        return f"torch.full({shape}, {_g(stats.mean)}, dtype={dtype})"
    if stats.form == "tril":
        return f"torch.tril(torch.ones({shape}, dtype={dtype}))"
    if stats.form == "complex":
        parts = _shape(stats.shape, sizes, pair=True)
        return (f"torch.view_as_complex((torch.randn{parts} * {_g(stats.std)}{mean})"
                f".clamp({_g(stats.lo)}, {_g(stats.hi)}).to(torch.{_parts_dtype(stats)}))")
    cast = "" if stats.dtype == "float32" else f".to({dtype})"
    return f"(torch.randn{shape} * {_g(stats.std)}{mean}).clamp({_g(stats.lo)}, {_g(stats.hi)}){cast}"


def _fill(stats: TensorStats, sizes: dict[int, str]) -> str:
    """A parameter or buffer like ``stats``'s, made with what a candidate's constructor may call too
    (a copied ``__init__`` is how a ``ModelNew`` makes the same ones): a constant, or a random fill,
    uniform over the observed range where the values spread like a uniform draw, else normal."""
    shape, dtype = _shape(stats.shape, sizes), f"torch.{stats.dtype}"
    if stats.form == "constant":
        return f"torch.full({shape}, {_g(stats.mean)}, dtype={dtype})"
    if stats.form == "complex":
        parts, real = _shape(stats.shape, sizes, pair=True), f"torch.{_parts_dtype(stats)}"
        return f"torch.view_as_complex(torch.empty({parts}, dtype={real}).normal_({_g(stats.mean)}, {_g(stats.std)}))"
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


def write_back(outs: tuple, args: Any, mutated: list[int]) -> tuple:
    """A problem's outputs (``outs``, a tuple) as its region's own: the last ``len(mutated)`` are the
    new values of the arguments the region writes in place (``RegionSpec.mutated``), copied into
    ``args`` here as the region would have written them; the rest are returned."""
    if not mutated:
        return outs
    own, new = outs[:len(outs) - len(mutated)], outs[len(outs) - len(mutated):]
    for at, value in zip(mutated, new):
        args[at].copy_(value)
    return own


def before_writes(args: Any, spec: RegionSpec) -> list:
    """The region's arguments as they are before it runs: a copy of each it may write into (its
    activations; buffers, which batch norm's running statistics are; what it writes in place), the
    parameters themselves (a weight of gigabytes is not copied for a check)."""
    return [a.clone() if hasattr(a, "clone") and (role != "parameter" or at in spec.mutated) else a
            for at, (a, role) in enumerate(zip(args, spec.roles))]
