"""Seeds from torch.compile (operators.seeds.convert, evolve.seeding.seed, ``kevo seed``), on the CPU.

The conversion runs on what Inductor wrote on an H200 (recorded with
``tests/fixtures/inductor/record.py``; torch 2.11, Triton 3.6), and the seeds
it writes are judged by the real evaluator under Triton's interpreter at small
shapes. Their block sizes are first brought down to 64 where larger (with
kevo's own parametric rewrite): the interpreter runs a block's reduction
element by element in Python, and a 2048-wide row of a few elements costs
minutes, not correctness.
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
import yaml

from tests.conftest import PROBLEMS, ROOT, SMALL_SHAPES, gpu_available, problem_path

from operators import apply_params, check_space, find_tunables, mutate
from operators.seeds.convert import ConversionError, NotTritonOnly, seed_source
from operators.space import read_declared_space

RECORDINGS = Path(__file__).parent / "fixtures" / "inductor" / "recordings.jsonl"


def recordings() -> list[dict]:
    return [json.loads(line) for line in RECORDINGS.read_text(encoding="utf-8").splitlines()]


def recording(name: str, mode: str | None = None) -> dict:
    for entry in recordings():
        if entry["problem"] == name and entry.get("mode") == mode:
            return entry
    raise KeyError(name)


def problem_file(name: str) -> Path:
    """A suite problem (``softmax/reference``) or a KernelBench one (``19_ReLU``, skipped without it)."""
    if "/" in name:
        return PROBLEMS / f"{name}.py"
    return problem_path(f"kernelbench/level1/{name}")


def seed_for(name: str) -> str:
    return seed_source(recording(name), problem_file(name).read_text(encoding="utf-8"))


def interpreter_sized(source: str) -> str:
    small = {t.name: 64 for t in find_tunables(source) if t.name.endswith("BLOCK") and t.value > 64}
    return apply_params(source, small)


@pytest.mark.parametrize("name", ["softmax", "rmsnorm", "gelu", "sum_middle", "elementwise"])
def test_a_seed_from_inductor_is_accepted_for_the_suite(name, evaluators):
    source = seed_for(f"{name}/reference")
    result = evaluators.get(name).evaluate(interpreter_sized(source))
    assert result.status.value == "accepted", result.reason
    assert result.checks >= 5  # held-out shapes, fixed inputs, probes and timed runs all judged


# A pointwise, a reduction, a normalisation and a softmax problem of KernelBench's level 1.
KERNELBENCH_CASES = {
    "19_ReLU": {"batch_size": 4, "dim": 100},
    "48_Mean_reduction_over_a_dimension": {"batch_size": 3, "dim1": 20, "dim2": 19},
    "39_L2Norm_": {"batch_size": 3, "dim": 100},
    "23_Softmax": {"batch_size": 4, "dim": 100},
}


@pytest.mark.parametrize("name", sorted(KERNELBENCH_CASES))
def test_a_seed_from_inductor_is_accepted_for_kernelbench(name, evaluators):
    source = seed_for(name)
    problem = f"kernelbench/level1/{name}"
    result = evaluators.get(problem, shapes=KERNELBENCH_CASES[name]).evaluate(interpreter_sized(source))
    assert result.status.value == "accepted", result.reason


def test_the_seed_is_a_plain_readable_candidate_with_its_search_space():
    source = seed_for("softmax/reference")
    tree = ast.parse(source)
    imports = [ast.unparse(n) for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
    assert not any("_inductor" in i for i in imports) and "triton_heuristics" not in source  # standalone
    kernels = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.decorator_list]
    assert all(ast.unparse(n.decorator_list[0]) == "triton.jit" for n in kernels)
    helpers = {n.name for n in kernels if n.name.startswith("helper_")}
    assert {"helper_max2", "helper_maximum"} <= helpers  # Inductor's helpers, made part of the file
    assert "its autotuner picked: XBLOCK=1, R0_BLOCK=2048, num_warps=16" in source
    names = {t.name for t in find_tunables(source)}
    kernel = "triton_red_fused__softmax_exp_prepare_softmax_online_sub_0"
    blocks = [f"_inductor_call.{kernel}_R0_BLOCK", f"_inductor_call.{kernel}_XBLOCK"]
    assert {*blocks, f"{kernel}.num_warps", f"{kernel}.num_stages"} <= names
    space = read_declared_space(source)
    assert set(space.declared) <= names  # the declared space names the seed's own tunables
    assert {256, 2048} <= set(space.declared[blocks[0]])
    check_space(source, None)
    child = mutate(source, random.Random(3))
    assert child is not None and child.source != source  # kevo's parametric operators can vary it


def test_a_helper_inductor_calls_by_name_keeps_its_dependencies_first():
    source = seed_for("softmax/reference")
    order = [n.name for n in ast.parse(source).body if isinstance(n, ast.FunctionDef)]
    assert order.index("helper_promote_to_tensor") < order.index("helper_is_floating") \
        < order.index("helper_maximum") < order.index("helper_max2")


def test_python_numbers_dynamo_lifted_are_passed_as_numbers():
    source = seed_for("rmsnorm/reference")
    assert ".item()" not in source  # eps is a float in eager; Inductor took it as a 0-d tensor
    assert "self.eps" in source and "self.weight" in source


SCALAR_INPUT = "5_Matrix_scalar_multiplication"  # forward(self, A, s) returns A * s, s = 3.14

RUN_SCALAR_SEED = """
import json, sys, types, torch
module = types.ModuleType("candidate")
exec(compile(open(sys.argv[1]).read(), sys.argv[1], "exec"), module.__dict__)
worst = []
for m, n, s in [(33, 50, 3.14), (7, 129, -0.5)]:
    torch.manual_seed(m * n)
    a = torch.randn(m, n)
    out = module.ModelNew()(a, s)
    assert out.shape == a.shape and out.dtype == a.dtype, (out.shape, out.dtype)
    worst.append((out - a * s).abs().max().item())
print(json.dumps(worst))
"""


def test_a_python_float_input_dynamo_made_a_0d_tensor_is_passed_as_a_number(tmp_path):
    """Dynamo passes forward's float ``s`` to the graph as a 0-d float64 CPU tensor (recorded on an H200),
    and Inductor's call() reads it with ``arg3_1.item()``; the model is called with the float itself
    (the seed failed every check with "'float' object has no attribute 'item'")."""
    source = seed_for(SCALAR_INPUT)
    assert ".item()" not in source  # a candidate may not call it: the trace refuses _local_scalar_dense
    assert "_inductor_call([A.size()[0], A.size()[1], A, s], A.device)" in source
    assert "(arg2_1, arg3_1, buf0, triton_poi_fused_0_xnumel, XBLOCK=" in source  # the number, to the kernel
    path = tmp_path / "seed.py"
    path.write_text(interpreter_sized(source))
    interpreter = {**os.environ, "TRITON_INTERPRET": "1", "CUDA_VISIBLE_DEVICES": ""}
    done = subprocess.run([sys.executable, "-c", RUN_SCALAR_SEED, str(path)], cwd=ROOT, capture_output=True,
                          text=True, timeout=300, env=interpreter)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == [0.0, 0.0]  # A * s, as eager computes it


def test_a_seed_with_a_python_float_input_is_accepted(tmp_path):
    """The same seed judged by kevo (screen, trace, held-out shapes), on the problem at small sizes
    (its M and N are computed constants, which --shape does not set: the copy fixes them)."""
    from fitness import Evaluator

    problem = problem_file(SCALAR_INPUT).read_text(encoding="utf-8")
    small = problem.replace("M = 16384 * 4", "M = 33").replace("N = 4096 * 4", "N = 50")
    assert small.count("= 33\n") == small.count("= 50\n") == 1
    path = tmp_path / f"{SCALAR_INPUT}.py"
    path.write_text(small)
    evaluator = Evaluator(path, platform="cpu", shapes={})
    try:
        result = evaluator.evaluate(interpreter_sized(seed_for(SCALAR_INPUT)))
    finally:
        evaluator.close()
    assert result.status.value == "accepted", result.reason


def test_a_matmul_inductor_hands_to_cublas_gets_no_seed():
    with pytest.raises(NotTritonOnly, match=r"extern_kernels\.mm"):
        seed_for("matmul/reference")
    template = recording("1_Square_matrix_multiplication_", "max-autotune-triton")
    other = template["codes"][0].replace("grid_m = (M + BLOCK_M - 1) // BLOCK_M", "grid_m = M // BLOCK_M")
    with pytest.raises(ConversionError, match="template other than Inductor's matmul"):
        seed_source({**template, "codes": [other]}, "class Model:\n    def forward(self, A, B):\n        return A @ B\n")


KERNELBENCH_RECORDED = sorted({e["problem"] for e in recordings() if "/" not in e["problem"] and not e.get("mode")})


@pytest.mark.parametrize("name", KERNELBENCH_RECORDED)
def test_every_recorded_kernelbench_problem_gives_a_seed_that_passes_the_screen(name):
    from fitness.boundary.screen import screen

    source = seed_for(name)
    verdict = screen(source)
    assert verdict.ok, verdict.reason
    check_space(source, None)  # KEVO_SPACE names the seed's own tunables, with legal values
    assert find_tunables(source)


def test_what_the_conversion_cannot_follow_is_named():
    entry = recording("softmax/reference")
    problem = problem_file("softmax/reference").read_text()
    with pytest.raises(ConversionError, match="2 graphs"):
        seed_source({**entry, "graph_args": entry["graph_args"] * 2}, problem)
    with pytest.raises(ConversionError, match="recording holds an error"):
        seed_source({"problem": "x", "error": "OutOfMemoryError: CUDA out of memory"}, problem)
    with pytest.raises(ConversionError, match="not an input of forward"):
        seed_source({**entry, "graph_args": [["L['y'].size()[0]", "L['x'].size()[1]", "L['x']"]]}, problem)
    aten = entry["codes"][0].replace("buf2 = empty_strided_cuda(", "buf2 = torch.ops.aten.exp.default(")
    with pytest.raises(NotTritonOnly, match="ATen"):
        seed_source({**entry, "codes": [aten]}, problem)


def test_an_unrecorded_config_falls_back_to_a_valid_default(evaluators):
    entry = recording("softmax/reference")
    source = seed_source({**entry, "kernels": {}}, problem_file("softmax/reference").read_text())
    assert "no config was recorded; kevo's default" in source
    result = evaluators.get("softmax").evaluate(interpreter_sized(source))
    assert result.status.value == "accepted", result.reason


def kevo(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "evolve.cli", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=300, env={**os.environ, "CUDA_VISIBLE_DEVICES": ""})


def test_kevo_seed_without_a_gpu_says_so_in_one_line_and_exits_2(tmp_path):
    out = tmp_path / "seed.py"
    done = kevo("seed", str(PROBLEMS / "softmax" / "reference.py"), "-o", str(out))
    assert done.returncode == 2
    assert done.stderr.strip().count("\n") == 0 and "no GPU" in done.stderr and "Traceback" not in done.stderr
    assert not out.exists()
    missing = kevo("seed", str(tmp_path / "nope.py"))
    assert missing.returncode == 2 and "cannot read problem file" in missing.stderr


def test_seeds_compile_in_a_config(tmp_path):
    from evolve.config import ConfigError, config_from_dict

    base = {"problem": {"reference": str(PROBLEMS / "softmax" / "reference.py"), "seeds": "compile"}}
    config = config_from_dict(base, "test")
    assert config.problem.compile_seed and config.problem.seeds == ()
    again = config_from_dict(config.to_dict(), "stored")  # what a run stores reads back the same
    assert again.problem.compile_seed
    with pytest.raises(ConfigError, match="do not mix"):
        config_from_dict({"problem": {**base["problem"], "seeds": [str(PROBLEMS / "softmax" / "seed.py")],
                                      "compile_seed": True}}, "test")


@pytest.mark.skipif(gpu_available(), reason="with a GPU, seeds: compile makes a seed")
def test_a_sweep_with_seeds_compile_skips_each_problem_with_the_reason_without_a_gpu(tmp_path, monkeypatch):
    import shutil

    from evolve import sweep as sweep_module
    from evolve.sweep import run_sweep
    from evolve.sweep_file import load_sweep

    level = tmp_path / "level1"
    level.mkdir()
    for number, name in ((1, "softmax"), (2, "gelu")):
        shutil.copy(PROBLEMS / name / "reference.py", level / f"{number}_{name}.py")
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(yaml.safe_dump({
        "defaults": {"platform": "cpu", "cluster": {"actors": 0}, "search": {"max_evaluations": 4}},
        "problems": [{"folder": str(level), "seeds": "compile", "shapes": SMALL_SHAPES["softmax"]}]}))
    entries = load_sweep(sweep)
    assert [e.skip for e in entries] == ["", ""]  # not skipped for want of a seed file
    outcomes = run_sweep(entries, tmp_path / "out")
    assert [o.status for o in outcomes] == ["skipped", "skipped"]
    assert all("no GPU" in o.reason for o in outcomes)
    monkeypatch.setattr(sweep_module, "start_run", lambda *a, **k: pytest.fail("started again"))
    monkeypatch.setattr(sweep_module, "resume_run", lambda *a, **k: pytest.fail("resumed"))
    again = run_sweep(entries, tmp_path / "out")
    assert [o.reason for o in again] == [o.reason for o in outcomes]  # a resumed sweep does not retry them


def test_a_max_autotune_matmul_template_becomes_a_seed_with_tunable_tiles(evaluators):
    """Inductor's Triton matmul template (recorded for KernelBench's 1_Square_matrix_multiplication_),
    its tiles made launch parameters, judged on the suite's matmul (the same forward(A, B))."""
    template = recording("1_Square_matrix_multiplication_", "max-autotune-triton")
    source = seed_source(template, (PROBLEMS / "matmul" / "reference.py").read_text())
    names = {t.name for t in find_tunables(source)}
    tiles = [f"_inductor_call.triton_tem_fused_mm_0_BLOCK_{axis}" for axis in "MNK"]
    assert set(tiles) <= names
    assert all(16 <= v <= 256 for t in tiles for v in read_declared_space(source).declared[t])
    assert "max-autotune benchmark picked: BLOCK_M=128, BLOCK_N=128, BLOCK_K=32" in source
    small = apply_params(source, {tiles[0]: 16, tiles[1]: 16, tiles[2]: 16})
    result = evaluators.get("matmul").evaluate(small)
    assert result.status.value == "accepted", result.reason


BMM_PROBLEM = """import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super(Model, self).__init__()

    def forward(self, A, B):
        return torch.bmm(A, B)


batch_size, m, k, n = 3, 20, 33, 24


def get_inputs():
    return [torch.rand(batch_size, m, k), torch.rand(batch_size, k, n)]


def get_init_inputs():
    return []
"""


def test_a_batched_matmul_template_becomes_a_seed_with_the_batch_on_the_grids_y_axis():
    """Inductor's batched template (recorded on an H200 for KernelBench's 3_Batched_matrix_multiplication,
    torch 2.11): the tiles over program 0 computed from the blocks, the batch's extent as call() passed it."""
    from operators.seeds.persistent import persistent_seed
    from operators.seeds.precision import precision_seed
    from operators.seeds.split_k import split_k_seed

    template = recording("3_Batched_matrix_multiplication", "max-autotune-triton")
    source = seed_source(template, BMM_PROBLEM)
    tiles = [f"_inductor_call.triton_tem_fused_bmm_0_BLOCK_{axis}" for axis in "MNK"]
    assert set(tiles) <= {t.name for t in find_tunables(source)}
    launch = next(line.strip() for line in source.splitlines() if line.strip().startswith("triton_tem_fused_bmm_0["))
    # the grid: M-tiles x N-tiles, then the batch (s55: A's first size in call()), then 1
    assert launch.startswith("triton_tem_fused_bmm_0[triton.cdiv(s84, triton_tem_fused_bmm_0_BLOCK_M) * "
                             "triton.cdiv(s3, triton_tem_fused_bmm_0_BLOCK_N), s55, 1]"), launch
    assert "s55 = arg3_1_size[0]" in source
    # the rewrites for the 1-D matmul grid leave it alone; the precision twins apply (its dot reads fp32)
    assert split_k_seed(source) is None and persistent_seed(source) is None
    twin = precision_seed(source, "tf32x3")
    assert twin is not None and "tf32x3" in twin
    with pytest.raises(ConversionError, match="passes 4 arguments"):  # a launch that lost its grid
        code = template["codes"][0].replace(", s55, 1, stream=stream0)", ", stream=stream0)")
        meta = {**template, "codes": [code]}
        seed_source(meta, BMM_PROBLEM)


def test_a_seed_from_inductors_batched_template_is_accepted_for_kernelbench(evaluators):
    source = seed_source(recording("3_Batched_matrix_multiplication", "max-autotune-triton"), BMM_PROBLEM)
    tiles = [f"_inductor_call.triton_tem_fused_bmm_0_BLOCK_{axis}" for axis in "MNK"]
    small = apply_params(source, {t: 16 for t in tiles})
    shapes = {"batch_size": 3, "m": 20, "k": 33, "n": 24}
    result = evaluators.get("kernelbench/level1/3_Batched_matrix_multiplication", shapes=shapes).evaluate(small)
    assert result.status.value == "accepted", result.reason
    assert result.checks >= 5  # held-out shapes (the batch among them), probes and timed runs


def test_a_kernel_launched_twice_gets_tunables_of_its_own_for_each_launch():
    entry = recording("softmax/reference")
    code = entry["codes"][0]
    launch = next(line for line in code.splitlines() if ".run(" in line)
    twice = code.replace(launch, launch + "\n" + launch)
    source = seed_source({**entry, "codes": [twice]}, problem_file("softmax/reference").read_text())
    check_space(source, None)  # every KEVO_SPACE name is one of the seed's tunables
    kernel = "triton_red_fused__softmax_exp_prepare_softmax_online_sub_0"
    assert {f"{kernel}@2.num_warps", f"_inductor_call.{kernel}_R0_BLOCK_2"} <= set(read_declared_space(source).declared)


def test_the_capture_reads_configs_from_this_problems_module_only(tmp_path, monkeypatch):
    """Kernel names repeat across problems (two norms both have triton_red_fused_linalg_vector_norm_0):
    a module loaded for an earlier problem must not lend its kernel's config."""
    import types

    from torch._inductor.codecache import PyCodeCache

    from evolve.seeding import inductor as inductor_capture

    def module(code: str, block: int) -> types.ModuleType:
        path = tmp_path / f"m{block}.py"
        path.write_text(code)
        config = types.SimpleNamespace(kwargs={"XBLOCK": block}, num_warps=4, num_stages=1)
        kernel = types.SimpleNamespace(launchers=[types.SimpleNamespace(config=config)], configs=[config],
                                       fn=types.SimpleNamespace(__name__="triton_poi_fused_relu_0"))
        found = types.ModuleType(f"m{block}")
        found.__file__ = str(path)
        found.triton_poi_fused_relu_0 = kernel
        return found

    ours = "triton_poi_fused_relu_0 = async_compile.triton('triton_poi_fused_relu_0', '''...''')\n# ours\n"
    theirs = ours.replace("# ours", "# an earlier problem's")
    monkeypatch.setattr(PyCodeCache, "modules", [module(theirs, 64), module(ours, 1024)])
    kernels = inductor_capture._kernel_configs(inductor_capture._module_kernels([ours]))
    assert kernels["triton_poi_fused_relu_0"]["chosen"]["kwargs"] == {"XBLOCK": 1024}


def test_torch_compile_is_also_timed_under_kevos_protocol_which_counts_the_host_inside_a_run():
    """do_bench enqueues runs back to back; kevo times each run from an idle device, on inputs
    drawn for it, so the host's time between launches is the run's. The capture's second
    figure is taken that way."""
    import time

    from evolve.seeding.inductor import _protocol_ms

    drawn = []

    def inputs(i: int) -> list:
        drawn.append(i)
        return [i]

    assert _protocol_ms(lambda args: time.sleep(0.003), inputs) >= 2.9
    assert len(set(drawn)) == len(drawn) >= 3  # every run, warm-up included, on inputs of its own


# --- shapes past 2**31 elements (issue 28) ----------------------------------------------------

SUITE_RECORDED = ["softmax", "rmsnorm", "gelu", "sum_middle", "elementwise"]


def converted(name: str) -> str:
    if name == "matmul-template":
        template = recording("1_Square_matrix_multiplication_", "max-autotune-triton")
        return seed_source(template, (PROBLEMS / "matmul" / "reference.py").read_text())
    return seed_for(name if name in KERNELBENCH_RECORDED else f"{name}/reference")


def launched_kernels(tree: ast.Module) -> tuple[list[ast.FunctionDef], list[ast.Call]]:
    """The kernels ``_inductor_call`` launches, and its launches."""
    call = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "_inductor_call")
    launches = [n for n in ast.walk(call) if isinstance(n, ast.Call) and isinstance(n.func, ast.Subscript)]
    names = {ast.unparse(c.func.value) for c in launches}
    return [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name in names], launches


@pytest.mark.parametrize("name", KERNELBENCH_RECORDED + SUITE_RECORDED + ["matmul-template"])
def test_every_kernel_of_a_seed_has_a_64_bit_variant_that_each_launch_picks(name):
    """Inductor's 32-bit index arithmetic overflows past 2**31 elements (26_GELU_ crashed with an
    illegal memory access at a held-out shape; 47_Sum was wrong): each kernel gets Inductor's 64-bit
    form under INDEX_64, and each launch decides by its own arguments."""
    from operators.seeds.index import index_helper_source

    source = converted(name)
    tree = ast.parse(source)
    assert index_helper_source() in source  # the rule the launches apply, in the file
    kernels, launches = launched_kernels(tree)
    assert kernels and launches
    for kernel in kernels:
        assert ast.unparse(kernel.args.args[-1]) == "INDEX_64: tl.constexpr"
        text = ast.unparse(kernel)
        program_ids = text.count("tl.program_id(")
        widened = text.count(".to(tl.int64 if INDEX_64 else tl.int32)")
        template = "INDEX_DTYPE: tl.constexpr = tl.int64 if INDEX_64 else tl.int32" in text
        assert program_ids >= 1 and (widened == program_ids or (template and ".to(INDEX_DTYPE)" in text)), text
        params = [a.arg for a in kernel.args.args]
        sizes = [p for p in params if p.startswith("ks")]  # Inductor's size arguments: 64-bit there too
        if sizes:
            guard = kernel.body[0]
            assert isinstance(guard, ast.If) and ast.unparse(guard.test) == "INDEX_64"
            assert [ast.unparse(s) for s in guard.body] == [f"{p} = tl.cast({p}, tl.int64)" for p in sizes]
        assert "r0_numel = tl.cast" not in text  # a reduction's loop index keeps its width (argmax carries it)
    for launch in launches:
        (flag,) = [k for k in launch.keywords if k.arg == "INDEX_64"]
        assert ast.unparse(flag.value.func) == "_index_64"
        arguments, numels = flag.value.args
        assert [ast.unparse(a) for a in arguments.elts] == [ast.unparse(a) for a in launch.args]


def test_the_64_bit_variant_is_chosen_exactly_past_int32():
    import torch

    from operators.seeds.index import needs_index_64

    assert not needs_index_64([], [2**31 - 1])
    assert needs_index_64([], [2**31]) and needs_index_64([], [2**31 + 1])
    assert needs_index_64([], [2**16, 2**15]) and not needs_index_64([], [2**16, 2**15 - 1])  # their product
    assert not needs_index_64([2**31 - 1], []) and needs_index_64([2**31], [])  # a size argument
    assert not needs_index_64([torch.empty(2**31 - 1, device="meta")], [])
    assert needs_index_64([torch.empty(2**31, device="meta")], [])
    # what a tensor spans, not how many elements it has: a view with a large stride
    assert needs_index_64([torch.empty_strided((2, 16), (2**31, 1), device="meta")], [32])
    assert not needs_index_64([torch.empty(0, 2**40, device="meta")], [])  # an empty tensor is not indexed
    assert not needs_index_64([1.5e10], [])  # a float argument is not a size
    # 26_GELU_: 4096 x 393216 at its own shape; a held-out shape 20% larger in each size (kevo draws 10-30%)
    assert not needs_index_64([torch.empty(4096, 393216, device="meta")], [4096 * 393216])
    assert needs_index_64([torch.empty(4915, 471859, device="meta")], [4915 * 471859])


def sixty_four_bit(source: str) -> str:
    """``source`` with every launch taking the 64-bit variant, whatever its size."""
    rule = "return largest > 2**31 - 1"
    assert source.count(rule) == 1
    return source.replace(rule, "return True")


# a pointwise, a looped reduction, a multi-kernel norm (a looped and a persistent reduction, then a pointwise)
SIXTY_FOUR_BIT_CASES = {"gelu": None, "softmax": None, "39_L2Norm_": KERNELBENCH_CASES["39_L2Norm_"]}


@pytest.mark.parametrize("name", sorted(SIXTY_FOUR_BIT_CASES))
def test_the_64_bit_variant_computes_the_right_answer(name, evaluators):
    source = converted(name)
    problem = f"kernelbench/level1/{name}" if name in KERNELBENCH_RECORDED else name
    result = evaluators.get(problem, shapes=SIXTY_FOUR_BIT_CASES[name]).evaluate(
        interpreter_sized(sixty_four_bit(source)))
    assert result.status.value == "accepted", result.reason


# Inductor's two-dimensional pointwise form (a transposing copy), as it writes it for a y extent
# it knows to be small; derived by hand from the Grid2DWithYZOverflow kernels it writes when the
# extent is symbolic (no recording of this grid type was made).
GRID2D_KERNEL = '''
@triton_heuristics.pointwise(
    size_hints={'y': 1024, 'x': 1024}, tile_hint=TileHint.SQUARE, filename=__file__,
    triton_meta={'signature': {'in_ptr0': '*fp32', 'out_ptr0': '*fp32', 'ks0': 'i64', 'ynumel': 'i32', 'xnumel': 'i32', 'YBLOCK': 'constexpr', 'XBLOCK': 'constexpr'}},
    inductor_meta={'grid_type': 'Grid2D', 'kernel_name': 'triton_poi_fused_clone_0'},
    min_elem_per_thread=0
)
@triton.jit
def triton_poi_fused_clone_0(in_ptr0, out_ptr0, ks0, ynumel, xnumel, YBLOCK : tl.constexpr, XBLOCK : tl.constexpr):
    yoffset = tl.program_id(1) * YBLOCK
    yindex = yoffset + tl.arange(0, YBLOCK)[:, None]
    ymask = yindex < ynumel
    xoffset = tl.program_id(0) * XBLOCK
    xindex = xoffset + tl.arange(0, XBLOCK)[None, :]
    xmask = xindex < xnumel
    x1 = xindex
    y0 = yindex
    tmp0 = tl.load(in_ptr0 + (y0 + ks0*x1), xmask & ymask, eviction_policy='evict_last')
    tl.store(out_ptr0 + (x1 + xnumel*y0), tmp0, xmask & ymask)
'''


def test_a_2d_grid_whose_y_extent_grows_with_the_shape_spills_into_z():
    from operators.seeds.code import _grid, _Kernel

    chosen = {"chosen": {"kwargs": {"YBLOCK": 32, "XBLOCK": 32}, "num_warps": 4, "num_stages": 1}}
    kernel = _Kernel("triton_poi_fused_clone_0", GRID2D_KERNEL, chosen)
    assert kernel.grid_type == "Grid2DWithYZOverflow"
    text = ast.unparse(kernel.function)
    wide = ".to(tl.int64 if INDEX_64 else tl.int32)"
    assert f"yoffset = (tl.program_id(1){wide} + tl.program_id(2){wide} * tl.num_programs(1)) * YBLOCK" in text
    grid = _grid(kernel, {"ynumel": "ny", "xnumel": "nx"}, {"YBLOCK": "yb", "XBLOCK": "xb"})
    assert grid == "(triton.cdiv(nx, xb), min(triton.cdiv(ny, yb), 65535), triton.cdiv(triton.cdiv(ny, yb), 65535))"
    fixed = GRID2D_KERNEL.replace("    yoffset =", "    ynumel = 64\n    yoffset =")
    assert _Kernel("triton_poi_fused_clone_0", fixed, chosen).grid_type == "Grid2D"  # a y extent that cannot grow
