"""Reading what Inductor wrote: its Triton kernels and its call().

The first half of ``operators.seeds.convert``: ``_Kernel`` reads one kernel of a
recording (its function, heuristics kind, grid type and the config to launch it
with; a max-autotune template, matmul or convolution, gets its tiles made
launch parameters by ``operators.seeds.template``), and ``_CallRewriter``
turns Inductor's ``call()`` into plain PyTorch allocations and
``kernel[grid](...)`` launches. Copying the runtime helpers the kernels call
is ``operators.seeds.helpers``.
"""

from __future__ import annotations

import ast
from typing import Any

from operators.seeds.index import launch_flag, spill_y_into_z, widen
from operators.seeds.template import CALL_FUNCTION, Template, TemplateError, read_template


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
        self.kind, self.meta, self.size_hints, self.signature = _heuristics(self.function, name)
        self.grid_type = self.meta.get("grid_type", "Grid1D")
        self.grid_args: list[str] = []  # a template's grid, passed after its arguments
        self.template: Template | None = None
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
        if self.grid_type == "Grid2D" and spill_y_into_z(self.function, self.runtime_params()):
            self.grid_type = "Grid2DWithYZOverflow"
        widen(self.function, self.signature)  # its 64-bit variant, for shapes past 2**31 elements

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
        """A max-autotune template (a Triton matmul or convolution): its block sizes made launch
        parameters and its grid computed from them (``operators.seeds.template``)."""
        try:
            self.template = read_template(self.name, self.function, self.meta)
        except TemplateError as exc:
            raise ConversionError(str(exc)) from None
        self.grid_args = list(self.meta["extra_launcher_args"])
        return {"chosen": self.template.chosen, "configs": [self.template.chosen]}

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


def _heuristics(function: ast.FunctionDef, name: str) -> tuple[str, dict[str, Any], dict[str, int], dict[str, str]]:
    """(the ``triton_heuristics`` decorator's name, its literal ``inductor_meta``, its ``size_hints``,
    the argument types of its ``triton_meta`` signature)."""
    for decorator in function.decorator_list:
        if isinstance(decorator, ast.Call):
            dotted = ast.unparse(decorator.func)
            if dotted.startswith("triton_heuristics."):
                meta: dict[str, Any] = {}
                hints: dict[str, int] = {}
                signature: dict[str, str] = {}
                for keyword in decorator.keywords:
                    if keyword.arg == "inductor_meta":
                        meta = _literal_items(keyword.value)
                    elif keyword.arg == "size_hints":
                        hints = {k: v for k, v in _literal_items(keyword.value).items() if isinstance(v, int)}
                    elif keyword.arg == "triton_meta":
                        found = _literal_items(keyword.value).get("signature")
                        signature = {k: v for k, v in (found or {}).items() if isinstance(v, str)}
                return dotted.split(".", 1)[1], meta, hints, signature
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
        if isinstance(node, (ast.Expr, ast.Assign)) and isinstance(node.value, ast.Call):
            name = ast.unparse(node.value.func)
            if name in _DROPPED_CALLS:  # a check, or a stream or device (stream0 = get_raw_stream(0))
                return []
            if isinstance(node, ast.Expr) and name.endswith(".run") and name[:-4] in self.kernels:
                return self._launch(self.kernels[name[:-4]], node.value)
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
        recorded: list[ast.expr] = []
        if kernel.grid_args:  # a template: its grid (recomputed below, from its blocks) follows its arguments
            recorded = call.args[len(call.args) - len(kernel.grid_args):]
            call.args = call.args[:len(call.args) - len(kernel.grid_args)]
        if len(call.args) != len(runtime):
            raise ConversionError(f"{kernel.name}.run passes {len(call.args)} arguments; the kernel takes "
                                  f"{len(runtime)} at run time ({', '.join(runtime)})")
        self._check_calls(ast.Module([ast.Expr(a) for a in call.args + recorded], []))
        call.args = [self.visit(a) for a in call.args]
        recorded_grid = [ast.unparse(self.visit(a)) for a in recorded]
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
        numels = [bound[p] for p in runtime if p.endswith("numel")]
        keywords.append(launch_flag([ast.unparse(a) for a in call.args], numels))
        keywords.append(f"num_warps={kernel.chosen['num_warps']}")
        keywords.append(f"num_stages={kernel.chosen['num_stages']}")
        if kernel.template is not None:
            try:
                grid = kernel.template.grid(bound, blocks, recorded_grid)
            except TemplateError as exc:
                raise ConversionError(f"{kernel.name}: {exc}") from exc
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
    if kernel.grid_type == "SplitScanGrid":  # a scan split along its row: blocks of a row along x, rows along y
        if blocks.get("XBLOCK") is not None or "XBLOCK" in kernel.params:
            raise ConversionError(f"{kernel.name}: a split scan takes one row a program (XBLOCK 1)")
        return f"({extent('r0_')}, {extent('x')})"  # no XBLOCK: extent('x') is xnumel itself
    raise ConversionError(f"{kernel.name}: grid type {kernel.grid_type!r} is not supported")
