"""The arrows between kevo's packages run one way (docs/ARCHITECTURE.md).

Read from the source with ``ast``, so that imports inside functions count too:
an import hidden in a function is still an arrow, and a cycle through one is
still a cycle.
"""

from __future__ import annotations

import ast
import warnings
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("evolve", "operators", "fitness", "platforms", "population_store")
# What each package may import of kevo (DESIGN.md, "Architecture").
ALLOWED = {
    "evolve": {"evolve", "operators", "fitness", "platforms", "population_store"},
    "operators": {"operators", "platforms"},
    "fitness": {"fitness", "platforms"},
    "platforms": {"platforms"},
    "population_store": {"population_store"},
}
# Third-party packages only the composition root may import.
EVOLVE_ONLY = {"ray", "deap"}


def _modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


MODULES = _modules()


def _imports(name: str, path: Path) -> list[tuple[str, int]]:
    """(imported module, line) for every import of ``path``, at any depth."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.extend((alias.name, node.lineno) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"{path}:{node.lineno}: relative import (keep imports absolute)"
            base = node.module or ""
            out.append((base, node.lineno))
            # "from fitness.boundary import wire" imports the submodule fitness.boundary.wire
            out.extend((f"{base}.{alias.name}", node.lineno) for alias in node.names
                       if f"{base}.{alias.name}" in MODULES)
    return out


def _kevo_target(imported: str) -> str | None:
    """The kevo module an import names (the longest known prefix), or None."""
    parts = imported.split(".")
    for n in range(len(parts), 0, -1):
        candidate = ".".join(parts[:n])
        if candidate in MODULES:
            return candidate
    return None


def test_every_import_runs_down_the_diagram():
    wrong = []
    for name, path in MODULES.items():
        package = name.split(".")[0]
        for imported, line in _imports(name, path):
            top = imported.split(".")[0]
            if top in PACKAGES and top not in ALLOWED[package]:
                wrong.append(f"{path.relative_to(ROOT)}:{line} imports {imported}")
            if top in EVOLVE_ONLY and package != "evolve":
                wrong.append(f"{path.relative_to(ROOT)}:{line} imports {imported} (only evolve/ may)")
    assert not wrong, "imports against the architecture:\n" + "\n".join(wrong)


def test_no_import_cycle_between_modules_even_through_functions():
    graph: dict[str, set[str]] = {name: set() for name in MODULES}
    for name, path in MODULES.items():
        for imported, _ in _imports(name, path):
            target = _kevo_target(imported)
            if target is not None and target != name and not name.startswith(target + "."):
                graph[name].add(target)
    # A package's __init__ re-exporting its modules is not a cycle of ideas: drop the
    # edges from a package to its own submodules before looking for cycles.
    for name in graph:
        graph[name] = {t for t in graph[name] if not t.startswith(name + ".")}
    cycles = []
    state: dict[str, int] = {}

    def visit(node: str, stack: list[str]) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                cycles.append(" -> ".join(stack[stack.index(nxt):] + [nxt]))
            elif nxt not in state:
                visit(nxt, stack)
        stack.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node, [])
    assert not cycles, "import cycles:\n" + "\n".join(cycles)



#: Rooms inside evolve/ that import nothing of each other, in either direction.
APART_ROOMS = ("evolve.seeding", "evolve.models")


@pytest.mark.parametrize("room,other", [APART_ROOMS, APART_ROOMS[::-1]])
def test_seeding_and_models_rooms_do_not_import_each_other(room, other):
    """evolve/seeding/ (a problem's first kernel from Inductor) and evolve/models/ (whole
    models taken apart and put back) are two rooms that stay apart: neither imports the
    other, at any depth. What both need lives outside both (docs/ARCHITECTURE.md).
    """
    assert any(name.startswith(room + ".") for name in MODULES), f"no modules under {room}"
    wrong = []
    for name, path in MODULES.items():
        if name != room and not name.startswith(room + "."):
            continue
        for imported, line in _imports(name, path):
            target = _kevo_target(imported) or imported
            if target == other or target.startswith(other + "."):
                wrong.append(f"{path.relative_to(ROOT)}:{line} imports {imported}")
    assert not wrong, f"{room} imports {other}:\n" + "\n".join(wrong)


#: Past this many lines a module is asked (a warning) whether it holds two ideas; past HARD_LINES it fails.
ASK_LINES, HARD_LINES = 400, 500


@pytest.mark.parametrize("name", sorted(MODULES))
def test_no_product_module_passes_500_lines(name):
    lines = MODULES[name].read_text(encoding="utf-8").count("\n")
    where = MODULES[name].relative_to(ROOT)
    assert lines <= HARD_LINES, f"{where} has {lines} lines: it holds more than one idea; split it by idea"
    if lines > ASK_LINES:
        warnings.warn(f"{where} has {lines} lines: does it hold two ideas?", stacklevel=1)


# Modules outside platforms/ that name torch's device API as data, not to call it: the
# screen and the guard list what a candidate may not reach, the watch what it may not
# replace, and the seed conversion reads Inductor's code as text.
NAMES_THE_DEVICE_API = {"fitness.boundary.screen", "fitness.worker.guard", "fitness.worker.instrument",
                        "operators.seeds.code"}


def test_device_calls_go_through_platforms():
    wrong = []
    for name, path in MODULES.items():
        if name.startswith("platforms") or name in NAMES_THE_DEVICE_API:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Attribute) and node.attr in ("cuda", "hip") and isinstance(node.value, (ast.Name, ast.Attribute)):
                text = ast.unparse(node)
                if text in ("torch.cuda", "torch.version.hip", "torch.version.cuda"):
                    wrong.append(f"{path.relative_to(ROOT)}:{node.lineno} uses {text}")
    assert not wrong, "device calls outside platforms/ (ask a Platform instead):\n" + "\n".join(wrong)
