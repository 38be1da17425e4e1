"""Several seeds per problem from Inductor's configurations (issue 28 item 2), on the CPU.

The recordings under ``tests/fixtures/seed_variants/`` are real Inductor
output made on this kind of machine, without a GPU (``record.py`` there):
Inductor's Triton backend for the CPU, its kernels and max-autotune's template
benchmarks run by Triton's interpreter (torch 2.13, Triton 3.9). The
conversion, the dropping of duplicates, ``kevo seed --all`` and a run whose
population starts from every configuration's seed are tested on them; one
test makes a live CPU capture in a fresh process. What a GPU's Inductor
writes for these configurations (other splits, autotuned picks) is not
recorded here.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import PROBLEMS, ROOT, problem_path

from evolve.seeding.inductor import VARIANTS
from fitness.boundary.screen import screen
from operators import apply_params, check_space, find_tunables
from operators.seeds.convert import NotTritonOnly, seed_source
from operators.seeds.variants import distinct, program_key
from operators.space import read_declared_space

RECORDINGS = Path(__file__).parent / "fixtures" / "seed_variants" / "recordings.jsonl"
KB = "kernelbench/level1/"
MSE, LAYER_NORM, CONV2D, CONV3D, DEPTHWISE, ATTENTION = (
    "94_MSELoss", "40_LayerNorm", "63_conv_standard_2D__square_input__square_kernel",
    "54_conv_standard_3D__square_input__square_kernel", "82_conv_depthwise_2D_square_input_square_kernel",
    "97_ScaledDotProductAttention")
#: The configurations captured for a problem without attention (attention_math is not: nothing to decompose).
PLAIN = [v for v in VARIANTS if v != "attention_math"]


def recordings() -> list[dict]:
    return [json.loads(line) for line in RECORDINGS.read_text(encoding="utf-8").splitlines()]


def recording(problem: str, variant: str, static: bool = False) -> dict:
    """The fixture of ``problem`` under ``variant`` (with every size static: the fast path's capture)."""
    return next(e for e in recordings()
                if e["problem"] == problem and e["variant"] == variant and bool(e.get("static")) == static)


def problem_file(name: str) -> Path:
    """A suite problem (``gelu/reference``) or a KernelBench level-1 one (skipped without KernelBench)."""
    return PROBLEMS / f"{name}.py" if "/" in name else problem_path(KB + name)


def evaluator_name(name: str) -> str:
    return name.split("/")[0] if "/" in name else KB + name


def converted(problem: str, variant: str) -> str:
    return seed_source(recording(problem, variant), problem_file(problem).read_text(encoding="utf-8"))


def replay(captured: list | None = None):
    """A stand-in for ``evolve.seeding.inductor.capture`` that hands back the recordings."""
    def capture(path, device="cuda", mode=None, time_it=True, shapes=None, dtype=None, variant=None, form=None,
                static=False):
        stem = Path(path).stem
        problem = f"{Path(path).parent.name}/{stem}" if Path(path).parent.parent == PROBLEMS else stem
        variant = variant or "default"
        if captured is not None:
            captured.append(f"{variant} static" if static else variant)
        try:
            entry = recording(problem, variant, static)
        except StopIteration:  # as a capture that fails: the caller says why
            raise RuntimeError(f"no recording of {problem} under {variant} (static: {static})") from None
        return {**entry, "codes": list(entry["codes"])}
    return capture


@pytest.fixture
def replayed(monkeypatch):
    """``compile_seeds`` without a GPU: the capture replays the recordings; the calls it got."""
    from evolve.seeding import inductor, seed

    captured: list[str] = []
    monkeypatch.setattr(inductor, "capture", replay(captured))
    monkeypatch.setattr(seed, "_require_gpu", lambda device: None)
    monkeypatch.setattr(seed, "_release", lambda device: None)
    # the problem's own model, run uncompiled when no configuration gives a seed: on a GPU there is none here
    # (tests/test_seed_reference.py runs it on the CPU)
    monkeypatch.setattr(seed, "_reference_error", lambda *args: "")
    return captured


TRITON_ONLY = [(e["problem"], e["variant"]) for e in recordings()
               if not (e["variant"] == "default" and e["problem"] in ("matmul/reference", CONV2D))
               and not (e["problem"] == ATTENTION and e["variant"] != "attention_math")]


@pytest.mark.parametrize(("problem", "variant"), TRITON_ONLY, ids=[f"{p}-{v}" for p, v in TRITON_ONLY])
def test_each_configurations_capture_becomes_a_seed_named_by_it_with_its_64_bit_variant(problem, variant):
    source = converted(problem, variant)
    header = ast.get_docstring(ast.parse(source))
    settings = ", ".join(f"{k}={v!r}" for k, v in VARIANTS[variant].items()) or "torch's defaults"
    if variant == "attention_math":
        settings += "; scaled_dot_product_attention decomposed by SDPBackend.MATH"
    assert f"Inductor configuration: {variant} ({settings})" in " ".join(header.split())
    assert "captured on the CPU" in header  # and says where it was captured
    verdict = screen(source)
    assert verdict.ok, verdict.reason
    check_space(source, None)
    tree = ast.parse(source)
    call = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "_inductor_call")
    launches = [n for n in ast.walk(call) if isinstance(n, ast.Call) and isinstance(n.func, ast.Subscript)]
    launched = {ast.unparse(c.func.value) for c in launches}
    kernels = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name in launched]
    assert launches and len(kernels) == len(launched)
    for kernel in kernels:  # every kernel keeps Inductor's 64-bit variant, chosen per launch
        assert ast.unparse(kernel.args.args[-1]) == "INDEX_64: tl.constexpr"
        assert "tl.int64 if INDEX_64 else tl.int32" in ast.unparse(kernel)
    for launch in launches:
        (flag,) = [k for k in launch.keywords if k.arg == "INDEX_64"]
        assert ast.unparse(flag.value.func) == "_index_64"


def test_an_index_inductor_casts_to_its_index_type_is_64_bit_in_the_64_bit_variant():
    """A split reduction checks its chunk's bound with ``(r0_1 + x0*chunk).to(tl.int32)``; Inductor's 64-bit
    variant writes ``tl.int64`` there, and so does the seed's under INDEX_64 (a data cast is left alone)."""
    from operators.seeds.index import widen

    source = converted(MSE, "default")
    wide = ".to(tl.int64 if INDEX_64 else tl.int32)"
    assert f"tmp0 = (r0_1 + x0 * ((7 + ks0 * ks1) // 8)){wide}" in source and f"tmp1 = (ks0 * ks1){wide}" in source
    assert ".to(tl.int32)" not in source
    kernel = ast.parse("@triton.jit\ndef k(in_ptr0, ks0, xnumel, XBLOCK: tl.constexpr):\n"
                       "    x0 = tl.program_id(0) * XBLOCK\n    tmp0 = tl.load(in_ptr0 + x0)\n"
                       "    tmp1 = tmp0.to(tl.int32)\n    tmp2 = (x0 + ks0).to(tl.int32)\n").body[0]
    widen(kernel, {})
    assert "tmp1 = tmp0.to(tl.int32)" in ast.unparse(kernel) and f"tmp2 = (x0 + ks0){wide}" in ast.unparse(kernel)


def test_a_configuration_that_calls_an_extern_library_gives_no_seed():
    with pytest.raises(NotTritonOnly, match=r"extern_kernels\.mm"):
        converted("matmul/reference", "default")
    with pytest.raises(NotTritonOnly, match=r"extern_kernels\.convolution"):
        converted(CONV2D, "default")


# --- duplicates ---------------------------------------------------------------------------------


def test_configurations_that_write_the_same_program_are_one_seed():
    def kept(problem: str) -> list[tuple[str, list[str]]]:
        seeds = [(v, converted(problem, v)) for v in PLAIN]
        return [(item[0], dropped) for item, dropped in distinct(seeds, lambda s: s[1], lambda s: s[0])]

    # a split reduction (a looped and a persistent kernel), its persistent stage looped, and no split
    assert kept(MSE) == [("default", ["coordinate_descent", "max_autotune"]), ("looped_reductions", []),
                         ("no_split_reductions", [])]
    assert kept(LAYER_NORM) == [("default", ["no_split_reductions", "coordinate_descent", "max_autotune"]),
                                ("looped_reductions", [])]
    assert kept("gelu/reference") == [("default", [v for v in PLAIN if v != "default"])]  # a pointwise


def test_the_program_key_ignores_tunable_numbers_layout_and_header_but_not_the_program():
    source = converted(MSE, "default")
    key = program_key(source)
    tunables = {t.name: t for t in find_tunables(source)}
    moved = apply_params(source, {name: 4 for name in tunables if name.endswith("num_warps")}
                         | {name: 8 for name in tunables if name.endswith("XBLOCK")})
    assert moved != source and program_key(moved) == key
    relaid = source.replace('"""Seed for', '"""Another seed for').replace("\n\n\n", "\n\n# a comment\n\n")
    assert program_key(relaid) == key
    assert program_key(source.replace("KEVO_SPACE = {", "KEVO_SPACE = {'x.num_warps': [1],")) == key
    assert program_key(converted(MSE, "looped_reductions")) != key
    body = "tmp5 = tmp3 - tmp4"
    assert body in source and program_key(source.replace(body, "tmp5 = tmp4 - tmp3")) != key


# --- compile_seeds and kevo seed --all -----------------------------------------------------------


def test_compile_seeds_keeps_one_seed_per_program_named_by_its_configuration(replayed):
    from evolve.seeding.seed import compile_seeds

    seeds = compile_seeds(problem_file(MSE))
    assert [s.variant for s in seeds] == ["default", "looped_reductions", "no_split_reductions"]
    assert seeds[0].duplicates == ("coordinate_descent", "max_autotune")
    assert all(f"Inductor configuration: {s.variant}" in s.source for s in seeds)
    assert seeds[1].kernels == ["triton_red_fused_mean_pow_sub_0", "triton_red_fused_mean_pow_sub_1"]
    assert replayed == [*PLAIN, "default static"]  # the default seed's fast path, captured last
    assert "if _at_main_shapes(main):" in seeds[0].source and "fast_path" in seeds[0].recording
    assert "_at_main_shapes" not in seeds[1].source  # the other configurations' seeds are as Inductor wrote them
    assert dict(seeds[0].skipped) == {"attention_math": "not captured: the default code calls no fused "
                                                        "attention kernel to decompose"}


def test_a_configuration_that_cannot_change_the_program_is_not_captured(replayed):
    from evolve.seeding.seed import compile_seeds

    (gelu,) = compile_seeds(PROBLEMS / "gelu" / "reference.py")
    assert replayed == ["default", "coordinate_descent", "max_autotune", "default static"]  # no reduction
    assert dict(gelu.skipped).keys() == {"looped_reductions", "no_split_reductions", "attention_math"}
    replayed.clear()
    matmul, tf32, tf32x3, split, persistent = compile_seeds(PROBLEMS / "matmul" / "reference.py")
    assert matmul.variant == "max_autotune" and matmul.mode == "max-autotune-triton"
    # the template's seed, its precision twins (fp32 operands), then the structural starts made from
    # it (operators.seeds.precision, .split_k, .persistent)
    assert [tf32.variant, tf32x3.variant] == ["max_autotune_tf32", "max_autotune_tf32x3"]
    assert [split.variant, persistent.variant] == ["max_autotune_split_k", "max_autotune_persistent"]
    assert "allow_tf32=ALLOW_TF32" in matmul.source and 'input_precision="tf32"' in tf32.source
    assert program_key(tf32.source) == program_key(matmul.source)  # the same program but for the dots' precision
    assert tf32.source.count("input_precision=") == matmul.source.count("allow_tf32=ALLOW_TF32") >= 1
    assert 'input_precision="tf32x3"' in tf32x3.source and "kevo variant: tf32x3 (" in tf32x3.source
    assert replayed == ["default", "max_autotune"]  # cuBLAS in the default: only the templates replace it
    reasons = dict(matmul.skipped)
    assert "extern_kernels.mm" in reasons["default"] and "extern library" in reasons["coordinate_descent"]


PRECISION_TWINS = [("matmul/reference", "tf32"), ("matmul/reference", "tf32x3"), (CONV2D, "tf32")]


@pytest.mark.parametrize(("problem", "precision"), PRECISION_TWINS, ids=[f"{p}-{v}" for p, v in PRECISION_TWINS])
def test_a_templates_precision_twin_is_judged_like_any_seed(replayed, evaluators, problem, precision):
    """Seen on the H200: a GEMM region's dot moved from ieee to tf32 ran 7x faster within its
    cutoff, and two other regions' budgets ran out before the search got there. The twins start
    there; on the CPU the interpreter's dot is what is judged, on a GPU the precision too."""
    from evolve.seeding.seed import compile_seeds

    seeds = {seed.variant: seed for seed in compile_seeds(problem_file(problem))}
    twin = seeds[f"max_autotune_{precision}"]
    assert f'input_precision="{precision}"' in twin.source and f"kevo variant: {precision} (" in twin.source
    entry = recording(problem, "max_autotune")
    result = evaluators.get(evaluator_name(problem), shapes=entry["shapes"]).evaluate(twin.source)
    assert result.status.value == "accepted", result.reason


def test_torch_compiles_own_time_is_kept_beside_a_template_seeds(replayed, monkeypatch):
    """A GEMM's seed comes from max-autotune's Triton templates, whose compiled time is not what a
    user of torch.compile gets (cuBLAS, in the default configuration): that one is kept beside it,
    for tables against torch.compile (bench/compile_sweep_table.py)."""
    from evolve.seeding import inductor, seed as seed_module

    replay_one = inductor.capture

    def timed(*args, variant="default", **kwargs):
        recording = replay_one(*args, variant=variant, **kwargs)
        times = (1.5, 1.6) if variant == "default" else (9.0, 9.5)
        return {**recording, "compiled_ms": times[0], "compiled_protocol_ms": times[1]}

    monkeypatch.setattr(inductor, "capture", timed)
    matmul = seed_module.compile_seeds(problem_file("matmul/reference"))[0]
    assert matmul.variant == "max_autotune" and matmul.recording["compiled_ms"] == 9.0
    assert (matmul.recording["default_compiled_ms"], matmul.recording["default_compiled_protocol_ms"]) == (1.5, 1.6)


def test_no_precision_twin_where_the_template_reads_half_precision(replayed, monkeypatch):
    """A template on fp16 operands takes the tensor cores already: its twins would be the same program."""
    from evolve.seeding import seed as seed_module
    from operators.seeds.precision import precision_seed, reads_fp32

    (matmul, *_) = seed_module.compile_seeds(problem_file("matmul/reference"))
    templates = [k for k in matmul.kernels if k.startswith("triton_tem_")]
    codes = matmul.recording["codes"]
    assert templates and reads_fp32(codes, templates)
    half = [code.replace("'*fp32'", "'*fp16'") for code in codes]
    assert not reads_fp32(half, templates)
    monkeypatch.setattr(seed_module, "reads_fp32", lambda codes, kernels: False)
    assert [s.variant for s in seed_module.compile_seeds(problem_file("matmul/reference"))] == [
        "max_autotune", "max_autotune_split_k", "max_autotune_persistent"]
    twin = precision_seed(matmul.source, "tf32")
    assert precision_seed(twin, "tf32") is None  # every dot there already: no twin
    with pytest.raises(ValueError, match="not among"):
        precision_seed(matmul.source, "bf16")


def test_compile_seeds_names_every_configuration_when_none_gives_a_seed(replayed):
    from evolve.seeding.seed import SeedError, compile_seeds

    with pytest.raises(SeedError, match=r"no seed from any Inductor configuration: default: no Triton-only seed"):
        compile_seeds(PROBLEMS / "matmul" / "reference.py", variants=["default"])
    with pytest.raises(SeedError, match="unknown Inductor configuration"):
        compile_seeds(PROBLEMS / "matmul" / "reference.py", variants=["fastest"])


def test_kevo_seed_all_writes_one_file_per_configuration(replayed, tmp_path, capsys):
    from evolve.cli import main

    out = tmp_path / "seeds"
    assert main(["seed", str(problem_file(MSE)), "--all", "-o", str(out)]) == 0
    written = sorted(p.name for p in out.iterdir())
    assert written == ["default.py", "looped_reductions.py", "no_split_reductions.py"]
    assert "Inductor configuration: looped_reductions" in (out / "looped_reductions.py").read_text()
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines[3] == "kevo seed: no seed from attention_math: not captured: the default code calls no fused " \
                       "attention kernel to decompose"
    assert len(lines) == 4 and lines[0].startswith(f"kevo seed: wrote {out / 'default.py'}: Inductor configuration "
                                                   "default: 2 Triton kernel(s)")
    assert lines[0].endswith("the same program as coordinate_descent, max_autotune")
    assert main(["seed", str(problem_file(MSE)), "--all"]) == 2  # --all needs a folder
    assert "name a folder with -o DIR" in capsys.readouterr().err


# --- judged on the CPU ---------------------------------------------------------------------------

JUDGED = [(MSE, "default"), (MSE, "looped_reductions"), (MSE, "no_split_reductions"),
          (LAYER_NORM, "looped_reductions"), (CONV2D, "max_autotune"), (CONV3D, "max_autotune"),
          (DEPTHWISE, "max_autotune")]


@pytest.mark.parametrize(("problem", "variant"), JUDGED, ids=[f"{p}-{v}" for p, v in JUDGED])
def test_every_configurations_seed_is_accepted_by_the_judge(problem, variant, evaluators):
    """At the shapes it was recorded at and at held-out shapes (those knobs of at least 8): a
    convolution's batch and spatial sizes are free, its grid computed from its tiles."""
    entry = recording(problem, variant)
    source = converted(problem, variant)  # at the blocks Inductor's CPU heuristics gave (the interpreter's size)
    result = evaluators.get(evaluator_name(problem), shapes=entry["shapes"]).evaluate(source)
    assert result.status.value == "accepted", result.reason


def test_a_convolution_template_becomes_a_seed_with_tunable_tiles_and_its_grid():
    source = converted(CONV2D, "max_autotune")
    kernel = "triton_tem_fused_convolution_2"
    tiles = [f"_inductor_call.{kernel}_BLOCK_{axis}" for axis in "MNK"]
    names = {t.name for t in find_tunables(source)}
    assert set(tiles) <= names and f"{kernel}.dot[0].input_precision" in names
    assert all(16 <= v <= 256 for t in tiles for v in read_declared_space(source).declared[t])
    assert (f"{kernel}[triton.cdiv(s77 * (-2 + s53) * (-2 + s0), {kernel}_BLOCK_M), "
            f"triton.cdiv(4, {kernel}_BLOCK_N), 1](") in source
    assert "fixes the weight's sizes" in source  # and says at which sizes it holds
    depthwise = converted(DEPTHWISE, "max_autotune")
    assert ", 4](" in depthwise and "GROUP_IN_C = IN_C // GROUPS" in depthwise  # one program column per group
    conv3d = converted(CONV3D, "max_autotune")  # batch x depth x height x width along the first axis
    assert "[triton.cdiv(s77 * (-2 + s53) * (-2 + s0) * (-2 + s93), triton_tem_fused_convolution_0_BLOCK_M), " \
        in conv3d


def test_the_64_bit_variant_of_a_convolution_template_computes_the_right_answer(evaluators):
    source = converted(CONV2D, "max_autotune")
    rule = "return largest > 2**31 - 1"
    result = evaluators.get(evaluator_name(CONV2D), shapes=recording(CONV2D, "max_autotune")["shapes"]).evaluate(
        source.replace(rule, "return True"))
    assert result.status.value == "accepted", result.reason


def test_a_strided_convolutions_output_size_through_inductors_floor_division_is_followed(evaluators):
    """Seen on the H200 under torch 2.11: a strided convolution's template computes ``OUT_H`` with
    ``triton_helpers.div_floor_integer`` (its numerator's sign unknown), and the conversion refused
    it as not computed from the kernel's arguments. The grid computes it in Python now; the same
    size written that way (``1 + (ks1 - 3) // 1``), the seed is still accepted."""
    from operators.seeds.convert import ConversionError

    entry = recording(CONV2D, "max_autotune")
    code = entry["codes"][0]
    assert "    OUT_H = (-2) + ks1\n" in code and "    OUT_W = (-2) + ks2\n" in code
    code = code.replace("    OUT_H = (-2) + ks1\n", "    OUT_H = 1 + triton_helpers.div_floor_integer((-3) + ks1,  1)\n")
    code = code.replace("    OUT_W = (-2) + ks2\n", "    OUT_W = triton_helpers.remainder_integer(ks2, 1 + ks2) + (-2)\n")
    source = seed_source({**entry, "codes": [code, *entry["codes"][1:]]}, problem_file(CONV2D).read_text())
    kernel = "triton_tem_fused_convolution_2"
    assert f"{kernel}[triton.cdiv(s77 * (1 + (-3 + s53) // 1) * (s0 % (1 + s0) + -2), " in source
    result = evaluators.get(evaluator_name(CONV2D), shapes=entry["shapes"]).evaluate(source)
    assert result.status.value == "accepted", result.reason
    with pytest.raises(ConversionError, match="its OUT_H is computed from"):  # a helper it cannot compute stays refused
        seed_source({**entry, "codes": [code.replace("div_floor_integer", "div_rn"), *entry["codes"][1:]]},
                    problem_file(CONV2D).read_text())


def test_a_template_kevo_does_not_follow_is_named():
    from operators.seeds.convert import ConversionError

    entry = recording(CONV2D, "max_autotune")
    code = entry["codes"][0].replace("idx_y_c = tl.program_id(1)", "idx_y_c = tl.program_id(2)")
    with pytest.raises(ConversionError, match="template other than Inductor's matmul and convolutions"):
        seed_source({**entry, "codes": [code]}, problem_file(CONV2D).read_text())


# --- a run starts from all of them ----------------------------------------------------------------


def run_mse_from_compile(tmp_path: Path, budget: int) -> tuple[str, Path, list]:
    """A CPU run of the MSE loss with ``seeds: compile`` and ``budget`` evaluations: (why it
    stopped, its folder, its rows)."""
    from evolve.session import start_run
    from population_store import RunStore

    config = tmp_path / "mse.yaml"
    config.write_text(f"""\
problem:
  reference: {problem_file(MSE)}
  seeds: compile
  shapes: {{batch_size: 8}}
search: {{population_size: 3, max_evaluations: {budget}}}
platform: cpu
""")
    run = tmp_path / "run"
    reason = start_run(config, run)
    with RunStore.open(run / "run.sqlite", readonly=True) as store:
        return reason, run, store.individuals()


def configuration(row) -> str:
    """The Inductor configuration a seed's header names."""
    return next(line for line in row.source.splitlines() if "Inductor configuration:" in line).split()[2]


def test_a_run_with_seeds_compile_starts_from_every_configurations_seed(replayed, tmp_path):
    from evolve.session import COMPILED_SEED_FILE, RECORDING_FILE

    reason, run, rows = run_mse_from_compile(tmp_path, 5)
    assert reason == "max_evaluations reached (5)"
    seeds = [i for i in rows if i.operator == "seed"]
    assert [i.generation for i in seeds] == [0, 0, 0]
    assert [configuration(i) for i in seeds] == ["default", "looped_reductions", "no_split_reductions"]
    assert all(i.status == "accepted" for i in seeds), [(i.status, i.result) for i in seeds]
    assert (run / COMPILED_SEED_FILE).read_text() == seeds[0].source
    recorded = json.loads((run / RECORDING_FILE).read_text())
    assert recorded["variant"] == "default" and "fast_path" in recorded  # the first seed holds the fast path
    assert recorded["skipped"]["attention_math"].startswith("not captured")  # why the others gave none, kept
    assert sorted(p.name for p in run.glob("seed_from_compile.*.py")) == [
        "seed_from_compile.looped_reductions.py", "seed_from_compile.no_split_reductions.py"]


# --- a live capture on the CPU --------------------------------------------------------------------


def interpreted(script: str, cwd: Path):
    """What ``script`` prints last (JSON), run in a process started with TRITON_INTERPRET=1, as a CPU
    capture needs."""
    done = subprocess.run([sys.executable, "-c", script], cwd=cwd, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "TRITON_INTERPRET": "1", "CUDA_VISIBLE_DEVICES": ""})
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_live_cpu_capture_gives_the_persistent_and_the_looped_seed(tmp_path):
    """Inductor's Triton backend for the CPU, now, in a process started with TRITON_INTERPRET=1."""
    script = f"""
import json, sys
sys.path.insert(0, {str(ROOT)!r})
from evolve.seeding.seed import compile_seeds
seeds = compile_seeds({str(problem_file(LAYER_NORM))!r}, device="cpu",
                      shapes={{"batch_size": 2, "features": 3, "dim1": 4, "dim2": 5}})
print(json.dumps([[s.variant, list(s.duplicates), s.kernels] for s in seeds]))
"""
    seeds = interpreted(script, tmp_path)
    assert [s[0] for s in seeds] == ["default", "looped_reductions"]
    assert seeds[0][2] == ["triton_per_fused_native_layer_norm_0"]
    assert seeds[1][2] == ["triton_red_fused_native_layer_norm_0"]


def test_a_cpu_capture_needs_the_interpreter_from_the_start():
    from evolve.seeding.inductor import capture

    if os.environ.get("TRITON_INTERPRET") == "1":
        pytest.skip("this process runs Triton's interpreter")
    with pytest.raises(RuntimeError, match="TRITON_INTERPRET=1"):
        capture(PROBLEMS / "gelu" / "reference.py", device="cpu", time_it=False)


def test_more_distinct_seeds_than_the_budget_keeps_the_first_ones(replayed, tmp_path):
    reason, _, rows = run_mse_from_compile(tmp_path, 2)
    assert reason == "max_evaluations reached (2)"
    assert len(rows) == 2 and all(i.operator == "seed" for i in rows)  # the budget holds: 2 of the 3 seeds
    assert [configuration(i) for i in rows] == ["default", "looped_reductions"]
    assert "no_split_reductions" not in replayed  # the third configuration was not even captured


BIAS_PROBLEM = '''import torch
import torch.nn as nn

batch_size = 2
channels = 4
size = 6


class Model(nn.Module):
    """A pointwise op and a bias shaped (C, 1, 1) broadcast over the spatial dimensions."""

    def __init__(self, channels):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(channels, 1, 1))

    def forward(self, x):
        return torch.relu(x) + self.bias


def get_inputs():
    return [torch.randn(batch_size, channels, size, size)]


def get_init_inputs():
    return [channels]
'''


def test_a_bias_shaped_to_broadcast_is_captured_and_judged(tmp_path):
    """Sizes of 1 kept symbolic cannot broadcast: the capture is made again with them constant."""
    problem = tmp_path / "bias_add.py"
    problem.write_text(BIAS_PROBLEM)
    script = f"""
import json, sys
sys.path.insert(0, {str(ROOT)!r})
from evolve.seeding.seed import compile_seeds
from fitness import Evaluator
(seed,) = compile_seeds({str(problem)!r}, device="cpu", variants=["default"])
with Evaluator({str(problem)!r}, platform="cpu") as evaluator:
    result = evaluator.evaluate(seed.source)
print(json.dumps([seed.kernels, result.status.value, result.reason]))
"""
    kernels, status, reason = interpreted(script, tmp_path)
    assert len(kernels) == 1 and status == "accepted", reason
