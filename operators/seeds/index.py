"""Index arithmetic and grids that hold at every shape a seed is judged at.

Inductor compiles a kernel for the shape it saw, guarded: past 2**31 - 1
elements (``can_use_32bit_indexing``) it compiles a variant whose index
arithmetic is 64-bit (``tl.program_id(0).to(tl.int64)``, its size arguments
declared ``i64``), and past 65535 programs along y it spills into z. A seed is
captured once and then run at held-out shapes, so it keeps both variants in one
kernel, chosen at each launch:

- the kernel takes ``INDEX_64: tl.constexpr``; where it is true, its program
  ids and integer size arguments (``ks0``, a template's ``M``/``N``/``K``) are
  made ``tl.int64`` first, so every index computed from them is 64-bit, in
  persistent and looped reductions (``r0_index``, ``rindex``) alike, and an
  index Inductor casts to its index type (``(r0_1 + x0*ks0).to(tl.int32)``, a
  split reduction's bound check) is cast to ``tl.int64`` instead, as Inductor's
  64-bit variant writes it; where it is false, the kernel is Inductor's 32-bit
  code unchanged (64-bit index arithmetic costs registers and integer
  divisions on small problems);
- the launch passes ``INDEX_64=_index_64(arguments, numels)``, Inductor's own
  rule evaluated on the real arguments: 64-bit where a tensor argument spans
  more than 2**31 - 1 elements, an integer argument exceeds it, or the
  kernel's numels multiply past it. Triton compiles each variant once;
- a ``Grid2D`` kernel whose y extent comes from a run-time ``ynumel`` gets
  Inductor's overflow form (y beyond 65535 programs continues along z), since
  the seed computes its grid from the sizes at each call.

The reduction index (``r0_offset`` from ``tl.range(0, r0_numel, ...)``) keeps
its width: an argmax carries it in an int32 accumulator across the loop, and a
reduction is over fewer than 2**31 elements per row at every shape kevo
checks. A one-dimensional grid holds at most 2**31 - 1 programs; a launch
beyond that fails at the launch (a result, not a wrong answer).
"""

from __future__ import annotations

import ast
import inspect
import re

#: The constexpr parameter a converted kernel takes for its index width.
INDEX_FLAG = "INDEX_64"
#: Where a flag-holding seed keeps the rule (copied from ``_index_64`` below).
INDEX_HELPER = "_index_64"

_INT_TYPES = {"i8", "i16", "i32", "i64", "u8", "u16", "u32", "u64"}
_WIDE = f"tl.int64 if {INDEX_FLAG} else tl.int32"


def _index_64(arguments, numels):
    """Whether one launch needs 64-bit index arithmetic (Inductor's rule, on the real arguments):
    a tensor argument spans more than 2**31 - 1 elements, a number exceeds it, or the numels multiply past it."""
    largest = 1
    for numel in numels:
        largest *= numel
    for argument in arguments:
        if isinstance(argument, int):  # (the screen refuses type() in a candidate)
            span = argument
        elif not hasattr(argument, "is_contiguous"):
            continue  # a float
        elif argument.is_contiguous():
            span = argument.storage_offset() + argument.numel()
        elif argument.numel() == 0:
            continue
        else:
            span = argument.storage_offset() + 1 + sum((n - 1) * s for n, s in zip(argument.shape, argument.stride()))
        if span > largest:
            largest = span
    return largest > 2**31 - 1


def needs_index_64(arguments, numels=()) -> bool:
    """``_index_64``, the rule each seed launch applies (the seed holds a copy of it).

    >>> needs_index_64([], [2**31 - 1]), needs_index_64([], [2**31]), needs_index_64([4096, 393216], [4096 * 393216])
    (False, True, False)
    """
    return _index_64(arguments, numels)


def index_helper_source() -> str:
    """The text of ``_index_64``, for the seed file."""
    return inspect.getsource(_index_64).strip()


def launch_flag(arguments: list[str], numels: list[str]) -> str:
    """The launch keyword that picks the variant: ``INDEX_64=_index_64((a, b, n), (n,))``."""
    def tuple_text(items: list[str]) -> str:
        return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"

    return f"{INDEX_FLAG}={INDEX_HELPER}({tuple_text(arguments)}, {tuple_text(numels)})"


def widen(function: ast.FunctionDef, signature: dict[str, str]) -> None:
    """Give ``function`` (one of Inductor's kernels, edited in place) its 64-bit variant under ``INDEX_64``.

    ``signature`` is the recorded ``triton_meta`` signature (argument -> ``'i32'``,
    ``'*fp32'``, ...); the integer arguments it names, other than numels, are
    widened. Without one, Inductor's size arguments (``ks0``, ``ks1``, ...) are.
    """
    params = [a.arg for a in function.args.args]
    if INDEX_FLAG in params:
        raise ValueError(f"{function.name} already takes {INDEX_FLAG}")
    if signature:
        sizes = [p for p in params if signature.get(p) in _INT_TYPES and not p.endswith("numel")]
    else:
        sizes = [p for p in params if p.startswith("ks") and p[2:].isdigit()]
    _ProgramIds().visit(function)
    casts = [ast.parse(f"{p} = tl.cast({p}, tl.int64)").body[0] for p in sizes]
    if casts:
        guard = ast.parse(f"if {INDEX_FLAG}:\n    pass").body[0]
        guard.body = casts
        function.body.insert(0, guard)
    function.args.args.append(ast.arg(INDEX_FLAG, ast.parse("tl.constexpr", mode="eval").body))
    ast.fix_missing_locations(function)


class _ProgramIds(ast.NodeTransformer):
    """``tl.program_id(k)`` -> ``tl.program_id(k).to(tl.int64 if INDEX_64 else tl.int32)``; a template's
    ``INDEX_DTYPE: tl.constexpr = tl.int32`` (its program ids already cast to it) follows the flag instead."""

    def visit_AnnAssign(self, node: ast.AnnAssign) -> ast.AST:
        if isinstance(node.target, ast.Name) and node.target.id == "INDEX_DTYPE" and node.value is not None \
                and ast.unparse(node.value) == "tl.int32":
            node.value = ast.parse(_WIDE, mode="eval").body
            return node
        self.generic_visit(node)
        return node

    def visit_Attribute(self, node: ast.Attribute) -> ast.AST:
        if node.attr == "to" and _is_program_id(node.value):
            return node  # already cast (to the template's INDEX_DTYPE)
        self.generic_visit(node)
        return node

    def visit_Call(self, node: ast.Call) -> ast.AST:
        self.generic_visit(node)
        if _is_program_id(node):
            return ast.parse(f"{ast.unparse(node)}.to({_WIDE})", mode="eval").body
        if isinstance(node.func, ast.Attribute) and node.func.attr == "to" and len(node.args) == 1 \
                and not node.keywords and ast.unparse(node.args[0]) == "tl.int32" and _is_index(node.func.value):
            node.args = [ast.parse(_WIDE, mode="eval").body]
        return node


#: Inductor's names for indices, offsets, numels and size arguments (``x0``, ``r0_1``, ``xindex``, ``ks0``).
_INDEX_NAME = re.compile(r"(?:[xyz]|r\d*_?)\d*|(?:[xyz]|r\d*_?)(?:index|offset|numel)|ks\d+")


def _is_index(node: ast.expr) -> bool:
    """Whether ``node`` is integer arithmetic over Inductor's index names and literals alone."""
    if isinstance(node, ast.Name):
        return _INDEX_NAME.fullmatch(node.id) is not None
    if isinstance(node, ast.Constant):
        return type(node.value) is int
    if isinstance(node, ast.BinOp):
        return _is_index(node.left) and _is_index(node.right)
    if isinstance(node, ast.UnaryOp):
        return _is_index(node.operand)
    return False


def _is_program_id(node: ast.AST) -> bool:
    return isinstance(node, ast.Call) and ast.unparse(node.func) == "tl.program_id"


def spill_y_into_z(function: ast.FunctionDef, runtime_params: list[str]) -> bool:
    """Rewrite a ``Grid2D`` kernel to Inductor's ``Grid2DWithYZOverflow`` form where its y extent
    comes from a run-time ``ynumel`` and is masked by it; True when rewritten.

    ``yoffset = tl.program_id(1) * YBLOCK`` becomes
    ``yoffset = (tl.program_id(1) + tl.program_id(2) * tl.num_programs(1)) * YBLOCK``,
    so a grid of ``(x, min(y, 65535), cdiv(y, 65535))`` programs covers any y.
    """
    text = ast.unparse(function)
    if "ynumel" not in runtime_params or "tl.program_id(2)" in text or "ymask = yindex < ynumel" not in text:
        return False
    if any(isinstance(n, ast.Name) and n.id == "ynumel" and isinstance(n.ctx, ast.Store) for n in ast.walk(function)):
        return False  # a size fixed in the kernel: its grid never grows

    class Spill(ast.NodeTransformer):
        def visit_Call(self, node: ast.Call) -> ast.AST:
            self.generic_visit(node)
            if _is_program_id(node) and ast.unparse(node) == "tl.program_id(1)":
                return ast.parse("(tl.program_id(1) + tl.program_id(2) * tl.num_programs(1))", mode="eval").body
            return node

    Spill().visit(function)
    ast.fix_missing_locations(function)
    return True
