"""Parametric mutation and crossover on realistic seed kernels.

The offspring are checked the way a user relies on them: they parse, they stay
inside the search space, a seed reproduces them, and the mutated kernels still
compute the right answer when run for real in Triton's CPU interpreter.
"""

from __future__ import annotations

import ast
import json
import os
import random
import subprocess
import sys
import textwrap

import pytest

from operators import (
    CROSSOVER,
    MUTATION,
    Kind,
    SearchSpace,
    SpaceError,
    apply_params,
    check_space,
    crossover,
    default_choices,
    find_tunables,
    mutate,
    params_of,
    resolve_space,
)
from fitness import Status
from tests.conftest import PROBLEMS

ELEMENTWISE = '''\
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, x + y, mask=mask)


class ModelNew(nn.Module):
    def forward(self, x, y):
        out = torch.empty_like(x)
        n = x.numel()
        BLOCK = 1024  # elements per program; the grid below follows it
        add_kernel[(triton.cdiv(n, BLOCK),)](x, y, out, n, BLOCK_SIZE=BLOCK, num_warps=4)
        return out
'''

SOFTMAX = '''\
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def softmax_kernel(out_ptr, in_ptr, in_row_stride, out_row_stride, n_cols, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_SIZE)
    mask = cols < n_cols
    x = tl.load(in_ptr + row * in_row_stride + cols, mask=mask, other=-float("inf"))
    x = x - tl.max(x, axis=0)
    num = tl.exp(x)
    tl.store(out_ptr + row * out_row_stride + cols, num / tl.sum(num, axis=0), mask=mask)


class ModelNew(nn.Module):
    def forward(self, x):
        n_rows, n_cols = x.shape
        out = torch.empty_like(x)
        # one program per row: the whole row must fit in one block
        softmax_kernel[(n_rows,)](
            out, x, x.stride(0), out.stride(0), n_cols,
            BLOCK_SIZE=triton.next_power_of_2(n_cols), num_warps=8,
        )
        return out
'''

MATMUL = '''\
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def matmul_kernel(
    a_ptr, b_ptr, c_ptr, M, N, K,
    stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + offs_m[:, None] * stride_am + offs_k[None, :] * stride_ak
    b_ptrs = b_ptr + offs_k[:, None] * stride_bk + offs_n[None, :] * stride_bn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        k_left = K - k * BLOCK_K
        a = tl.load(a_ptrs, mask=(offs_m[:, None] < M) & (offs_k[None, :] < k_left), other=0.0)
        b = tl.load(b_ptrs, mask=(offs_k[:, None] < k_left) & (offs_n[None, :] < N), other=0.0)
        acc += tl.dot(a, b)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    c_ptrs = c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn
    tl.store(c_ptrs, acc, mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


class ModelNew(nn.Module):
    def forward(self, a, b):
        M, K = a.shape
        _, N = b.shape
        c = torch.empty((M, N), device=a.device, dtype=torch.float32)
        grid = lambda META: (triton.cdiv(M, META["BLOCK_M"]), triton.cdiv(N, META["BLOCK_N"]))
        matmul_kernel[grid](
            a, b, c, M, N, K,
            a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1),
            BLOCK_M=64, BLOCK_N=64, BLOCK_K=32,  # tile shape
            num_warps=4, num_stages=3,
        )
        return c
'''

AUTOTUNED = '''\
import triton
import triton.language as tl


@triton.autotune(
    configs=[
        triton.Config({"BLOCK_SIZE": 128}, num_warps=4),
        triton.Config({"BLOCK_SIZE": 1024}, num_warps=8, num_stages=2),
    ],
    key=["n"],
)
@triton.jit
def scale_kernel(x_ptr, out_ptr, n, BLOCK_SIZE: tl.constexpr):
    offs = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * 2, mask=offs < n)


def launch(x, out, n):
    scale_kernel[lambda meta: (triton.cdiv(n, meta["BLOCK_SIZE"]),)](x, out, n)
'''

SEEDS = {"elementwise": ELEMENTWISE, "softmax": SOFTMAX, "matmul": MATMUL}
MATMUL_NAMES = [
    "matmul_kernel.BLOCK_M",
    "matmul_kernel.BLOCK_N",
    "matmul_kernel.BLOCK_K",
    "matmul_kernel.num_warps",
    "matmul_kernel.num_stages",
]


def literal_text(source: str, tunable) -> str:
    """The source text at a tunable's span (ASCII sources only)."""
    line = source.splitlines()[tunable.span.lineno - 1]
    return line[tunable.span.col : tunable.span.end_col]


def changed_lines(before: str, after: str) -> list[tuple[str, str]]:
    old, new = before.splitlines(), after.splitlines()
    assert len(old) == len(new)
    return [(a, b) for a, b in zip(old, new) if a != b]


# --- discovery --------------------------------------------------------------


def test_elementwise_tunables_are_the_block_assignment_and_num_warps():
    tunables = find_tunables(ELEMENTWISE)
    assert [(t.name, t.value, t.kind) for t in tunables] == [
        ("forward.BLOCK", 1024, Kind.BLOCK),
        ("add_kernel.num_warps", 4, Kind.NUM_WARPS),
    ]
    block = tunables[0]
    # the tunable is the assignment's literal, not the launch keyword
    assert ELEMENTWISE.splitlines()[block.span.lineno - 1].strip().startswith("BLOCK = 1024")
    assert [literal_text(ELEMENTWISE, t) for t in tunables] == ["1024", "4"]


def test_softmax_next_power_of_two_is_not_tunable():
    assert params_of(SOFTMAX) == {"softmax_kernel.num_warps": 8}
    # the same through a local name bound to a call, not to a literal
    assigned = SOFTMAX.replace("BLOCK_SIZE=triton.next_power_of_2(n_cols)", "BLOCK_SIZE=block").replace(
        "        # one program per row", "        block = triton.next_power_of_2(n_cols)\n        # one program per row"
    )
    assert "block = triton.next_power_of_2(n_cols)\n" in assigned and "BLOCK_SIZE=block," in assigned
    assert params_of(assigned) == {"softmax_kernel.num_warps": 8}


def test_matmul_tunables_are_its_tile_shape_and_launch_options():
    tunables = find_tunables(MATMUL)
    assert [t.name for t in tunables] == MATMUL_NAMES
    assert [t.value for t in tunables] == [64, 64, 32, 4, 3]
    assert [t.kind for t in tunables] == [Kind.BLOCK] * 3 + [Kind.NUM_WARPS, Kind.NUM_STAGES]
    assert [literal_text(MATMUL, t) for t in tunables] == ["64", "64", "32", "4", "3"]


def test_literals_that_are_not_tunables_are_left_alone():
    source = textwrap.dedent('''\
        import triton
        import triton.language as tl

        @triton.jit
        def k(x_ptr, n, STEP, HAS_MASK: tl.constexpr, NUM_ITEMS: tl.constexpr, BLOCK: tl.constexpr):
            pass

        def helper(x, BLOCK):
            k[(1,)](x, 1024, 64, HAS_MASK=True, NUM_ITEMS=3, BLOCK=BLOCK)  # BLOCK is a parameter

        def twice(x):
            B = 64
            if x.numel() > 4096:
                B = 128
            k[(1,)](x, 8, 1, HAS_MASK=False, NUM_ITEMS=3, BLOCK=B)  # B has two bindings

        def mixed(x):
            W = 4
            k[(1,)](x, 8, 1, HAS_MASK=False, NUM_ITEMS=3, BLOCK=W, num_warps=W)  # one name, two kinds

        def not_a_launch(x, fn):
            fn(x, BLOCK=64, num_warps=4)
            k(x, BLOCK=64)
        ''')
    assert find_tunables(source) == []


def test_each_launch_of_a_kernel_has_its_own_names():
    source = textwrap.dedent('''\
        import triton
        import triton.language as tl

        @triton.jit
        def k(x_ptr, BLOCK: tl.constexpr):
            pass

        def forward(x, y):
            k[(1,)](x, BLOCK=64, num_warps=2)
            k[(1,)](y, BLOCK=128, num_ctas=2)
        ''')
    assert params_of(source) == {"k.BLOCK": 64, "k.num_warps": 2, "k@2.BLOCK": 128, "k@2.num_ctas": 2}


def test_autotune_config_literals_are_tunables():
    assert params_of(AUTOTUNED) == {
        "scale_kernel.configs[0].BLOCK_SIZE": 128,
        "scale_kernel.configs[0].num_warps": 4,
        "scale_kernel.configs[1].BLOCK_SIZE": 1024,
        "scale_kernel.configs[1].num_warps": 8,
        "scale_kernel.configs[1].num_stages": 2,
    }
    child = apply_params(AUTOTUNED, {"scale_kernel.configs[1].num_stages": 4})
    assert changed_lines(AUTOTUNED, child) == [
        (
            '        triton.Config({"BLOCK_SIZE": 1024}, num_warps=8, num_stages=2),',
            '        triton.Config({"BLOCK_SIZE": 1024}, num_warps=8, num_stages=4),',
        )
    ]


# --- the space ----------------------------------------------------------------


def test_default_space_per_kind():
    assert default_choices(Kind.BLOCK, 1024) == (128, 256, 512, 1024, 2048, 4096, 8192)
    assert default_choices(Kind.BLOCK, 32) == (16, 32, 64, 128, 256)  # clamped below at 16
    assert default_choices(Kind.BLOCK, 32768) == (4096, 8192, 16384, 32768, 65536)  # and above at 65536
    assert default_choices(Kind.BLOCK, 8) == (8, 16, 32, 64)  # the current value always belongs
    assert default_choices(Kind.NUM_WARPS, 8) == (1, 2, 4, 8, 16)
    assert default_choices(Kind.NUM_WARPS, 32) == (1, 2, 4, 8, 16, 32)
    assert default_choices(Kind.NUM_STAGES, 3) == (1, 2, 3, 4, 5)


def test_resolved_space_of_a_seed():
    assert resolve_space(MATMUL) == {
        "matmul_kernel.BLOCK_M": (16, 32, 64, 128, 256, 512),
        "matmul_kernel.BLOCK_N": (16, 32, 64, 128, 256, 512),
        "matmul_kernel.BLOCK_K": (16, 32, 64, 128, 256),
        "matmul_kernel.num_warps": (1, 2, 4, 8, 16),
        "matmul_kernel.num_stages": (1, 2, 3, 4, 5),
    }


def test_config_space_is_respected():
    space = {"forward.BLOCK": [256, 512, 2048], "add_kernel.num_warps": [4, 8]}
    seen = set()
    for seed in range(100):
        child = mutate(ELEMENTWISE, random.Random(seed), space, n_changes=2)
        assert child.params["forward.BLOCK"] in (256, 512, 1024, 2048)  # 1024 when left unchanged
        assert child.params["add_kernel.num_warps"] in (4, 8)
        seen.add(child.params["forward.BLOCK"])
    assert seen == {256, 512, 1024, 2048}


def test_space_declared_in_the_file_is_respected_and_the_config_wins():
    declaration = 'KEVO_SPACE = {"forward.BLOCK": [1024, 4096], "add_kernel.num_warps": [4, 16]}'
    declared = ELEMENTWISE.replace("\n\n@triton.jit", f"\n\n{declaration}\n\n\n@triton.jit", 1)
    children = [mutate(declared, random.Random(seed), n_changes=2) for seed in range(40)]
    assert {c.params["forward.BLOCK"] for c in children} == {1024, 4096}
    assert {c.params["add_kernel.num_warps"] for c in children} == {4, 16}
    assert all("KEVO_SPACE" in c.source for c in children)  # the declaration travels with the offspring
    overridden = [mutate(declared, random.Random(s), {"forward.BLOCK": [1024, 64]}, 2) for s in range(40)]
    assert {c.params["forward.BLOCK"] for c in overridden} == {1024, 64}
    assert {c.params["add_kernel.num_warps"] for c in overridden} == {4, 16}


@pytest.mark.parametrize(
    ("declaration", "message"),
    [
        ('KEVO_SPACE = {"forward.BLOKC": [512]}', "forward.BLOKC"),
        ('KEVO_SPACE = {"add_kernel.num_warps": [3, 4]}', "not legal for a num_warps"),
        ('KEVO_SPACE = {"forward.BLOCK": [96]}', "not legal for a block"),
        ('KEVO_SPACE = {"forward.BLOCK": []}', "non-empty list"),
        ('KEVO_SPACE = {"forward.BLOCK": [2.0 ** 9]}', "dict literal"),
        ('KEVO_SPACE = dict(BLOCK=[512])', "dict literal"),
    ],
)
def test_a_bad_space_in_the_file_is_an_error_that_names_the_problem(declaration, message):
    source = ELEMENTWISE.replace("\n\n@triton.jit", f"\n\n{declaration}\n\n\n@triton.jit", 1)
    with pytest.raises(SpaceError, match=message.replace("[", r"\[")):
        mutate(source, random.Random(0))


def test_check_space_catches_a_misspelt_config_name():
    check_space(ELEMENTWISE, {"forward.BLOCK": [512, 1024]})
    with pytest.raises(SpaceError, match="add_kernel.BLOCK_SIZE"):
        check_space(ELEMENTWISE, {"add_kernel.BLOCK_SIZE": [512, 1024]})  # it is forward.BLOCK here
    with pytest.raises(SpaceError, match="not legal"):
        check_space(ELEMENTWISE, SearchSpace.from_mapping({"add_kernel.num_warps": [64]}))


# --- mutation -------------------------------------------------------------------


@pytest.mark.parametrize("name", SEEDS)
def test_mutation_gives_valid_distinct_offspring_inside_the_space(name):
    seed = SEEDS[name]
    space = resolve_space(seed)
    parent = params_of(seed)
    for s in range(50):
        child = mutate(seed, random.Random(s), n_changes=2)
        ast.parse(child.source)
        assert child.operator == MUTATION
        assert child.source != seed
        assert params_of(child.source) == child.params
        changed = {n for n in parent if child.params[n] != parent[n]}
        assert 1 <= len(changed) <= 2
        assert all(child.params[n] in space[n] for n in changed)
        for n in changed:
            assert f"{n} {parent[n]}→{child.params[n]}" in child.description


def test_mutation_is_deterministic_under_a_seed():
    first = [mutate(MATMUL, random.Random(7), n_changes=3) for _ in range(2)]
    assert first[0] == first[1]
    rng_a, rng_b = random.Random(11), random.Random(11)
    chain_a, chain_b = MATMUL, MATMUL
    for _ in range(10):
        chain_a = mutate(chain_a, rng_a, resolve_space(MATMUL)).source
        chain_b = mutate(chain_b, rng_b, resolve_space(MATMUL)).source
    assert chain_a == chain_b
    assert mutate(MATMUL, random.Random(8), n_changes=3) != first[0]


def test_many_mutations_cover_the_space():
    space = resolve_space(MATMUL)
    seen = {n: set() for n in space}
    rng = random.Random(0)
    for _ in range(400):
        child = mutate(MATMUL, rng, n_changes=2)
        for n, v in child.params.items():
            seen[n].add(v)
    assert seen == {n: set(values) for n, values in space.items()}


def test_a_fixed_space_holds_over_generations():
    space = resolve_space(ELEMENTWISE)
    rng = random.Random(3)
    source = ELEMENTWISE
    for _ in range(60):
        source = mutate(source, rng, space, n_changes=2).source
        assert all(v in space[n] for n, v in params_of(source).items())


def test_mutation_returns_none_when_nothing_can_change():
    assert mutate(SOFTMAX, random.Random(0), {"softmax_kernel.num_warps": [8]}) is None
    no_tunables = SOFTMAX.replace(", num_warps=8", "")
    assert find_tunables(no_tunables) == []
    assert mutate(no_tunables, random.Random(0)) is None
    with pytest.raises(ValueError, match="n_changes"):
        mutate(MATMUL, random.Random(0), n_changes=0)


def test_mutation_changes_only_the_literal_and_keeps_comments():
    child = mutate(ELEMENTWISE, random.Random(0), {"forward.BLOCK": [256], "add_kernel.num_warps": [4]})
    assert child.description == "forward.BLOCK 1024→256"
    assert changed_lines(ELEMENTWISE, child.source) == [
        (
            "        BLOCK = 1024  # elements per program; the grid below follows it",
            "        BLOCK = 256  # elements per program; the grid below follows it",
        )
    ]
    matmul_child = apply_params(MATMUL, {"matmul_kernel.BLOCK_K": 64, "matmul_kernel.num_stages": 4})
    assert changed_lines(MATMUL, matmul_child) == [
        (
            "            BLOCK_M=64, BLOCK_N=64, BLOCK_K=32,  # tile shape",
            "            BLOCK_M=64, BLOCK_N=64, BLOCK_K=64,  # tile shape",
        ),
        ("            num_warps=4, num_stages=3,", "            num_warps=4, num_stages=4,"),
    ]


def test_edits_land_on_the_literal_after_non_ascii_text_and_crlf_line_ends():
    source = ELEMENTWISE.replace("BLOCK = 1024", 'unit = "µs→"; BLOCK = 1024').replace("\n", "\r\n")
    assert params_of(source)["forward.BLOCK"] == 1024
    child = apply_params(source, {"forward.BLOCK": 2048, "add_kernel.num_warps": 16})
    assert child == source.replace("BLOCK = 1024", "BLOCK = 2048").replace("num_warps=4", "num_warps=16")


def test_apply_params_refuses_unknown_names_and_non_ints():
    with pytest.raises(KeyError, match="add_kernel.BLOCK_SIZE"):
        apply_params(ELEMENTWISE, {"add_kernel.BLOCK_SIZE": 512})
    with pytest.raises(TypeError):
        apply_params(ELEMENTWISE, {"forward.BLOCK": True})


# --- crossover ------------------------------------------------------------------

PARENT_A = apply_params(
    MATMUL, {"matmul_kernel.BLOCK_M": 128, "matmul_kernel.BLOCK_N": 32, "matmul_kernel.num_stages": 2}
)
PARENT_B = apply_params(
    MATMUL, {"matmul_kernel.BLOCK_M": 32, "matmul_kernel.BLOCK_K": 64, "matmul_kernel.num_warps": 8}
)


def test_crossover_mixes_the_parents_values():
    a, b = params_of(PARENT_A), params_of(PARENT_B)
    taken_from_b = {n: 0 for n in a}
    for s in range(60):
        child = crossover(PARENT_A, PARENT_B, random.Random(s))
        assert child.operator == CROSSOVER
        ast.parse(child.source)
        assert params_of(child.source) == child.params
        assert child.params not in (a, b)
        assert all(child.params[n] in (a[n], b[n]) for n in a)
        for n in a:
            taken_from_b[n] += child.params[n] == b[n] != a[n]
    # every tunable on which the parents differ comes from b some of the time, from a the rest
    assert all(0 < taken_from_b[n] < 60 for n in a if a[n] != b[n])
    assert taken_from_b["matmul_kernel.BLOCK_N"] > 0 and taken_from_b["matmul_kernel.num_stages"] > 0


def test_crossover_is_deterministic_under_a_seed():
    assert crossover(PARENT_A, PARENT_B, random.Random(5)) == crossover(PARENT_A, PARENT_B, random.Random(5))


def test_crossover_refuses_differing_structures():
    assert crossover(ELEMENTWISE, MATMUL, random.Random(0)) is None
    # same tunables, different code around them
    edited = PARENT_B.replace("acc += tl.dot(a, b)", "acc += tl.dot(a, b) * 1.0")
    assert [t.name for t in find_tunables(edited)] == MATMUL_NAMES
    assert crossover(PARENT_A, edited, random.Random(0)) is None


def test_crossover_ignores_comments_and_layout_but_builds_on_parent_a():
    reformatted = PARENT_B.replace("  # tile shape", "").replace(
        "            num_warps=8, num_stages=3,\n", "            num_warps=8,\n            num_stages=3,\n"
    )
    assert "# tile shape" not in reformatted and "            num_stages=3,\n" in reformatted
    child = crossover(PARENT_A, reformatted, random.Random(1))
    assert child is not None
    assert "# tile shape" in child.source


def test_crossover_needs_two_differences_for_a_new_child():
    one_apart = apply_params(MATMUL, {"matmul_kernel.num_warps": 8})
    assert crossover(MATMUL, one_apart, random.Random(0)) is None
    assert crossover(MATMUL, MATMUL, random.Random(0)) is None


def test_crossover_never_passes_on_a_value_outside_the_space():
    space = {"matmul_kernel.BLOCK_M": [32, 64], "matmul_kernel.num_warps": [4, 8]}
    for s in range(30):
        child = crossover(PARENT_A, PARENT_B, random.Random(s), space)
        assert child.params["matmul_kernel.BLOCK_M"] == 32  # parent a's 128 is outside the space


# --- the offspring still compute the right answer -----------------------------

RUNNER = r"""
import importlib.util, json, sys
import torch

def load(path):
    spec = importlib.util.spec_from_file_location("candidate", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.ModelNew()

def inputs(kind, seed):
    g = torch.Generator().manual_seed(seed)
    if kind == "elementwise":
        x, y = torch.randn(1000, generator=g), torch.randn(1000, generator=g)
        return (x, y), x + y
    a, b = torch.randn(40, 56, generator=g), torch.randn(56, 72, generator=g)
    return (a, b), a @ b

results = []
for seed, (kind, path) in enumerate(json.loads(sys.argv[1])):
    args, expected = inputs(kind, seed)
    out = load(path)(*args)
    results.append(bool(torch.allclose(out, expected, atol=1e-4, rtol=1e-4)))
print(json.dumps(results))
"""


def run_in_interpreter(tmp_path, candidates: list[tuple[str, str]]) -> list[bool]:
    """Run each (kind, source) in one fresh process under TRITON_INTERPRET=1; True where it is right."""
    paths = []
    for i, (kind, source) in enumerate(candidates):
        path = tmp_path / f"candidate_{i}.py"
        path.write_text(source)
        paths.append((kind, str(path)))
    env = {**os.environ, "TRITON_INTERPRET": "1"}  # set before triton is imported in the child
    done = subprocess.run(
        [sys.executable, "-c", RUNNER, json.dumps(paths)], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_mutated_kernels_still_compute_the_right_answer(tmp_path):
    block_space = resolve_space(ELEMENTWISE)["forward.BLOCK"]
    # every block size of the space at n=1000: the grid follows BLOCK, so all elements are covered
    every_block = [apply_params(ELEMENTWISE, {"forward.BLOCK": v}) for v in block_space]
    mutants = [mutate(ELEMENTWISE, random.Random(s), n_changes=2).source for s in range(3)]
    matmuls = [mutate(MATMUL, random.Random(s), n_changes=3).source for s in range(3)]
    matmuls.append(crossover(PARENT_A, PARENT_B, random.Random(0)).source)
    # control: the launch keyword changed behind the grid's back must be caught as wrong
    stale_grid = ELEMENTWISE.replace("BLOCK_SIZE=BLOCK", "BLOCK_SIZE=256")
    candidates = (
        [("elementwise", s) for s in [*every_block, *mutants]]
        + [("matmul", s) for s in matmuls]
        + [("elementwise", stale_grid)]
    )
    results = run_in_interpreter(tmp_path, candidates)
    assert results == [True] * (len(candidates) - 1) + [False]
    assert len(block_space) == 7 and 128 in block_space


TIED_LAUNCH = "gated_mul_kernel[(triton.cdiv(n_elements, 1024),)](x, y, out, n_elements, BLOCK_SIZE=1024, num_warps=4)"


def test_a_block_size_repeated_in_the_grid_moves_with_it(evaluators):
    """The most common way kernels are written: the grid repeats the block size as a literal."""
    seed = (PROBLEMS / "elementwise" / "seed.py").read_text()
    launch = "gated_mul_kernel[grid](x, y, out, n_elements, BLOCK_SIZE=1024, num_warps=4)"
    tied = seed.replace(launch, TIED_LAUNCH)
    assert tied != seed
    (block,) = [t for t in find_tunables(tied) if t.name == "gated_mul_kernel.BLOCK_SIZE"]
    assert len(block.ties) == 1
    evaluator = evaluators.get("elementwise")
    for value in (64, 4096):
        child = apply_params(tied, {"gated_mul_kernel.BLOCK_SIZE": value})
        assert f"triton.cdiv(n_elements, {value})" in child and f"BLOCK_SIZE={value}" in child
        result = evaluator.evaluate(child)
        assert result.status is Status.ACCEPTED, (value, result.reason)


def test_a_grid_literal_two_block_sizes_could_own_is_left_alone():
    source = (
        "import triton\nimport triton.language as tl\n\n"
        "@triton.jit\ndef mm(a, M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):\n    pass\n\n"
        "def forward(a, M, N):\n"
        "    mm[(triton.cdiv(M, 64), triton.cdiv(N, 64))](a, M, N, BLOCK_M=64, BLOCK_N=64, num_warps=4)\n"
    )
    assert [t.name for t in find_tunables(source)] == ["mm.num_warps"]
