"""Every suite problem's seed is accepted, on shapes it was not written for."""

from __future__ import annotations

import pytest

from tests.conftest import PROBLEMS, SMALL_SHAPES

from fitness import Status, screen
from fitness.problems.problem import declared_cutoff


@pytest.mark.parametrize("problem", sorted(SMALL_SHAPES))
def test_seed_is_accepted(evaluators, problem):
    evaluator = evaluators.get(problem)
    assert evaluator.held_out, "a held-out shape variant is checked too"
    result = evaluator.evaluate((PROBLEMS / problem / "seed.py").read_text())
    assert result.status is Status.ACCEPTED, result.reason
    assert result.max_abs_diff <= evaluator.cutoff
    assert result.runtime_ms > 0 and result.reference_ms > 0
    # fixed and fresh inputs on two shape variants, plus checked timed runs
    assert result.checks >= 2 * 3 + 1


@pytest.mark.parametrize("problem", sorted(SMALL_SHAPES))
def test_suite_problem_declares_a_cutoff_and_passes_the_screen(problem):
    assert declared_cutoff(PROBLEMS / problem / "reference.py") is not None
    assert screen((PROBLEMS / problem / "seed.py").read_text()).ok


def test_suite_covers_every_problem_folder():
    folders = {p.name for p in PROBLEMS.iterdir() if (p / "reference.py").exists()}
    assert folders == set(SMALL_SHAPES)
