"""What fuses: a model's FX graph (torch.compile's, as Dynamo traced it) cut into regions.

A region is what one kernel could do: a single heavy operator (a GEMM or
linear layer, a convolution, attention, a recurrent layer) with the chain of
pointwise, normalisation, reduction and activation operators that follow it,
as Inductor fuses them into one kernel (or, behind an extern GEMM, into the
epilogue a Triton kernel could fuse); or such a chain on its own. Two matmuls
around the score transform between them (``softmax(q @ k^T) @ v``) are one
region, ``attention``. A random draw (``randn``, a dropout that drops) joins no
region: what it draws is an input of the region that reads it. Views (``view``,
``transpose``, ``getitem``, ...) cost nothing: one joins a region only where an
operator of that region reads it, so a region's inputs and outputs are the
tensors the model hands between kernels.

Regions are found greedily in the graph's order, and each stays convex (no
path leaves it and comes back), so it can be replaced by one call:
``partition`` does that, each region becoming a submodule ``kevo_region_N``
of the graph module. Pure FX: nothing runs here.
"""

from __future__ import annotations

import dataclasses
import operator
from typing import Any

import torch
from torch import fx

HEAVY, FUSIBLE, VIEW, OPAQUE, RANDOM = "heavy", "fusible", "view", "opaque", "random"

#: Heavy operators, by the name ``op_name`` gives them, and the kind of region they start.
HEAVY_KINDS = {
    **dict.fromkeys(("linear", "bilinear", "matmul", "mm", "bmm", "addmm", "baddbmm", "addbmm", "einsum", "mv",
                     "addmv", "tensordot", "chain_matmul"), "gemm"),
    **dict.fromkeys(("conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d",
                     "conv_transpose3d", "convolution", "conv_tbc"), "conv"),
    **dict.fromkeys(("scaled_dot_product_attention", "multi_head_attention_forward", "native_multi_head_attention",
                     "transformer_encoder_layer_fwd"), "attention"),
    **dict.fromkeys(("lstm", "gru", "rnn_tanh", "rnn_relu", "lstm_cell", "gru_cell", "rnn_tanh_cell",
                     "rnn_relu_cell"), "recurrent"),
}
#: Batched products of two activations (no weight): the two ends of an attention region.
_SCORE_PRODUCTS = {"matmul", "bmm", "einsum"}

_VIEWS = {"view", "view_as", "reshape", "reshape_as", "transpose", "permute", "t", "unsqueeze", "squeeze",
          "flatten", "unflatten", "expand", "expand_as", "split", "split_with_sizes", "chunk", "unbind",
          "narrow", "select", "getitem", "size", "dim", "unfold", "movedim", "swapaxes", "swapdims",
          "as_strided", "detach", "alias"}

#: Operators that draw random numbers (in-place forms too: ``normal_`` is ``normal``). A draw joins no
#: region: a problem written from a region could not reproduce it, so what it draws is a region's input.
_RANDOM = {"randn", "rand", "randint", "randn_like", "rand_like", "randint_like", "normal", "bernoulli",
           "multinomial", "randperm", "poisson", "uniform", "exponential", "geometric", "cauchy", "log_normal",
           "random", "rrelu"}
_DROPOUTS = {"dropout", "dropout1d", "dropout2d", "dropout3d", "alpha_dropout", "feature_alpha_dropout"}

SUBMODULE_PREFIX = "kevo_region_"


def op_name(node: fx.Node) -> str:
    """A short readable name of what ``node`` computes: ``linear``, ``relu``, ``getitem``, ``add``."""
    target = node.target
    if node.op == "call_method":
        name = str(target)
    elif node.op == "call_function":
        name = getattr(target, "__name__", None) or str(target)
    else:
        return str(target) if node.op == "call_module" else node.op
    name = name.strip("_")
    if name.endswith("_") and not name.endswith("__"):
        name = name[:-1]  # in-place variants: relu_ is relu
    return {"iadd": "add", "isub": "sub", "imul": "mul", "itruediv": "truediv"}.get(name, name)


def classify(node: fx.Node) -> str:
    """``HEAVY``, ``FUSIBLE``, ``VIEW``, ``OPAQUE`` (a submodule call: no region writes it) or ``RANDOM``."""
    if node.op == "call_module":
        return OPAQUE
    name = op_name(node)
    if name in HEAVY_KINDS:
        return HEAVY
    if name in _RANDOM or (name in _DROPOUTS and _drops(node)):
        return RANDOM
    if name in _VIEWS or node.target is operator.getitem:
        return VIEW
    return FUSIBLE


def _drops(node: fx.Node) -> bool:
    """Whether a dropout call may zero anything: a probability other than 0 (or one not known
    when traced), in training (``F.dropout(input, p=0.5, training=True)``; a method call: the module's own)."""
    args, kwargs = node.args, node.kwargs
    p = kwargs.get("p", args[1] if len(args) > 1 else 0.5)
    training = kwargs.get("training", args[2] if len(args) > 2 else True)
    return training is not False and p != 0


@dataclasses.dataclass
class Region:
    """Nodes of the graph that one kernel could compute, in graph order."""

    nodes: list[fx.Node]
    kind: str  # gemm, conv, attention, recurrent, fused (no heavy operator), opaque

    @property
    def ops(self) -> list[str]:
        """The names of its computing operators, in order (views left out)."""
        return [op_name(n) for n in self.nodes if classify(n) != VIEW]

    @property
    def name(self) -> str:
        """``linear_relu``, ``conv2d_batch_norm_relu``: its first few distinct operators."""
        seen: list[str] = []
        for op in self.ops:
            if op not in seen:
                seen.append(op)
        return "_".join(seen[:4])[:48] or "views"


class _Grouping:
    """The greedy grouping of one graph's nodes into convex regions."""

    def __init__(self, graph: fx.Graph) -> None:
        self.nodes = list(graph.nodes)
        self.index = {n: i for i, n in enumerate(self.nodes)}
        self.ancestors: dict[fx.Node, int] = {}  # a bit per node, by index
        for n in self.nodes:
            bits = 0
            for p in n.all_input_nodes:
                bits |= self.ancestors[p] | (1 << self.index[p])
            self.ancestors[n] = bits
        self.owner: dict[fx.Node, int] = {}
        self.members: dict[int, set[fx.Node]] = {}
        self.kinds: dict[int, str] = {}
        self._next = 0

    def regions(self) -> list[Region]:
        for node in self.nodes:
            if node.op in ("placeholder", "get_attr", "output"):
                continue
            kind = classify(node)
            if kind == HEAVY:
                if not self._attend(node):
                    self._new({node}, HEAVY_KINDS[op_name(node)])
            elif kind == FUSIBLE:
                self._fuse(node)
            elif kind == OPAQUE:
                self._new({node}, "opaque")
            # RANDOM: in no region (see _RANDOM)
        for members in self.members.values():
            # a value taken apart by getitem (a tuple: a recurrent layer's, a split) is handed out in parts
            for n in list(members):
                if n.users and all(u.target is operator.getitem for u in n.users):
                    for u in n.users:
                        members.add(u)
                        self.owner[u] = self.owner[n]
        found = [Region(sorted(m, key=self.index.__getitem__), self.kinds[r]) for r, m in self.members.items()]
        return sorted(found, key=lambda r: self.index[r.nodes[0]])

    def _new(self, nodes: set[fx.Node], kind: str) -> int:
        rid, self._next = self._next, self._next + 1
        self.members[rid], self.kinds[rid] = set(nodes), kind
        for n in nodes:
            self.owner[n] = rid
        return rid

    def _producers(self, node: fx.Node, only: fx.Node | None = None) -> list[tuple[int, list[fx.Node]]]:
        """(region, the views between it and ``node``) for each input (or ``only`` that one)
        computed in a region."""
        found = []
        for p in node.all_input_nodes if only is None else [only]:
            chain = []
            while p not in self.owner and p.op in ("call_function", "call_method") and classify(p) == VIEW:
                chain.append(p)
                if not p.all_input_nodes:
                    break
                p = p.all_input_nodes[0]
            if p in self.owner:
                found.append((self.owner[p], chain))
        return found

    def _convex(self, nodes: set[fx.Node]) -> bool:
        mask = 0
        for n in nodes:
            mask |= 1 << self.index[n]
        return not any(q not in nodes and self.ancestors[q] & mask for n in nodes for q in n.all_input_nodes)

    def _absorb(self, node: fx.Node, into: list[tuple[int, list[fx.Node]]], kind: str) -> None:
        """``node`` and the regions (with the views leading from them) in ``into`` become one region."""
        nodes = {node}
        for rid, chain in into:
            nodes |= self.members.pop(rid, set()) | set(chain)
            self.kinds.pop(rid, None)
        self._new(nodes, kind)

    def _fuse(self, node: fx.Node) -> None:
        """A pointwise/normalisation/reduction operator joins the regions it reads from: every
        chain-only one, and the latest with a heavy operator, as far as each keeps the region convex."""
        producers = self._producers(node)
        # the region of a heavy operator first (that of the first argument, the one an in-place
        # operator writes, then the latest), then chains, latest first
        first = self._producers(node, only=node.args[0])[:1] if node.args and isinstance(node.args[0], fx.Node) else []
        first = first[0][0] if first else None
        producers.sort(key=lambda rc: (self.kinds[rc[0]] == "fused", rc[0] != first,
                                       -max(self.index[n] for n in self.members[rc[0]])))
        taken: list[tuple[int, list[fx.Node]]] = []
        nodes, kind = {node}, "fused"
        for rid, chain in producers:
            if rid in (t for t, _ in taken):
                taken.append((rid, chain))  # another path from a region already taken: its views too
                nodes |= set(chain)
                continue
            rkind = self.kinds[rid]
            if rkind == "opaque" or (kind != "fused" and rkind != "fused"):
                continue
            trial = nodes | self.members[rid] | set(chain)
            if self._convex(trial):
                nodes, kind = trial, (rkind if rkind != "fused" else kind)
                taken.append((rid, chain))
        self._absorb(node, taken, kind)

    def _attend(self, node: fx.Node) -> bool:
        """``node`` (a batched product) closes an attention region: it reads the output of a
        region that is one batched product and the score transform after it."""
        if op_name(node) not in _SCORE_PRODUCTS or len(node.args) < 2 or not all(
                isinstance(a, fx.Node) for a in node.args[:2]):
            return False
        # the scores on the left, the values (from elsewhere) on the right
        values = {rid for rid, _ in self._producers(node, only=node.args[1])}
        for rid, chain in self._producers(node, only=node.args[0]):
            if rid in values:
                continue
            members = self.members[rid]
            heavy = [n for n in members if classify(n) == HEAVY]
            if (self.kinds[rid] == "gemm" and len(heavy) == 1 and op_name(heavy[0]) in _SCORE_PRODUCTS
                    and any(classify(n) == FUSIBLE for n in members)
                    and self._convex(members | set(chain) | {node})):
                self._absorb(node, [(rid, chain)], "attention")
                return True
        return False


def find_regions(graph: fx.Graph) -> list[Region]:
    """The regions of ``graph``, in graph order (see the module doc).

    >>> gm = torch.fx.symbolic_trace(lambda x: torch.relu(x @ x) + 1)
    >>> [(r.kind, r.name) for r in find_regions(gm.graph)]
    [('gemm', 'matmul_relu_add')]
    """
    return _Grouping(graph).regions()


@dataclasses.dataclass
class RegionCall:
    """A region after ``partition``: its submodule and where its inputs come from."""

    region: Region
    submodule: str  # the graph module's attribute (``kevo_region_3``)
    inputs: list[fx.Node]  # the outer graph's nodes it reads, in the submodule's argument order
    module: fx.GraphModule  # the region's own graph: a placeholder per input, a tuple out


def partition(gm: fx.GraphModule, regions: list[Region]) -> list[RegionCall]:
    """Replace each region of ``gm`` by a call of a submodule that computes it (in place).

    Each submodule returns a tuple, the outer graph reads its outputs with ``getitem``.
    """
    from torch.fx.passes.tools_common import stable_topological_sort

    if not regions:
        return []
    for i, region in enumerate(regions):
        _fuse(gm, dict.fromkeys(region.nodes), f"{SUBMODULE_PREFIX}{i}")
    stable_topological_sort(gm)
    gm.graph.lint()
    calls = {n.target: n for n in gm.graph.nodes if n.op == "call_module"
             and str(n.target).startswith(SUBMODULE_PREFIX)}
    out = []
    for i, region in enumerate(regions):
        name = f"{SUBMODULE_PREFIX}{i}"
        out.append(RegionCall(region, name, list(calls[name].args), getattr(gm, name)))
    return out


def _fuse(gm: fx.GraphModule, nodes: dict[fx.Node, None], name: str) -> None:
    """One region of ``gm`` as a call of submodule ``name``, inserted after the region's last node.

    torch's ``fuse_by_partitions`` does the same, but before 2.12 it cannot place a region that nothing
    outside it reads (one that only writes into a buffer, as batch norm's ``num_batches_tracked.add_(1)``
    in training mode): it looks for the insertion point among the region's outputs.
    """
    from torch.fx.passes.utils.fuser_utils import erase_nodes, fuse_as_graphmodule, topo_sort

    ordered = topo_sort(list(nodes))
    sub, inputs, outputs = fuse_as_graphmodule(gm, ordered, name, nodes, always_return_tuple=True)
    gm.add_submodule(name, sub)
    with gm.graph.inserting_after(ordered[-1]):
        call = gm.graph.call_module(name, args=tuple(inputs))
    with gm.graph.inserting_after(call):
        for k, out in reversed(list(enumerate(outputs))):  # each getitem right after the call, in order
            out.replace_all_uses_with(gm.graph.call_function(operator.getitem, (call, k)), propagate_meta=True)
    erase_nodes(gm, ordered)


def inplace_free(target: Any, args: tuple, kwargs: dict, method: bool) -> tuple[Any, tuple, dict]:
    """The out-of-place form of a call (``relu(x, inplace=True)`` -> ``relu(x)``, ``x += y`` -> ``x + y``,
    ``x.add_(y)`` -> ``x.add(y)``): a region's problem must not change its inputs."""
    import inspect

    swaps = {operator.iadd: operator.add, operator.isub: operator.sub, operator.imul: operator.mul,
             operator.itruediv: operator.truediv}
    if method:
        name = str(target)
        if name.endswith("_") and not name.endswith("__") and hasattr(torch.Tensor, name[:-1]):
            return name[:-1], args, kwargs
        return target, args, kwargs
    if target in swaps:
        return swaps[target], args, kwargs
    if kwargs.get("inplace"):
        return target, args, {**kwargs, "inplace": False}
    try:
        params = list(inspect.signature(target).parameters)
    except (TypeError, ValueError):
        return target, args, kwargs
    if "inplace" in params and params.index("inplace") < len(args) and args[params.index("inplace")]:
        at = params.index("inplace")
        return target, (*args[:at], False, *args[at + 1:]), kwargs
    return target, args, kwargs
