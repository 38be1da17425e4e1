"""Static screen: what a candidate may not even contain.

The first of several defences; every rule here also has a runtime
counterpart in the worker (trace, tamper check, launch count), so a
construct that slips past the screen is still caught when it runs.
"""

from __future__ import annotations

import ast
import dataclasses

import sys

# Modules a candidate may import (a module or any of its submodules, unless
# listed in _FORBIDDEN_SUBMODULES). Everything else in the standard library is
# a way out: each of operator, functools, typing, dataclasses and enum has a
# function that turns a string into attribute access or evaluated code.
ALLOWED_IMPORTS = frozenset({"torch", "triton", "math", "typing", "__future__"})
# From typing, only names that are plain type constructors.
SAFE_TYPING = frozenset(
    {"Any", "Optional", "Union", "List", "Tuple", "Dict", "Sequence", "Callable",
     "Iterable", "Mapping", "Set", "FrozenSet", "Literal", "Final"}
)
# Parts of allowed packages that reach the process, the timers, the compiler
# driver or native code.
_FORBIDDEN_SUBMODULES = (
    "torch.utils", "torch.multiprocessing", "torch.distributed", "torch.library",
    "torch.ops", "torch.hub", "torch.package", "torch.compiler", "torch.profiler",
    "torch.testing", "torch.serialization", "torch.cuda.graphs", "torch.cuda.jiterator",
    "triton.runtime", "triton.compiler", "triton.backends", "triton.knobs",
    "triton.testing", "triton.tools", "triton.profiler",
)
# Packages re-export standard modules (torch.os, torch.ctypes, torch.threading,
# torch.builtins, ...): an attribute named after a module a candidate may not
# import is refused wherever it hangs. Names that are also everyday tensor
# methods, and harmless modules, are let through.
_HARMLESS_MODULE_NAMES = frozenset({"math", "select", "copy", "array", "abc", "numbers", "random", "typing"})
_MODULE_ATTRIBUTES = frozenset(sys.stdlib_module_names) - _HARMLESS_MODULE_NAMES
FORBIDDEN_BUILTINS = frozenset(
    {"eval", "exec", "compile", "open", "__import__", "globals", "locals", "vars",
     "getattr", "setattr", "delattr", "breakpoint", "input", "exit", "quit", "help",
     "dir", "memoryview", "__builtins__", "type"}
)
# Attribute names that lead out of the candidate's lane whatever they hang off.
FORBIDDEN_ATTRIBUTES = frozenset(
    {"environ", "getenv", "putenv", "system", "popen", "spawn", "fork", "kill",
     "_exit", "exit", "modules", "save", "tofile", "fromfile", "from_file",
     "runtime", "knobs", "compiler", "backends", "testing", "driver", "compile",
     "ops", "library", "utils", "hub", "profiler", "multiprocessing", "distributed",
     "cudart", "jiterator", "set_", "untyped_storage", "storage", "share_memory_",
     "from_dlpack", "to_dlpack", "register_forward_hook", "register_forward_pre_hook",
     "register_hook", "register_module_forward_hook", "f_globals", "f_locals",
     "f_back", "f_builtins", "gi_frame", "cr_frame", "tb_frame", "mro",
     # strings turned into attribute access or code
     "attrgetter", "methodcaller", "get_type_hints", "make_dataclass", "ForwardRef",
     # computing on the host, outside both Triton and the dispatch trace
     "tolist", "numpy", "map_", "map2_", "apply_", "from_numpy", "frombuffer",
     # replaying captured PyTorch work outside the trace
     "CUDAGraph", "graph", "graphs", "make_graphed_callables", "replay", "capture_begin",
     "capture_end", "package", "serialization"}
) | _MODULE_ATTRIBUTES
ALLOWED_DUNDERS = frozenset({"__init__", "__name__"})
#: Private functions of ``triton.language.core`` a kernel may call: pure, on its own values. Inductor's
#: runtime helpers (the decoupled look-back of a split scan) call this one, and seeds copy them.
ALLOWED_LANGUAGE_PRIVATE = frozenset({"_unwrap_if_constexpr"})


@dataclasses.dataclass(frozen=True)
class ScreenVerdict:
    ok: bool
    status: str = ""
    reason: str = ""


def _dotted(node: ast.AST) -> str | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return None


def _bound_names(node: ast.AST) -> list[str]:
    """Plain names ``node`` binds: assignment, loop and comprehension targets,
    with-as, walrus, except-as and parameters."""
    targets: list[ast.AST] = []
    if isinstance(node, ast.Assign):
        targets = list(node.targets)
    elif isinstance(node, (ast.AnnAssign, ast.AugAssign, ast.For, ast.NamedExpr, ast.comprehension)):
        targets = [node.target]
    elif isinstance(node, ast.withitem) and node.optional_vars is not None:
        targets = [node.optional_vars]
    elif isinstance(node, ast.ExceptHandler) and node.name:
        return [node.name]
    elif isinstance(node, ast.arg):
        return [node.arg]
    return [n.id for target in targets for n in ast.walk(target) if isinstance(n, ast.Name)]


def _root_name(node: ast.AST) -> str | None:
    while isinstance(node, (ast.Attribute, ast.Subscript, ast.Call)):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node.id if isinstance(node, ast.Name) else None


def _import_ok(module: str) -> bool:
    if module.split(".")[0] not in ALLOWED_IMPORTS:
        return False
    return not any(module == bad or module.startswith(bad + ".") for bad in _FORBIDDEN_SUBMODULES)


class _Screen(ast.NodeVisitor):
    def __init__(self) -> None:
        self.problems: list[str] = []
        self.jit_functions: set[str] = set()
        self.launched: set[str] = set()
        self.has_model_new = False
        self._in_jit = False
        self._descriptors: set[str] = set()  # in the jit function being read: tensor descriptors
        self.language_aliases: set[str] = set()
        # The receiving parameter of each method defined in a class body, the
        # private attributes those methods set on it, and the class names.
        self._self_stack: list[str | None] = [None]
        self._methods: set[ast.AST] = set()
        self._own_private: set[str] = set()
        self._class_names: set[str] = set()

    def prepare(self, tree: ast.Module) -> None:
        for cls in ast.walk(tree):
            if not isinstance(cls, ast.ClassDef):
                continue
            self._class_names.add(cls.name)
            for item in cls.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and item.args.args:
                    if any(_dotted(d) in ("staticmethod", "classmethod") for d in item.decorator_list):
                        continue
                    self._methods.add(item)
                    me = item.args.args[0].arg
                    for sub in ast.walk(item):
                        if (isinstance(sub, ast.Attribute) and isinstance(sub.ctx, ast.Store)
                                and isinstance(sub.value, ast.Name) and sub.value.id == me
                                and sub.attr.startswith("_") and not sub.attr.startswith("__")):
                            self._own_private.add(sub.attr)

    def _is_triton_language(self, node: ast.AST) -> bool:
        name = _dotted(node)
        return name == "triton.language" or name in self.language_aliases

    def _language_private(self, node: ast.Attribute) -> bool:
        """``tl.core.NAME`` for a NAME of ``ALLOWED_LANGUAGE_PRIVATE`` (``tl`` Triton's language module)."""
        return node.attr in ALLOWED_LANGUAGE_PRIVATE and isinstance(node.value, ast.Attribute) \
            and node.value.attr == "core" and self._is_triton_language(node.value.value)

    def fail(self, node: ast.AST, message: str) -> None:
        self.problems.append(f"line {getattr(node, 'lineno', '?')}: {message}")

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            if alias.name == "typing":
                self.fail(node, "import typing: use from typing import <type names>")
            elif not _import_ok(alias.name):
                self.fail(node, f"imports {alias.name}, which candidates may not use")
            if alias.name == "triton.language" and alias.asname:
                self.language_aliases.add(alias.asname)
        self.generic_visit(node)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        module = node.module or ""
        if node.level or not _import_ok(module):
            self.fail(node, f"imports from {module or '.'}, which candidates may not use")
        for alias in node.names:
            if alias.name == "*":
                self.fail(node, "star imports are not allowed")
            elif module == "typing" and alias.name not in SAFE_TYPING:
                self.fail(node, f"imports typing.{alias.name}; only type names may come from typing")
            elif not _import_ok(f"{module}.{alias.name}") and _import_ok(module):
                self.fail(node, f"imports {module}.{alias.name}, which candidates may not use")
            elif alias.name in FORBIDDEN_ATTRIBUTES or (alias.name == "load" and module != "triton.language"):
                self.fail(node, f"imports {alias.name} from {module}")
            if f"{module}.{alias.name}" == "triton.language":
                self.language_aliases.add(alias.asname or alias.name)
        self.generic_visit(node)

    def _visit_name(self, node: ast.Name) -> None:
        if node.id in FORBIDDEN_BUILTINS:
            self.fail(node, f"uses {node.id}")
        elif node.id.startswith("__") and node.id not in ALLOWED_DUNDERS:
            self.fail(node, f"uses {node.id}")
        if self._in_jit and node.id == "torch":
            self.fail(node, "uses torch inside a @triton.jit function")
        self.generic_visit(node)

    def _on_self(self, node: ast.AST) -> bool:
        """True when ``node`` is the instance a method of ModelNew & co. receives."""
        return isinstance(node, ast.Name) and self._self_stack[-1] is not None and node.id == self._self_stack[-1]

    def visit_Attribute(self, node: ast.Attribute) -> None:
        attr = node.attr
        on_self = self._on_self(node.value)
        if attr in ALLOWED_DUNDERS:
            pass
        elif attr.startswith("__") and attr.endswith("__"):
            self.fail(node, f"uses attribute {attr}")
        elif attr.startswith("_") and not (on_self and attr in self._own_private) \
                and not self._language_private(node):
            self.fail(node, f"uses private attribute {attr} (only attributes the class sets on self may be private)")
        elif attr in FORBIDDEN_ATTRIBUTES:
            self.fail(node, f"uses attribute {attr}")
        elif attr == "load" and not self._is_triton_language(node.value) and not (
                self._in_jit and isinstance(node.value, ast.Name) and node.value.id in self._descriptors):
            self.fail(node, f"uses {_dotted(node) or 'load'} (only tl.load may be called load)")
        if isinstance(node.value, ast.Name) and node.value.id in self._class_names:
            self.fail(node, f"uses {node.value.id}.{attr}: methods are called on the instance")
        if isinstance(node.ctx, (ast.Store, ast.Del)) and not self._chain_on_self(node):
            self.fail(node, f"assigns attribute {_dotted(node) or attr} of an object it does not own")
        self.generic_visit(node)

    def _chain_on_self(self, node: ast.AST) -> bool:
        while isinstance(node, (ast.Attribute, ast.Subscript)):
            node = node.value
        return self._on_self(node)

    def visit_Name(self, node: ast.Name) -> None:
        if isinstance(node.ctx, (ast.Store, ast.Del)) and node.id in {"self", "cls", self._self_stack[-1]}:
            self.fail(node, f"rebinds {node.id}")
        self._visit_name(node)

    def visit_Global(self, node: ast.Global) -> None:
        self.fail(node, "uses global")

    def visit_Nonlocal(self, node: ast.Nonlocal) -> None:
        self.fail(node, "uses nonlocal")

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        if node.name.startswith("__") and node.name not in ALLOWED_DUNDERS:
            self.fail(node, f"defines {node.name}")
        is_jit = any(_is_jit_decorator(d) for d in node.decorator_list)
        if is_jit:
            self.jit_functions.add(node.name)
        outer, self._in_jit = self._in_jit, self._in_jit or is_jit
        outer_descriptors = self._descriptors
        if is_jit:
            self._descriptors = self._descriptor_names(node)
        self._self_stack.append(self._self_name_for(node))
        self.generic_visit(node)
        self._self_stack.pop()
        self._in_jit, self._descriptors = outer, outer_descriptors

    def _descriptor_names(self, node: ast.FunctionDef) -> set[str]:
        """Names a jit function binds to ``tl.make_tensor_descriptor(...)`` and to
        nothing else (a parameter included): their ``.load`` is Triton's."""
        bindings: dict[str, list[bool]] = {}
        for child in ast.walk(node):
            for name in _bound_names(child):
                bindings.setdefault(name, []).append(self._makes_descriptor(child))
        return {name for name, descriptor in bindings.items() if all(descriptor)}

    def _makes_descriptor(self, node: ast.AST) -> bool:
        """``name = tl.make_tensor_descriptor(...)``."""
        return (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
                and isinstance(node.value, ast.Call) and isinstance(node.value.func, ast.Attribute)
                and node.value.func.attr == "make_tensor_descriptor"
                and self._is_triton_language(node.value.func.value))

    def visit_Lambda(self, node: ast.Lambda) -> None:
        self._self_stack.append(self._self_name_for(node))
        self.generic_visit(node)
        self._self_stack.pop()

    def _self_name_for(self, node: ast.AST) -> str | None:
        params = [a.arg for a in (*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs)]
        if node in self._methods:
            return params[0] if params else None
        inherited = self._self_stack[-1]
        return None if inherited in params else inherited

    visit_AsyncFunctionDef = visit_FunctionDef  # type: ignore[assignment]

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        if node.name == "ModelNew":
            self.has_model_new = True
        for keyword in node.keywords:
            self.fail(node, f"class {node.name} uses keyword {keyword.arg} in its bases")
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        if isinstance(node.func, ast.Subscript):
            name = _dotted(node.func.value)
            if name:
                self.launched.add(name.split(".")[-1])
        self.generic_visit(node)


def _is_jit_decorator(node: ast.AST) -> bool:
    target = node.func if isinstance(node, ast.Call) else node
    name = _dotted(target) or ""
    return name in ("triton.jit", "jit")


def screen(source: str) -> ScreenVerdict:
    """Refuse a candidate whose source breaks a rule, with the first reason.

    >>> screen("import os").status
    'forbidden'
    """
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        return ScreenVerdict(False, "compile_error", f"does not parse: line {exc.lineno}: {exc.msg}")
    visitor = _Screen()
    visitor.prepare(tree)
    visitor.visit(tree)
    if visitor.problems:
        more = f" (and {len(visitor.problems) - 1} more)" if len(visitor.problems) > 1 else ""
        return ScreenVerdict(False, "forbidden", visitor.problems[0] + more)
    if not visitor.has_model_new:
        return ScreenVerdict(False, "compile_error", "defines no class ModelNew")
    if not visitor.jit_functions:
        return ScreenVerdict(False, "forbidden", "defines no @triton.jit kernel")
    if not visitor.jit_functions & visitor.launched:
        return ScreenVerdict(False, "forbidden", "never launches a @triton.jit kernel (kernel[grid](...))")
    return ScreenVerdict(True)
