"""A persistent launch as a structural start for GEMM seeds (issue 28, item 3), on the CPU.

``operators.seeds.persistent`` rewrites the recorded CPU capture of
max-autotune's Triton matmul template (``tests/fixtures/seed_variants/``) so
that its programs, one per SM (``CPU_PROGRAMS`` under the interpreter), each
loop over output tiles. The kernels run in a fresh process under
``TRITON_INTERPRET=1`` with 16-wide tiles, so that there are more tiles than
programs and not a multiple of them; a control rewrite that skips every
other tile must come out wrong there.
"""

from __future__ import annotations

import ast

import pytest

from tests.conftest import PROBLEMS
from tests.test_seed_variants import CONV2D, MSE, converted
from tests.test_split_k import FP32_OUTPUT, RELU_EPILOGUE, STORE, replayed, run_cases  # noqa: F401 (a fixture)

from fitness.boundary.screen import screen
from operators import apply_params, check_space, find_tunables
from operators.seeds.persistent import CPU_PROGRAMS, PersistentError, persistent_seed
from operators.seeds.split_k import split_k_seed
from operators.seeds.variants import program_key

KERNEL = "triton_tem_fused_mm_0"
TILES = {f"_inductor_call.{KERNEL}_BLOCK_{axis}": 16 for axis in "MNK"}
PROGRAMS = f"if device.type == 'cuda' else {CPU_PROGRAMS}"


def matmul_seed() -> str:
    return converted("matmul/reference", "max_autotune")


def persistent(base: str | None = None) -> str:
    made = persistent_seed(base or matmul_seed())
    assert made is not None
    return made


def test_the_recorded_matmul_template_gets_a_persistent_seed():
    base = matmul_seed()
    made = persistent(base)
    verdict = screen(made)
    assert verdict.ok, verdict.reason
    check_space(made, None)
    assert program_key(made) != program_key(base)
    header = " ".join(ast.get_docstring(ast.parse(made)).split())
    assert "Inductor configuration: max_autotune (" in header and "kevo variant: persistent (" in header
    # the template's tunables, all of them at their values: the variant changes the structure only
    assert {t.name: t.value for t in find_tunables(made)} == {t.name: t.value for t in find_tunables(base)}
    kernel = next(ast.unparse(n) for n in ast.parse(made).body if isinstance(n, ast.FunctionDef) and n.name == KERNEL)
    assert "for tile_id in range(tl.program_id(0), persistent_tiles, tl.num_programs(0)):" in kernel
    assert "pid = tl.cast(tile_id, tl.int32).to(INDEX_DTYPE)" in kernel
    assert kernel.count("tl.program_id(") == 1
    assert (f"{KERNEL}_programs = torch.cuda.get_device_properties(device).multi_processor_count "
            f"{PROGRAMS}\n") in made
    assert f"triton.cdiv(s86, {KERNEL}_BLOCK_N), {KERNEL}_programs),](" in made


def test_what_the_rewrite_does_not_follow_is_declined_with_its_reason():
    assert persistent_seed(converted(MSE, "default")) is None
    assert persistent_seed(converted(CONV2D, "max_autotune")) is None
    base = matmul_seed()
    assert persistent_seed(persistent(base)) is None  # its template's body is in the tile loop now
    with pytest.raises(PersistentError, match=r"program id is not read once"):
        persistent_seed(base.replace("tl.assume(pid_m >= 0)", "tl.assume(tl.program_id(0) >= 0)"))
    with pytest.raises(PersistentError, match=r"program id is not read once"):  # split-K's second axis
        persistent_seed(split_k_seed(base))
    with pytest.raises(PersistentError, match=r"a return after its pid"):
        persistent_seed(base.replace(STORE, STORE + "\n    return"))
    with pytest.raises(PersistentError, match=r"stride_am assigned both before and after its pid"):
        persistent_seed(base.replace(STORE, STORE + "\n    stride_am = 2"))
    (launch,) = [line for line in base.splitlines() if line.startswith(f"    {KERNEL}[")]
    with pytest.raises(PersistentError, match=r"launched 2 times"):
        persistent_seed(base.replace(launch, launch + "\n" + launch))


def test_persistent_matches_torch_matmul_with_more_tiles_than_programs(tmp_path):
    """16-wide tiles (70 x 3 at 70 x 129 x 3 is 5 tiles, 33 x 29 is 6) over 4, 1 and 64 programs; a plain
    matmul, a ReLU fused into the store and an fp16 output; then a control that skips every other tile."""
    base = matmul_seed()
    relu = base.replace(STORE, RELU_EPILOGUE)
    half = base.replace(FP32_OUTPUT, FP32_OUTPUT.replace("torch.float32", "torch.float16"))
    cases = []
    for source, epilogue in ((base, "none"), (relu, "relu"), (half, "fp16")):
        made = apply_params(persistent(source), TILES)
        for programs in (CPU_PROGRAMS, 1, 64):
            cases.append((made.replace(PROGRAMS, f"if device.type == 'cuda' else {programs}"), epilogue))
    skipping = persistent(base).replace("tl.num_programs(0))", "2 * tl.num_programs(0))")
    cases.append((apply_params(skipping, TILES), "none"))
    errors = run_cases(tmp_path, cases)
    tolerance = {"none": 1e-4, "relu": 1e-4, "fp16": 2e-2}
    for (_, epilogue), error in zip(cases[:-1], errors[:-1]):
        assert error <= tolerance[epilogue], (epilogue, error, errors)
    assert errors[-1] > 1.0


def test_the_judge_accepts_the_persistent_seed(evaluators):
    result = evaluators.get("matmul").evaluate(apply_params(persistent(), TILES))
    assert result.status.value == "accepted", result.reason


def test_compile_seeds_adds_the_persistent_seed_after_the_split_k_one(replayed):
    from evolve.seeding.seed import compile_seeds

    base, *_, made = compile_seeds(PROBLEMS / "matmul" / "reference.py")  # the precision twins and split-K between
    assert made.variant == "max_autotune_persistent" and made.source == persistent_seed(base.source)
    assert made.kernels == [KERNEL] and made.mode == "max-autotune-triton"
