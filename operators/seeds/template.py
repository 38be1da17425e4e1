"""Inductor's Triton templates (max-autotune's matmul and convolutions) as a seed's kernels.

Inductor bakes a template's config into its body (``BLOCK_M : tl.constexpr =
128``) and passes its grid to the launch as numbers computed in call()
(``FixedGrid``: ``_grid_0, _grid_1, _grid_2`` after the arguments).
``read_template`` recognises the templates kevo converts, turns their block
sizes into ``tl.constexpr`` parameters (so parametric mutation can tune them)
and says how the grid follows from the blocks and from the sizes the body
itself computes from its arguments:

- the matmul (``mm``, ``addmm``, a matmul with its epilogue fused): one
  program per ``BLOCK_M x BLOCK_N`` tile, ``cdiv(M, BLOCK_M) * cdiv(N, BLOCK_N)``
  programs (its ``grid_m``/``grid_n`` lines say so);
- the batched matmul (``bmm``): the same tiles over ``tl.program_id(0)``, the
  batch over ``tl.program_id(1)`` (and, where Inductor splits a batch past the
  grid's y limit, ``tl.program_id(2)``); the tile count is computed from the
  blocks, the batch's grid extents are those call() passed
  (``bmm_grid``, over the batch's size);
- the 2-D and 3-D convolutions (``convolution2d``, ``convolution3d``): Inductor's
  ``conv2d_grid``/``conv3d_grid``, ``(cdiv(BATCH*[OUT_D*]OUT_H*OUT_W, BLOCK_M),
  cdiv(OUT_C, BLOCK_N), GROUPS)``, each size as the body assigns it.

A convolution template holds at the weight's sizes Inductor compiled it for:
its lowering guards the weight's shape to integers (``out_chan, in_chan,
*kernel_shape = guard_int_seq(weight.get_size())``), so the channel counts,
the kernel's extent and the strides derived from them are constants in the
body and in the layout copies around it; the batch and spatial sizes stay
arguments. ``Template.fixed`` says so, and the seed's header repeats it.

Any other template (Inductor's depthwise 1-D convolution, a persistent TMA
matmul) raises ``ConversionError`` naming what was seen.

What has been seen: the matmul and the batched matmul as Inductor writes them
on an H200 (``tests/fixtures/inductor/``, torch 2.11), and the matmul and the 2-D, 3-D and depthwise
2-D convolution templates as Inductor writes them for the CPU under Triton's
interpreter (``tests/fixtures/seed_variants/``, torch 2.13). A GPU's
convolution capture has not been converted yet; it may differ in what
surrounds the template (channels-last layout copies when Inductor's layout
optimisation is on, an epilogue fused by ``benchmark_epilogue_fusion``, which
the CPU capture turns off, ``ALLOW_TF32`` from cuDNN's precision setting, a
1x1 convolution turned into the matmul template or into an extern
``conv1x1_via_mm``, which gives no seed). The template body and its grid, which
this module reads, are the same source on both.
"""

from __future__ import annotations

import ast
import dataclasses
import re
from typing import Any

#: The sizes each convolution template's grid is computed from, in the order Inductor multiplies them.
_CONV_PROGRAMS = {"nhw": ("BATCH", "OUT_H", "OUT_W"), "ndhw": ("BATCH", "OUT_D", "OUT_H", "OUT_W")}


#: The seed's function that does what Inductor's call() did: it launches the kernels (``operators.seeds.code``).
CALL_FUNCTION = "_inductor_call"


class TemplateError(ValueError):
    """A template this conversion does not follow (``operators.seeds.code`` words it as a ConversionError)."""


@dataclasses.dataclass
class Template:
    """One recognised template: its kind, its baked blocks and launch options, and its grid's sizes."""

    kind: str  # "matmul", "bmm", "convolution2d" or "convolution3d"
    blocks: dict[str, int]  # BLOCK_M, BLOCK_N, BLOCK_K as Inductor's benchmark picked them
    chosen: dict[str, Any]  # {"kwargs": blocks, "num_warps": ..., "num_stages": ...}
    sizes: dict[str, ast.expr]  # the body's size assignments the grid needs, over the kernel's parameters
    groups: int = 1
    fixed: str = ""  # what the template fixes at the sizes it was compiled for ("" if nothing)

    def grid(self, bound: dict[str, str], blocks: dict[str, str], recorded: list[str] | None = None) -> str:
        """The launch grid, with the kernel's parameters bound to call()'s expressions and the blocks to
        locals; ``recorded``: the grid call() passed (a batched matmul keeps its batch extents)."""
        def size(name: str) -> str:
            return _substitute(self.sizes[name], bound)

        if self.kind in ("matmul", "bmm"):
            tiles = f"triton.cdiv({size('M')}, {blocks['BLOCK_M']}) * triton.cdiv({size('N')}, {blocks['BLOCK_N']})"
            if self.kind == "matmul":
                return f"({tiles},)"
            if not recorded or len(recorded) != 3:
                raise TemplateError("a batched matmul template launched without its 3-D grid")
            return f"({tiles}, {recorded[1]}, {recorded[2]})"
        programs = " * ".join(f"({size(n)})" for n in _CONV_PROGRAMS["ndhw" if self.kind == "convolution3d" else "nhw"])
        return (f"(triton.cdiv({programs}, {blocks['BLOCK_M']}), triton.cdiv({size('OUT_C')}, {blocks['BLOCK_N']}), "
                f"{self.groups})")


def read_template(name: str, function: ast.FunctionDef, meta: dict[str, Any]) -> Template:
    """The template ``function`` (edited in place: its baked blocks become ``tl.constexpr`` parameters)."""
    if meta.get("grid_type") != "FixedGrid" or not meta.get("extra_launcher_args"):
        raise TemplateError(f"{name}: a template with grid {meta.get('grid_type')!r} is not supported")
    blocks: dict[str, int] = {}
    constants: dict[str, Any] = {}
    kept = []
    for statement in function.body:
        if (isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name)
                and _is_constexpr(statement.annotation) and isinstance(statement.value, ast.Constant)):
            constants[statement.target.id] = statement.value.value
            if statement.target.id.startswith("BLOCK_") and type(statement.value.value) is int:
                blocks[statement.target.id] = statement.value.value
                continue
        kept.append(statement)
    assigned = _assignments(function)
    text = ast.unparse(function)
    uses = _program_ids(function)
    kind = _kind(name, function, text, assigned, uses)
    gemm = kind in ("matmul", "bmm")
    needed = ({"BLOCK_M", "BLOCK_N"} if gemm else {"BLOCK_M", "BLOCK_N", "BLOCK_K"})
    if not needed <= set(blocks):
        raise TemplateError(f"{name}: a {kind} template without {', '.join(sorted(needed - set(blocks)))} in its body")
    if gemm:
        sizes = {axis: assigned[axis] for axis in ("M", "N")}
    else:
        sizes = {n: assigned[n] for n in (*_CONV_PROGRAMS["ndhw" if kind == "convolution3d" else "nhw"], "OUT_C")}
    sizes = {size_name: _host_integer_ops(expr) for size_name, expr in sizes.items()}
    params = {a.arg for a in function.args.args}
    for size_name, expr in sizes.items():
        unknown = {n.id for n in ast.walk(expr) if isinstance(n, ast.Name)} - params
        if unknown:
            raise TemplateError(f"{name}: its {size_name} is computed from {sorted(unknown)}, not its arguments")
    groups = constants.get("GROUPS", 1)
    if not gemm and (type(groups) is not int or groups < 1):
        raise TemplateError(f"{name}: a convolution template whose GROUPS is not a number")
    function.body = kept
    for block in blocks:
        function.args.args.append(ast.arg(block, ast.parse("tl.constexpr", mode="eval").body))
    options = {k.arg: ast.literal_eval(k.value) for d in function.decorator_list if isinstance(d, ast.Call)
               for k in d.keywords if k.arg in ("num_warps", "num_stages")}
    chosen = {"kwargs": blocks, "num_warps": int(options.get("num_warps", 4)),
              "num_stages": int(options.get("num_stages", 1))}
    fixed = ""
    if not gemm:
        fixed = ("Inductor's convolution template fixes the weight's sizes (channels in and out, the kernel's "
                 "extent) as constants: the seed holds at those sizes only; batch and spatial sizes stay free")
    return Template(kind, blocks, chosen, sizes, 1 if gemm else groups, fixed)


def _kind(name: str, function: ast.FunctionDef, text: str, assigned: dict[str, ast.expr], uses: set[int]) -> str:
    if "grid_m = (M + BLOCK_M - 1) // BLOCK_M" in text and "grid_n = (N + BLOCK_N - 1) // BLOCK_N" in text:
        if {"M", "N"} <= set(assigned) and uses == {0}:
            return "matmul"
        if {"M", "N"} <= set(assigned) and _batch_axis(function) and 1 in uses and uses <= {0, 1, 2}:
            return "bmm"
        raise TemplateError(f"{name}: a Triton template other than Inductor's matmul and batched matmul")
    for programs, dims in _CONV_PROGRAMS.items():
        start = re.search(rf"^\s*{programs} = tl\.program_id\(0\)(\.to\(INDEX_DTYPE\))? \* BLOCK_M \+ "
                          r"tl\.arange\(0, BLOCK_M\)$", text, re.MULTILINE)
        channels = re.search(r"^\s*idx_y_c = tl\.program_id\(1\)(\.to\(INDEX_DTYPE\))? \* BLOCK_N \+ "
                             r"tl\.arange\(0, BLOCK_N\)$", text, re.MULTILINE)
        if start and channels and {*dims, "OUT_C"} <= set(assigned) and uses <= {0, 1, 2}:
            return "convolution3d" if programs == "ndhw" else "convolution2d"
    raise TemplateError(f"{name}: a Triton template other than Inductor's matmul and convolutions")


def _assignments(function: ast.FunctionDef) -> dict[str, ast.expr]:
    """Names the body assigns exactly once at its top level (``M = ks0``, ``OUT_H = (-2) + ks1``)."""
    seen: dict[str, list[ast.expr]] = {}
    for statement in function.body:
        if isinstance(statement, ast.Assign) and len(statement.targets) == 1 \
                and isinstance(statement.targets[0], ast.Name):
            seen.setdefault(statement.targets[0].id, []).append(statement.value)
    return {name: values[0] for name, values in seen.items() if len(values) == 1}


#: Inductor's integer helpers in a size (a strided convolution's ``OUT_H``, where the sign of the
#: numerator is not known) and the Python operator that computes the same on the host: floor
#: division, and the remainder that takes the divisor's sign.
_HOST_INTEGER_OPS = {"div_floor_integer": ast.FloorDiv, "remainder_integer": ast.Mod}


def _host_integer_ops(expr: ast.expr) -> ast.expr:
    """``expr`` with ``triton_helpers.div_floor_integer(a, b)`` as ``a // b`` (and the remainder as
    ``a % b``), so that the launch grid computes it in Python.

    >>> ast.unparse(_host_integer_ops(ast.parse("1 + triton_helpers.div_floor_integer((-7) + ks1,  4)").body[0].value))
    '1 + (-7 + ks1) // 4'
    """

    class Host(ast.NodeTransformer):
        def visit_Call(self, node: ast.Call) -> ast.AST:
            self.generic_visit(node)
            func = node.func
            if (isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name)
                    and func.value.id == "triton_helpers" and func.attr in _HOST_INTEGER_OPS
                    and len(node.args) == 2 and not node.keywords):
                return ast.BinOp(node.args[0], _HOST_INTEGER_OPS[func.attr](), node.args[1])
            return node

    return ast.fix_missing_locations(Host().visit(ast.parse(ast.unparse(expr), mode="eval").body))


def _program_ids(function: ast.FunctionDef) -> set[int]:
    axes = set()
    for node in ast.walk(function):
        if isinstance(node, ast.Call) and ast.unparse(node.func) == "tl.program_id" and node.args \
                and isinstance(node.args[0], ast.Constant):
            axes.add(node.args[0].value)
    return axes


def _substitute(expr: ast.expr, bound: dict[str, str]) -> str:
    """``expr`` with each parameter replaced by its bound expression (parenthesised)."""

    class Bind(ast.NodeTransformer):
        def visit_Name(self, node: ast.Name) -> ast.AST:
            if node.id in bound:
                return ast.parse(f"({bound[node.id]})", mode="eval").body
            return node

    return ast.unparse(Bind().visit(ast.parse(ast.unparse(expr), mode="eval").body))


def _is_constexpr(annotation: ast.expr | None) -> bool:
    return annotation is not None and ast.unparse(annotation).endswith("constexpr")


def template_and_call(source: str, error: type[ValueError], what: str
                      ) -> tuple[ast.Module, list[ast.FunctionDef], ast.FunctionDef] | None:
    """(the seed's tree, its matmul template kernels, its launching function), or None when it has
    no template; ``error`` when it has no ``_inductor_call(args, device)`` to launch ``what`` from."""
    tree = ast.parse(source)
    kernels = [n for n in tree.body if isinstance(n, ast.FunctionDef) and is_matmul_template(n)]
    if not kernels:
        return None
    call = next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == CALL_FUNCTION), None)
    if call is None or [a.arg for a in call.args.args][-1:] != ["device"]:
        raise error(f"the seed has no {CALL_FUNCTION}(args, device) to launch the {what} from")
    return tree, kernels, call


def one_launch(tree: ast.Module, call: ast.FunctionDef, kernel: str, axes: int, error: type[ValueError]) -> int:
    """The index in ``call``'s body of the statement that launches ``kernel`` on a grid of ``axes`` axes,
    the seed's (``tree``'s) only launch of it; ``error`` saying what was seen otherwise (the rewrites of
    ``operators.seeds`` change that one launch)."""
    launches = [n for n in ast.walk(tree) if isinstance(n, ast.Subscript) and isinstance(n.value, ast.Name)
                and n.value.id == kernel]
    top = [i for i, s in enumerate(call.body) if isinstance(s, ast.Expr) and isinstance(s.value, ast.Call)
           and isinstance(s.value.func, ast.Subscript) and isinstance(s.value.func.value, ast.Name)
           and s.value.func.value.id == kernel]
    if len(launches) != 1 or len(top) != 1:
        raise error(f"{kernel}: launched {len(launches)} times, {len(top)} of them at the top of "
                    f"{CALL_FUNCTION} (the rewrite changes its one launch there)")
    grid = call.body[top[0]].value.func.slice
    if not (isinstance(grid, ast.Tuple) and len(grid.elts) == axes):
        raise error(f"{kernel}: its launch grid {ast.unparse(grid)} is not the template's "
                    + ("one axis" if axes == 1 else f"{axes} axes"))
    return top[0]


def is_matmul_template(function: ast.FunctionDef) -> bool:
    """Whether ``function`` is Inductor's matmul template (its tile grid, as ``operators.seeds.template`` reads it)."""
    lines = {ast.unparse(s) for s in function.body if isinstance(s, ast.Assign)}
    return ({"grid_m = (M + BLOCK_M - 1) // BLOCK_M", "grid_n = (N + BLOCK_N - 1) // BLOCK_N"} <= lines
            and not _batch_axis(function))  # not the batched one: its grid has a batch axis


def _batch_axis(function: ast.FunctionDef) -> bool:
    """Whether ``function`` is Inductor's batched matmul: its body takes the batch's index ``idx_q``
    from the grid's y axis (``tl.program_id(1)``, torch 2.11 assigns it twice; later versions add
    ``tl.program_id(2)`` for a batch past the grid's y limit)."""
    return any(isinstance(s, ast.Assign) and [ast.unparse(t) for t in s.targets] == ["idx_q"]
               and "tl.program_id(1)" in ast.unparse(s.value) for s in function.body)
