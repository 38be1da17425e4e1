"""The depthwise variant of a grouped convolution template seed (operators.seeds.depthwise), on the CPU.

The seed is the recorded CPU capture of max-autotune's Triton convolution
template for 82_conv_depthwise_2D (``tests/fixtures/seed_variants/``: 4
channels, a 3 x 3 kernel, groups = channels). Its kernels run in a fresh
process started with ``TRITON_INTERPRET=1`` against ``torch.nn.functional.conv2d``
at the weight's sizes the template fixes and other batch and spatial sizes;
a control rewrite that takes every program's group as 0 must come out wrong (every buffer starts as
NaN, so what it leaves unwritten cannot pass for right).
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.test_seed_variants import CONV2D, CONV3D, DEPTHWISE, converted, replayed  # noqa: F401 (a fixture)

from fitness.boundary.screen import screen
from operators import apply_params, check_space, resolve_space
from operators.seeds.depthwise import DepthwiseError, depthwise_seed
from operators.space import read_declared_space

KERNEL = "triton_tem_fused_convolution_1"
BLOCK_M = f"_inductor_call.{KERNEL}_BLOCK_M"
#: (batch, height, width) at the fixture's 4 channels and 3 x 3 kernel
SHAPES = [(2, 9, 9), (3, 11, 7), (1, 5, 13)]

RUNNER = """
import json, math, sys, types, torch
cases, shapes = json.loads(sys.argv[1]), json.loads(sys.argv[2])
# every buffer a candidate allocates starts as NaN: an element its kernels never write must not pass for right
# because the allocator handed back memory that an earlier candidate filled with the right values
empty_strided, empty = torch.empty_strided, torch.empty
torch.empty_strided = lambda *a, **k: empty_strided(*a, **k).fill_(math.nan)
torch.empty = lambda *a, **k: empty(*a, **k).fill_(math.nan)
results = []
for path in cases:
    module = types.ModuleType("candidate")
    exec(compile(open(path).read(), path, "exec"), module.__dict__)
    worst = 0.0
    for n, h, w in shapes:
        torch.manual_seed(n * 100 + h * 10 + w)
        model = module.ModelNew(4, 3)
        x = torch.randn(n, 4, h, w)
        expected = torch.nn.functional.conv2d(x, model.conv2d.weight, groups=4)
        out = model(x)
        assert out.shape == expected.shape, (out.shape, expected.shape)
        error = (out - expected).abs().max().item()
        worst = max(worst, error if math.isfinite(error) else math.inf)
    results.append(worst)
print(json.dumps(results))
"""


def depthwise() -> str:
    made = depthwise_seed(converted(DEPTHWISE, "max_autotune"))
    assert made is not None
    return made


def run_cases(tmp_path: Path, sources: list[str]) -> list[float]:
    """The largest |out - conv2d| of each source over ``SHAPES``, in one fresh interpreted process."""
    paths = []
    for i, source in enumerate(sources):
        path = tmp_path / f"candidate_{i}.py"
        path.write_text(source)
        paths.append(str(path))
    done = subprocess.run([sys.executable, "-c", RUNNER, json.dumps(paths), json.dumps(SHAPES)], cwd=ROOT,
                          capture_output=True, text=True, timeout=600,
                          env={**os.environ, "TRITON_INTERPRET": "1", "CUDA_VISIBLE_DEVICES": ""})
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_variant_is_a_seed_named_in_its_header_with_its_blocks_fixed():
    source = depthwise()
    header = " ".join(ast.get_docstring(ast.parse(source)).split())
    assert "kevo variant: depthwise (" in header
    assert screen(source).ok, screen(source).reason
    check_space(source, None)
    space = read_declared_space(source).declared
    assert space[f"_inductor_call.{KERNEL}_BLOCK_N"] == (1,) and space[f"_inductor_call.{KERNEL}_BLOCK_K"] == (1,)
    assert space[BLOCK_M] == (16, 32, 64, 128, 256)
    assert resolve_space(source)[f"_inductor_call.{KERNEL}_BLOCK_N"] == (1,)  # parametric mutation keeps it
    tree = ast.parse(source)
    kernel = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == KERNEL)
    text = ast.unparse(kernel)
    assert "tl.dot" not in text and "tl.program_id(2)" not in text and "tl.program_id(0) % GROUPS" in text
    call = ast.unparse(next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "_inductor_call"))
    assert f"triton.cdiv(1, {KERNEL}_BLOCK_N), 1]" in call and f"{KERNEL}_BLOCK_M) * 4," in call


def test_only_a_template_with_one_output_channel_a_group_is_rewritten():
    assert depthwise_seed(converted(CONV2D, "max_autotune")) is None  # groups = 1
    assert depthwise_seed(converted(CONV3D, "max_autotune")) is None
    assert depthwise_seed(converted(DEPTHWISE, "max_autotune").replace("OUT_C = 4", "OUT_C = 8")) is None
    with pytest.raises(DepthwiseError, match="already rewritten"):
        depthwise_seed(depthwise())
    launch = f"    {KERNEL}[triton.cdiv("
    base = converted(DEPTHWISE, "max_autotune")
    with pytest.raises(DepthwiseError, match="grid's z axis"):
        depthwise_seed(base.replace("_BLOCK_N), 4](", "_BLOCK_N), 2]("))
    assert launch in base


def test_the_variant_matches_torch_at_other_batch_and_spatial_sizes_and_a_wrong_group_does_not(tmp_path):
    source = depthwise()
    wrong = source.replace("group = (tl.program_id(0) % GROUPS)", "group = (tl.program_id(0) * 0)")
    assert wrong != source
    errors = run_cases(tmp_path, [source, apply_params(source, {BLOCK_M: 16}), converted(DEPTHWISE, "max_autotune"),
                                  wrong])
    assert max(errors[:3]) < 1e-4, errors
    assert errors[3] > 0.1, errors


def test_the_judge_accepts_the_variant(evaluators):
    """At the recorded shapes and held-out ones (KernelBench's problem file: skipped without it)."""
    from tests.test_seed_variants import evaluator_name, recording

    evaluator = evaluators.get(evaluator_name(DEPTHWISE), shapes=recording(DEPTHWISE, "max_autotune")["shapes"])
    for source in (depthwise(), apply_params(depthwise(), {BLOCK_M: 16})):
        result = evaluator.evaluate(source)
        assert result.status.value == "accepted", result.reason


def test_compile_seeds_starts_a_depthwise_problem_from_the_variant_too(replayed):
    from evolve.seeding.seed import compile_seeds
    from tests.test_seed_variants import problem_file

    seeds = compile_seeds(problem_file(DEPTHWISE), variants=["max_autotune"])
    # the template's seed, the depthwise start made from it, then the template's precision twins (fp32
    # operands): the depthwise start is judged among the first, not after the slow template's twins
    assert [s.variant for s in seeds] == ["max_autotune", "max_autotune_depthwise", "max_autotune_tf32",
                                          "max_autotune_tf32x3"]
    assert seeds[1].source == depthwise() and "acc += tl.dot(" not in seeds[1].source
