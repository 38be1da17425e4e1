"""Loading a problem in KernelBench's format, with its shape knobs overridden.

A problem file defines ``Model``, ``get_inputs()`` and ``get_init_inputs()``;
its module-level integer constants are the shape knobs (``n = 8``, ``h = w = 32``,
``D, H, W = 16, 32, 32``). An override binds one anew right after its assignment,
before any more of the module runs, so constants derived from it
(``bias_shape = (out_features,)``) follow.

Optional module-level names kevo reads: ``MAX_ABS_DIFF`` (the problem's
cutoff), ``HELD_OUT_SHAPES`` (a list of override dicts) and ``INPUT_DOMAIN``
(what the inputs mean, for the probes: ``fitness.problems.probes``).
"""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import operator
import random
import threading
import types
from pathlib import Path
from typing import Any

from fitness.problems.probes import domains_for, transform

# Constants below this are left alone when kevo derives a held-out shape on
# its own: they are usually structural (``dim = 1``, ``kernel_size = 3``).
_MIN_PERTURBED = 8


class ProblemError(ValueError):
    """The problem file or a shape override is unusable; the message says why."""


class NoRoomNow(ProblemError):
    """One evaluation of the problem fits the device, but not the memory free on it now: other work
    (another problem's evaluators, beside it in a sweep) holds the rest. Not the problem's fault."""


@dataclasses.dataclass(frozen=True)
class ShapeKnob:
    name: str
    value: int
    line: int


def _parse(path: Path, source: str | None = None) -> tuple[str, ast.Module]:
    try:
        source = path.read_text(encoding="utf-8") if source is None else source
    except OSError as exc:
        raise ProblemError(f"cannot read problem file {path}: {exc.strerror}") from None
    try:
        return source, ast.parse(source, filename=str(path))
    except SyntaxError as exc:
        raise ProblemError(f"problem file {path} does not parse: line {exc.lineno}: {exc.msg}") from None


def _bindings(node: ast.stmt) -> list[tuple[str, ast.expr]]:
    """The names an assignment binds, each with its expression: ``a = b = 32`` both to ``32``, ``D, H = 16, 32``
    (``(a, b) = [1, 2]``, nested too) each to its element, a name unpacked from anything else to the whole.

    >>> [(n, ast.unparse(v)) for n, v in _bindings(ast.parse("a = (b, [c, d]) = 1, (2 * 3, -4)").body[0])]
    [('a', '(1, (2 * 3, -4))'), ('b', '1'), ('c', '2 * 3'), ('d', '-4')]
    """
    targets = node.targets if isinstance(node, ast.Assign) else []
    return [pair for target in targets for pair in _bind(target, node.value)]


def _bind(target: ast.expr, value: ast.expr) -> list[tuple[str, ast.expr]]:
    if isinstance(target, (ast.Name, ast.Starred)):
        return [(target.id, value)] if isinstance(target, ast.Name) else _bind(target.value, value)
    if not isinstance(target, (ast.Tuple, ast.List)):
        return []  # an attribute or a subscript: no module-level name
    parts = value.elts if isinstance(value, (ast.Tuple, ast.List)) else []
    if len(parts) != len(target.elts) or any(isinstance(e, ast.Starred) for e in [*parts, *target.elts]):
        parts = [value] * len(target.elts)
    return [pair for t, v in zip(target.elts, parts) for pair in _bind(t, v)]


def _knob_assignments(tree: ast.Module) -> dict[str, tuple[ast.Assign, ast.expr]]:
    """Each module-level name an assignment binds to an integer (``_bindings``), with the assignment and
    the integer: a literal or arithmetic on literals only (KernelBench writes ``N = 2048 * 2``)."""
    return {name: (node, value) for node in tree.body for name, value in _bindings(node) if _integer(value) is not None}


_ARITHMETIC = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.FloorDiv: operator.floordiv}


def _integer(node: ast.AST) -> int | None:
    """The integer an expression of integer literals, ``+ - * //`` and a leading ``-`` gives, else None.

    >>> [_integer(ast.parse(e, mode="eval").body) for e in ("2048 * 2", "-3 + 10 // 4", "4.0", "n * 2", "2 ** 3")]
    [4096, -1, None, None, None]
    """
    if isinstance(node, ast.Constant):
        return node.value if type(node.value) is int else None
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        value = _integer(node.operand)
        return None if value is None else -value
    if isinstance(node, ast.BinOp) and type(node.op) in _ARITHMETIC:
        left, right = _integer(node.left), _integer(node.right)
        if left is None or right is None or (isinstance(node.op, ast.FloorDiv) and right == 0):
            return None
        return _ARITHMETIC[type(node.op)](left, right)
    return None


def shape_knobs(path: str | Path) -> list[ShapeKnob]:
    """The module-level integer constants of a problem file (literals or arithmetic on literals), in file order."""
    _, tree = _parse(Path(path))
    return [ShapeKnob(name, _integer(value), node.lineno) for name, (node, value) in _knob_assignments(tree).items()]


def _bound(tree: ast.Module, name: str) -> ast.expr | None:
    """What the first module-level assignment to ``name`` binds it to (``_bindings``), or None."""
    return next((value for node in tree.body for bound, value in _bindings(node) if bound == name), None)


def _literal(tree: ast.Module, name: str) -> Any:
    value = _bound(tree, name)
    if value is None:
        return None
    try:
        return ast.literal_eval(value)
    except ValueError:
        raise ProblemError(f"{name} must be a literal in the problem file") from None


@dataclasses.dataclass
class Problem:
    """A problem module built for one set of shape overrides."""

    path: Path
    shapes: dict[str, int]
    module: types.ModuleType
    dtype: str | None = None  # floating-point inputs and parameters cast to this (None: as the file makes them)

    @property
    def Model(self) -> type:
        return self.module.Model

    def get_inputs(self) -> list[Any]:
        return list(self.module.get_inputs())

    def get_init_inputs(self) -> list[Any]:
        return list(self.module.get_init_inputs())


#: Precisions a problem can be run at (KernelBench's "precision" option does the same casts).
DTYPES = ("float32", "float16", "bfloat16")


def _computed(tree: ast.Module, name: str) -> str | None:
    """The expression a module-level ``name = ...`` that is no constant computes, as written."""
    value = _bound(tree, name)
    return None if value is None or isinstance(value, ast.Constant) else ast.unparse(value)


def load_problem(path: str | Path, shapes: dict[str, int] | None = None, dtype: str | None = None,
                 source: str | None = None) -> Problem:
    """Build the problem module at ``path`` (from its text ``source`` if given: the worker reads no problem
    file) with ``shapes`` overriding its knobs. With ``dtype``, the floating-point inputs and the model's
    floating-point parameters and buffers are cast to it (``make_inputs``, ``build_model``).

    >>> p = load_problem("problems/softmax/reference.py", {"batch_size": 4, "dim": 100})
    >>> p.module.dim
    100
    """
    path = Path(path)
    shapes = dict(shapes or {})
    if dtype is not None and dtype not in DTYPES:
        raise ProblemError(f"dtype {dtype!r}: expected one of {', '.join(DTYPES)}")
    _source, tree = _parse(path, source)
    knobs, after = _knob_assignments(tree), {}
    for name, value in shapes.items():
        if name not in knobs:
            known = ", ".join(knobs) or "none"
            computed = _computed(tree, name)
            raise ProblemError(
                f"--shape {name}: {path} has no module-level integer constant {name!r} "
                + (f"({name} = {computed} follows what it is computed from; " if computed else "(")
                + f"its shape constants: {known})"
            )
        if type(value) is not int:
            raise ProblemError(f"--shape {name}={value!r}: shape values must be integers")
        rebind = ast.Assign(targets=[ast.Name(name, ast.Store())], value=ast.Constant(value))  # a = b = 32: a alone
        after.setdefault(id(knobs[name][0]), []).append(ast.copy_location(rebind, knobs[name][0]))
    tree.body = [stmt for node in tree.body for stmt in (node, *after.get(id(node), ()))]
    ast.fix_missing_locations(tree)
    module = types.ModuleType(f"kevo_problem_{path.stem}")
    module.__file__ = str(path)
    try:
        exec(compile(tree, str(path), "exec"), module.__dict__)
    except Exception as exc:  # the problem file is user input: report, don't crash
        raise ProblemError(f"problem file {path} failed to run: {type(exc).__name__}: {exc}") from None
    for name in ("Model", "get_inputs", "get_init_inputs"):
        if not hasattr(module, name):
            raise ProblemError(f"problem file {path} does not define {name} (KernelBench format)")
    return Problem(path, shapes, module, dtype)


def declared_cutoff(path: str | Path) -> float | None:
    """The problem's own ``MAX_ABS_DIFF``, if it declares one."""
    _, tree = _parse(Path(path))
    value = _literal(tree, "MAX_ABS_DIFF")
    if value is not None and not isinstance(value, (int, float)):
        raise ProblemError(f"MAX_ABS_DIFF in {path} must be a number")
    return None if value is None else float(value)


def held_out_shapes(path: str | Path, shapes: dict[str, int] | None = None,
                    rng: random.Random | None = None, per_side: int = 3) -> list[list[dict[str, int]]]:
    """Shapes a kernel is checked on besides the ones it is bred on, in groups:
    each evaluation checks one shape of every group.

    The problem's ``HELD_OUT_SHAPES`` when it declares them (a group of one
    each). Otherwise two groups derived from the knobs: ``per_side`` smaller
    and ``per_side`` larger variants, every constant of at least 8 but the model's own
    settings (``model_knobs``) drawn with ``rng`` from roughly 65-85% (or 110-130%)
    of its value, as an odd number
    that is not a power of two, so a kernel that hard-codes its shape, its
    bounds or its grid, or forgets a mask, fails. Drawn with a secret ``rng``
    (the evaluator's), the shapes cannot be known in advance, so a kernel
    cannot special-case them either.
    """
    path = Path(path)
    _, tree = _parse(path)
    declared = _literal(tree, "HELD_OUT_SHAPES")
    if declared is not None:
        if not isinstance(declared, list) or not all(isinstance(d, dict) for d in declared):
            raise ProblemError(f"HELD_OUT_SHAPES in {path} must be a list of dicts")
        return [[d] for d in declared]
    base = {k.name: k.value for k in shape_knobs(path)}
    base.update(shapes or {})
    fixed = model_knobs(tree)
    fixed |= pinned_by_state(path, base, skip=fixed)
    knobs = {name: value for name, value in base.items() if value >= _MIN_PERTURBED and name not in fixed}
    if not knobs:
        return []
    rng = rng or random.Random(0)
    groups = []
    for grow in (False, True):
        group: list[dict[str, int]] = []
        for _ in range(per_side):
            variant = {name: draw_held_out(value, rng, grow) for name, value in knobs.items()}
            if variant not in group:
                group.append(variant)
        groups.append(group)
    return groups


def model_knobs(tree: ast.Module) -> set[str]:
    """The model's own settings: module-level names ``get_init_inputs`` reads and ``get_inputs``
    does not (directly or through module-level assignments): a pooling window, a stride, a
    padding, an output width. They build the model, not its data, and derived held-out
    shapes keep them; a size that shapes the inputs too (a normalised shape, input channels)
    still varies, so a kernel that hard-codes it is caught.

    >>> tree = ast.parse("k = 3; n = 8; m = 9; shape = (n, 2)")
    >>> tree.body += ast.parse("def get_init_inputs(): return [k, shape]").body
    >>> tree.body += ast.parse("def get_inputs(): return [m]").body
    >>> sorted(model_knobs(tree)), sorted(model_knobs(ast.parse("k = 3; n = 8")))
    (['k', 'n', 'shape'], [])
    """
    return _read_by(tree, "get_init_inputs") - _read_by(tree, "get_inputs")


def pinned_by_state(path: Path, base: dict[str, int], skip: set[str] | frozenset[str] = frozenset()) -> set[str]:
    """The knobs (of ``_MIN_PERTURBED`` or more) that shape the model's parameters or buffers: a
    layer's channel counts, a normalisation's weight. The model's weights fix them whatever the
    data (an input of other channels cannot meet the same weights), so a kernel may specialise to
    them, as torch.compile does (its convolution templates hold the weight's sizes as constants);
    held-out shapes keep them. A size that shapes the data alone (a batch, a length, a norm
    without weights) still varies.

    Found by building the model on the meta device (no memory, no compute) at the main shapes and
    with each knob doubled (but those in ``skip``, already kept); a problem whose model cannot be
    built that way pins nothing.
    """
    try:
        main = _state_shapes(path, base)
    except Exception:  # the problem file is user input; the main shapes' preparation reports it
        return set()
    pinned = set()
    for name, value in base.items():
        if value < _MIN_PERTURBED or name in skip:
            continue
        try:
            if _state_shapes(path, {**base, name: 2 * value}) != main:
                pinned.add(name)
        except Exception:  # not buildable at that size: the knob varies, as before
            continue
    return pinned


def _state_shapes(path: Path, shapes: dict[str, int]) -> dict[str, tuple[int, ...]]:
    """The shape of every parameter and buffer of the problem's model at ``shapes``, built on meta."""
    import torch

    module = load_problem(path, shapes).module
    with torch.device("meta"):
        model = module.Model(*module.get_init_inputs())
    return {name: tuple(t.shape) for name, t in model.state_dict().items()} if isinstance(model, torch.nn.Module) else {}


def _read_by(tree: ast.Module, function: str) -> set[str]:
    """The names module-level ``function`` reads, and those the module-level assignments and
    functions it reads from read, to the end."""
    assigned: dict[str, ast.AST] = {name: value for node in tree.body for name, value in _bindings(node)}
    assigned.update({node.name: node for node in tree.body if isinstance(node, ast.FunctionDef)})
    found = next((node for node in tree.body if isinstance(node, ast.FunctionDef) and node.name == function), None)
    todo = [] if found is None else [found]
    seen: set[str] = set()
    while todo:
        for name in (n.id for n in ast.walk(todo.pop()) if isinstance(n, ast.Name)):
            if name not in seen:
                seen.add(name)
                if name in assigned:
                    todo.append(assigned[name])
    return seen


def draw_held_out(value: int, rng: random.Random, grow: bool = False) -> int:
    """A nearby smaller (or larger) size, odd and not a power of two, drawn with ``rng``.

    >>> r = random.Random(1)
    >>> all(65 <= draw_held_out(100, r) <= 85 for _ in range(50))
    True
    >>> all(110 <= draw_held_out(100, r, grow=True) <= 130 for _ in range(50))
    True
    """
    lo, hi = (value + value // 10, value + value * 3 // 10) if grow else (max(3, value * 65 // 100), value * 85 // 100)
    n = rng.randint(lo, hi) | 1 if lo <= hi else 0  # odd, and so (above 1) not a power of two
    if n > hi:
        n -= 2
    if n < lo or n == value:  # too small a value for a range: the nearest odd size on that side
        return value + 1 + value % 2 if grow else max(3, value - 1 - value % 2)
    return n


# Problems draw from torch's global generator (KernelBench's get_inputs takes
# no generator): seeding and drawing must not interleave between threads, as
# they would with several evaluators in one process (the slots of a Ray actor).
_GLOBAL_RNG = threading.RLock()


def make_inputs(problem: Problem, seed: int, device: str, probe: Any = None) -> list[Any]:
    """The problem's inputs drawn from ``seed``, created on ``device``.

    Drawn on the device itself (the default device is set while
    ``get_inputs`` runs) so large inputs cost no CPU time or copy; the same
    seed gives the same inputs in every process. With ``probe`` (a
    ``fitness.problems.probes.Probe``), the floating-point inputs are then transformed
    by it, within the problem's ``INPUT_DOMAIN``.
    """
    import torch

    with _GLOBAL_RNG:
        torch.manual_seed(seed)
        with torch.device(device):
            inputs = problem.get_inputs()
    inputs = [x.to(device) if isinstance(x, torch.Tensor) and x.device != torch.device(device) else x
              for x in inputs]
    if problem.dtype is not None:
        dtype = getattr(torch, problem.dtype)
        inputs = [x.to(dtype) if isinstance(x, torch.Tensor) and x.is_floating_point() else x for x in inputs]
    if probe is not None:
        transform(inputs, probe, seed, input_domains(problem, len(inputs)))
    return inputs


def input_domains(problem: Problem, n_inputs: int) -> list[str]:
    """The domain of each input (``fitness.problems.probes``), from the problem's ``INPUT_DOMAIN``."""
    try:
        return domains_for(getattr(problem.module, "INPUT_DOMAIN", None), n_inputs)
    except ValueError as exc:
        raise ProblemError(f"problem file {problem.path}: {exc}") from None


def build_model(cls: type, problem: Problem, seed: int, device: str, around: Any = None):
    """``cls(*get_init_inputs())`` with the random generators seeded first.

    ``Model`` and ``ModelNew`` built this way hold the same weights when they
    create the same parameters in the same order (KernelBench's convention).
    ``around()`` (a context manager factory, for the worker's guard and trace)
    encloses what runs the class's own code (construction, ``.to``), not the
    seeding, which is kevo's and slow under a profile hook.
    """
    import torch

    with _GLOBAL_RNG:
        init_inputs = problem.get_init_inputs()
        torch.manual_seed(seed)
        with (around() if around is not None else contextlib.nullcontext()):
            with torch.device(device):
                model = cls(*init_inputs)
            model = model.to(device)
            return model.to(getattr(torch, problem.dtype)) if problem.dtype is not None else model
