"""Split-K as a structural start for GEMM seeds (issue 28, item 3), on the CPU under Triton's interpreter.

The seed is the recorded CPU capture of max-autotune's Triton matmul template
(``tests/fixtures/seed_variants/``); ``operators.seeds.split_k`` rewrites it.
The kernels run in a fresh process started with ``TRITON_INTERPRET=1``, at
small odd shapes, with BLOCK_K made 16 so that K spans several tiles; a
control rewrite that sums every split over the same tiles must come out wrong
there. One test captures a Linear + bias + ReLU now (Inductor fuses the bias
and the ReLU into the template's store) and has the judge check its split.
"""

from __future__ import annotations

import ast
import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import PROBLEMS, ROOT
from tests.test_seed_variants import CONV2D, MSE, converted, interpreted, problem_file, replay

from fitness.boundary.screen import screen
from operators import apply_params, check_space, find_tunables, mutate, params_of, resolve_space
from operators.seeds.split_k import DEFAULT_SPLIT_K, SPLIT_CHOICES, SplitKError, split_k_seed
from operators.seeds.variants import program_key
from operators.space import Kind, read_declared_space

KERNEL = "triton_tem_fused_mm_0"
SPLIT = f"_inductor_call.{KERNEL}_SPLIT_K"
BLOCK_K = f"_inductor_call.{KERNEL}_BLOCK_K"
STORE = "tl.store(out_ptr0 + tl.broadcast_to(xindex, [BLOCK_M, BLOCK_N]), acc, mask)"
#: A non-linear epilogue in the template's store, as Inductor fuses one (relu(A @ B - 1)).
RELU_EPILOGUE = ("tmp0 = acc - 1.0\n    tmp1 = tl.where(tmp0 > 0, tmp0, 0.0)\n"
                 "    tl.store(out_ptr0 + tl.broadcast_to(xindex, [BLOCK_M, BLOCK_N]), tmp1, mask)")
FP32_OUTPUT = "buf0 = torch.empty_strided((s85, s86), (s86, 1), dtype=torch.float32, device=device)"
#: (M, K, N): sizes no block divides, a K of one partial tile, a K of many tiles with a partial last one.
SHAPES = [(33, 47, 29), (5, 300, 7), (1, 1, 1), (70, 129, 3)]


def matmul_seed() -> str:
    return converted("matmul/reference", "max_autotune")


def split_seed(base: str | None = None) -> str:
    split = split_k_seed(base or matmul_seed())
    assert split is not None
    return split


# --- the rewrite ----------------------------------------------------------------------------------


def test_the_recorded_matmul_template_gets_a_split_k_seed_with_split_k_tunable():
    base = matmul_seed()
    split = split_seed(base)
    verdict = screen(split)
    assert verdict.ok, verdict.reason
    check_space(split, None)  # every KEVO_SPACE name is a tunable, every value legal
    assert program_key(split) != program_key(base)  # a program of its own, not a duplicate of the template's
    header = " ".join(ast.get_docstring(ast.parse(split)).split())
    assert "Inductor configuration: max_autotune (" in header and "kevo variant: split_k (" in header
    tunables = {t.name: t for t in find_tunables(split)}
    assert {t.name for t in find_tunables(base)} < set(tunables)  # the template's tunables are all still there
    assert tunables[SPLIT].value == DEFAULT_SPLIT_K and tunables[SPLIT].kind is Kind.BLOCK
    assert read_declared_space(split).declared[SPLIT] == SPLIT_CHOICES
    assert resolve_space(split)[SPLIT] == SPLIT_CHOICES
    # the grid and the zeroing follow the local the tunable rewrites
    at_one = apply_params(split, {SPLIT: 1})
    assert f"{KERNEL}_SPLIT_K = 1\n" in at_one and f"{KERNEL}_SPLIT_K = 4\n" not in at_one
    assert f"triton.cdiv(s86, {KERNEL}_BLOCK_N), {KERNEL}_SPLIT_K](" in split
    assert f"if {KERNEL}_SPLIT_K > 1:\n        buf0.zero_()" in split
    # a plain matmul into an fp32 buffer: the partial tiles go straight into the output, no second kernel
    assert "tl.atomic_add(out_ptr0 + tl.broadcast_to(xindex, [BLOCK_M, BLOCK_N]), acc, mask=mask" in split
    assert "_split_k_epilogue" not in split


def test_parametric_mutation_varies_split_k():
    split = split_seed()
    moved = set()
    for seed in range(300):
        child = mutate(split, random.Random(seed))
        if child is not None and SPLIT in child.description:
            moved.add(params_of(child.source)[SPLIT])
    assert moved and moved <= set(SPLIT_CHOICES) - {DEFAULT_SPLIT_K}
    assert len(moved) >= 3


def test_an_epilogue_fused_into_the_store_runs_once_on_the_sum():
    base = matmul_seed().replace(STORE, RELU_EPILOGUE)
    split = split_seed(base)
    tree = ast.parse(split)
    kernels = {n.name: ast.unparse(n) for n in tree.body if isinstance(n, ast.FunctionDef)}
    epilogue = f"{KERNEL}_split_k_epilogue"
    assert epilogue in kernels
    # the ReLU: in place at SPLIT_K = 1, else only in the kernel that reads the summed workspace
    assert "if SPLIT_K == 1:" in kernels[KERNEL] and kernels[KERNEL].count("tl.where(tmp0 > 0") == 1
    assert "tl.atomic_add(ws_ptr + " in kernels[KERNEL]
    assert "acc = tl.load(ws_ptr + " in kernels[epilogue] and "tl.dot(" not in kernels[epilogue]
    assert f"if {KERNEL}_SPLIT_K > 1:\n        {epilogue}[" in split
    assert f"{KERNEL}_split_k_workspace = torch.zeros(" in split
    check_space(split, None)
    assert screen(split).ok


def test_what_the_rewrite_does_not_follow_is_declined_with_its_reason():
    assert split_k_seed(converted(MSE, "default")) is None  # no GEMM template: nothing to split
    assert split_k_seed(converted(CONV2D, "max_autotune")) is None  # a convolution template
    base = matmul_seed()
    with pytest.raises(SplitKError, match=r"accumulates in tl\.float64; split-K sums the partial tiles in fp32"):
        split_k_seed(base.replace("ACC_TYPE: tl.constexpr = tl.float32", "ACC_TYPE: tl.constexpr = tl.float64"))
    with pytest.raises(SplitKError, match=r"not the template's one K loop"):
        split_k_seed(base.replace("range(0, tl.cdiv(K, BLOCK_K))", "range(0, tl.cdiv(K, BLOCK_K), 2)"))
    (launch,) = [line for line in base.splitlines() if line.startswith(f"    {KERNEL}[")]
    with pytest.raises(SplitKError, match=r"launched 2 times"):
        split_k_seed(base.replace(launch, launch + "\n" + launch))
    with pytest.raises(SplitKError, match=r"already split-K"):
        split_k_seed(split_seed(base))
    with pytest.raises(SplitKError, match=r"a return in the epilogue"):
        split_k_seed(base.replace(STORE, STORE + "\n    return"))


# --- on the CPU, under the interpreter -------------------------------------------------------------

RUNNER = """
import json, sys, types, torch
cases = json.loads(sys.argv[1])
results = []
for path, epilogue, shapes in cases:
    module = types.ModuleType("candidate")
    exec(compile(open(path).read(), path, "exec"), module.__dict__)
    worst = 0.0
    for m, k, n in shapes:
        torch.manual_seed(m * 1000 + k + n)
        a, b = torch.randn(m, k), torch.randn(k, n)
        expected = a @ b
        if epilogue == "relu":
            expected = torch.relu(expected - 1.0)
        out = module.ModelNew()(a, b)
        assert out.shape == expected.shape, (out.shape, expected.shape)
        if epilogue == "fp16":
            assert out.dtype == torch.float16, out.dtype
            expected = expected.half()
        worst = max(worst, (out.float() - expected.float()).abs().max().item())
    results.append(worst)
print(json.dumps(results))
"""


def run_cases(tmp_path: Path, cases: list[tuple[str, str]]) -> list[float]:
    """The largest |out - expected| of each (source, epilogue) over ``SHAPES``, in one fresh interpreted process."""
    paths = []
    for i, (source, epilogue) in enumerate(cases):
        path = tmp_path / f"candidate_{i}.py"
        path.write_text(source)
        paths.append((str(path), epilogue, SHAPES))
    done = subprocess.run([sys.executable, "-c", RUNNER, json.dumps(paths)], cwd=ROOT, capture_output=True,
                          text=True, timeout=300,
                          env={**os.environ, "TRITON_INTERPRET": "1", "CUDA_VISIBLE_DEVICES": ""})
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_split_k_matches_torch_matmul_for_each_split_and_odd_shapes(tmp_path):
    """SPLIT_K 1, 2, 4 and 8 with 16-wide K tiles (K = 47: three tiles, the last partial, so that 2 and 4
    splits do not divide it and 4 leaves a split with none), and at the template's 64-wide tiles; a plain
    matmul, a ReLU fused into the store, and an fp16 output (both through the workspace and the second kernel)."""
    base = matmul_seed()
    relu = base.replace(STORE, RELU_EPILOGUE)
    half = base.replace(FP32_OUTPUT, FP32_OUTPUT.replace("torch.float32", "torch.float16"))
    assert relu != base and half != base
    cases = []
    for source, epilogue in ((base, "none"), (relu, "relu"), (half, "fp16")):
        split = split_seed(source)
        assert ("_split_k_epilogue" in split) == (epilogue != "none")
        for splits, block_k in ((1, 16), (2, 16), (4, 16), (8, 16), (4, 64)):
            cases.append((apply_params(split, {SPLIT: splits, BLOCK_K: block_k}), epilogue))
    # control: every split summing the same run of K tiles is wrong, and the runner says so
    wrong = split_seed(base).replace("k_start = tl.program_id(1) * k_per_split", "k_start = 0 * k_per_split")
    cases.append((apply_params(wrong, {SPLIT: 4, BLOCK_K: 16}), "none"))
    errors = run_cases(tmp_path, cases)
    tolerance = {"none": 1e-4, "relu": 1e-4, "fp16": 2e-2}
    for (_, epilogue), error in zip(cases[:-1], errors[:-1]):
        assert error <= tolerance[epilogue], (epilogue, error, errors)
    assert errors[-1] > 1.0


def test_the_judge_accepts_the_split_k_seed(evaluators):
    """The matmul problem's judge (fresh inputs, held-out shapes): SPLIT_K 4 with K in 16-wide tiles, and 1."""
    split = split_seed()
    evaluator = evaluators.get("matmul")
    for splits in (4, 1):
        result = evaluator.evaluate(apply_params(split, {SPLIT: splits, BLOCK_K: 16}))
        assert result.status.value == "accepted", (splits, result.reason)


# --- compile_seeds -------------------------------------------------------------------------------------


@pytest.fixture
def replayed(monkeypatch):
    """``compile_seeds`` without a GPU, replaying the recordings (``edit`` rewrites the recorded code)."""
    from evolve.seeding import inductor, seed

    edits: list = []
    captured: list[str] = []
    inner = replay(captured)

    def capture(*args, **kwargs):
        entry = inner(*args, **kwargs)
        for edit in edits:
            entry["codes"] = [edit(code) for code in entry["codes"]]
        return entry

    monkeypatch.setattr(inductor, "capture", capture)
    monkeypatch.setattr(seed, "_require_gpu", lambda device: None)
    monkeypatch.setattr(seed, "_release", lambda device: None)
    return edits


def test_compile_seeds_adds_the_split_k_seed_after_the_gemm_template_seed(replayed, tmp_path):
    from evolve.seeding.seed import compile_seeds, write_seeds

    seeds = compile_seeds(PROBLEMS / "matmul" / "reference.py")
    assert [s.variant for s in seeds] == ["max_autotune", "max_autotune_tf32", "max_autotune_tf32x3",
                                          "max_autotune_split_k", "max_autotune_persistent"]
    base, _, _, split, _ = seeds
    assert split.source == split_k_seed(base.source) and split.mode == "max-autotune-triton"
    assert split.kernels == [KERNEL] and split.duplicates == ()
    assert "max_autotune_split_k" not in dict(base.skipped)
    assert [s.variant for s in compile_seeds(problem_file(MSE))] == [
        "default", "looped_reductions", "no_split_reductions"]  # no GEMM template: no split-K seed
    lines = write_seeds(PROBLEMS / "matmul" / "reference.py", tmp_path / "seeds")
    assert sorted(p.name for p in (tmp_path / "seeds").iterdir()) == [
        "max_autotune.py", "max_autotune_persistent.py", "max_autotune_split_k.py", "max_autotune_tf32.py",
        "max_autotune_tf32x3.py"]
    assert lines[3].startswith(f"wrote {tmp_path / 'seeds' / 'max_autotune_split_k.py'}")


def test_a_gemm_template_split_k_declines_is_named_among_the_skipped(replayed):
    from evolve.seeding.seed import compile_seeds

    replayed.append(lambda code: code.replace("ACC_TYPE : tl.constexpr = tl.float32",
                                              "ACC_TYPE : tl.constexpr = tl.float64"))
    seeds = compile_seeds(PROBLEMS / "matmul" / "reference.py")
    assert [s.variant for s in seeds] == ["max_autotune", "max_autotune_tf32", "max_autotune_tf32x3",
                                          "max_autotune_persistent"]  # the persistent one holds
    why = dict(seeds[0].skipped)["max_autotune_split_k"]
    assert why.startswith("no split_k variant: triton_tem_fused_mm_0: it accumulates in tl.float64")


# --- a live capture with a fused epilogue ---------------------------------------------------------------

LINEAR_RELU = '''import torch
import torch.nn as nn

batch_size = 24
in_features = 200
out_features = 40


class Model(nn.Module):
    """A linear layer and a ReLU: Inductor fuses the bias and the ReLU into its matmul template's store."""

    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        return torch.relu(self.linear(x))


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]
'''


@pytest.mark.slow
def test_a_live_capture_with_bias_and_relu_fused_gives_a_split_k_seed_the_judge_accepts(tmp_path):
    """Inductor's own epilogue (a bias load, an add, a ReLU) in its template, captured now on the CPU; its
    split-K seed, at 4 splits of 16-wide K tiles (200 = 12.5 tiles) and at 1, judged."""
    problem = tmp_path / "linear_relu.py"
    problem.write_text(LINEAR_RELU)
    script = f"""
import json, sys
sys.path.insert(0, {str(ROOT)!r})
from evolve.seeding.seed import compile_seeds
from fitness import Evaluator
from operators import apply_params, find_tunables
seeds = compile_seeds({str(problem)!r}, device="cpu", variants=["max_autotune"])
split = next(s.source for s in seeds if s.variant == "max_autotune_split_k")
names = [t.name for t in find_tunables(split) if t.name.endswith(("_SPLIT_K", "_BLOCK_K"))]
verdicts = []
with Evaluator({str(problem)!r}, platform="cpu") as evaluator:
    for splits in (4, 1):
        values = {{n: splits if n.endswith("_SPLIT_K") else 16 for n in names}}
        result = evaluator.evaluate(apply_params(split, values))
        verdicts.append([result.status.value, result.reason])
print(json.dumps([[s.variant for s in seeds], "_split_k_epilogue" in split, sorted(names), verdicts]))
"""
    variants, has_epilogue, names, verdicts = interpreted(script, tmp_path)
    assert variants == ["max_autotune", "max_autotune_tf32", "max_autotune_tf32x3", "max_autotune_split_k",
                        "max_autotune_persistent"]
    assert has_epilogue and len(names) == 2
    assert [status for status, _ in verdicts] == ["accepted", "accepted"], verdicts
