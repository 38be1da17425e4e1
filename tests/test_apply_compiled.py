"""``kevo apply``'s compiled path on the CPU: a region's kernel as a custom operator that Inductor
keeps while it compiles the rest of the model; a kernel in only where the whole compiled model is
faster with it (a controlled timer); the module ``--module`` writes, imported by a fresh process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from evolve.models.apply import _kernel_env
from evolve.models.choose import choose
from evolve.models.compiled import RegionKernel, compile_with
from evolve.models.manifest import read_manifest
from fitness.problems.problem import build_model, load_problem, make_inputs
from fitness.profiling.target import load_candidate
from platforms import get_platform
from tests.conftest import ROOT
from tests.test_extract import _chain, _kernel, _stored_sweep, kevo

CPU = get_platform("cpu")


def _counted(path: Path, calls: list[int]) -> type:
    """The kernel file's ModelNew, counting its forwards into ``calls``."""
    cls = load_candidate(path)

    class Counted(cls):
        def forward(self, *args):
            calls.append(1)
            return super().forward(*args)

    return Counted


@pytest.fixture
def chain(tmp_path):
    """The small model, its mul-add-relu region's problem, a right kernel (counted) and a wrong one."""
    model, problem = _chain(tmp_path)
    key = next(r.key for r in read_manifest(problem.parent).regions if r.problem == problem.name)
    files = {}
    for name, addend in (("right", "1.0"), ("wrong", "1.5")):
        files[name] = tmp_path / f"{name}.py"
        files[name].write_text(_kernel(problem, addend))
    with _kernel_env(CPU):
        yield model, problem, key, files


def test_a_kernel_runs_as_a_custom_operator_inside_the_compiled_model(chain):
    model_path, problem, key, files = chain
    reference = load_problem(model_path)
    calls: list[int] = []
    kernel = RegionKernel(key, problem.name, _counted(files["right"], calls), load_problem(problem))
    model = build_model(reference.Model, reference, 0, "cpu")
    eager = build_model(reference.Model, reference, 0, "cpu")
    compiled, backend = compile_with(model, [kernel])
    x = make_inputs(reference, 7, "cpu")
    with torch.no_grad():
        out, want = compiled(*x), eager(*x)
    assert backend.found() == {key: 1} and len(calls) == 1  # the region matched, and its kernel ran once
    assert torch.allclose(out, want, atol=1e-6)
    backend.active = set()  # torch.compile's own code for the region: the kernel no longer runs
    with torch.no_grad():
        again = compiled(*x)
    assert len(calls) == 1 and torch.allclose(again, want, atol=1e-5)
    # a wrong kernel makes the compiled model wrong: its output is the model's, not computed beside it
    wrong = RegionKernel(key, problem.name, load_candidate(files["wrong"]), load_problem(problem))
    bad, _ = compile_with(build_model(reference.Model, reference, 0, "cpu"), [wrong])
    with torch.no_grad():
        assert not torch.allclose(bad(*x), want, atol=1e-3)


def _timer(calls: list[int], with_kernel: float, without: float):
    """A timer that runs the forward once and reads the time the kernel's presence decides."""

    def timer(platform, forward, problem) -> float:
        before = len(calls)
        with torch.no_grad():
            forward(*make_inputs(problem, 0, platform.device()))
        return with_kernel if len(calls) > before else without

    return timer


@pytest.mark.parametrize("faster", [True, False], ids=["kernel-faster", "kernel-slower"])
def test_a_kernel_goes_in_only_where_the_whole_compiled_model_is_faster(chain, faster):
    model_path, problem, key, files = chain
    reference = load_problem(model_path)
    calls: list[int] = []
    kernel = RegionKernel(key, problem.name, _counted(files["right"], calls), load_problem(problem))
    original = build_model(reference.Model, reference, 0, "cpu")
    timer = _timer(calls, with_kernel=1.0 if faster else 3.0, without=2.0)
    outcome = choose(reference, [kernel], CPU, original, cutoff=1e-4, checks=2, timer=timer)
    assert [t.key for t in outcome.trials] == [key] and outcome.trials[0].kept is faster
    assert outcome.trials[0].ratios == [2.0 if faster else 2.0 / 3.0] * 3
    assert outcome.chosen == ([key] if faster else []) and not outcome.fault and outcome.max_abs_diff <= 1e-5
    # the final rounds: eager and torch.compile never run the kernel; the patched model does where chosen
    assert outcome.times["eager"] == outcome.times["compiled"] == [2.0] * 3
    assert outcome.times["patched"] == [1.0 if faster else 2.0] * 3


def test_a_kernel_whose_dots_multiply_below_fp32_is_timed_against_torch_compile_with_tf32_too(chain):
    """Where a chosen kernel may multiply fp32 in TF32, torch.compile with TF32 allowed is timed beside the
    plain one (a GPU's rounds: the platform named so here, the timer controlled)."""
    import copy

    from evolve.models.choose import versus

    model_path, problem, key, files = chain
    reference = load_problem(model_path)
    calls: list[int] = []
    kernel = RegionKernel(key, problem.name, _counted(files["right"], calls), load_problem(problem),
                          lower_precision=True)
    gpu = copy.copy(CPU)
    gpu.name = "cuda"
    precisions: list[str] = []

    def timer(platform, forward, problem_) -> float:
        precisions.append(torch.get_float32_matmul_precision())
        return _timer(calls, with_kernel=1.0, without=2.0)(platform, forward, problem_)

    outcome = choose(reference, [kernel], gpu, build_model(reference.Model, reference, 0, "cpu"), cutoff=1e-4,
                     checks=1, timer=timer)
    assert outcome.chosen == [key] and outcome.times["compiled_tf32"] == [2.0] * 3
    assert precisions.count("high") == 3 and torch.get_float32_matmul_precision() == "highest"  # only its windows
    assert versus(outcome.times, "compiled_tf32")["ratio"] == 2.0


def test_a_wrong_kernel_forced_in_is_caught_by_the_compiled_models_check(chain):
    model_path, problem, key, files = chain
    reference = load_problem(model_path)
    wrong = RegionKernel(key, problem.name, load_candidate(files["wrong"]), load_problem(problem))
    original = build_model(reference.Model, reference, 0, "cpu")
    outcome = choose(reference, [wrong], CPU, original, cutoff=1e-4, checks=1, force=True)
    assert outcome.chosen == [key] and outcome.fault.startswith("the compiled model's output: max |out - ref|")
    assert not outcome.times  # a wrong model is not timed


def test_the_module_apply_writes_runs_the_kernels_in_a_fresh_process(tmp_path):
    model, problem = _chain(tmp_path)
    _stored_sweep(tmp_path / "sweep", problem, _kernel(problem, "1.0"))
    done = kevo("apply", model, tmp_path / "sweep", "--device", "cpu", "--json", "--keep-slower",
                "--module", tmp_path / "mine")
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout)
    assert report["status"] == "accepted" and report["module"] == str(tmp_path / "mine" / "kevo_small")
    # the run directory and the extracted problems gone: the module holds what it needs
    for folder in (tmp_path / "sweep", problem.parent):
        subprocess.run(["rm", "-rf", str(folder)], check=True)
    script = textwrap.dedent(f'''
        import importlib.util, sys
        import torch
        spec = importlib.util.spec_from_file_location("small", {str(model)!r})
        small = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(small)
        import kevo_small
        torch.manual_seed(0)
        model = small.Model(*small.get_init_inputs())
        backend = kevo_small.backend(model)
        compiled = torch.compile(model, backend=backend, dynamic=False)
        x = small.get_inputs()[0]
        with torch.no_grad():
            diff = (compiled(x) - model(x)).abs().max().item()
            patched = (kevo_small.patch(model)(x) - model(x)).abs().max().item()
        print(diff, patched, sorted(backend.found().values()), sorted(backend.active) == sorted(backend.found()))
    ''')
    env = {**os.environ, "PYTHONPATH": f"{tmp_path / 'mine'}{os.pathsep}{ROOT}", "TRITON_INTERPRET": "1"}
    ran = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, cwd=tmp_path,
                         timeout=600)
    assert ran.returncode == 0, ran.stderr[-3000:]
    diff, patched, found, active = ran.stdout.split(maxsplit=3)
    assert float(diff) <= 1e-6 and float(patched) <= 1e-6 and found == "[1]" and active.strip() == "True", ran.stdout
