"""Turn a recording of torch.compile's Inductor output into a seed candidate file.

``seed_source(recording, problem_source)`` takes what
``evolve.inductor_capture.capture`` recorded for a problem and the problem
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
  them;
- ``KEVO_SPACE``: per tunable, the values of the configs Inductor would have
  autotuned over together with kevo's default choices around the picked one
  (a persistent reduction's ``R0_BLOCK``, which must cover the whole row,
  stays at the picked value).

A max-autotune matmul template (what Inductor writes for a matmul when told
not to call cuBLAS) gets its tile sizes, which Inductor bakes into its body,
made launch parameters, and its grid computed from them.

A problem Inductor does not lower to Triton alone (a cuBLAS matmul through
``extern_kernels``, an ATen fallback) raises ``NotTritonOnly``; anything this
conversion cannot follow raises ``ConversionError``; both name what was seen.
"""

from __future__ import annotations

import ast
import functools
import inspect
import re
from typing import Any

from operators.space import Kind, default_choices

#: The seed's function that does what Inductor's call() did.
CALL_FUNCTION = "_inductor_call"
#: Prefix of the Inductor runtime helpers copied into a seed.
HELPER_PREFIX = "helper_"


class ConversionError(ValueError):
    """The recording holds something this conversion cannot turn into a seed."""


class NotTritonOnly(ConversionError):
    """Inductor's code for the problem calls something other than Triton kernels."""


# --- the recorded module ------------------------------------------------------------------


class _Kernel:
    """One Triton kernel of the recording: its function, heuristics kind, grid type, config."""

    def __init__(self, name: str, source: str, recorded: dict[str, Any] | None) -> None:
        self.name = name
        tree = ast.parse(source)
        functions = [n for n in tree.body if isinstance(n, ast.FunctionDef)]
        mains = [f for f in functions if f.name == name] or [f for f in functions if _has_heuristics(f)]
        if len(mains) != 1:
            raise ConversionError(f"kernel {name}: cannot tell its function among {[f.name for f in functions]}")
        self.function = mains[0]
        # functions of its own it calls (a scan's combine function): plain @triton.jit, kept as they are
        self.companions = [f for f in functions if f is not self.function]
        self.kind, self.meta, self.size_hints = _heuristics(self.function, name)
        self.grid_type = self.meta.get("grid_type", "Grid1D")
        self.grid_args: list[str] = []  # a template's grid, passed after its arguments
        if self.kind == "template":
            recorded = self._template()
        args = self.function.args
        self.params = [a.arg for a in args.args]  # (a template's blocks appended above)
        self.constexprs = {a.arg for a in args.args if _is_constexpr(a.annotation)}
        defaults = args.args[len(args.args) - len(args.defaults):] if args.defaults else []
        self.defaulted = {a.arg for a in defaults}
        recorded = recorded or {}
        self.configs = [c for c in recorded.get("configs") or [] if isinstance(c, dict)]
        self.picked = "its autotuner picked"
        self.chosen = recorded.get("chosen")
        if not self.chosen and self.configs:
            self.chosen, self.picked = self.configs[0], "its autotuner's pick was not recorded; Inductor's first config"
        if not self.chosen:
            self.chosen, self.picked = self._default_config(), "no config was recorded; kevo's default for the kind"
        self.configs = self.configs or [self.chosen]
        if self.kind == "template":
            self.picked = "the config Inductor's max-autotune benchmark picked"
        missing = [p for p in self.params if p in self.constexprs and p not in self.defaulted
                   and p not in self.chosen["kwargs"]]
        if missing:
            raise ConversionError(f"kernel {name}: no value for its constexpr parameter(s) {', '.join(missing)}")
        self.function.decorator_list = [ast.parse("triton.jit", mode="eval").body]

    def _default_config(self) -> dict[str, Any]:
        """Block sizes for a kernel whose autotuning was not recorded: valid for any size."""
        blocks = [p for p in self.params if p in self.constexprs and p not in self.defaulted and p.endswith("BLOCK")]
        hints = self.size_hints
        kwargs: dict[str, int] = {}
        reduction = [b for b in blocks if b.startswith("R")]
        if self.kind == "persistent_reduction" and reduction:
            raise ConversionError(f"kernel {self.name}: a persistent reduction's block must cover its rows, "
                                  "and no config was recorded")
        rblock = 1
        for block in reduction:
            hint = hints.get(block[:-5].lower() + "_", hints.get("r0_", 1024))
            rblock = min(2048, _next_power_of_2(hint))
            kwargs[block] = rblock
        spatial = [b for b in blocks if b not in reduction]
        for block in spatial:
            hint = hints.get(block[0].lower(), 1024)
            if reduction:
                size = max(1, min(64, 2048 // rblock))
            elif len(spatial) > 1:
                size = 32
            else:
                size = 1024
            kwargs[block] = min(size, _next_power_of_2(hint))
        total = rblock * max([kwargs[b] for b in spatial] or [1])
        return {"kwargs": kwargs, "num_warps": 8 if total >= 2048 else 4, "num_stages": 1}

    def _template(self) -> dict[str, Any]:
        """A max-autotune template (a Triton matmul): its block sizes made launch parameters.

        Inductor bakes a template's config into its body (``BLOCK_M : tl.constexpr = 128``)
        and computes its one-dimensional grid in call(). Where the body is the matmul
        template (``grid_m = (M + BLOCK_M - 1) // BLOCK_M``, the same for ``N``), the blocks
        become ``tl.constexpr`` parameters and the grid is computed from them, so they can
        be tuned; any other template is refused.
        """
        if self.grid_type != "FixedGrid" or not self.meta.get("extra_launcher_args"):
            raise ConversionError(f"{self.name}: a template with grid {self.grid_type!r} is not supported")
        self.grid_args = list(self.meta["extra_launcher_args"])
        body = self.function.body
        blocks: dict[str, int] = {}
        kept = []
        for statement in body:
            if (isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name)
                    and _is_constexpr(statement.annotation) and statement.target.id.startswith("BLOCK_")
                    and isinstance(statement.value, ast.Constant) and type(statement.value.value) is int):
                blocks[statement.target.id] = statement.value.value
            else:
                kept.append(statement)
        text = ast.unparse(self.function)
        sizes = {}
        for axis in ("M", "N"):
            found = re.search(rf"^\s*{axis} = (\w+)$", text, re.MULTILINE)
            if found is None or f"grid_{axis.lower()} = ({axis} + BLOCK_{axis} - 1) // BLOCK_{axis}" not in text:
                raise ConversionError(f"{self.name}: a Triton template other than Inductor's matmul")
            sizes[axis] = found.group(1)
        if "tl.program_id(1)" in text or "tl.program_id(2)" in text or not {"BLOCK_M", "BLOCK_N"} <= set(blocks):
            raise ConversionError(f"{self.name}: a Triton template other than Inductor's matmul")
        self.template_sizes = sizes  # the parameters holding M and N
        self.function.body = kept
        for name in blocks:
            self.function.args.args.append(ast.arg(name, ast.parse("tl.constexpr", mode="eval").body))
        options = {k.arg: ast.literal_eval(k.value) for d in self.function.decorator_list if isinstance(d, ast.Call)
                   for k in d.keywords if k.arg in ("num_warps", "num_stages")}
        chosen = {"kwargs": blocks, "num_warps": int(options.get("num_warps", 4)),
                  "num_stages": int(options.get("num_stages", 1))}
        return {"chosen": chosen, "configs": [chosen]}

    def runtime_params(self) -> list[str]:
        """The parameters ``.run(...)`` passes positionally (not set by the config)."""
        return [p for p in self.params if p not in self.chosen["kwargs"] and p not in self.defaulted]


def _is_constexpr(annotation: ast.expr | None) -> bool:
    return annotation is not None and ast.unparse(annotation).endswith("constexpr")


def _next_power_of_2(n: int) -> int:
    return 1 << max(0, int(n) - 1).bit_length()


def _has_heuristics(function: ast.FunctionDef) -> bool:
    return any(isinstance(d, ast.Call) and ast.unparse(d.func).startswith("triton_heuristics.")
               for d in function.decorator_list)


def _heuristics(function: ast.FunctionDef, name: str) -> tuple[str, dict[str, Any], dict[str, int]]:
    """(the ``triton_heuristics`` decorator's name, its literal ``inductor_meta``, its ``size_hints``)."""
    for decorator in function.decorator_list:
        if isinstance(decorator, ast.Call):
            dotted = ast.unparse(decorator.func)
            if dotted.startswith("triton_heuristics."):
                meta: dict[str, Any] = {}
                hints: dict[str, int] = {}
                for keyword in decorator.keywords:
                    if keyword.arg == "inductor_meta":
                        meta = _literal_items(keyword.value)
                    elif keyword.arg == "size_hints":
                        hints = {k: v for k, v in _literal_items(keyword.value).items() if isinstance(v, int)}
                return dotted.split(".", 1)[1], meta, hints
    raise ConversionError(f"kernel {name}: no triton_heuristics decorator in its source")


def _literal_items(node: ast.expr) -> dict[str, Any]:
    """The literal entries of a dict display whose other entries are not literals."""
    items: dict[str, Any] = {}
    if isinstance(node, ast.Dict):
        for key, value in zip(node.keys, node.values):
            try:
                items[ast.literal_eval(key)] = ast.literal_eval(value)
            except (ValueError, TypeError):
                continue
    return items


def _kernel_sources(module: ast.Module) -> dict[str, str]:
    """``name -> source`` of each ``name = async_compile.triton('name', '''...''')``."""
    found = {}
    for node in module.body:
        if not (isinstance(node, ast.Assign) and isinstance(node.value, ast.Call)):
            continue
        func = ast.unparse(node.value.func)
        target = node.targets[0]
        if not isinstance(target, ast.Name):
            continue
        if func == "async_compile.triton":
            source = node.value.args[1]
            if not (isinstance(source, ast.Constant) and isinstance(source.value, str)):
                raise ConversionError(f"kernel {target.id}: its source is not a string literal")
            found[target.id] = source.value
        elif func.startswith("async_compile.") and func != "async_compile.wait":
            raise NotTritonOnly(f"Inductor compiles {target.id} with {func} (not Triton)")
    return found


def _call_function(module: ast.Module) -> ast.FunctionDef:
    for node in module.body:
        if isinstance(node, ast.FunctionDef) and node.name == "call":
            return node
        if isinstance(node, ast.ClassDef):
            for inner in node.body:
                if isinstance(inner, ast.FunctionDef) and inner.name == "call":
                    return inner
    raise ConversionError("the recorded module has no call()")


# --- call() ------------------------------------------------------------------------------

#: Calls in call() that only check or place things, dropped from the seed.
_DROPPED_CALLS = {"assert_size_stride", "assert_alignment", "torch.cuda.set_device", "get_raw_stream",
                  "torch._C._cuda_setDevice", "async_compile.wait"}
_ALLOCATORS = {"empty_strided_cuda", "empty_strided_xpu", "empty_strided_cpu", "empty_strided"}


class _CallRewriter(ast.NodeTransformer):
    """Rewrites call()'s body into plain PyTorch plus ``kernel[grid](...)`` launches."""

    def __init__(self, kernels: dict[str, _Kernel], scalars: set[str] = frozenset()) -> None:
        self.kernels = kernels
        self.scalars = scalars  # call()'s arguments that are Python numbers in eager (Dynamo made them 0-d tensors)
        self.launched: list[str] = []

    def rewrite(self, body: list[ast.stmt]) -> list[ast.stmt]:
        out: list[ast.stmt] = []
        for statement in body:
            out.extend(self._statement(statement))
        return out

    def _statement(self, node: ast.stmt) -> list[ast.stmt]:
        if isinstance(node, ast.With):  # torch.cuda._DeviceGuard(0): the seed runs on its inputs' device
            return self.rewrite(node.body)
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
            name = ast.unparse(node.value.func)
            if name in _DROPPED_CALLS:
                return []
            if name.endswith(".run") and name[:-4] in self.kernels:
                return self._launch(self.kernels[name[:-4]], node.value)
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
            if ast.unparse(node.value.func) in _DROPPED_CALLS:
                return []
        self._check_calls(node)
        return [self.visit(node)]

    def _check_calls(self, node: ast.AST) -> None:
        for call in ast.walk(node):
            if not isinstance(call, ast.Call):
                continue
            name = ast.unparse(call.func)
            if name.startswith("extern_kernels."):
                raise NotTritonOnly(f"Inductor calls {name} (an extern library, not Triton) for this problem")
            if name.startswith(("torch.ops.", "aten.")) or ".default" in name:
                raise NotTritonOnly(f"Inductor falls back to {name} (ATen, not Triton) for this problem")
            if name.endswith(".run") and name[:-4] not in self.kernels:
                raise ConversionError(f"call() runs {name[:-4]}, which is not among the recorded kernels")

    def visit_Call(self, node: ast.Call) -> ast.AST:
        self.generic_visit(node)
        name = ast.unparse(node.func)
        if (isinstance(node.func, ast.Attribute) and node.func.attr == "item" and not node.args
                and isinstance(node.func.value, ast.Name) and node.func.value.id in self.scalars):
            return node.func.value  # the number itself: ModelNew passes it as it is
        if name in _ALLOCATORS:
            size, stride, dtype = node.args[:3]
            return ast.Call(ast.parse("torch.empty_strided", mode="eval").body, [size, stride],
                            [ast.keyword("dtype", dtype), ast.keyword("device", ast.Name("device"))])
        if name == "reinterpret_tensor":
            tensor, *rest = node.args
            return ast.Call(ast.Attribute(tensor, "as_strided"), rest, [])
        return node

    def _launch(self, kernel: _Kernel, call: ast.Call) -> list[ast.stmt]:
        runtime = kernel.runtime_params()
        if kernel.grid_args:  # a template: its grid (recomputed below, from its blocks) follows its arguments
            call.args = call.args[:len(call.args) - len(kernel.grid_args)]
        if len(call.args) != len(runtime):
            raise ConversionError(f"{kernel.name}.run passes {len(call.args)} arguments; the kernel takes "
                                  f"{len(runtime)} at run time ({', '.join(runtime)})")
        self._check_calls(ast.Module([ast.Expr(a) for a in call.args], []))
        call.args = [self.visit(a) for a in call.args]
        bound = dict(zip(runtime, (ast.unparse(a) for a in call.args)))
        self.launched.append(kernel.name)
        nth = self.launched.count(kernel.name)
        suffix = "" if nth == 1 else f"_{nth}"  # a kernel launched again gets locals of its own
        statements = []
        keywords = []
        blocks = {}
        for option, value in kernel.chosen["kwargs"].items():
            if option in kernel.constexprs and isinstance(value, int) and "BLOCK" in option:
                local = f"{kernel.name}_{option}{suffix}"
                statements.append(f"{local} = {value}")
                keywords.append(f"{option}={local}")
                blocks[option] = local
            else:
                keywords.append(f"{option}={value!r}")
        keywords.append(f"num_warps={kernel.chosen['num_warps']}")
        keywords.append(f"num_stages={kernel.chosen['num_stages']}")
        if kernel.grid_args:
            sizes = kernel.template_sizes
            grid = (f"(triton.cdiv({bound[sizes['M']]}, {blocks['BLOCK_M']}) * "
                    f"triton.cdiv({bound[sizes['N']]}, {blocks['BLOCK_N']}),)")
        else:
            grid = _grid(kernel, bound, blocks)
        args = ", ".join(ast.unparse(a) for a in call.args)
        statements.append(f"{kernel.name}[{grid}]({args}, {', '.join(keywords)})")
        return [ast.parse(s).body[0] for s in statements]


def _grid(kernel: _Kernel, bound: dict[str, str], blocks: dict[str, str]) -> str:
    """The launch grid Inductor's ``grid_type`` computes, over the kernel's numel arguments."""

    def extent(axis: str) -> str:
        numel = bound.get(f"{axis}numel")
        if numel is None:
            if f"{axis}numel" in kernel.params:
                raise ConversionError(f"{kernel.name}: {axis}numel is not a run-time argument")
            return "1"
        block = blocks.get(f"{axis.upper()}BLOCK")
        if block is None:
            if f"{axis.upper()}BLOCK" in kernel.params:
                raise ConversionError(f"{kernel.name}: {axis.upper()}BLOCK is neither in its config nor fixed")
            return numel  # no block along this axis: one program per element
        return f"triton.cdiv({numel}, {block})"

    if kernel.grid_type == "Grid1D":
        return f"({extent('x')},)"
    if kernel.grid_type == "Grid2D":
        return f"({extent('x')}, {extent('y')})"
    if kernel.grid_type == "Grid2DWithYZOverflow":  # y beyond the grid's limit spills into z
        y = extent("y")
        return f"({extent('x')}, min({y}, 65535), triton.cdiv({y}, 65535))"
    if kernel.grid_type == "Grid3D":
        return f"({extent('x')}, {extent('y')}, {extent('z')})"
    raise ConversionError(f"{kernel.name}: grid type {kernel.grid_type!r} is not supported")


# --- the helpers -------------------------------------------------------------------------


@functools.lru_cache(maxsize=1)
def _helper_module() -> tuple[dict[str, ast.AST], dict[str, ast.stmt]]:
    """(jit functions by name, module-level constant assignments by name) of the installed
    torch's ``torch._inductor.runtime.triton_helpers``."""
    from torch._inductor.runtime import triton_helpers

    tree = ast.parse(inspect.getsource(triton_helpers))
    functions, constants = {}, {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            functions[node.name] = node
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                if isinstance(target, ast.Name):
                    constants[target.id] = node
    return functions, constants


def _helpers_used(kernels: list[ast.FunctionDef]) -> list[str]:
    """Helper names the kernels call, with the helpers those call, dependencies first."""
    functions, _ = _helper_module()
    order: list[str] = []

    def visit(name: str, chain: tuple[str, ...]) -> None:
        if name in order or name in chain:
            return
        if name not in functions:
            raise ConversionError(f"the kernels call triton_helpers.{name}, which this torch does not have")
        node = functions[name]
        decorators = [ast.unparse(d) for d in node.decorator_list]
        if decorators != ["triton.jit"]:
            raise ConversionError(f"triton_helpers.{name} is not a plain @triton.jit function ({decorators})")
        for inner in ast.walk(node):
            if isinstance(inner, ast.Name) and inner.id in functions and inner.id != name:
                visit(inner.id, (*chain, name))
        order.append(name)

    for kernel in kernels:
        for node in ast.walk(kernel):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
                    and node.value.id == "triton_helpers":
                visit(node.attr, ())
    return order


class _HelperRenamer(ast.NodeTransformer):
    """``triton_helpers.f`` and a helper's bare ``f`` -> ``helper_f``; triton_helpers' ``math`` -> ``tl_math``."""

    def __init__(self, helpers: set[str], constants: set[str], in_helper: bool) -> None:
        self.helpers, self.constants, self.in_helper = helpers, constants, in_helper

    def visit_Attribute(self, node: ast.Attribute) -> ast.AST:
        if isinstance(node.value, ast.Name) and node.value.id == "triton_helpers":
            return ast.copy_location(ast.Name(HELPER_PREFIX + node.attr, ast.Load()), node)
        self.generic_visit(node)
        return node

    def visit_Name(self, node: ast.Name) -> ast.AST:
        if self.in_helper and (node.id in self.helpers or node.id in self.constants):
            return ast.copy_location(ast.Name(HELPER_PREFIX + node.id, node.ctx), node)
        if self.in_helper and node.id == "math":
            return ast.copy_location(ast.Name("tl_math", node.ctx), node)
        return node


def _helper_code(names: list[str]) -> list[str]:
    functions, constants = _helper_module()
    used_constants: list[str] = []
    for name in names:
        for node in ast.walk(functions[name]):
            if isinstance(node, ast.Name) and node.id in constants and node.id not in used_constants:
                used_constants.append(node.id)
    renamer = _HelperRenamer(set(names), set(used_constants), in_helper=True)
    out = []
    for constant in used_constants:
        node = renamer.visit(ast.parse(ast.unparse(constants[constant])).body[0])
        out.append(ast.unparse(node))
    for name in names:
        node = ast.parse(ast.unparse(functions[name])).body[0]
        node = renamer.visit(node)
        node.name = HELPER_PREFIX + name
        out.append(ast.unparse(node))
    return out


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
    rewriter = _CallRewriter(kernels, _scalar_arguments(call, graphs[0]))
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
    parts = [
        f'"""Seed for {recording.get("problem", "the problem")}: the Triton kernels torch.compile\'s Inductor '
        f'wrote for it\n(torch {recording.get("torch", "?")}, Triton {recording.get("triton", "?")}), '
        'turned into a standalone candidate by kevo seed."""'
        + ("\n\n# Some sizes of this problem are constants in Inductor's code (the model's own code fixes "
           "them, as\n# nn.LayerNorm's normalized_shape does): the seed holds at the shapes it was written "
           "at only." if recording.get("static_dims") else ""),
        "import torch\nimport torch.nn as nn\nimport triton\nimport triton.language as tl\n"
        "import triton.language.extra.libdevice as libdevice\n\ntl_math = tl.math",
        "KEVO_SPACE = " + _format_space(_space([kernels[name] for name in rewriter.launched])),
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
