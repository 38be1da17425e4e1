"""Persistent launch: a GEMM seed whose programs, one per SM, each loop over output tiles (issue 28, item 3).

Inductor's max-autotune matmul template (``operators.seeds.template``) is
launched with one program per ``BLOCK_M x BLOCK_N`` output tile; a GPU runs
them in waves, each program paying its start-up and its epilogue's tail alone.
``persistent_seed(source)`` rewrites a seed converted from that template into
a structurally different program: the launch gives it as many programs as the
device has SMs (``torch.cuda.get_device_properties(device).multi_processor_count``,
and ``CPU_PROGRAMS`` under Triton's interpreter on the CPU) or as many as there
are tiles where that is fewer, and the kernel's body from its ``pid =
tl.program_id(0)`` on runs in a loop over the tiles ``tl.program_id(0)``,
``+ tl.num_programs(0)``, ... In the loop ``pid`` is the tile, so the
template's GROUP_M swizzle, masks, K loop and epilogue (bias, activation,
cast) stay as they were, once per tile. The template's tunables (its tiles,
warps, stages, GROUP_M) are the variant's; how many programs run is the SM
count, not a tunable.

A seed without the matmul template at the top of a kernel (a persistent one
too) gives None; a matmul template this rewrite does not follow raises
``PersistentError`` saying what was seen (program ids read elsewhere than its
one ``pid =``, as split-K's second axis is, a ``return`` after it, a name
assigned both before and after it, a kernel launched more than once).
"""

from __future__ import annotations

import ast
import copy
import textwrap

from operators.literals import dotted
from operators.seeds.code import CALL_FUNCTION
from operators.seeds.template import one_launch, template_and_call
from operators.seeds.variants import replace_statements, with_variant_line

#: The name of the variant, in a seed's header and in ``CompiledSeed.variant`` (``max_autotune_persistent``).
VARIANT = "persistent"
#: Programs launched on the CPU, under Triton's interpreter (it has no SMs to count).
CPU_PROGRAMS = 4
#: What the variant changes, in the seed's header.
WHAT = ("one program per SM, each looping over output tiles from its program id in steps of the program count; "
        "operators.seeds.persistent")
_ADDED = ("tile_id", "persistent_tiles")


class PersistentError(ValueError):
    """A matmul template this rewrite does not follow; the message says why in one line."""


def persistent_seed(source: str) -> str | None:
    """The persistent variant of the seed ``source`` (see the module doc): None when it has no Inductor matmul
    template, ``PersistentError`` when it has one this rewrite does not follow."""
    found = template_and_call(source, PersistentError, "kernels")
    if found is None:
        return None
    tree, kernels, call = found
    new_call = copy.deepcopy(call)
    edits: dict[ast.stmt, str] = {}
    for kernel in kernels:
        comment = textwrap.fill(f"kevo's persistent launch of {kernel.name} (operators.seeds.persistent): one "
                                "program per SM, each looping over output tiles; pid is the tile, the template's "
                                "body as it was.", 100, initial_indent="# ", subsequent_indent="# ")
        edits[kernel] = comment + "\n" + ast.unparse(_persistent_kernel(kernel))
        one_launch(tree, call, kernel.name, 1, PersistentError)
        _persistent_launch(new_call, kernel.name)
    edits[call] = ast.unparse(new_call)
    try:
        return with_variant_line(replace_statements(source, edits), VARIANT, WHAT)
    except ValueError as exc:  # a seed without the conversion's header
        raise PersistentError(str(exc)) from None


def _persistent_kernel(function: ast.FunctionDef) -> ast.FunctionDef:
    """The template with its body from ``pid = ...tl.program_id(0)...`` on in a loop over the tiles."""
    name = function.name
    if any(dotted(c.func) == "tl.num_programs" for c in ast.walk(function) if isinstance(c, ast.Call)):
        raise PersistentError(f"{name}: already reads tl.num_programs (persistent already?)")
    used = {n.id for n in ast.walk(function) if isinstance(n, ast.Name)} | {a.arg for a in function.args.args}
    taken = [n for n in _ADDED if n in used]
    if taken:
        raise PersistentError(f"{name}: it already uses the name(s) {', '.join(taken)} the rewrite adds")
    reads = [c for c in ast.walk(function) if isinstance(c, ast.Call) and dotted(c.func) == "tl.program_id"]
    body = function.body
    starts = [i for i, s in enumerate(body) if isinstance(s, ast.Assign) and len(s.targets) == 1
              and isinstance(s.targets[0], ast.Name) and s.targets[0].id == "pid"
              and any(c in reads for c in ast.walk(s.value))]
    if len(reads) != 1 or len(starts) != 1 or ast.unparse(reads[0]) != "tl.program_id(0)":
        raise PersistentError(f"{name}: its program id is not read once, as tl.program_id(0), by a top-level `pid =`")
    start = starts[0]
    before, after = body[:start], body[start:]
    if any(isinstance(n, ast.Return) for s in after for n in ast.walk(s)):
        raise PersistentError(f"{name}: a return after its pid (the tile loop cannot return)")
    assigned_before = {n.id for s in before for n in ast.walk(s) if isinstance(n, ast.Name)
                       and not isinstance(n.ctx, ast.Load)}
    carried = sorted(assigned_before & {n.id for s in after for n in ast.walk(s) if isinstance(n, ast.Name)
                                        and not isinstance(n.ctx, ast.Load)})
    if carried:
        raise PersistentError(f"{name}: {', '.join(carried)} assigned both before and after its pid (they would be "
                              "carried across tiles)")
    for size in ("M", "N"):
        if size not in assigned_before:
            raise PersistentError(f"{name}: {size} is not assigned before its pid")
    kernel = copy.deepcopy(function)
    head, tail = kernel.body[:start], kernel.body[start:]

    class Tile(ast.NodeTransformer):  # pid = tl.program_id(0).to(...) -> pid = tl.cast(tile_id, tl.int32).to(...)
        def visit_Call(self, node: ast.Call) -> ast.AST:  # (a tensor, as program_id's: the interpreter's is an int)
            if dotted(node.func) == "tl.program_id":
                return ast.parse("tl.cast(tile_id, tl.int32)", mode="eval").body
            return self.generic_visit(node)

    tail[0] = Tile().visit(tail[0])
    loop = ast.parse("persistent_tiles = tl.cdiv(M, BLOCK_M) * tl.cdiv(N, BLOCK_N)\n"
                     "for tile_id in range(tl.program_id(0), persistent_tiles, tl.num_programs(0)):\n"
                     "    pass\n").body
    loop[1].body = tail
    kernel.body = head + loop
    return ast.fix_missing_locations(kernel)


def _persistent_launch(call: ast.FunctionDef, kernel: str) -> None:
    """``call``'s launch of ``kernel`` given min(SMs, tiles) programs."""
    (index,) = [i for i, s in enumerate(call.body) if isinstance(s, ast.Expr) and isinstance(s.value, ast.Call)
                and isinstance(s.value.func, ast.Subscript) and isinstance(s.value.func.value, ast.Name)
                and s.value.func.value.id == kernel]
    launch = call.body[index].value
    programs = f"{kernel}_programs"
    if programs in {n.id for n in ast.walk(call) if isinstance(n, ast.Name)}:
        raise PersistentError(f"{kernel}: {CALL_FUNCTION} already has a {programs}")
    (tiles,) = launch.func.slice.elts
    launch.func.slice = ast.parse(f"(min({ast.unparse(tiles)}, {programs}),)", mode="eval").body
    count = ast.parse(f"{programs} = torch.cuda.get_device_properties(device).multi_processor_count "
                      f"if device.type == 'cuda' else {CPU_PROGRAMS}").body
    call.body[index:index] = count
    ast.fix_missing_locations(call)
