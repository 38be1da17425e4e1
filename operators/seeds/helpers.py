"""The ``torch._inductor.runtime.triton_helpers`` functions Inductor's kernels call, copied into a seed.

``_helpers_used`` finds the helpers the kernels call (with the helpers those
call, dependencies first) in the installed torch; ``_helper_code`` gives their
source, renamed under ``helper_`` along with the module-level constants they
use; ``_HelperRenamer`` makes the kernels call them by those names.
"""

from __future__ import annotations

import ast
import functools
import inspect

from operators.seeds.code import ConversionError

#: Prefix of the Inductor runtime helpers copied into a seed.
HELPER_PREFIX = "helper_"


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
