"""Loading problems in KernelBench's format with shape overrides."""

from __future__ import annotations

import random

import pytest

from fitness.problems.problem import ProblemError, draw_held_out, held_out_shapes, load_problem, shape_knobs

LEVEL2_STYLE = """
import torch
import torch.nn as nn

batch_size = 128
in_features = 64
out_features = 8192
bias_shape = (out_features,)

class Model(nn.Module):
    def __init__(self, in_features, out_features, bias_shape):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.bias = nn.Parameter(torch.randn(bias_shape))
    def forward(self, x):
        return self.linear(x) + self.bias

def get_inputs():
    return [torch.randn(batch_size, in_features)]

def get_init_inputs():
    return [in_features, out_features, bias_shape]
"""


@pytest.fixture
def level2(tmp_path):
    path = tmp_path / "reference.py"
    path.write_text(LEVEL2_STYLE)
    return path


def test_override_takes_effect_before_derived_constants(level2):
    problem = load_problem(level2, {"out_features": 5, "batch_size": 3})
    assert problem.module.bias_shape == (5,)
    model = problem.Model(*problem.get_init_inputs())
    (x,) = problem.get_inputs()
    assert model(x).shape == (3, 5)


def test_knobs_are_the_module_level_integers(level2):
    assert [k.name for k in shape_knobs(level2)] == ["batch_size", "in_features", "out_features"]


def test_unknown_override_names_the_knobs(level2):
    with pytest.raises(ProblemError, match="batch_size, in_features, out_features"):
        load_problem(level2, {"batch": 3})


def test_a_computed_constant_is_named_with_what_it_follows(level2):
    with pytest.raises(ProblemError, match=r"\(bias_shape = \(out_features,\) follows what it is computed from; "
                                           r"its shape constants: batch_size, in_features, out_features\)"):
        load_problem(level2, {"bias_shape": 3})


def test_missing_and_broken_files_are_problem_errors(tmp_path):
    with pytest.raises(ProblemError, match="cannot read"):
        load_problem(tmp_path / "nope.py")
    bad = tmp_path / "bad.py"
    bad.write_text("def (:\n")
    with pytest.raises(ProblemError, match="does not parse"):
        load_problem(bad)
    incomplete = tmp_path / "incomplete.py"
    incomplete.write_text("x = 1\n")
    with pytest.raises(ProblemError, match="does not define Model"):
        load_problem(incomplete)


def test_derived_held_out_shapes_are_drawn_odd_and_nearby_and_skip_structural_constants(level2):
    # in_features and out_features give the linear layer's weight its shape: the model's, they stay
    # (and out_features shapes no input); the batch is the data's and varies
    base = {"batch_size": 16}
    smaller, larger = held_out_shapes(level2, {"batch_size": 16}, rng=random.Random(5))
    assert 1 <= len(smaller) <= 3 and 1 <= len(larger) <= 3
    for variant in smaller + larger:
        assert set(variant) == set(base)  # structural constants (below 8) stay as written
        assert all(value % 2 == 1 for value in variant.values())
    for variant in smaller:
        assert all(0.65 * base[k] - 1 <= v < base[k] * 0.85 + 1 for k, v in variant.items())
    for variant in larger:
        assert all(1.1 * base[k] - 1 <= v <= base[k] * 1.3 + 1 for k, v in variant.items())
    # another draw, other shapes: a kernel cannot know them in advance
    assert held_out_shapes(level2, {"batch_size": 16}, rng=random.Random(6)) != [smaller, larger]
    for value in (8, 9, 16, 100, 1024, 65536):
        for seed in range(20):
            rng = random.Random(seed)
            assert 3 <= draw_held_out(value, rng) < value and draw_held_out(value, rng) % 2 == 1
            assert draw_held_out(value, rng, grow=True) > value and draw_held_out(value, rng, grow=True) % 2 == 1


def test_declared_held_out_shapes_win(tmp_path):
    path = tmp_path / "reference.py"
    path.write_text(LEVEL2_STYLE + "\nHELD_OUT_SHAPES = [{'batch_size': 7}]\n")
    assert held_out_shapes(path) == [[{"batch_size": 7}]]


def test_a_knob_written_as_arithmetic_is_a_knob(tmp_path):
    # KernelBench writes sizes as N = 2048 * 2: an override takes, and held-out shapes vary it
    path = tmp_path / "square.py"
    path.write_text("import torch\nimport torch.nn as nn\n\n\nclass Model(nn.Module):\n"
                    "    def forward(self, a, b):\n        return a @ b\n\n\nN = 2048 * 2\nLAYERS = 4 - 1\n\n\n"
                    "def get_inputs():\n    return [torch.rand(N, N), torch.rand(N, N)]\n\n\n"
                    "def get_init_inputs():\n    return []\n")
    assert [(k.name, k.value) for k in shape_knobs(path)] == [("N", 4096), ("LAYERS", 3)]
    assert load_problem(path, {"N": 12}).module.N == 12
    variants = [v for group in held_out_shapes(path, rng=random.Random(1)) for v in group]
    assert variants and all(set(v) == {"N"} and v["N"] % 2 == 1 for v in variants)
