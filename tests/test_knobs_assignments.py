"""Shape knobs written as chained (``height = width = 32``) or unpacking (``D, H, W = 16, 32, 32``)
assignments: 63 of KernelBench level 2's files write their sizes so. They are knobs like
``n = 8``: found, varied by derived held-out shapes, and overridden one name at a time."""

from __future__ import annotations

import ast
import random

import pytest

from tests.conftest import KERNELBENCH

from fitness.problems.problem import (
    ProblemError,
    declared_cutoff,
    held_out_shapes,
    load_problem,
    model_knobs,
    shape_knobs,
)

CHAINED = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size):
        super().__init__()
        self.conv = nn.Conv3d(in_channels, out_channels, kernel_size)

    def forward(self, x):
        return self.conv(x)


batch_size = 16
in_channels, out_channels = 3, 16
depth = height = width = 24
kernel_size = 3


def get_inputs():
    return [torch.rand(batch_size, in_channels, depth, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size]
"""

UNPACKED = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x, y):
        return x.sum() + y.sum()


D, H, W = 16, 32, 32
(a, b) = (1, 2)
[rows, cols] = [8 * 4, 48]
n, (p, q) = 9, (10, 11)
low, high = -9, 9
flag, scale = True, 2.0
quotient, remainder = divmod(7, 2)
first, *rest = 1, 2, 3
area = side = H * W
plane = (H, W)
MAX_ABS_DIFF = TOLERANCE = 0.25


def get_inputs():
    return [torch.rand(D, *plane), torch.rand(rows, cols)]


def get_init_inputs():
    return []
"""

UNPACKED_KNOBS = [("D", 16), ("H", 32), ("W", 32), ("a", 1), ("b", 2), ("rows", 32), ("cols", 48),
                  ("n", 9), ("p", 10), ("q", 11), ("low", -9), ("high", 9)]


@pytest.fixture
def chained(tmp_path):
    path = tmp_path / "chained.py"
    path.write_text(CHAINED)
    return path


@pytest.fixture
def unpacked(tmp_path):
    path = tmp_path / "unpacked.py"
    path.write_text(UNPACKED)
    return path


def test_chained_and_unpacked_integers_are_knobs(chained, unpacked):
    assert [(k.name, k.value) for k in shape_knobs(chained)] == [
        ("batch_size", 16), ("in_channels", 3), ("out_channels", 16),
        ("depth", 24), ("height", 24), ("width", 24), ("kernel_size", 3)]
    # bools, floats, calls, starred unpacking and computed sizes are no knobs, as with ``name = value``
    assert [(k.name, k.value) for k in shape_knobs(unpacked)] == UNPACKED_KNOBS
    line = {k.name: k.line for k in shape_knobs(unpacked)}  # each the line of its assignment
    assert UNPACKED.splitlines()[line["W"] - 1] == "D, H, W = 16, 32, 32"
    assert UNPACKED.splitlines()[line["q"] - 1] == "n, (p, q) = 9, (10, 11)"


def test_model_knobs_follow_names_bound_together():
    # out_channels and kernel_size build the model only; in_channels, bound beside out_channels,
    # shapes the input too
    assert model_knobs(ast.parse(CHAINED)) == {"out_channels", "kernel_size"}
    # what a shape computed in a chained or unpacking assignment is computed from is read through it
    tree = ast.parse("c = 8; g = 4; b = 16\nbias_shape = norm_shape = (c, 1)\ngroups, rows = g * 2, b\n"
                     "def get_init_inputs(): return [bias_shape, groups]\ndef get_inputs(): return [rows]\n")
    assert model_knobs(tree) == {"bias_shape", "c", "groups", "g"}


def test_held_out_shapes_vary_chained_and_unpacked_sizes(chained, unpacked):
    for group in held_out_shapes(chained, rng=random.Random(2)):
        assert group
        for variant in group:
            # out_channels is the model's (and its weight's), in_channels and kernel_size are below 8
            assert set(variant) == {"batch_size", "depth", "height", "width"}
            assert all(v % 2 == 1 and v != 24 for k, v in variant.items() if k != "batch_size")
    variants = [v for group in held_out_shapes(unpacked, rng=random.Random(3)) for v in group]
    # a and b are below 8, low is negative: they stay as written
    assert variants and all(set(v) == {"D", "H", "W", "rows", "cols", "n", "p", "q", "high"} for v in variants)
    # drawn one by one: H and W, bound together, need not stay equal
    assert any(v["H"] != v["W"] for v in variants)
    for v in variants:  # and every variant builds
        module = load_problem(unpacked, v).module
        assert (module.D, module.H, module.W) == (v["D"], v["H"], v["W"]) and module.plane == (v["H"], v["W"])


def test_an_override_changes_only_the_name_it_names(chained, unpacked):
    problem = load_problem(chained, {"height": 17, "batch_size": 2})
    m = problem.module
    assert (m.batch_size, m.depth, m.height, m.width) == (2, 24, 17, 24)
    (x,) = problem.get_inputs()
    assert x.shape == (2, 3, 24, 17, 24)

    problem = load_problem(chained, {"out_channels": 5, "batch_size": 1, "depth": 5, "height": 6, "width": 7})
    assert (problem.module.in_channels, problem.module.out_channels) == (3, 5)
    (x,) = problem.get_inputs()
    assert problem.Model(*problem.get_init_inputs())(x).shape == (1, 5, 3, 4, 5)

    m = load_problem(unpacked, {"W": 15, "q": 4, "a": 7}).module
    assert (m.D, m.H, m.W, m.plane, m.area) == (16, 32, 15, (32, 15), 32 * 15)
    assert (m.n, m.p, m.q, m.a, m.b) == (9, 10, 4, 7, 2)
    m = load_problem(unpacked, {"D": 9, "H": 11}).module  # two of one assignment
    assert (m.D, m.H, m.W, m.area) == (9, 11, 32, 11 * 32)
    assert load_problem(unpacked).module.W == 32  # no override, as written


def test_overrides_of_names_no_integer_is_bound_to_are_refused(unpacked):
    with pytest.raises(ProblemError, match=r"\(area = H \* W follows what it is computed from; "
                                           r"its shape constants: D, H, W, a, b, rows, cols, n, p, q, low, high\)"):
        load_problem(unpacked, {"area": 3})
    for name in ("flag", "scale", "quotient", "first", "rest", "TOLERANCE"):
        with pytest.raises(ProblemError, match=f"no module-level integer constant '{name}'"):
            load_problem(unpacked, {name: 3})
    with pytest.raises(ProblemError, match="shape values must be integers"):
        load_problem(unpacked, {"H": 3.0})


def test_declared_names_read_through_chained_assignments(unpacked):
    assert declared_cutoff(unpacked) == 0.25


def _int_literal(node: ast.expr) -> int | None:
    try:
        value = ast.literal_eval(node)
    except ValueError:
        return None
    return value if type(value) is int else None


def _chained_or_unpacked_ints(tree: ast.Module) -> dict[str, int]:
    """Names level 2 binds to int literals with ``a = b = 32`` or ``D, H, W = 16, 32, 32``,
    found here on their own (flat unpacking only, as level 2 writes it)."""
    found = {}
    for node in tree.body:
        if not isinstance(node, ast.Assign):
            continue
        for target in node.targets:
            if isinstance(target, ast.Name) and len(node.targets) > 1 and _int_literal(node.value) is not None:
                found[target.id] = _int_literal(node.value)
            elif isinstance(target, ast.Tuple) and isinstance(node.value, ast.Tuple):
                for t, v in zip(target.elts, node.value.elts):
                    if isinstance(t, ast.Name) and _int_literal(v) is not None:
                        found[t.id] = _int_literal(v)
    return found


LEVEL2 = KERNELBENCH / "level2"


@pytest.mark.skipif(not LEVEL2.is_dir(), reason=f"KernelBench's level 2 is not at {LEVEL2}")
def test_level2_sizes_bound_together_are_knobs_and_override_one_by_one():
    files = 0
    for path in sorted(LEVEL2.glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        get_inputs = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "get_inputs")
        read = {n.id for n in ast.walk(get_inputs) if isinstance(n, ast.Name)}
        together = {name: value for name, value in _chained_or_unpacked_ints(tree).items() if name in read}
        if not together:
            continue
        files += 1
        knobs = {k.name: k.value for k in shape_knobs(path)}
        assert together.items() <= knobs.items(), path.name
        name = next(iter(together))
        module = load_problem(path, {name: together[name] + 2}).module
        assert getattr(module, name) == together[name] + 2, path.name
        assert all(getattr(module, other) == value for other, value in knobs.items() if other != name), path.name
    assert files >= 60  # 63 when this was written


@pytest.mark.skipif(not LEVEL2.is_dir(), reason=f"KernelBench's level 2 is not at {LEVEL2}")
@pytest.mark.parametrize(("name", "sizes"), [
    ("49_ConvTranspose3d_Softmax_Sigmoid", {"D", "H", "W"}),  # D, H, W = 16, 32, 32
    ("10_ConvTranspose2d_MaxPool_Hardtanh_Mean_Tanh", {"height", "width"}),  # height = width = 256
])
def test_level2_held_out_shapes_vary_sizes_bound_together(name, sizes):
    variants = [v for group in held_out_shapes(LEVEL2 / f"{name}.py", rng=random.Random(4)) for v in group]
    assert variants and all(sizes <= set(v) for v in variants)
