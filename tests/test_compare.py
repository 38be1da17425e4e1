"""NaN-safe comparison and the check that refuses a cutoff trivial outputs pass."""

from __future__ import annotations

import math

import pytest
import torch

from fitness.compare import CutoffError, check_cutoff, compare


def test_within_and_beyond_cutoff():
    ref = torch.tensor([1.0, 2.0, 3.0])
    assert compare([ref + 1e-4], [ref], 1e-3).status == "accepted"
    result = compare([ref + 1e-2], [ref], 1e-3)
    assert result.status == "wrong" and result.max_abs_diff == pytest.approx(1e-2, rel=1e-3)


def test_nan_where_reference_is_finite_is_never_close():
    ref = torch.tensor([1.0, 2.0])
    out = torch.tensor([1.0, float("nan")])
    result = compare([out], [ref], 1e9)
    assert result.status == "nan" and math.isinf(result.max_abs_diff)
    assert compare([torch.tensor([1.0, float("inf")])], [ref], 1e9).status == "nan"


def test_nan_in_reference_must_be_matched():
    ref = torch.tensor([1.0, float("nan"), float("-inf")])
    assert compare([ref.clone()], [ref], 1e-6).status == "accepted"
    assert compare([torch.tensor([1.0, 0.0, float("-inf")])], [ref], 1e9).status == "wrong"
    assert compare([torch.tensor([1.0, float("nan"), float("inf")])], [ref], 1e9).status == "wrong"


def test_shape_dtype_and_count_mismatches():
    ref = torch.zeros(2, 3)
    assert "shape" in compare([torch.zeros(3, 2)], [ref], 1.0).reason
    assert "dtype" in compare([torch.zeros(2, 3, dtype=torch.float64)], [ref], 1.0).reason
    assert compare([ref, ref], [ref], 1.0).status == "wrong"


def test_cutoff_that_zeros_pass_is_refused_with_the_output_scale():
    torch.manual_seed(0)
    x = torch.randn(4, 16384)
    ref = torch.softmax(x, dim=1)
    with pytest.raises(CutoffError, match=r"max \|ref\| = .*zeros"):
        check_cutoff([ref], [x], 1e-2)
    check_cutoff([ref], [x], 1e-6)


def test_cutoff_that_a_constant_or_the_input_passes_is_refused():
    ref = torch.full((64,), 5.0) + 1e-4 * torch.randn(64)
    with pytest.raises(CutoffError, match="constant"):
        check_cutoff([ref], [], 1e-2)
    x = torch.randn(64)
    with pytest.raises(CutoffError, match="input 0"):
        check_cutoff([x + 1e-5], [x], 1e-3)


def test_cutoff_must_be_positive():
    with pytest.raises(CutoffError):
        check_cutoff([torch.ones(3)], [], 0.0)
