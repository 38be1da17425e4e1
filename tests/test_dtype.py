"""Running a problem at another precision (``problem.dtype``, ``verify --dtype``), on the CPU."""

from __future__ import annotations

import pytest

from tests.conftest import PROBLEMS, SMALL_SHAPES

from evolve.config import ConfigError, config_from_dict
from fitness import Evaluator, ProblemError, Status
from fitness.problems.problem import build_model, load_problem, make_inputs

SEED = (PROBLEMS / "softmax" / "seed.py").read_text()
# The seed, refusing to run on anything but half-precision inputs.
FP16_ONLY = SEED.replace("        n_rows, n_cols = x.shape\n",
                         "        n_rows, n_cols = x.shape\n"
                         "        if x.dtype != torch.float16:\n"
                         "            raise ValueError(f'expected float16 inputs, got {x.dtype}')\n", 1)


def test_inputs_and_weights_are_cast():
    import torch

    problem = load_problem(PROBLEMS / "rmsnorm" / "reference.py", SMALL_SHAPES["rmsnorm"], "bfloat16")
    (x,) = make_inputs(problem, 1, "cpu")
    model = build_model(problem.Model, problem, 42, "cpu")
    assert x.dtype is torch.bfloat16
    assert all(p.dtype is torch.bfloat16 for p in model.parameters())
    as_written = load_problem(PROBLEMS / "rmsnorm" / "reference.py", SMALL_SHAPES["rmsnorm"])
    assert make_inputs(as_written, 1, "cpu")[0].dtype is torch.float32


def test_the_candidate_runs_at_the_problems_precision():
    assert FP16_ONLY != SEED
    with Evaluator(PROBLEMS / "softmax" / "reference.py", platform="cpu", shapes=SMALL_SHAPES["softmax"],
                   max_abs_diff=1e-2, held_out=[], dtype="float16") as evaluator:
        result = evaluator.evaluate(FP16_ONLY)
    assert result.status is Status.ACCEPTED, result.reason
    with Evaluator(PROBLEMS / "softmax" / "reference.py", platform="cpu", shapes=SMALL_SHAPES["softmax"],
                   held_out=[]) as evaluator:
        result = evaluator.evaluate(FP16_ONLY)
    assert result.status is Status.RUNTIME_ERROR and "expected float16" in result.reason, result


def test_an_unknown_dtype_is_a_clear_error():
    with pytest.raises(ProblemError, match="float64.*float32, float16, bfloat16"):
        load_problem(PROBLEMS / "softmax" / "reference.py", {}, "float64")
    data = {"problem": {"reference": "r.py", "seeds": ["s.py"], "dtype": "fp8"}}
    with pytest.raises(ConfigError, match="problem.dtype"):
        config_from_dict(data, origin="test.yaml")
