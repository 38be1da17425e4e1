"""A derived cutoff never lies below what a sum in another order rounds to (fitness.judge.cutoff).

KernelBench's 4_Matrix_vector_multiplication_ multiplies draws of [0, 1) over
2^20 terms: its outputs sit near 262144, where one fp32 ulp is 0.03, and on
the H200 every seed torch.compile wrote for it was judged wrong against 1e-2
(max |diff| 51.6 and 6.25: nothing but the order of the sum).
"""

import textwrap

import pytest
import torch

from fitness.judge.cutoff import derived_cutoff
from fitness.judge.floor import reduction_terms
from fitness.problems.problem import load_problem

from tests.conftest import PROBLEMS

SEED = (PROBLEMS / "matvec" / "seed.py").read_text()


def test_a_long_sum_of_large_outputs_widens_the_cutoff_to_its_rounding():
    refs = [torch.full((4, 1), 262144.0)]
    cutoff, rule = derived_cutoff(refs, 262144.0, terms=2**20)
    assert cutoff == pytest.approx(4 * torch.finfo(torch.float32).eps * 262144 * 1024)
    assert 100 < cutoff < 200 and "sqrt" in rule


def test_small_or_short_outputs_keep_kernelbenchs_cutoff():
    refs = [torch.ones(8)]
    assert derived_cutoff(refs, 3.0, terms=1)[0] == 1e-2  # elementwise
    assert derived_cutoff(refs, 90.0, terms=8192)[0] == 1e-2  # problems/matvec's randn outputs
    assert derived_cutoff(refs, 1e-3, terms=4096)[0] == pytest.approx(1e-5)  # small outputs: scaled down


def test_the_rounding_floor_never_passes_kernelbenchs_own_relative_tolerance():
    cutoff, _ = derived_cutoff([torch.ones(8)], 1000.0, terms=1e16)
    assert cutoff == pytest.approx(1e-2 * 1000.0)


def test_half_outputs_are_summed_in_fp32():
    bf16 = [torch.ones(8, dtype=torch.bfloat16)]
    wide, rule = derived_cutoff(bf16, 65536.0, terms=2**20)
    assert wide == pytest.approx(4 * torch.finfo(torch.float32).eps * 65536 * 1024)


def test_reduction_terms_are_the_dot_products_length():
    problem = load_problem("problems/matmul/reference.py", {"M": 8, "K": 48, "N": 16})
    assert reduction_terms(problem, "cpu", 8 * 16) == 48.0
    relu = load_problem("problems/elementwise/reference.py", {"batch_size": 4, "dim": 64})
    assert reduction_terms(relu, "cpu", 4 * 64) == 1.0


PROBLEM = textwrap.dedent("""
    import torch
    import torch.nn as nn

    class Model(nn.Module):
        def forward(self, A, B):
            return torch.matmul(A, B)

    M = 4
    K = 262144

    def get_inputs():
        return [torch.rand(M, K), torch.rand(K, 1)]

    def get_init_inputs():
        return []
""")


def test_an_honest_matvec_over_large_sums_is_accepted_and_one_that_skips_a_block_is_not(tmp_path):
    from fitness import Evaluator, Status

    reference = tmp_path / "matvec_rand.py"
    reference.write_text(PROBLEM)
    with Evaluator(reference, platform="cpu") as evaluator:
        assert 8 < evaluator.cutoff < 32 and "sqrt" in evaluator.cutoff_rule
        honest = evaluator.evaluate(SEED)
        skips = evaluator.evaluate(SEED.replace("for k in range(0, K, BLOCK_K):",
                                                "for k in range(0, K - BLOCK_K, BLOCK_K):"))
    assert honest.status is Status.ACCEPTED, honest.reason
    assert honest.max_abs_diff > 1e-2  # what KernelBench's 1e-2 alone would have refused
    assert skips.status is Status.WRONG, skips.reason  # 256 of 262144 terms dropped: ~56 off


SCAN = textwrap.dedent("""
    import torch
    import torch.nn as nn

    class Model(nn.Module):
        def __init__(self, dim):
            super().__init__()
            self.dim = dim

        def forward(self, x):
            return torch.cumsum(x, dim=self.dim)

    batch_size = 4
    length = 3000

    def get_inputs():
        return [torch.rand(batch_size, length)]

    def get_init_inputs():
        return [1]
""")


def test_a_running_sum_counts_its_rows_length_as_its_terms(tmp_path):
    # One add an output: its FLOPs say 1 term, but the row's last output sums all 3000
    # (KernelBench's 89_cumsum: 32768, and its torch.compile seed was 0.07 off against 1e-2).
    reference = tmp_path / "scan.py"
    reference.write_text(SCAN)
    assert reduction_terms(load_problem(reference), "cpu", 4 * 3000) == 3000.0
    reference.write_text(SCAN.replace("return [1]", "return [0]"))
    assert reduction_terms(load_problem(reference), "cpu", 4 * 3000) == 4.0
