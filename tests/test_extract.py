"""``kevo extract`` and ``kevo apply`` on the CPU: a whole model to its hot regions as problems,
and the sweep's kernels back in the model, checked and timed end to end.

The level-3 models of KernelBench are read in place (skipped where they are not);
a small model written here covers the whole path without them.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from evolve.models.fusion import find_regions
from evolve.models.manifest import read_manifest
from fitness.problems.problem import build_model, load_problem, make_inputs
from tests.conftest import KERNELBENCH, ROOT

LEVEL3 = KERNELBENCH / "level3"

# A pointwise chain with a parameter of its own, then the same block twice (one problem, counted twice).
SMALL_MODEL = '''
import torch
import torch.nn as nn


class Block(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.fc = nn.Linear(dim, dim)

    def forward(self, x):
        return torch.relu(self.fc(x))


class Model(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.scale = nn.Parameter(torch.rand(dim) + 0.5)
        self.blocks = nn.Sequential(Block(dim), Block(dim))

    def forward(self, x):
        h = torch.relu(x * self.scale + 1.0)
        return self.blocks(h)


batch_size = 64
dim = 48


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return [dim]
'''

# ModelNew for the chain relu(x * p0 + 1): its constructor is the problem's own (copied in, as
# seeds from torch.compile do), its forward one Triton kernel. WRONG adds 1.5.
KERNEL = '''
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _scale_add_relu(x_ptr, s_ptr, out_ptr, n, cols, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    s = tl.load(s_ptr + offs % cols, mask=mask)
    tl.store(out_ptr + offs, tl.maximum(x * s + ADDEND, 0.0), mask=mask)


class ModelNew(nn.Module):
INIT

    def forward(self, x0):
        x0 = x0.contiguous()
        out = torch.empty_like(x0)
        n = x0.numel()
        _scale_add_relu[(triton.cdiv(n, 256),)](x0, self.p0, out, n, x0.shape[-1], BLOCK=256)
        return out
'''


def kevo(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "evolve.cli", *map(str, args)], cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout)


def level3(name: str) -> Path:
    path = LEVEL3 / name
    if not path.is_file():
        pytest.skip(f"KernelBench's level 3 is not at {LEVEL3}")
    return path


def extract(model: Path, out: Path, *args: str) -> dict:
    done = kevo("extract", model, "-o", out, "--device", "cpu", "--no-compile", "--json", *args)
    assert done.returncode == 0, done.stderr[-3000:]
    manifest = json.loads(done.stdout)
    assert manifest == read_manifest(out).to_dict()
    return manifest


def check_problems(manifest: dict, out: Path) -> None:
    """Every problem written loads as kevo loads a problem and its reference runs."""
    assert manifest["regions"], manifest
    for region in manifest["regions"]:
        problem = load_problem(out / region["problem"])
        model = build_model(problem.Model, problem, 0, "cpu")
        with torch.no_grad():
            out_ = model(*make_inputs(problem, 0, "cpu"))
        assert all(torch.isfinite(o).all() for o in (out_ if isinstance(out_, (tuple, list)) else [out_]))
        assert region["count"] >= 1 and 0 < region["share"] <= 1 and region["eager_ms"] > 0
    assert abs(manifest["covered"] - sum(r["share"] for r in manifest["regions"])) < 1e-9
    sweep = (out / "sweep.yaml").read_text()
    assert sweep.count("seeds: compile") == len(manifest["regions"])
    from evolve.sweep_file import load_sweep

    entries = load_sweep(out / "sweep.yaml")
    assert [Path(e.config["problem"]["reference"]).name for e in entries] == [r["problem"] for r in manifest["regions"]]


def test_regions_follow_what_fuses():
    def forward(x, w, v, b):
        h = torch.relu(x @ w + b)  # a matmul and its epilogue
        scores = torch.softmax(h @ h.transpose(-2, -1) * 0.5, dim=-1)  # attention: product, transform, product
        return scores @ v

    graph = torch.fx.symbolic_trace(forward).graph
    regions = find_regions(graph)
    assert [(r.kind, r.ops) for r in regions] == [
        ("gemm", ["matmul", "add", "relu"]),
        ("attention", ["matmul", "mul", "softmax", "matmul"]),
    ]


def test_partition_places_a_region_that_only_writes_a_buffer():
    """Batch norm in training mode bumps ``num_batches_tracked`` in place: a region nothing outside
    reads. It is still placed, and the partitioned graph computes what the original did, writes
    included."""
    from evolve.models.fusion import partition

    found = []

    def backend(gm, example_inputs):
        regions = find_regions(gm.graph)
        found.extend((r.kind, r.ops, any(u not in r.nodes for n in r.nodes for u in n.users)) for r in regions)
        assert len(partition(gm, regions)) == len(regions)
        gm.recompile()
        return gm.forward

    def net():
        torch.manual_seed(0)
        return torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4), torch.nn.ReLU())

    model, twin = net(), net()
    x = torch.randn(2, 3, 8, 8)
    torch.testing.assert_close(torch.compile(model, backend=backend)(x), twin(x))
    assert ("fused", ["add"], False) in found, found  # the counter's region, with no output
    assert int(model[1].num_batches_tracked) == 1 == int(twin[1].num_batches_tracked)
    torch.testing.assert_close(model[1].running_var, twin[1].running_var)


def test_extract_a_small_model_repeated_block_once(tmp_path):
    model = tmp_path / "small.py"
    model.write_text(SMALL_MODEL)
    manifest = extract(model, tmp_path / "regions", "--cover", "1.0")
    check_problems(manifest, tmp_path / "regions")
    by_ops = {tuple(r["ops"]): r for r in manifest["regions"]}
    assert set(by_ops) == {("mul", "add", "relu"), ("linear", "relu")}, by_ops
    assert by_ops[("linear", "relu")]["count"] == 2 and by_ops[("mul", "add", "relu")]["count"] == 1
    assert manifest["covered"] > 0.8 and manifest["total_ms"] > 0 and manifest["eager_ms"] > 0
    chain = (tmp_path / "regions" / by_ops[("mul", "add", "relu")]["problem"]).read_text()
    assert "nn.Parameter(" in chain and "# scale" in chain  # the model's parameter stays a parameter
    assert "batch_size = 64" in chain and "dim1 = 48" in chain


@pytest.mark.parametrize("name, shapes, kind", [
    ("3_DeepNarrowMLP.py", ["batch_size=4", "input_size=64", "output_size=32"], "gemm"),
    ("4_LeNet5.py", ["batch_size=4"], "conv"),
    ("43_MinGPTCausalAttention.py", ["batch_size=2", "max_seqlen=32", "seq_len=16", "n_embd=32", "n_head=4"],
     "attention"),
    ("39_GRU.py", ["batch_size=2", "seq_len=8", "input_size=16", "hidden_size=16", "num_layers=2"], "recurrent"),
])
def test_extract_level3_models_at_small_shapes(tmp_path, name, shapes, kind):
    args = [a for s in shapes for a in ("--shape", s)]
    manifest = extract(level3(name), tmp_path / "regions", "--cover", "1.0", *args)
    check_problems(manifest, tmp_path / "regions")
    assert kind in {r["kind"] for r in manifest["regions"]}
    # every region written (--cover 1.0); the rest of the time is views between them (CPU time: noisy)
    assert manifest["covered"] > 0.6 and manifest["covered"] <= manifest["in_regions"] + 1e-9
    if name == "3_DeepNarrowMLP.py":  # 16 hidden layers: 15 identical linear+relu blocks, one problem
        assert max(r["count"] for r in manifest["regions"]) == 15


def test_extract_refuses_a_bad_model_file_in_one_line(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("import torch\nclass Model(torch.nn.Module):\n    pass\n")
    empty = tmp_path / "empty.py"
    empty.write_text(SMALL_MODEL.replace("h = torch.relu(x * self.scale + 1.0)\n        return self.blocks(h)",
                                         "return x"))
    for model in (bad, empty, tmp_path / "missing.py"):
        done = kevo("extract", model, "-o", tmp_path / "out", "--device", "cpu", "--no-compile")
        assert done.returncode == 2, done.stderr
        assert "Traceback" not in done.stderr
        assert done.stderr.strip().splitlines()[-1].startswith("kevo extract:"), done.stderr


def _kernel(problem: Path, addend: str) -> str:
    """KERNEL with the problem's own constructor."""
    source = problem.read_text()
    model = next(n for n in ast.parse(source).body if isinstance(n, ast.ClassDef) and n.name == "Model")
    init = next(n for n in model.body if isinstance(n, ast.FunctionDef) and n.name == "__init__")
    return KERNEL.replace("INIT", "    " + ast.get_source_segment(source, init)).replace("ADDEND", addend)


def _chain(tmp_path: Path) -> tuple[Path, Path]:
    model = tmp_path / "small.py"
    model.write_text(SMALL_MODEL)
    manifest = extract(model, tmp_path / "regions", "--cover", "1.0")
    region = next(r for r in manifest["regions"] if r["ops"] == ["mul", "add", "relu"])
    return model, tmp_path / "regions" / region["problem"]


def _stored_sweep(sweep_dir: Path, problem: Path, source: str) -> None:
    """A sweep directory as kevo sweep leaves it, whose one run holds ``source`` as its best
    accepted kernel (as if the judge had accepted it)."""
    from population_store import RunStore
    from population_store.individual import Individual, source_hash

    name = f"000-{problem.stem}"
    config = {"problem": {"reference": str(problem), "seeds": []}, "platform": "cpu"}
    (sweep_dir / name).mkdir(parents=True)
    (sweep_dir / "sweep.json").write_text(json.dumps([{"name": name, "config": config, "skip": ""}]))
    result = {"status": "accepted", "runtime_ms": 0.5, "reference_ms": 1.0, "speedup": 2.0}  # faster: apply puts it in
    with RunStore.create(sweep_dir / name / "run.sqlite", config) as store:
        store.add_individual(Individual(None, source, source_hash(source), 0, 0, "seed", [], {},
                                        status="accepted", runtime_ms=0.5, result=result))


def test_apply_refuses_a_wrong_kernel_naming_its_region(tmp_path):
    model, problem = _chain(tmp_path)
    _stored_sweep(tmp_path / "sweep", problem, _kernel(problem, "1.5"))
    done = kevo("apply", model, tmp_path / "sweep", "--device", "cpu", "--json")
    assert done.returncode == 1, done.stderr[-3000:]
    report = json.loads(done.stdout)
    assert report["status"] == "refused"
    assert problem.name in report["reason"] and "max |out - ref|" in report["reason"]
    assert report["patched_ms"] is None  # a refused model is not timed


def test_apply_accepts_a_right_kernel_from_a_sweep_and_times_the_model(tmp_path):
    model, problem = _chain(tmp_path)
    seed = tmp_path / "right.py"
    seed.write_text(_kernel(problem, "1.0"))
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text("defaults:\n  search: {population_size: 2, max_evaluations: 1, seed: 0}\n  platform: cpu\n"
                     f"problems:\n  - reference: {problem}\n    seeds: [{seed}]\n")
    done = kevo("sweep", sweep, "--run-dir", tmp_path / "runs")  # the judge accepts it first
    assert done.returncode == 0, done.stderr[-3000:]
    # Triton's interpreter is slower than torch's own code: apply keeps the region's code unless told
    done = kevo("apply", model, tmp_path / "runs", "--device", "cpu", "--json")
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout)
    kept = {r["problem"]: r for r in report["regions"]}[problem.name]
    assert report["status"] == "unchanged" and report["patched_ms"] is None, report
    assert kept["applied"] == 0 and kept["speedup"] < 1 and kept["note"].startswith("kept its own code"), kept
    done = kevo("apply", model, tmp_path / "runs", "--device", "cpu", "--json", "--keep-slower")
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout)
    assert report["status"] == "accepted", report["reason"]
    applied = {r["problem"]: r for r in report["regions"]}
    assert applied[problem.name]["applied"] == 1 and applied[problem.name]["max_abs_diff"] <= 1e-6
    assert all(r["applied"] == 0 and r["note"] for name, r in applied.items() if name != problem.name)
    assert report["max_abs_diff"] <= report["cutoff"] and report["checks"] == 3
    assert report["eager_ms"] > 0 and report["patched_ms"] > 0
    assert report["speedup"] == report["eager_ms"] / report["patched_ms"]
    # against torch.compile of the same model, round by round: the interpreted kernel loses, and it says so
    versus = report["vs_compile"]  # (one round may read otherwise on a loaded machine: the median does not)
    assert versus["rounds"] == 3 and versus["low"] <= versus["ratio"] < 1 and versus["ratio"] <= versus["high"], versus
    assert versus["faster"] in ("torch.compile", "neither")
    assert 0 < report["covered"] < 1 and report["bound"] == pytest.approx(1 / (1 - report["covered"]))


def test_apply_takes_only_a_sweep_of_this_model(tmp_path):
    model, problem = _chain(tmp_path)
    other = tmp_path / "other.py"
    other.write_text(SMALL_MODEL)
    _stored_sweep(tmp_path / "sweep", problem, _kernel(problem, "1.0"))
    for args in ((model, tmp_path / "nowhere"), (other, tmp_path / "sweep")):
        done = kevo("apply", *args, "--device", "cpu")
        assert done.returncode == 2, done.stderr
        assert "Traceback" not in done.stderr and done.stderr.strip().splitlines()[-1].startswith("kevo apply:")


# Draws its initial state in the forward, as KernelBench's LSTM models with no h0 given do.
DRAWING_MODEL = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.fc = nn.Linear(dim, dim)

    def forward(self, x):
        h0 = torch.randn(x.shape[0], x.shape[1])
        return torch.relu(self.fc(x)) * 2.0 + h0


batch_size = 8
dim = 16


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return [dim]
'''


def test_apply_draws_the_same_in_the_original_and_the_patched_model(tmp_path):
    """A model that draws random numbers in its forward is checked with the generator in the
    same state for both runs: the right kernel is accepted, and still a wrong one is not."""
    model = tmp_path / "drawing.py"
    model.write_text(DRAWING_MODEL)
    manifest = extract(model, tmp_path / "regions", "--cover", "1.0")
    region = next(r for r in manifest["regions"] if "linear" in r["ops"])
    problem = tmp_path / "regions" / region["problem"]
    own = problem.read_text().replace("class Model(", "class ModelNew(")  # the region's own code as its kernel
    _stored_sweep(tmp_path / "right", problem, own)
    # in, though not faster than torch.compile's code: the compiled model draws as eager does too
    done = kevo("apply", model, tmp_path / "right", "--device", "cpu", "--json", "--checks", "2", "--keep-slower")
    report = json.loads(done.stdout)
    assert done.returncode == 0 and report["status"] == "accepted", report["reason"]
    assert report["max_abs_diff"] == 0.0
    # off by 1 everywhere: far beyond any cutoff derived from outputs of this size
    wrong = own.replace("def forward(self, ", "def forward(self, *a):\n        out = self._forward(*a)\n"
                        "        return tuple(t + 1.0 for t in out) if isinstance(out, tuple) else out + 1.0\n\n"
                        "    def _forward(self, ", 1)
    _stored_sweep(tmp_path / "wrong", problem, wrong)
    done = kevo("apply", model, tmp_path / "wrong", "--device", "cpu", "--json", "--checks", "2")
    report = json.loads(done.stdout)
    assert done.returncode == 1 and report["status"] == "refused", done.stdout[-2000:]
    assert problem.name in report["reason"] and "max |out - ref|" in report["reason"], report["reason"]
