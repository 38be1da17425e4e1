"""A seed for attention (issue 28): scaled_dot_product_attention by its math, in Triton.

Inductor hands ``F.scaled_dot_product_attention`` whole to a fused ATen kernel
(flash, memory-efficient or cuDNN attention on a GPU; the flash kernel for the
CPU here), which no seed can hold: every configuration of 97_ScaledDotProductAttention
fell back to it. The configuration ``attention_math`` compiles with
``SDPBackend.MATH``, so that Dynamo traces the decomposition (the scaled
query and key, a batched matmul, a softmax, a batched matmul), and with
max-autotune's Triton templates for the matmuls. The recordings are real
Inductor output on the CPU (``tests/fixtures/seed_variants/record.py``,
2 x 2 x 16 x 8); the seed is judged here under Triton's interpreter.
"""

from __future__ import annotations

import ast

import pytest

from tests.test_seed_variants import ATTENTION, converted, evaluator_name, problem_file, recording, replayed  # noqa: F401

from operators.seeds.convert import NotTritonOnly

FUSED_NOTE = "not captured: the default code calls a fused attention kernel, which only attention_math decomposes"


def _launched(source: str) -> list[str]:
    tree = ast.parse(source)
    call = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "_inductor_call")
    return [ast.unparse(n.func.value) for n in ast.walk(call) if isinstance(n, ast.Call)
            and isinstance(n.func, ast.Subscript)]


def test_the_fused_attention_kernel_gives_no_seed_and_its_math_does():
    for variant in ("default", "max_autotune"):
        with pytest.raises(NotTritonOnly, match=r"_scaled_dot_product_flash_attention_for_cpu"):
            converted(ATTENTION, variant)
    source = converted(ATTENTION, "attention_math")
    launched = _launched(source)
    templates = [k for k in launched if k.startswith("triton_tem_")]
    assert len(templates) == 2 and all("bmm" in k for k in templates)  # the two batched matmuls
    assert any("softmax" in k for k in launched)
    assert "torch.ops" not in source and "extern_kernels" not in source
    assert "scaled_dot_product_attention decomposed by SDPBackend.MATH" in " ".join(source.split())


def test_compile_seeds_decomposes_the_attention_and_skips_what_cannot_help(replayed):
    from evolve.seeding.seed import compile_seeds

    seeds = compile_seeds(problem_file(ATTENTION))
    assert replayed == ["default", "attention_math"]
    variants = [s.variant for s in seeds]
    assert variants[:3] == ["attention_math", "attention_math_tf32", "attention_math_tf32x3"]
    skipped = dict(seeds[0].skipped)
    for name in ("looped_reductions", "no_split_reductions", "coordinate_descent", "max_autotune"):
        assert skipped[name] == FUSED_NOTE
    assert "_scaled_dot_product_flash_attention_for_cpu" in skipped["default"]
    assert 'input_precision="tf32x3"' in seeds[2].source


def test_kevo_seed_goes_on_to_the_attention_math(replayed):
    from evolve.seeding.seed import compile_seed

    seed = compile_seed(problem_file(ATTENTION))
    assert replayed == ["default", "attention_math"]
    assert seed.variant == "attention_math" and "SDPBackend.MATH" in seed.source


def test_the_attention_seed_is_accepted_by_the_judge(evaluators):
    """At the shapes it was recorded at, its held-out shapes and probe inputs."""
    entry = recording(ATTENTION, "attention_math")
    result = evaluators.get(evaluator_name(ATTENTION), shapes=entry["shapes"]).evaluate(
        converted(ATTENTION, "attention_math"))
    assert result.status.value == "accepted", result.reason
