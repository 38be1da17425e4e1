"""Depthwise: a grouped convolution seed with one output channel a group, as a stencil per channel.

Inductor's convolution template (``operators.seeds.template``) runs, for each
of its ``GROUPS``, programs of ``BLOCK_M`` output positions by ``BLOCK_N``
output channels of the group, summing over ``BLOCK_K`` input channels of the
group with ``tl.dot``. Where a group has one output channel (a depthwise
convolution: KernelBench level 1's 82-86, ``groups=in_channels``), each
program computes a 128 x 16 x 16 dot for a 128 x 1 x 1 product, and the
grid's y axis runs ``cdiv(OUT_C, BLOCK_N)`` programs a group where one writes
anything: on the H200, 83_conv_depthwise_2D's template seed ran 56 ms against
cuDNN's 1.49 (docs/RESULTS.md). ``depthwise_seed(source)`` rewrites such a
seed into a structurally different program:

- the dot becomes a product summed over the group's input channels
  (``tl.sum(x[:, :, None] * w[None, :, :], axis=1)`` in fp32), and the
  launch's ``BLOCK_N`` and ``BLOCK_K`` are 1 (``KEVO_SPACE`` allows only that:
  wider blocks would multiply masked zeros);
- the grid's y axis spans the group's own output channels
  (``cdiv(OUT_C // GROUPS, BLOCK_N)``: one program), not all of them;
- the group moves from the grid's z axis into x, varying fastest
  (``tl.program_id(0) % GROUPS``, the positions' block ``// GROUPS``), so
  programs that run together read the channels of the same positions, which
  lie side by side in the channels-last layout the template reads.

Only the template's kernel and its launch change; the layout copies around
it stay as Inductor wrote them. A seed without a grouped convolution template
with one output channel a group gives None; one this rewrite does not follow
raises ``DepthwiseError`` saying what was seen.
"""

from __future__ import annotations

import ast
import copy
import textwrap

from operators.literals import dotted
from operators.seeds.code import CALL_FUNCTION
from operators.seeds.template import one_launch
from operators.seeds.variants import replace_statements, with_variant_line
from operators.space import SPACE_VARIABLE

#: The name of the variant, in a seed's header and in ``CompiledSeed.variant`` (``max_autotune_depthwise``).
VARIANT = "depthwise"
#: What the variant changes, in the seed's header.
WHAT = ("each group's one output channel as a stencil: the template's tl.dot a product summed over the group's "
        "input channels, BLOCK_N and BLOCK_K 1, the grid's y axis the group's channels only, the group varying "
        "fastest along x; operators.seeds.depthwise")
#: The block sizes the rewrite fixes, and the values KEVO_SPACE allows them.
FIXED_BLOCKS = ("BLOCK_N", "BLOCK_K")

_DOT = "tl.sum(matrix_x[:, :, None].to(tl.float32) * matrix_w[None, :, :].to(tl.float32), axis=1)"


class DepthwiseError(ValueError):
    """A grouped convolution template the rewrite does not follow."""


def depthwise_seed(source: str) -> str | None:
    """The depthwise variant of ``source`` (see the module doc), or None where it has no grouped
    convolution template with one output channel a group."""
    tree = ast.parse(source)
    kernels = [(n, groups) for n in tree.body if isinstance(n, ast.FunctionDef)
               for groups in [_depthwise_groups(n)] if groups]
    if not kernels:
        return None
    call = next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == CALL_FUNCTION), None)
    if call is None:
        raise DepthwiseError(f"the seed has no {CALL_FUNCTION} to launch the template from")
    new_call = copy.deepcopy(call)
    edits: dict[ast.stmt, str] = {}
    fixed: list[str] = []
    for kernel, groups in kernels:
        comment = textwrap.fill(f"kevo's depthwise rewrite of {kernel.name} (operators.seeds.depthwise): the "
                                "group from tl.program_id(0) % GROUPS, the dot a product summed in fp32.", 100,
                                initial_indent="# ", subsequent_indent="# ")
        edits[kernel] = comment + "\n" + ast.unparse(_kernel(kernel))
        one_launch(tree, call, kernel.name, 3, DepthwiseError)  # launched once in the seed, from _inductor_call
        fixed += _launch(new_call, one_launch(ast.Module([new_call], []), new_call, kernel.name, 3, DepthwiseError),
                         kernel.name, groups)
    edits[call] = ast.unparse(new_call)
    space = next((n for n in tree.body if isinstance(n, ast.Assign)
                  and any(isinstance(t, ast.Name) and t.id == SPACE_VARIABLE for t in n.targets)), None)
    if space is not None:
        edits[space] = _space(space, fixed)
    try:
        return with_variant_line(replace_statements(source, edits), VARIANT, WHAT)
    except ValueError as exc:  # a seed without the conversion's header
        raise DepthwiseError(str(exc)) from None


def _depthwise_groups(function: ast.FunctionDef) -> int | None:
    """``GROUPS`` of a grouped convolution template whose ``OUT_C`` is ``GROUPS`` (one output channel a
    group), else None."""
    values: dict[str, object] = {}
    for statement in function.body:
        if isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name) \
                and statement.value is not None:
            values[statement.target.id] = statement.value
        elif isinstance(statement, ast.Assign) and len(statement.targets) == 1 \
                and isinstance(statement.targets[0], ast.Name):
            values[statement.targets[0].id] = statement.value
    groups, out_c, group = values.get("GROUPS"), values.get("OUT_C"), values.get("group")
    if not (isinstance(groups, ast.Constant) and isinstance(out_c, ast.Constant) and group is not None):
        return None  # not a grouped convolution template (no group axis, or sizes not fixed)
    if not (isinstance(groups.value, int) and groups.value > 1 and out_c.value == groups.value):
        return None
    return groups.value


def _kernel(function: ast.FunctionDef) -> ast.FunctionDef:
    """The template with its group from the x axis and its dot a product summed in fp32."""
    name = function.name
    kernel = copy.deepcopy(function)
    if "tl.program_id(0) % GROUPS" in ast.unparse(kernel):
        raise DepthwiseError(f"{name}: already rewritten")
    reads = [c for c in ast.walk(kernel) if isinstance(c, ast.Call) and dotted(c.func) == "tl.program_id"]
    axes = sorted(ast.unparse(c.args[0]) for c in reads if len(c.args) == 1)
    if axes != ["0", "1", "2"]:
        raise DepthwiseError(f"{name}: reads its program ids {axes}, not each of 0, 1 and 2 once")
    dots = [s for s in ast.walk(kernel) if isinstance(s, ast.AugAssign) and isinstance(s.value, ast.Call)
            and dotted(s.value.func) == "tl.dot"]
    if len(dots) != 1 or [ast.unparse(a) for a in dots[0].value.args[:2]] != ["matrix_x", "matrix_w"] \
            or ast.unparse(dots[0].target) != "acc":
        raise DepthwiseError(f"{name}: not one `acc += tl.dot(matrix_x, matrix_w, ...)`")

    class Axes(ast.NodeTransformer):
        def visit_Call(self, node: ast.Call) -> ast.AST:
            if dotted(node.func) == "tl.program_id" and len(node.args) == 1:
                axis = ast.unparse(node.args[0])
                if axis == "0":
                    return ast.parse("(tl.program_id(0) // GROUPS)", mode="eval").body
                if axis == "2":
                    return ast.parse("(tl.program_id(0) % GROUPS)", mode="eval").body
                return node
            return self.generic_visit(node)

    kernel = Axes().visit(kernel)
    for statement in ast.walk(kernel):
        if isinstance(statement, ast.AugAssign) and isinstance(statement.value, ast.Call) \
                and dotted(statement.value.func) == "tl.dot":
            statement.value = ast.parse(_DOT, mode="eval").body
    return ast.fix_missing_locations(kernel)


def _launch(call: ast.FunctionDef, index: int, kernel: str, groups: int) -> list[str]:
    """``call``'s launch of ``kernel`` (its body's statement ``index``) on the new grid, its BLOCK_N and
    BLOCK_K locals at 1; the names of those locals as tunables (``_inductor_call.NAME``)."""
    grid = call.body[index].value.func.slice
    positions, channels, group_axis = grid.elts
    if not (isinstance(group_axis, ast.Constant) and group_axis.value == groups):
        raise DepthwiseError(f"{kernel}: its grid's z axis {ast.unparse(group_axis)} is not its {groups} groups")
    if not (isinstance(channels, ast.Call) and dotted(channels.func) == "triton.cdiv" and len(channels.args) == 2
            and isinstance(channels.args[0], ast.Constant) and channels.args[0].value == groups):
        raise DepthwiseError(f"{kernel}: its grid's y axis {ast.unparse(channels)} is not cdiv({groups}, BLOCK_N)")
    grid.elts = [ast.parse(f"({ast.unparse(positions)}) * {groups}", mode="eval").body,
                 ast.parse(f"triton.cdiv(1, {ast.unparse(channels.args[1])})", mode="eval").body,
                 ast.Constant(1)]
    names = []
    for block in FIXED_BLOCKS:
        local = f"{kernel}_{block}"
        assigned = [s for s in call.body if isinstance(s, ast.Assign) and len(s.targets) == 1
                    and isinstance(s.targets[0], ast.Name) and s.targets[0].id == local]
        if len(assigned) != 1:
            raise DepthwiseError(f"{kernel}: {CALL_FUNCTION} does not set {local} once")
        assigned[0].value = ast.Constant(1)
        names.append(f"{CALL_FUNCTION}.{local}")
    ast.fix_missing_locations(call)
    return names


def _space(node: ast.Assign, fixed: list[str]) -> str:
    """``KEVO_SPACE`` with each of ``fixed`` allowed only 1."""
    try:
        space = dict(ast.literal_eval(node.value))
    except ValueError:
        raise DepthwiseError(f"the seed's {SPACE_VARIABLE} is not a literal") from None
    space.update({name: [1] for name in fixed})
    return "\n".join([f"{SPACE_VARIABLE} = {{", *(f"    {k!r}: {v!r}," for k, v in space.items()), "}"])
