"""A seed that runs torch.compile's own code at the shapes it is bred on, and holds at every other.

A seed from torch.compile is captured with every size symbolic (``evolve.seeding.inductor``), so
that it holds at the held-out shapes it is judged on. That generality costs the main shapes their
speed: with the sizes known, Inductor writes other code (no masks where a block divides a size, a
softmax's reduction split to the row's length, configs tuned for those sizes). What a user's
``torch.compile`` runs is that static code.

``fast_path_seed(general, main, main_recording)`` joins two converted seeds of one problem: the
general one and ``main``, converted from a capture at the main shapes with static sizes. The
forward takes ``main``'s code where its arguments are those the code was compiled for (their sizes
and strides, Inductor's own guard for it, read from the recording's ``assert_size_stride`` calls)
and the general code elsewhere. ``main``'s functions are renamed with a ``_main`` suffix;
``KEVO_SPACE`` holds ``main``'s space (the search tunes the code that is timed) and the general
path's tunables each pinned to its value (tuning them changes no timed run). A kernel may keep a
fast path for the shapes it is bred on: it is judged at the main shapes, where the fast path runs,
and at held-out shapes, where the general one does, both against the reference.
"""

from __future__ import annotations

import ast
import re
from typing import Any

from operators.seeds.code import CALL_FUNCTION, ConversionError, _call_function
from operators.space import SPACE_VARIABLE, read_declared_space
from operators.tunables import find_tunables

SUFFIX = "_main"
GUARD = "_at_main_shapes"
_FORWARD_CALL = re.compile(rf"^(?P<indent> +)outputs = {CALL_FUNCTION}\((?P<args>\[.*\]), (?P<device>[\w.]+)\)$",
                           re.MULTILINE)


def main_arguments(recording: dict[str, Any]) -> list[tuple[tuple[int, ...], tuple[int, ...]] | None]:
    """Per argument of the recorded (static) call(), its sizes and strides as Inductor's guard asserts them,
    or None where it asserts none; ``ConversionError`` where a size is not a number (not a static capture)."""
    codes = recording.get("codes") or []
    if len(codes) != 1:
        raise ConversionError(f"the main shapes' capture made {len(codes)} graphs (one is needed)")
    call = _call_function(ast.parse(codes[0]))
    unpack = next((n for n in call.body if isinstance(n, ast.Assign) and isinstance(n.targets[0], ast.Tuple)
                   and isinstance(n.value, ast.Name)), None)
    single = next((n for n in call.body if isinstance(n, ast.Assign) and isinstance(n.targets[0], ast.Name)
                   and isinstance(n.value, ast.Name)), None) if unpack is None else None
    if unpack is None and single is None:
        raise ConversionError("the main shapes' call() does not unpack its arguments")
    names = [t.id for t in unpack.targets[0].elts] if unpack is not None else [single.targets[0].id]
    guarded: dict[str, tuple[tuple[int, ...], tuple[int, ...]]] = {}
    for node in ast.walk(call):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "assert_size_stride":
            target, sizes, strides = node.args[:3]
            try:
                guarded[target.id] = (tuple(ast.literal_eval(sizes)), tuple(ast.literal_eval(strides)))
            except ValueError:
                raise ConversionError("the main shapes' code takes a size as an argument: it is not static") from None
    if not guarded:
        raise ConversionError("the main shapes' call() asserts no argument's sizes")
    return [guarded.get(name) for name in names]


def fast_path_seed(general: str, main: str, main_recording: dict[str, Any]) -> str:
    """``general`` with ``main``'s code as the path its forward takes at the main shapes (see the module doc)."""
    arguments = main_arguments(main_recording)
    main_tree, general_tree = ast.parse(main), ast.parse(general)
    main_functions = [n for n in main_tree.body if isinstance(n, ast.FunctionDef)]
    renamed = {n.name: n.name + SUFFIX for n in main_functions}
    clash = set(renamed.values()) & {n.name for n in general_tree.body if isinstance(n, ast.FunctionDef)}
    if clash:
        raise ConversionError(f"the general seed already defines {', '.join(sorted(clash))}")
    lines = main.splitlines()
    pieces = []
    for node in main_functions:  # each with the comments right above it (a kernel's configs)
        start = min([node.lineno, *(d.lineno for d in node.decorator_list)]) - 1
        while start > 0 and lines[start - 1].startswith("#"):
            start -= 1
        pieces.append(_renamed("\n".join(lines[start:node.end_lineno]), renamed))
    main_call, general_call = _FORWARD_CALL.search(main), _FORWARD_CALL.search(general)
    if main_call is None or general_call is None:
        raise ConversionError("a seed's forward does not call its code in one line")
    indent = general_call["indent"]
    dispatch = "\n".join([
        f"{indent}main = {_renamed(main_call['args'], renamed)}",
        f"{indent}if {GUARD}(main):  # the shapes torch.compile's static code was written for",
        f"{indent}    outputs = {CALL_FUNCTION}{SUFFIX}(main, {main_call['device']})",
        f"{indent}else:",
        f"{indent}    outputs = {CALL_FUNCTION}({general_call['args']}, {general_call['device']})"])
    body = general[:general_call.start()] + dispatch + general[general_call.end():]
    space = _space(general, main, renamed)
    guard = _GUARD_SOURCE.replace("@ARGUMENTS@", repr(arguments))
    model_at = body.index("class ModelNew(")
    header = ("# torch.compile's code at the main shapes (their sizes static, as a user's torch.compile writes it),\n"
              "# taken where the forward's arguments are those it was compiled for; the code above holds elsewhere.")
    body = body[:model_at] + header + "\n\n" + guard + "\n\n\n" + "\n\n\n".join(pieces) + "\n\n\n" + body[model_at:]
    return _with_space(body, space)


#: The guard the forward asks (``@ARGUMENTS@``: ``main_arguments``' list).
_GUARD_SOURCE = f'''#: Each argument of the main shapes' code: (sizes, strides) as Inductor's guard for it asserts them
_MAIN_ARGUMENTS = @ARGUMENTS@


def {GUARD}(arguments):
    """Whether ``arguments`` are those the main shapes' code was compiled for."""
    if len(arguments) != len(_MAIN_ARGUMENTS):
        return False
    for argument, expected in zip(arguments, _MAIN_ARGUMENTS):
        if expected is None:
            continue
        if not hasattr(argument, 'stride') or tuple(argument.shape) != expected[0] \\
                or tuple(argument.stride()) != expected[1]:
            return False
    return True'''


def _renamed(text: str, renamed: dict[str, str]) -> str:
    if not renamed:
        return text
    pattern = re.compile(r"\b(" + "|".join(map(re.escape, sorted(renamed, key=len, reverse=True))) + r")\b")
    return pattern.sub(lambda m: renamed[m.group(1)], text)


def _space(general: str, main: str, renamed: dict[str, str]) -> dict[str, list[Any]]:
    """``main``'s declared space under its new names, then every tunable of the general path pinned."""
    space: dict[str, list[Any]] = {}
    for name, values in read_declared_space(main).declared.items():
        function, _, rest = name.partition(".")
        base, at, nth = function.partition("@")
        space[f"{renamed.get(base, base)}{at}{nth}.{rest}"] = list(values)
    for tunable in find_tunables(general):
        space[tunable.name] = [tunable.value]
    return space


def _with_space(source: str, space: dict[str, list[Any]]) -> str:
    """``source`` with its ``KEVO_SPACE`` literal replaced by ``space``."""
    tree = ast.parse(source)
    node = next(n for n in tree.body if isinstance(n, ast.Assign) and len(n.targets) == 1
                and getattr(n.targets[0], "id", None) == SPACE_VARIABLE)
    lines = source.splitlines()
    text = "\n".join([f"{SPACE_VARIABLE} = {{"] + [f"    {k!r}: {v!r}," for k, v in space.items()] + ["}"])
    return "\n".join([*lines[:node.lineno - 1], text, *lines[node.end_lineno:]]) + "\n"
