"""The arrows between kevo's packages run one way (docs/ARCHITECTURE.md).

Read from the source with ``ast``, so that imports inside functions count too:
an import hidden in a function is still an arrow, and a cycle through one is
still a cycle.

Inside fitness/, the rooms along the sandbox line import each other only this
way (``FITNESS_ROOMS``):

- ``fitness.problems`` (a problem loaded, its inputs) imports no other room;
- ``fitness.boundary`` (the screen, the worker process and its confinement, the
  protocol, the wire) imports only ``fitness.problems``: never the worker, the
  judge or profiling;
- ``fitness.worker`` (what runs beside untrusted code) imports the boundary and
  the problems: never the judge or profiling;
- ``fitness.profiling`` imports the boundary and the problems: never the worker
  or the judge;
- ``fitness.judge`` imports the boundary, the problems and profiling: never the
  worker.

Every room may import fitness's shared modules at its top (``FITNESS_SHARED``:
result, settings, refusal), which import no room; no room imports the package
``fitness`` itself (its public names load the judge). A fresh
``python -m fitness.worker`` holds exactly the modules ``WORKER_PROCESS`` names.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
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


#: fitness/'s rooms, and the rooms each may import besides itself and FITNESS_SHARED.
FITNESS_ROOMS = {
    "fitness.problems": set(),
    "fitness.boundary": {"fitness.problems"},
    "fitness.worker": {"fitness.boundary", "fitness.problems"},
    "fitness.profiling": {"fitness.boundary", "fitness.problems"},
    "fitness.judge": {"fitness.boundary", "fitness.problems", "fitness.profiling"},
}
#: The modules at fitness/'s top that every room speaks; they import no room.
FITNESS_SHARED = {"fitness.result", "fitness.settings", "fitness.refusal"}


def _fitness_room(name: str) -> str | None:
    """The room module ``name`` lives in, or None for the package and its shared modules."""
    return next((room for room in FITNESS_ROOMS if name == room or name.startswith(room + ".")), None)


def test_every_fitness_module_lives_in_a_room_or_is_shared():
    loose = [name for name in MODULES if name.startswith("fitness.")
             and _fitness_room(name) is None and name not in FITNESS_SHARED]
    assert not loose, f"modules of fitness/ in no room (put each in one, docs/ARCHITECTURE.md): {loose}"


def test_rooms_of_fitness_import_only_what_their_rules_allow():
    wrong = []
    for name, path in MODULES.items():
        if not name.startswith("fitness."):
            continue
        room = _fitness_room(name)
        allowed = {room, *FITNESS_ROOMS[room]} if room else set()
        for imported, line in _imports(name, path):
            target = _kevo_target(imported)
            if target is None or not (target == "fitness" or target.startswith("fitness.")):
                continue
            if target == "fitness":
                wrong.append(f"{path.relative_to(ROOT)}:{line} imports the package fitness (import the module itself)")
            elif target in FITNESS_SHARED:
                continue
            elif _fitness_room(target) not in allowed:
                what = f"the room {room}" if room else "a shared module"
                wrong.append(f"{path.relative_to(ROOT)}:{line} imports {target}: {what} may not")
    assert not wrong, "imports against fitness/'s rooms:\n" + "\n".join(wrong)


@pytest.mark.parametrize("room", sorted(FITNESS_ROOMS))
def test_a_room_of_fitness_imports_nothing_when_entered(room):
    """A room's __init__ holds its docstring, not imports: importing one module of a room
    loads no other."""
    tree = ast.parse(MODULES[room].read_text(encoding="utf-8"))
    assert ast.get_docstring(tree), f"{room} says in a docstring what it holds and whom it may import"
    assert not any(isinstance(node, (ast.Import, ast.ImportFrom)) for node in ast.walk(tree)), room


#: Every module of kevo that a fresh ``python -m fitness.worker`` holds: the worker room,
#: and what it must have of the boundary, the problems and the shared modules. A new
#: import into the worker shows here first; nothing of fitness.judge or fitness.profiling
#: may ever join.
WORKER_PROCESS = {
    "fitness",  # the package: its public names load lazily, and none is asked for here
    "fitness.worker", "fitness.worker.__main__", "fitness.worker.harness", "fitness.worker.load_step",
    "fitness.worker.timed_step", "fitness.worker.loan", "fitness.worker.guard", "fitness.worker.compile_watch",
    "fitness.worker.instrument", "fitness.worker.trace",
    # the boundary: the messages it reads and writes, the wire, the screen's lists (the
    # guard's), and what the OS put in force (confine.in_force)
    "fitness.boundary", "fitness.boundary.protocol", "fitness.boundary.messages", "fitness.boundary.wire",
    "fitness.boundary.screen", "fitness.boundary.confine",
    # the problem it builds the candidate for and draws inputs of, probes included
    "fitness.problems", "fitness.problems.problem", "fitness.problems.probes",
    "fitness.result", "fitness.settings", "fitness.refusal",
}


def test_a_fresh_worker_process_holds_only_the_worker_room_and_what_it_must():
    """What ``python -m fitness.worker`` imports before its ``main`` runs a step, in a new
    interpreter: its ``__main__`` imported under its own name (the ``__name__`` check keeps
    ``main`` from running), with the worker's own ``PYTHONPATH`` (fitness.boundary.sandbox)."""
    script = ("import json, sys\n"
              "import fitness.worker.__main__\n"
              "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in %r)))" % (PACKAGES,))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    loaded = set(json.loads(done.stdout))
    fitness_loaded = {m for m in loaded if m.split(".")[0] == "fitness"}
    assert fitness_loaded == WORKER_PROCESS, (
        f"the worker process holds {sorted(fitness_loaded - WORKER_PROCESS)} it should not, "
        f"lacks {sorted(WORKER_PROCESS - fitness_loaded)}")
    others = {m.split(".")[0] for m in loaded} - {"fitness", "platforms"}
    assert not others, f"the worker process imports {sorted(others)} of kevo"


def test_every_import_of_the_worker_room_at_any_depth_stays_in_the_worker_process():
    """The imports inside the worker's functions too (``ast``): what the process may load
    later, running a step, is still only what ``WORKER_PROCESS`` names."""
    seen, todo = set(), [name for name in MODULES if name.startswith("fitness.worker")]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        for imported, _ in _imports(name, MODULES[name]):
            target = _kevo_target(imported)
            if target is not None and target.split(".")[0] == "fitness":
                todo.append(target)
    # fitness.worker.__main__ is a module like any other here
    assert seen <= WORKER_PROCESS, f"the worker room reaches {sorted(seen - WORKER_PROCESS)}"
