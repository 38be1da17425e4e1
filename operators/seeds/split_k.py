"""Split-K: a GEMM seed whose sum over K is shared by SPLIT_K programs (issue 28, item 3).

Inductor's max-autotune matmul template (``operators.seeds.template``) runs one
program per ``BLOCK_M x BLOCK_N`` output tile, each looping over all of K.
Where M*N is small and K large (KernelBench level 1's
``6_Matmul_with_large_K_dimension_``), that is a few long-running programs on
a GPU of a hundred-odd SMs. ``split_k_seed(source)`` rewrites a seed
converted from that template into a structurally different program:

- its launch gets a second grid axis of ``SPLIT_K`` programs; the one at
  ``tl.program_id(1) = s`` runs the K loop over its own run of
  ``cdiv(k_tiles, SPLIT_K)`` K tiles from ``s`` times that (the last run
  shorter, or empty), the template's masks still guarding the partial tile;
- where the template stores ``acc`` itself into an fp32 buffer that
  ``_inductor_call`` allocates (a plain matmul), each program adds its partial
  tile into that buffer, zeroed first, with ``tl.atomic_add``;
- otherwise (an epilogue fused into the store: a bias, an activation, a cast
  to fp16, several outputs; linear or not), the partial tiles are added into
  an fp32 workspace of M x N zeros, and a second kernel,
  ``<kernel>_split_k_epilogue`` (the template with its K loop replaced by a
  load of its workspace tile), runs the template's epilogue once on the sum;
- ``SPLIT_K`` is a ``tl.constexpr`` the launch passes from a local of
  ``_inductor_call`` (``<kernel>_SPLIT_K = 4``): parametric search varies it
  as it does the tiles, over ``SPLIT_CHOICES`` (declared in ``KEVO_SPACE``).
  At 1 the program is the template as Inductor wrote it (no zeroing, no
  workspace, no second kernel).

The atomic adds sum in no fixed order: the fp32 sum up to its rounding, not
bit for bit the same from run to run. A seed without the matmul template gives
None; a matmul template this rewrite does not follow raises ``SplitKError``
saying what was seen (an accumulator other than fp32, another K loop, a
kernel launched more than once, a ``return`` in its epilogue, a seed already
split).
"""

from __future__ import annotations

import ast
import copy
import dataclasses
import textwrap

from operators.literals import dotted, is_constexpr
from operators.seeds.code import CALL_FUNCTION
from operators.seeds.template import one_launch, template_and_call
from operators.seeds.variants import replace_statements, with_variant_line
from operators.space import SPACE_VARIABLE

#: The name of the variant, in a seed's header and in ``CompiledSeed.variant`` (``max_autotune_split_k``).
VARIANT = "split_k"
#: The values ``KEVO_SPACE`` allows SPLIT_K (a block-kind tunable: powers of two).
SPLIT_CHOICES = (1, 2, 4, 8, 16, 32, 64)
#: SPLIT_K as the seed is written: a start the search moves from (1 would repeat the template's seed).
DEFAULT_SPLIT_K = 4
#: What the variant changes, in the seed's header.
WHAT = ("K split across SPLIT_K programs along a second grid axis, their partial tiles summed in fp32 with "
        "tl.atomic_add; SPLIT_K is tunable, 1 is the template as Inductor wrote it; operators.seeds.split_k")

#: The names the rewrite adds to a kernel: a kernel that has any of them already is not rewritten.
_KERNEL_NAMES = ("SPLIT_K", "ws_ptr", "k_tiles", "k_per_split", "k_start", "k_end", "split_k_rows",
                 "split_k_cols")
_K_LOOP = "range(0, tl.cdiv(K, BLOCK_K))"
_TILE = ("split_k_rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)\n"
         "split_k_cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)\n")
_TILE_OFFSETS = "ws_ptr + (split_k_rows[:, None] * N + split_k_cols[None, :])"
_TILE_MASK = "(split_k_rows[:, None] < M) & (split_k_cols[None, :] < N)"


class SplitKError(ValueError):
    """A matmul template this rewrite does not follow; the message says why in one line."""


@dataclasses.dataclass
class _Gemm:
    """One matmul template kernel of a seed, as the rewrite needs it."""

    function: ast.FunctionDef
    runtime: list[str]  # the parameters its launch passes by position, in order
    zeros: int  # the body's index of ``acc = tl.zeros(...)``
    loop: int  # the body's index of the K loop
    store: int | None  # the body's index of ``tl.store(ptr, acc, mask)`` where that is the whole epilogue's effect
    out: str | None  # the parameter that store writes through


def split_k_seed(source: str, split_k: int = DEFAULT_SPLIT_K) -> str | None:
    """The split-K variant of the seed ``source`` at ``SPLIT_K = split_k`` (see the module doc): None
    when it has no Inductor matmul template, ``SplitKError`` when it has one this rewrite does not follow."""
    if split_k not in SPLIT_CHOICES:
        raise ValueError(f"SPLIT_K {split_k} is not among {SPLIT_CHOICES}")
    found = template_and_call(source, SplitKError, "split kernels")
    if found is None:
        return None
    tree, kernels, call = found
    space = next((n for n in tree.body if isinstance(n, ast.Assign)
                  and any(isinstance(t, ast.Name) and t.id == SPACE_VARIABLE for t in n.targets)), None)
    names = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    edits: dict[ast.stmt, str] = {}
    new_call = copy.deepcopy(call)
    added: list[str] = []
    for kernel in kernels:
        gemm = _read(kernel)
        epilogue_name = f"{kernel.name}_split_k_epilogue"
        if epilogue_name in names:
            raise SplitKError(f"{kernel.name}: the seed already has a function {epilogue_name}")
        _launch(tree, call, kernel.name)  # launched once in the seed, from the top of _inductor_call
        launch = _launch(ast.Module([new_call], []), new_call, kernel.name)  # where it is in the copy
        direct = gemm.store is not None and _fp32_buffer(new_call, launch, gemm)
        texts = [_comment(kernel.name, direct) + "\n" + ast.unparse(_split_kernel(gemm, direct))]
        if not direct:
            note = (f"{epilogue_name}: the epilogue Inductor fused into {kernel.name}'s store, run once on the "
                    "fp32 sum of its SPLIT_K partial tiles (kevo's split-K, operators.seeds.split_k).")
            texts.append(textwrap.fill(note, 100, initial_indent="# ", subsequent_indent="# ") + "\n"
                         + ast.unparse(_epilogue_kernel(gemm, epilogue_name)))
        edits[kernel] = "\n\n\n".join(texts)
        _split_launch(new_call, launch, gemm, split_k, None if direct else epilogue_name)
        added.append(f"{CALL_FUNCTION}.{kernel.name}_SPLIT_K")
    edits[call] = ast.unparse(new_call)
    if space is not None:
        edits[space] = _space_text(space, added)
    else:  # SPLIT_K's choices declared all the same (a block's default space would leave out 1 and 2)
        edits[kernels[0]] = _space_text(None, added) + "\n\n\n" + edits[kernels[0]]
    try:
        return with_variant_line(replace_statements(source, edits), VARIANT, WHAT)
    except ValueError as exc:  # a seed without the conversion's header
        raise SplitKError(str(exc)) from None


def _read(function: ast.FunctionDef) -> _Gemm:
    name = function.name
    args = function.args
    if args.posonlyargs or args.kwonlyargs or args.vararg or args.kwarg:
        raise SplitKError(f"{name}: a kernel with positional-only, keyword-only or variadic parameters")
    constexprs = [a.arg for a in args.args if a.annotation is not None and is_constexpr(a.annotation)]
    if "SPLIT_K" in constexprs:
        raise SplitKError(f"{name}: already split-K (it has a SPLIT_K parameter)")
    missing = [b for b in ("BLOCK_M", "BLOCK_N", "BLOCK_K") if b not in constexprs]
    if missing:
        raise SplitKError(f"{name}: {', '.join(missing)} not launch parameters (a template kevo seed did not convert)")
    runtime = [a.arg for a in args.args if a.arg not in constexprs]
    if [a.arg for a in args.args[:len(runtime)]] != runtime:
        raise SplitKError(f"{name}: its tl.constexpr parameters do not all follow the ones passed by position")
    used = {n.id for n in ast.walk(function) if isinstance(n, ast.Name)} | {a.arg for a in args.args}
    taken = [n for n in _KERNEL_NAMES if n in used]
    if taken:
        raise SplitKError(f"{name}: it already uses the name(s) {', '.join(taken)} the split-K rewrite adds")
    axes = {ast.unparse(c.args[0]) for c in ast.walk(function) if isinstance(c, ast.Call)
            and dotted(c.func) == "tl.program_id" and c.args}
    if axes != {"0"}:
        raise SplitKError(f"{name}: a matmul template over program ids {sorted(axes)} (split-K takes the second "
                          "axis of a template that uses the first alone)")
    body = function.body
    loops = [i for i, s in enumerate(body) if isinstance(s, (ast.For, ast.While))]
    if len(loops) != 1 or not _is_k_loop(body[loops[0]]):
        raise SplitKError(f"{name}: not the template's one K loop `for k_idx in {_K_LOOP}` at the top of its body")
    loop = loops[0]
    zeros = [i for i in range(loop) if _stores_to(body[i], "acc")]
    if len(zeros) != 1 or not _is_zeros(body[zeros[0]]):
        raise SplitKError(f"{name}: its accumulator is not set once by `acc = tl.zeros((BLOCK_M, BLOCK_N), ...)` "
                          "before the K loop")
    accumulator = _accumulator_type(body, body[zeros[0]])
    if accumulator != "tl.float32":
        raise SplitKError(f"{name}: it accumulates in {accumulator}; split-K sums the partial tiles in fp32, "
                          "with the template's fp32 accumulator only")
    if any(_names(s) & {"acc"} for s in body[zeros[0] + 1:loop]):
        raise SplitKError(f"{name}: its accumulator is used between its tl.zeros and the K loop")
    for size in ("M", "N", "K", "pid_m", "pid_n"):
        assigned = [i for i, s in enumerate(body) if _stores_to(s, size)]
        stores = sum(isinstance(n, ast.Name) and n.id == size and not isinstance(n.ctx, ast.Load)
                     for n in ast.walk(function))
        if len(assigned) != 1 or stores != 1 or assigned[0] > loop:
            raise SplitKError(f"{name}: {size} is not assigned once before the K loop")
    epilogue = body[loop + 1:]
    if any(isinstance(n, ast.Return) for s in epilogue for n in ast.walk(s)):
        raise SplitKError(f"{name}: a return in the epilogue after its K loop")
    effects = [c for s in epilogue for c in ast.walk(s) if isinstance(c, ast.Call)
               and (dotted(c.func) == "tl.store" or dotted(c.func).startswith("tl.atomic"))]
    if not effects:
        raise SplitKError(f"{name}: its epilogue stores nothing")
    # the epilogue's one effect a store of acc itself (the output's dtype is call()'s to say): direct
    store = out = None
    (first, *rest) = effects
    statement = next((i for i, s in enumerate(epilogue) if isinstance(s, ast.Expr) and s.value is first), None)
    pointers = _names(first.args[0]) & set(runtime) if first.args else set()
    if (not rest and statement is not None and dotted(first.func) == "tl.store" and len(first.args) >= 2
            and ast.unparse(first.args[1]) == "acc" and len(pointers) == 1
            and sum(n.id == "acc" for s in epilogue for n in ast.walk(s) if isinstance(n, ast.Name)) == 1):
        store, (out,) = loop + 1 + statement, pointers
    return _Gemm(function, runtime, zeros[0], loop, store, out)


def _is_k_loop(loop: ast.stmt) -> bool:
    return (isinstance(loop, ast.For) and isinstance(loop.target, ast.Name) and not loop.orelse
            and ast.unparse(loop.iter) == _K_LOOP
            and any(isinstance(c, ast.Call) and dotted(c.func) == "tl.dot" for c in ast.walk(loop)))


def _is_zeros(statement: ast.stmt) -> bool:
    value = statement.value if isinstance(statement, ast.Assign) and len(statement.targets) == 1 else None
    return (isinstance(value, ast.Call) and dotted(value.func) == "tl.zeros" and len(value.args) == 1
            and ast.unparse(value.args[0]) == "(BLOCK_M, BLOCK_N)")


def _accumulator_type(body: list[ast.stmt], zeros: ast.Assign) -> str:
    """The dtype ``tl.zeros`` is given, through a ``NAME: tl.constexpr = ...`` the kernel fixes."""
    dtype = next((k.value for k in zeros.value.keywords if k.arg == "dtype"), None)
    if dtype is None:
        return "tl.float32"  # tl.zeros' own default
    if isinstance(dtype, ast.Name):
        fixed = [s.value for s in body if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)
                 and s.target.id == dtype.id and s.value is not None]
        if len(fixed) == 1:
            dtype = fixed[0]
    return ast.unparse(dtype)


def _stores_to(statement: ast.stmt, name: str) -> bool:
    """Whether ``statement`` (not what it nests) assigns ``name``."""
    if isinstance(statement, ast.Assign):
        return any(isinstance(t, ast.Name) and t.id == name for t in statement.targets)
    if isinstance(statement, (ast.AnnAssign, ast.AugAssign)):
        return isinstance(statement.target, ast.Name) and statement.target.id == name
    return False


def _names(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def _parse(text: str) -> list[ast.stmt]:
    return ast.parse(textwrap.dedent(text)).body


# --- the kernels ----------------------------------------------------------------------------------


def _split_kernel(gemm: _Gemm, direct: bool) -> ast.FunctionDef:
    """The template with its K loop over one split's run of tiles and its result added atomically."""
    kernel = copy.deepcopy(gemm.function)
    body = kernel.body
    loop = body[gemm.loop]
    loop.iter = ast.parse("range(k_start, k_end)", mode="eval").body
    share = _parse("""
        k_tiles = tl.cdiv(K, BLOCK_K)
        k_per_split = tl.cdiv(k_tiles, SPLIT_K)
        k_start = tl.program_id(1) * k_per_split
        k_end = min(k_start + k_per_split, k_tiles)
    """)
    if direct:  # the one store becomes an atomic add into the zeroed output
        store = body[gemm.store].value
        keyword = next((k.value for k in store.keywords if k.arg == "mask"), None)
        mask = store.args[2] if len(store.args) > 2 else keyword
        add = ast.Call(ast.parse("tl.atomic_add", mode="eval").body, [store.args[0], store.args[1]],
                       ([ast.keyword("mask", mask)] if mask is not None else [])
                       + [ast.keyword("sem", ast.Constant("relaxed"))])
        branch = ast.If(ast.parse("SPLIT_K == 1", mode="eval").body, [body[gemm.store]], [ast.Expr(add)])
        epilogue = body[gemm.loop + 1:gemm.store] + [branch] + body[gemm.store + 1:]
    else:  # the epilogue in place at SPLIT_K = 1; else the partial tile into the workspace
        partial = _parse(_TILE + f"tl.atomic_add({_TILE_OFFSETS}, acc, mask={_TILE_MASK}, sem='relaxed')\n")
        epilogue = [ast.If(ast.parse("SPLIT_K == 1", mode="eval").body, body[gemm.loop + 1:], partial)]
        kernel.args.args.insert(len(gemm.runtime), ast.arg("ws_ptr"))
    kernel.body = body[:gemm.loop] + share + [loop] + epilogue
    kernel.args.args.append(ast.arg("SPLIT_K", ast.parse("tl.constexpr", mode="eval").body))
    return ast.fix_missing_locations(kernel)


def _epilogue_kernel(gemm: _Gemm, name: str) -> ast.FunctionDef:
    """The template with its accumulator loaded from the workspace instead of summed over K."""
    kernel = copy.deepcopy(gemm.function)
    kernel.name = name
    body = kernel.body
    load = _parse(_TILE + f"acc = tl.load({_TILE_OFFSETS}, mask={_TILE_MASK}, other=0.0)\n")
    kernel.body = body[:gemm.zeros] + body[gemm.zeros + 1:gemm.loop] + load + body[gemm.loop + 1:]
    kernel.args.args.insert(len(gemm.runtime), ast.arg("ws_ptr"))
    return ast.fix_missing_locations(kernel)


def _comment(name: str, direct: bool) -> str:
    how = ("added with tl.atomic_add into the output, zeroed first" if direct else
           f"added with tl.atomic_add into an fp32 workspace that {name}_split_k_epilogue finishes")
    return textwrap.fill(f"kevo's split-K of {name} (operators.seeds.split_k): SPLIT_K programs along the grid's "
                         f"second axis share its K tiles, each one's partial tile {how} (SPLIT_K = 1: the template "
                         "as Inductor wrote it).", 100, initial_indent="# ", subsequent_indent="# ")


# --- the launch -----------------------------------------------------------------------------------


def _launch(tree: ast.Module, call: ast.FunctionDef, kernel: str) -> int:
    """The index in ``call``'s body of the one statement that launches ``kernel``, the seed's only launch of
    it (``operators.seeds.template.one_launch``), with no ``*args`` or ``**kwargs``."""
    index = one_launch(tree, call, kernel, 1, SplitKError)
    launch = call.body[index].value
    if any(k.arg is None for k in launch.keywords) or any(isinstance(a, ast.Starred) for a in launch.args):
        raise SplitKError(f"{kernel}: its launch unpacks *args or **kwargs")
    return index


def _fp32_buffer(call: ast.FunctionDef, index: int, gemm: _Gemm) -> bool:
    """Whether the template's store writes into a buffer ``_inductor_call`` allocates as fp32 before the launch."""
    launch = call.body[index].value
    argument = launch.args[gemm.runtime.index(gemm.out)] if len(launch.args) == len(gemm.runtime) else None
    if not isinstance(argument, ast.Name):
        return False
    bindings = [s for s in call.body if _stores_to(s, argument.id)]
    nested = sum(isinstance(n, ast.Name) and n.id == argument.id and not isinstance(n.ctx, ast.Load)
                 for n in ast.walk(call))
    if len(bindings) != 1 or nested != 1 or call.body.index(bindings[0]) > index:
        return False
    value = bindings[0].value
    return (isinstance(value, ast.Call) and dotted(value.func) in ("torch.empty_strided", "torch.empty")
            and any(k.arg == "dtype" and ast.unparse(k.value) == "torch.float32" for k in value.keywords))


def _split_launch(call: ast.FunctionDef, index: int, gemm: _Gemm, split_k: int, epilogue: str | None) -> None:
    """``call``'s launch at ``index`` given its SPLIT_K programs (and, with ``epilogue``, the workspace and the
    epilogue kernel's launch after it)."""
    name = gemm.function.name
    statement = call.body[index]
    launch = statement.value
    if len(launch.args) != len(gemm.runtime):
        raise SplitKError(f"{name}: its launch passes {len(launch.args)} arguments by position, the kernel takes "
                          f"{len(gemm.runtime)} ({', '.join(gemm.runtime)})")
    splits = f"{name}_SPLIT_K"
    (programs,) = launch.func.slice.elts
    before = [f"{splits} = {split_k}"]
    after: list[str] = []
    launch.func.slice = ast.Tuple([programs, ast.Name(splits, ast.Load())], ast.Load())
    if epilogue is None:
        before.append(f"if {splits} > 1:\n    {ast.unparse(launch.args[gemm.runtime.index(gemm.out)])}.zero_()")
    else:
        bound = dict(zip(gemm.runtime, (ast.unparse(a) for a in launch.args)))
        rows, columns = (_bound_size(gemm.function, size, bound) for size in ("M", "N"))
        workspace = f"{name}_split_k_workspace"
        if workspace in _names(call):
            raise SplitKError(f"{name}: {CALL_FUNCTION} already has a {workspace}")
        before.append(f"{workspace} = torch.zeros(({rows}, {columns}), dtype=torch.float32, device=device) "
                      f"if {splits} > 1 else torch.empty((1,), dtype=torch.float32, device=device)")
        launch.args.append(ast.Name(workspace, ast.Load()))
        for keyword in launch.keywords:  # the 64-bit variant's rule sees the workspace too
            value = keyword.value
            if keyword.arg == "INDEX_64" and isinstance(value, ast.Call) and value.args \
                    and isinstance(value.args[0], ast.Tuple):
                value.args[0].elts.append(ast.Name(workspace, ast.Load()))
        options = [k for k in launch.keywords if k.arg not in ("num_warps", "num_stages")]
        arguments = ", ".join([*(ast.unparse(a) for a in launch.args), *(ast.unparse(k) for k in options)])
        after.append(f"if {splits} > 1:\n"
                     f"    {epilogue}[({ast.unparse(programs)},)]({arguments}, num_warps=4, num_stages=1)")
    launch.keywords.insert(next((i for i, k in enumerate(launch.keywords) if k.arg in ("num_warps", "num_stages")),
                                len(launch.keywords)), ast.keyword("SPLIT_K", ast.Name(splits, ast.Load())))
    new = [s for text in before for s in _parse(text)] + [statement] + [s for text in after for s in _parse(text)]
    call.body[index:index + 1] = new
    ast.fix_missing_locations(call)


def _bound_size(function: ast.FunctionDef, size: str, bound: dict[str, str]) -> str:
    """The kernel's ``M`` (or ``N``) as ``_inductor_call`` computes it from the launch's arguments."""
    (value,) = [s.value for s in function.body if _stores_to(s, size)]
    unknown = _names(value) - set(bound)
    if unknown:
        raise SplitKError(f"{function.name}: its {size} = {ast.unparse(value)} is not computed from its arguments")

    class Bind(ast.NodeTransformer):
        def visit_Name(self, node: ast.Name) -> ast.AST:
            return ast.parse(f"({bound[node.id]})", mode="eval").body

    return ast.unparse(Bind().visit(copy.deepcopy(value)))


# --- the source -----------------------------------------------------------------------------------


def _space_text(node: ast.Assign | None, added: list[str]) -> str:
    """``KEVO_SPACE`` (``node``'s, or a new one) with each SPLIT_K tunable's choices added (one entry a line,
    as the conversion writes it)."""
    try:
        space = dict(ast.literal_eval(node.value)) if node is not None else {}
    except ValueError:
        raise SplitKError(f"the seed's {SPACE_VARIABLE} is not a literal") from None
    space.update({name: list(SPLIT_CHOICES) for name in added})
    return "\n".join([f"{SPACE_VARIABLE} = {{", *(f"    {k!r}: {v!r}," for k, v in space.items()), "}"])
