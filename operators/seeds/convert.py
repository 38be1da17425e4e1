"""Turn a recording of torch.compile's Inductor output into a seed candidate file.

``seed_source(recording, problem_source)`` takes what
``evolve.seeding.inductor.capture`` recorded for a problem and the problem
file's text, and writes a standalone KernelBench candidate:

- the Triton kernels Inductor generated, as plain ``@triton.jit`` functions
  (its autotuning decorators dropped);
- the ``torch._inductor.runtime.triton_helpers`` functions they call, copied
  from the installed torch into the file under a ``helper_`` prefix, with
  ``libdevice`` taken from Triton itself (``triton.language.extra``);
- Inductor's ``call()``, as ``_inductor_call(args, device)``: the buffers it
  allocates and the launches it makes, each launch with the grid Inductor's
  grid type computes and the block sizes and launch options of the config its
  autotuner picked, as literals kevo's parametric operators can vary;
- ``ModelNew``: the problem's own ``Model.__init__`` (so parameters are made
  in the same order from the same seed) and a ``forward`` that passes the
  graph's arguments (parameters, sizes, inputs) in the order ``call()`` takes
  them; a Python number Dynamo made a 0-d CPU tensor (a float input or
  attribute), which ``call()`` reads as ``.item()``, is passed as the number;
- ``KEVO_SPACE``: per tunable, the values of the configs Inductor would have
  autotuned over together with kevo's default choices around the picked one
  (a persistent reduction's ``R0_BLOCK``, which must cover the whole row,
  stays at the picked value);
- each kernel's 64-bit variant, chosen per launch (``operators.seeds.index``):
  the seed is written at one shape and judged at others, past 2**31 elements
  too, where Inductor would have compiled its 64-bit variant behind a guard.

A max-autotune template (what Inductor writes for a matmul or a convolution
when told not to call cuBLAS or cuDNN) gets its tile sizes, which Inductor
bakes into its body, made launch parameters, and its grid computed from them
(``operators.seeds.template``; a convolution holds at the weight sizes it was
compiled for, and its header says so).

The header names the Inductor configuration the recording was made under
(``operators.seeds.variants``), so seeds of one problem from several
configurations can be told apart.

Reading the recorded kernels and call() is ``operators.seeds.code``, copying
the helpers ``operators.seeds.helpers``; this module assembles the file.

A problem Inductor does not lower to Triton alone (a cuBLAS matmul through
``extern_kernels``, an ATen fallback) raises ``NotTritonOnly``; anything this
conversion cannot follow raises ``ConversionError``; both name what was seen.
"""

from __future__ import annotations

import ast
import re
import textwrap
from typing import Any

from operators.seeds.code import (_DROPPED_CALLS, CALL_FUNCTION, ConversionError, NotTritonOnly,
                                     _call_function, _CallRewriter, _Kernel, _kernel_sources)
from operators.seeds.helpers import _helper_code, _HelperRenamer, _helpers_used
from operators.seeds.index import index_helper_source
from operators.seeds.variants import configuration_line
from operators.space import Kind, default_choices

__all__ = ["CALL_FUNCTION", "ConversionError", "NotTritonOnly", "seed_source"]

# --- the model ---------------------------------------------------------------------------

_SOURCE_ATTR = re.compile(r"\._(modules|parameters|buffers)\[['\"](\w+)['\"]\]")


def _argument(source: str | None, forward_args: list[str]) -> str:
    """The expression in ``ModelNew.forward`` for one graph argument's Dynamo source."""
    if source is None:
        raise ConversionError("a graph argument has no source (a constant Dynamo lifted)")
    expr = _SOURCE_ATTR.sub(r".\2", source)
    expr = re.sub(r"L\[['\"](\w+)['\"]\]", r"\1", expr)
    try:
        tree = ast.parse(expr, mode="eval")
    except SyntaxError:
        raise ConversionError(f"cannot follow the graph argument {source!r}") from None
    roots = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
    unknown = roots - {"self", *forward_args}
    if unknown:
        raise ConversionError(f"the graph argument {source!r} names {sorted(unknown)}, not an input of forward")
    return ast.unparse(tree)


class _Renamer(ast.NodeTransformer):
    def __init__(self, old: str, new: str) -> None:
        self.old, self.new = old, new

    def visit_Name(self, node: ast.Name) -> ast.AST:
        if node.id == self.old:
            return ast.copy_location(ast.Name(self.new, node.ctx), node)
        return node


def _is_tensor_source(source: str | None) -> bool:
    """Whether a graph argument's source is a tensor (an input, a parameter, a buffer) rather
    than a size or a number attribute."""
    if source is None or ".size()" in source or ".stride()" in source:
        return False
    return re.fullmatch(r"L\[['\"]\w+['\"]\]", source) is not None or "._parameters[" in source \
        or "._buffers[" in source


def _scalar_arguments(call: ast.FunctionDef, sources: list[str | None]) -> set[str]:
    """Names call() unpacks its arguments into whose source is a Python number attribute."""
    first = call.body[0] if call.body else None
    if not (isinstance(first, ast.Assign) and isinstance(first.targets[0], ast.Tuple)):
        return set()
    names = [ast.unparse(e) for e in first.targets[0].elts]
    return {n for n, s in zip(names, sources) if s is not None and not _is_tensor_source(s)
            and ".size()" not in s and ".stride()" not in s}


def _host_numbers(module: ast.Module, call: ast.FunctionDef) -> set[str]:
    """Names call() unpacks its arguments into whose example input (``argN = rand_strided((), (),
    device='cpu', ...)`` in the recorded module's ``get_args()``) is a 0-d CPU tensor that call() reads
    only as ``.item()``: Dynamo passes a float input of forward as such a tensor, and Inductor reads
    its number on the host for a kernel. The seed passes the number as it is (a candidate's forward
    may not call ``.item()``: the trace refuses it as computing)."""
    get_args = next((n for n in module.body if isinstance(n, ast.FunctionDef) and n.name == "get_args"), None)
    first = call.body[0] if call.body else None
    if get_args is None or not (isinstance(first, ast.Assign) and isinstance(first.targets[0], ast.Tuple)):
        return set()
    examples = {ast.unparse(n.targets[0]): n.value for n in get_args.body if isinstance(n, ast.Assign)}
    returned = get_args.body[-1].value if isinstance(get_args.body[-1], ast.Return) else None
    if not isinstance(returned, (ast.List, ast.Tuple)):
        return set()
    zero_d = set()
    for name, element in zip((ast.unparse(e) for e in first.targets[0].elts), returned.elts):
        example = examples.get(ast.unparse(element))
        if (isinstance(example, ast.Call) and ast.unparse(example.func) == "rand_strided" and example.args
                and ast.unparse(example.args[0]) == "()"
                and any(k.arg == "device" and isinstance(k.value, ast.Constant) and k.value.value == "cpu"
                        for k in example.keywords)):
            zero_d.add(name)
    rest = ast.Module(call.body[1:], [])
    unread: set[int] = set()  # a Name inside .item(), or inside a check the seed drops
    for node in ast.walk(rest):
        if isinstance(node, ast.Call) and ast.unparse(node.func) in _DROPPED_CALLS:
            unread.update(id(n) for n in ast.walk(node))
        elif isinstance(node, ast.Call) and not node.args and isinstance(node.func, ast.Attribute) \
                and node.func.attr == "item":
            unread.add(id(node.func.value))
    read = {n.id for n in ast.walk(rest) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)
            and id(n) not in unread}
    return zero_d - read


def _model_class(problem_source: str, graph_args: list[str | None], returns_tuple: bool, n_outputs: int) -> str:
    tree = ast.parse(problem_source)
    model = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Model"), None)
    if model is None:
        raise ConversionError("the problem file has no class Model")
    init = next((n for n in model.body if isinstance(n, ast.FunctionDef) and n.name == "__init__"), None)
    forward = next((n for n in model.body if isinstance(n, ast.FunctionDef) and n.name == "forward"), None)
    if forward is None:
        raise ConversionError("the problem's Model has no forward")
    params = [a.arg for a in forward.args.args[1:]]
    if forward.args.vararg or forward.args.kwonlyargs or forward.args.kwarg:
        raise ConversionError("the problem's forward takes *args, **kwargs or keyword-only arguments")
    args = [_argument(s, params) for s in graph_args]
    tensor = next((p for p in params if any(a == p for a in args)), None)
    if tensor is None:
        raise ConversionError("no input of forward is passed to the compiled graph as a tensor")
    result = f"tuple(outputs[:{n_outputs}])" if returns_tuple else "outputs[0]"
    lines = ["class ModelNew(nn.Module):",
             '    """The problem\'s Model, its forward run by the Triton kernels torch.compile wrote."""', ""]
    if init is not None:
        init = _Renamer("Model", "ModelNew").visit(ast.parse(ast.unparse(init)).body[0])
        lines += ["    " + line for line in ast.unparse(init).splitlines()] + [""]
    lines += [f"    def forward(self, {', '.join(params)}):",
              f"        outputs = _inductor_call([{', '.join(args)}], {tensor}.device)",
              f"        return {result}"]
    return "\n".join(lines)


# --- the seed ----------------------------------------------------------------------------


def _space(launches: list[_Kernel]) -> dict[str, list[int]]:
    """KEVO_SPACE for each launch, in order (a kernel's second launch has tunables of its own)."""
    space: dict[str, list[int]] = {}
    count: dict[str, int] = {}
    for kernel in launches:
        count[kernel.name] = nth = count.get(kernel.name, 0) + 1
        local_suffix, launch = ("", kernel.name) if nth == 1 else (f"_{nth}", f"{kernel.name}@{nth}")
        chosen = kernel.chosen
        persistent = kernel.kind == "persistent_reduction"
        for option, value in chosen["kwargs"].items():
            if not (option in kernel.constexprs and "BLOCK" in option and isinstance(value, int)):
                continue
            seen = {c["kwargs"].get(option) for c in kernel.configs} - {None}
            if persistent and option.startswith("R"):
                values = {value}
            elif kernel.kind == "template":  # tl.dot tiles: 16 to 256 along each side
                values = {v for v in {value, *seen, *(2**e for e in range(4, 9))} if 16 <= v <= 256}
            else:
                near = {2**e for e in range(21) if value / 8 <= 2**e <= value * 8}
                values = seen | near | set(default_choices(Kind.BLOCK, value))
            if kernel.kind == "split_scan" and option.startswith("R"):
                # its look-back workspace holds a slot per block of the smallest size Inductor offered
                values = {v for v in values if v >= min(seen | {value})}
            # the launch takes the block from a local of _inductor_call (so that its grid follows it)
            space[f"{CALL_FUNCTION}.{kernel.name}_{option}{local_suffix}"] = sorted(values)
        warps = {c["num_warps"] for c in kernel.configs} | {chosen["num_warps"]}
        space[f"{launch}.num_warps"] = sorted(warps | set(default_choices(Kind.NUM_WARPS, chosen["num_warps"])))
        stages = {c["num_stages"] for c in kernel.configs} | {chosen["num_stages"]}
        space[f"{launch}.num_stages"] = sorted(stages | set(default_choices(Kind.NUM_STAGES, chosen["num_stages"])))
    return space


def _configs_comment(kernel: _Kernel) -> str:
    def one(config: dict[str, Any]) -> str:
        items = [f"{k}={v}" for k, v in config["kwargs"].items()]
        return ", ".join([*items, f"num_warps={config['num_warps']}", f"num_stages={config['num_stages']}"])

    lines = [f"# {kernel.name}: Inductor's {kernel.kind} kernel, grid {kernel.grid_type}; "
             f"{kernel.picked}: {one(kernel.chosen)}"]
    if len(kernel.configs) > 1:
        lines.append("# from: " + "; ".join(one(c) for c in kernel.configs))
    return "\n".join(lines)


def seed_source(recording: dict[str, Any], problem_source: str) -> str:
    """The text of a candidate file built from ``recording`` (see the module doc)."""
    if recording.get("error"):
        raise ConversionError(f"the recording holds an error: {recording['error']}")
    codes, graphs = recording.get("codes") or [], recording.get("graph_args") or []
    if len(graphs) != 1 or len(codes) < 1:
        raise ConversionError(f"torch.compile made {len(graphs)} graphs of the model (one is needed: "
                              "a graph break splits it)")
    module = ast.parse(codes[0])
    sources = _kernel_sources(module)
    call = _call_function(module)
    if not sources:
        _CallRewriter({})._check_calls(call)
        raise NotTritonOnly("Inductor generated no Triton kernel for this problem")
    recorded = recording.get("kernels") or {}
    kernels = {name: _Kernel(name, src, recorded.get(name)) for name, src in sources.items()}
    rewriter = _CallRewriter(kernels, _scalar_arguments(call, graphs[0]) | _host_numbers(module, call))
    body = rewriter.rewrite(call.body)
    launched = [kernels[name] for name in dict.fromkeys(rewriter.launched)]
    if not launched:
        raise NotTritonOnly("Inductor's call() launches no Triton kernel")
    unpack = call.args.args[-1].arg  # call(args) or call(self, args)
    function = ast.FunctionDef(
        name=CALL_FUNCTION,
        args=ast.arguments(posonlyargs=[], args=[ast.arg(unpack), ast.arg("device")], kwonlyargs=[],
                           kw_defaults=[], defaults=[]),
        body=body or [ast.Pass()], decorator_list=[], returns=None, type_params=[])
    ast.fix_missing_locations(function)
    helpers = _helpers_used([k.function for k in launched])
    renamer = _HelperRenamer(set(helpers), set(), in_helper=False)
    fixed = [k.template.fixed for k in launched if k.template is not None and k.template.fixed]
    parts = [
        f'"""Seed for {recording.get("problem", "the problem")}: the Triton kernels torch.compile\'s Inductor '
        f'wrote for it\n(torch {recording.get("torch", "?")}, Triton {recording.get("triton", "?")}), '
        'turned into a standalone candidate by kevo seed.\n\n'
        + textwrap.fill(configuration_line(recording), 100) + '\n"""'
        + ("\n\n# Some sizes of this problem are constants in Inductor's code (the model's own code fixes "
           "them, as\n# nn.LayerNorm's normalized_shape does, or Inductor's lowering, as a convolution's "
           "weight sizes):\n# the seed holds at the shapes it was written at only."
           if recording.get("static_dims") else "")
        + "".join("\n\n" + textwrap.fill(note + ".", 100, initial_indent="# ", subsequent_indent="# ")
                  for note in dict.fromkeys(fixed)),
        "import torch\nimport torch.nn as nn\nimport triton\nimport triton.language as tl\n"
        "import triton.language.extra.libdevice as libdevice\n\ntl_math = tl.math",
        "KEVO_SPACE = " + _format_space(_space([kernels[name] for name in rewriter.launched])),
        "# Each kernel has a 64-bit variant (INDEX_64) for shapes past 2**31 elements, as Inductor compiles one\n"
        "# when its guard fails; each launch picks the variant its arguments need.\n" + index_helper_source(),
    ]
    if helpers:
        parts.append("# Inductor's runtime helpers (torch._inductor.runtime.triton_helpers) the kernels call")
        parts.extend(_helper_code(helpers))
    for kernel in launched:
        for companion in kernel.companions:
            parts.append(ast.unparse(renamer.visit(companion)))
        function_node = renamer.visit(kernel.function)
        parts.append(_configs_comment(kernel) + "\n" + ast.unparse(function_node))
    parts.append(ast.unparse(function))
    parts.append(_model_class(problem_source, graphs[0], bool(recording.get("returns_tuple")),
                              len(recording.get("outputs") or [None])))
    return "\n\n\n".join(parts) + "\n"


def _format_space(space: dict[str, list[int]]) -> str:
    lines = ["{"] + [f"    {name!r}: {values!r}," for name, values in space.items()] + ["}"]
    return "\n".join(lines)
