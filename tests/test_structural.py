"""Structural tunables: the named choices a kernel's text makes (operators.structural).

A dot's input precision, a load's eviction policy and cache modifier, a GEMM's
swizzle group: found where a kernel writes them, left alone where it does not,
mutated only to the choices ``operators.space`` declares, and written back so
the child parses and reads back the same.
"""

from __future__ import annotations

import ast
import random

import pytest

from operators import (
    KIND_RULES,
    Kind,
    SpaceError,
    apply_params,
    crossover,
    find_tunables,
    mutate,
    params_of,
    resolve_space,
)
from tests.conftest import PROBLEMS

GEMM = '''\
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def gemm_kernel(a_ptr, b_ptr, c_ptr, M, N, K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    GROUP_M: tl.constexpr = 8
    ALLOW_TF32: tl.constexpr = True
    pid = tl.program_id(0)
    grid_m = tl.cdiv(M, BLOCK_M)
    grid_n = tl.cdiv(N, BLOCK_N)
    width = GROUP_M * grid_n
    group_id = pid // width
    group_size = min(grid_m - group_id * GROUP_M, GROUP_M)
    pid_m = group_id * GROUP_M + pid % group_size
    pid_n = pid % width // group_size
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, K, BLOCK_K):
        a = tl.load(a_ptr + rm[:, None] * K + (k + rk)[None, :],
                    mask=(rm[:, None] < M) & ((k + rk)[None, :] < K), other=0.0, eviction_policy="evict_last")
        b = tl.load(b_ptr + (k + rk)[:, None] * N + rn[None, :],
                    mask=((k + rk)[:, None] < K) & (rn[None, :] < N), other=0.0, cache_modifier='.cg')
        acc = tl.dot(a, b, acc, input_precision="ieee")
        acc += tl.dot(a, b, allow_tf32=False) * 0.0  # more dots to tune, times zero
        acc += tl.dot(a, b, allow_tf32=ALLOW_TF32) * 0.0
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc, mask=(rm[:, None] < M) & (rn[None, :] < N))


class ModelNew(nn.Module):
    def forward(self, A, B):
        M, K = A.shape
        N = B.shape[1]
        C = torch.empty((M, N), dtype=A.dtype, device=A.device)
        grid = lambda meta: (triton.cdiv(M, meta["BLOCK_M"]) * triton.cdiv(N, meta["BLOCK_N"]),)
        gemm_kernel[grid](A, B, C, M, N, K, BLOCK_M=16, BLOCK_N=16, BLOCK_K=16, num_warps=4)
        return C
'''

STRUCTURAL = {
    "gemm_kernel.GROUP_M": (8, Kind.GROUP),
    "gemm_kernel.load[0].eviction_policy": ("evict_last", Kind.EVICTION_POLICY),
    "gemm_kernel.load[1].cache_modifier": (".cg", Kind.CACHE_MODIFIER),
    "gemm_kernel.dot[0].input_precision": ("ieee", Kind.INPUT_PRECISION),
    "gemm_kernel.dot[1].input_precision": ("ieee", Kind.INPUT_PRECISION),  # allow_tf32=False
    "gemm_kernel.dot[2].input_precision": ("tf32", Kind.INPUT_PRECISION),  # allow_tf32=ALLOW_TF32, fixed True
}
NUMBERS = {"gemm_kernel.BLOCK_M": 16, "gemm_kernel.BLOCK_N": 16, "gemm_kernel.BLOCK_K": 16, "gemm_kernel.num_warps": 4}


def structural_only(source: str) -> dict[str, list]:
    """A space that pins every number, so a mutation can only change a structural choice."""
    return {name: [value] for name, value in params_of(source).items() if isinstance(value, int)
            and name not in STRUCTURAL}


def test_the_choices_a_kernel_writes_are_found_with_their_kind_and_value():
    found = {t.name: (t.value, t.kind) for t in find_tunables(GEMM)}
    assert {n: found[n] for n in STRUCTURAL} == STRUCTURAL
    assert {n: v for n, (v, _) in found.items() if n not in STRUCTURAL} == NUMBERS
    names = [t.name for t in find_tunables(GEMM)]
    assert names.index("gemm_kernel.GROUP_M") < names.index("gemm_kernel.load[0].eviction_policy")  # source order


def test_what_a_kernel_does_not_write_is_not_a_tunable():
    absent = (GEMM.replace(', eviction_policy="evict_last"', "").replace(", cache_modifier='.cg'", "")
              .replace(', input_precision="ieee"', "").replace("allow_tf32=False", "out_dtype=tl.float32")
              .replace("    GROUP_M: tl.constexpr = 8\n", "").replace("GROUP_M", "8"))
    ast.parse(absent)
    assert {t.kind for t in find_tunables(absent)} == {Kind.BLOCK, Kind.NUM_WARPS, Kind.INPUT_PRECISION}
    assert [t.name for t in find_tunables(absent) if t.kind is Kind.INPUT_PRECISION] == \
        ["gemm_kernel.dot[2].input_precision"]  # only the allow_tf32= one is left
    # a keyword that holds a name, and a flag the launch passes in, are not the kernel's to change
    passed = (GEMM.replace('eviction_policy="evict_last"', "eviction_policy=POLICY")
              .replace("BLOCK_K: tl.constexpr):", "BLOCK_K: tl.constexpr, POLICY: tl.constexpr, ALLOW: tl.constexpr):")
              .replace("allow_tf32=ALLOW_TF32", "allow_tf32=ALLOW"))
    names = {t.name for t in find_tunables(passed)}
    assert "gemm_kernel.load[0].eviction_policy" not in names and "gemm_kernel.dot[2].input_precision" not in names
    assert "gemm_kernel.dot[0].input_precision" in names
    # a name bound twice is not a fixed value
    twice = GEMM.replace("    ALLOW_TF32: tl.constexpr = True\n", "    ALLOW_TF32 = True\n    ALLOW_TF32 = False\n")
    assert "gemm_kernel.dot[2].input_precision" not in {t.name for t in find_tunables(twice)}


def test_the_suite_matmul_seed_exposes_its_dot_precision():
    seed = (PROBLEMS / "matmul" / "seed.py").read_text()
    assert params_of(seed)["matmul_kernel.dot[0].input_precision"] == "ieee"
    assert resolve_space(seed)["matmul_kernel.dot[0].input_precision"] == ("ieee", "tf32", "tf32x3")


@pytest.mark.parametrize("seed", range(12))
def test_a_mutation_sets_a_structural_choice_to_a_legal_value_and_the_child_parses(seed):
    child = mutate(GEMM, random.Random(seed), structural_only(GEMM), n_changes=3)
    assert child is not None
    ast.parse(child.source)
    assert params_of(child.source) == child.params
    changed = {n for n in child.params if child.params[n] != params_of(GEMM)[n]}
    assert changed and changed <= set(STRUCTURAL)
    for name in changed:
        kind = STRUCTURAL[name][1]
        assert child.params[name] in KIND_RULES[kind].legal
    assert child.source.count("\n") == GEMM.count("\n")  # a value changed in place, nothing else


def test_apply_params_round_trips_each_choice():
    for name, (value, kind) in STRUCTURAL.items():
        for choice in KIND_RULES[kind].default:
            child = apply_params(GEMM, {name: choice})
            assert params_of(child)[name] == choice
            assert {n: v for n, v in params_of(child).items() if n != name} == \
                {n: v for n, v in params_of(GEMM).items() if n != name}
            back = apply_params(child, {name: value})
            assert params_of(back) == params_of(GEMM)
            if name not in ("gemm_kernel.dot[1].input_precision", "gemm_kernel.dot[2].input_precision"):
                assert back == GEMM  # a literal is rewritten in place
    # allow_tf32= is replaced by the keyword that says the same, once a value is set
    exact = apply_params(GEMM, {"gemm_kernel.dot[1].input_precision": "tf32x3"})
    assert 'acc += tl.dot(a, b, input_precision="tf32x3") * 0.0' in exact and "allow_tf32=False" not in exact


def test_a_new_value_keeps_the_literal_s_quotes():
    child = apply_params(GEMM, {"gemm_kernel.load[0].eviction_policy": "evict_first",
                                "gemm_kernel.load[1].cache_modifier": ".ca"})
    assert 'eviction_policy="evict_first"' in child and "cache_modifier='.ca'" in child
    assert apply_params(GEMM, {"gemm_kernel.load[0].eviction_policy": ""}).count('eviction_policy=""') == 1


def test_a_choice_takes_a_string_and_a_number_takes_an_int():
    with pytest.raises(TypeError, match="must be set to a str"):
        apply_params(GEMM, {"gemm_kernel.dot[0].input_precision": 1})
    with pytest.raises(TypeError, match="must be set to an int"):
        apply_params(GEMM, {"gemm_kernel.BLOCK_M": "16"})


@pytest.mark.parametrize(("declared", "message"), [
    ({"gemm_kernel.load[0].eviction_policy": ["evict_normal"]}, "not legal for a eviction_policy"),
    ({"gemm_kernel.dot[0].input_precision": ["ieee", 3]}, "all ints"),
    ({"gemm_kernel.GROUP_M": [0]}, "not legal for a group"),
])
def test_a_declared_space_for_a_choice_is_checked(declared, message):
    with pytest.raises(SpaceError, match=message):
        mutate(GEMM, random.Random(0), declared)


def test_a_space_in_the_file_can_pin_a_choice():
    declared = GEMM.replace("\n\n@triton.jit", "\n\nKEVO_SPACE = {'gemm_kernel.dot[0].input_precision': "
                            "['ieee', 'tf32x3']}\n\n\n@triton.jit", 1)
    values = {mutate(declared, random.Random(s), structural_only(declared)).params["gemm_kernel.dot[0].input_precision"]
              for s in range(40)}
    assert values == {"ieee", "tf32x3"}


def test_parents_that_differ_in_choices_and_numbers_cross():
    a = apply_params(GEMM, {"gemm_kernel.dot[1].input_precision": "tf32x3", "gemm_kernel.BLOCK_M": 32})
    b = apply_params(GEMM, {"gemm_kernel.load[0].eviction_policy": "", "gemm_kernel.num_warps": 8})
    children = [crossover(a, b, random.Random(s)) for s in range(20)]
    assert all(c is not None for c in children)  # allow_tf32=False and input_precision="..." are one structure
    for child in children:
        ast.parse(child.source)
        assert params_of(child.source) == child.params
    assert {c.params["gemm_kernel.dot[1].input_precision"] for c in children} == {"ieee", "tf32x3"}


def test_a_group_a_launch_passes_is_a_group_not_a_block():
    source = GEMM.replace("    GROUP_M: tl.constexpr = 8\n", "").replace(
        "BLOCK_K: tl.constexpr):", "BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):").replace(
        "BLOCK_K=16, num_warps=4", "BLOCK_K=16, GROUP_M=6, num_warps=4")
    (group,) = [t for t in find_tunables(source) if t.name == "gemm_kernel.GROUP_M"]
    assert (group.kind, group.value) == (Kind.GROUP, 6)  # not a power of two, and still a group
    assert resolve_space(source)["gemm_kernel.GROUP_M"] == (1, 2, 4, 6, 8, 16, 32)


def test_mutated_choices_still_compute_the_right_answer(evaluators):
    """Each choice the space offers for the suite's matmul seed, run in Triton's interpreter."""
    seed = (PROBLEMS / "matmul" / "seed.py").read_text()
    evaluator = evaluators.get("matmul")
    for precision in ("tf32x3",):  # tf32 may miss the cutoff on a GPU: that child is judged wrong, not refused
        child = apply_params(seed, {"matmul_kernel.dot[0].input_precision": precision})
        result = evaluator.evaluate(child)
        assert result.status.value == "accepted", result.reason
    cached = apply_params(GEMM, {"gemm_kernel.load[0].eviction_policy": "evict_first",
                                 "gemm_kernel.load[1].cache_modifier": ".ca", "gemm_kernel.GROUP_M": 2,
                                 "gemm_kernel.dot[2].input_precision": "ieee"})
    result = evaluator.evaluate(cached)
    assert result.status.value == "accepted", result.reason
