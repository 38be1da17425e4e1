"""``kevo extract`` and ``kevo apply`` on models unlike the ones they were built on: operators
that write into their inputs, complex tensors, a model that fails on its own, a weight of a
gigabyte, a forward slowed by something else on the machine. Each case is a small model written
here, so nothing depends on KernelBench.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from evolve.models.manifest import read_manifest
from evolve.models.regions import _moments, describe
from fitness.problems.problem import build_model, load_problem, make_inputs
from tests.conftest import ROOT


def kevo(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "evolve.cli", *map(str, args)], cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout)


def model_file(tmp_path: Path, name: str, source: str) -> Path:
    path = tmp_path / f"{name}.py"
    path.write_text(textwrap.dedent(source))
    return path


def extract(model: Path, out: Path, *args: str) -> dict:
    done = kevo("extract", model, "-o", out, "--device", "cpu", "--no-compile", "--json", "--cover", "1.0", *args)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


def run_problem(path: Path) -> tuple[list, list]:
    """The problem's inputs and what its reference gives on them (inputs kept as drawn)."""
    problem = load_problem(path)
    model = build_model(problem.Model, problem, 0, "cpu")
    inputs = make_inputs(problem, 0, "cpu")
    given = [x.clone() for x in inputs]
    with torch.no_grad():
        out = model(*inputs)
    assert all(torch.equal(a, b) for a, b in zip(inputs, given)), "the problem wrote into its inputs"
    return inputs, list(out) if isinstance(out, (tuple, list)) else [out]


def own_sweep(out: Path, sweep_dir: Path, only: list[str] | None = None,
              speedups: dict[str, float] | None = None) -> None:
    """A sweep directory as kevo sweep leaves it, whose runs hold, as their best accepted kernel,
    each problem's own reference (its ``Model`` as ``ModelNew``): apply then runs the problems'
    code in place of the regions' (``only``: for these problem files alone). Each kernel is
    stored as the judge would store one twice as fast as its reference (``speedups``: as fast as
    given, per problem file)."""
    from population_store import RunStore
    from population_store.individual import Individual, source_hash

    entries = []
    for i, region in enumerate(read_manifest(out).regions):
        if only is not None and region.problem not in only:
            continue
        problem = out / region.problem
        source = problem.read_text().replace("class Model(nn.Module)", "class ModelNew(nn.Module)")
        name = f"{i:03d}-{problem.stem}"
        config = {"problem": {"reference": str(problem), "seeds": []}, "platform": "cpu"}
        (sweep_dir / name).mkdir(parents=True)
        speedup = (speedups or {}).get(region.problem, 2.0)
        result = {"status": "accepted", "runtime_ms": 1.0 / speedup, "reference_ms": 1.0, "speedup": speedup}
        with RunStore.create(sweep_dir / name / "run.sqlite", config) as store:
            store.add_individual(Individual(None, source, source_hash(source), 0, 0, "seed", [], {},
                                            status="accepted", runtime_ms=1.0 / speedup, result=result))
        entries.append({"name": name, "config": config, "skip": ""})
    (sweep_dir / "sweep.json").write_text(json.dumps(entries))


def apply(model: Path, sweep_dir: Path, *args: str) -> dict:
    done = kevo("apply", model, sweep_dir, "--device", "cpu", "--json", "--checks", "2", *args)
    assert done.returncode in (0, 1), done.stderr[-3000:]
    return json.loads(done.stdout)


# The first operator writes into the model's input (a region of its own, whose effect is only that
# write), and the fc region writes into its own tensor without taking the result, then reads it.
WRITES = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.fc = nn.Linear(dim, dim)
        self.out = nn.Linear(dim, dim)

    def forward(self, x):
        x.mul_(2.0)
        h = self.fc(x)
        h.add_(1.0)
        h[:, 0] = 0.0
        y = torch.tanh(h) + h
        return self.out(y) + x


batch_size = 8
dim = 24


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return [dim]
'''


def test_regions_that_write_in_place_become_problems_that_return_what_they_wrote(tmp_path):
    model = model_file(tmp_path, "writes", WRITES)
    out = tmp_path / "regions"
    manifest = extract(model, out)
    # every region reproduces its code: none is skipped, and the write into the input is a problem
    assert manifest["skipped"] == [], manifest["skipped"]
    by_ops = {tuple(r["ops"]): r for r in manifest["regions"]}
    assert ("mul",) in by_ops, by_ops
    assert any(ops[0] == "linear" and "setitem" in ops for ops in by_ops), by_ops
    # the write into the input: the problem returns the new value, and leaves its input alone
    inputs, outs = run_problem(out / by_ops[("mul",)]["problem"])
    assert len(outs) == 1 and torch.equal(outs[0], inputs[0] * 2.0)
    # what reads h after h.add_(1.0) and h[:, 0] = 0 reads the new h
    fc = next(r for ops, r in by_ops.items() if "setitem" in ops)
    inputs, outs = run_problem(out / fc["problem"])
    assert len(outs) == 1 and torch.isfinite(outs[0]).all()


def test_apply_writes_back_what_a_kernel_returns_for_a_region_that_writes_its_input(tmp_path):
    model = model_file(tmp_path, "writes", WRITES)
    out = tmp_path / "regions"
    manifest = extract(model, out)
    written = next(r["problem"] for r in manifest["regions"] if r["ops"] == ["mul"])
    # a kernel for the write alone: the regions after it read the input only as the kernel wrote it
    # (put in though not faster than torch.compile's code: the compiled model writes back through its operator)
    own_sweep(out, tmp_path / "sweep", only=[written])
    report = apply(model, tmp_path / "sweep", "--keep-slower")
    assert report["status"] == "accepted", report["reason"]
    applied = {r["problem"]: r["applied"] for r in report["regions"]}
    assert applied[written] == 1 and report["max_abs_diff"] <= 1e-5
    own_sweep(out, tmp_path / "all")  # and every region at once
    report = apply(model, tmp_path / "all", "--keep-slower")
    assert report["status"] == "accepted", report["reason"]
    assert all(r["applied"] == r["count"] for r in report["regions"]), report["regions"]


def test_apply_keeps_the_code_of_a_region_whose_kernel_is_slower(tmp_path):
    """Seen on the H200: 2_ShallowWideMLP's sweep found kernels at 0.53x and 0.43x of two of its
    regions' own code, and apply put them in, making the model 0.64x. A region whose best kernel
    is not faster keeps its code; --keep-slower puts every kernel in."""
    model = model_file(tmp_path, "writes", WRITES)
    out = tmp_path / "regions"
    problems = [r["problem"] for r in extract(model, out)["regions"]]
    slow, fast = problems[0], problems[1:]
    own_sweep(out, tmp_path / "sweep", speedups={slow: 0.5})
    report = apply(model, tmp_path / "sweep")
    regions = {r["problem"]: r for r in report["regions"]}
    assert regions[slow]["applied"] == 0 and regions[slow]["speedup"] == 0.5
    assert regions[slow]["note"] == "kept its own code: its best kernel is 0.5x of it"
    # the others were tried in the model under torch.compile, each in only if the model was faster with it
    # in every round (the regions' own code as a custom operator is not faster than Inductor's here)
    for p in fast:
        assert regions[p]["applied"] == regions[p]["count"] or regions[p]["note"].startswith(
            "kept torch.compile's code: the compiled model with its kernel was"), regions[p]
    assert report["covered"] == pytest.approx(sum(regions[p]["share"] for p in fast if regions[p]["applied"]))
    assert report["status"] == ("accepted" if report["covered"] else "unchanged"), report["reason"]
    report = apply(model, tmp_path / "sweep", "--keep-slower")
    assert all(r["applied"] == r["count"] for r in report["regions"]), report["regions"]
    # nothing faster: the model stays as it is, and apply says so (exit 0: nothing is wrong)
    own_sweep(out, tmp_path / "slow", speedups=dict.fromkeys(problems, 1.0))
    done = kevo("apply", model, tmp_path / "slow", "--device", "cpu")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "status     unchanged" in done.stdout and "faster than the region's own code" in done.stdout
    assert done.stdout.count("kept its own code: its best kernel is 1x of it") == len(problems), done.stdout


def test_apply_checks_a_model_that_returns_a_dict(tmp_path):
    model = model_file(tmp_path, "named", '''
        import torch
        import torch.nn as nn


        class Model(nn.Module):
            def __init__(self, dim):
                super().__init__()
                self.fc = nn.Linear(dim, dim)

            def forward(self, x, scale: float = 2.0):
                h = torch.relu(self.fc(x)) * scale
                return {"out": h, "parts": (h.sum(), h.amax(dim=0))}


        batch_size = 8
        dim = 16


        def get_inputs():
            return [torch.randn(batch_size, dim), 3.0]


        def get_init_inputs():
            return [dim]
        ''')
    out = tmp_path / "regions"
    extract(model, out)
    own_sweep(out, tmp_path / "sweep")
    report = apply(model, tmp_path / "sweep", "--keep-slower")
    assert report["status"] == "accepted", report["reason"]
    assert all(r["applied"] == r["count"] for r in report["regions"]) and report["max_abs_diff"] <= 1e-5


def test_a_region_whose_result_nothing_reads_is_skipped_not_written_empty(tmp_path):
    # Dynamo keeps a layer whose result the forward drops (as in KernelBench's LSTMHn and
    # Mamba2ReturnFinalState): it takes time in the model, but a problem of it would return nothing
    model = model_file(tmp_path, "dead", '''
        import torch
        import torch.nn as nn


        class Model(nn.Module):
            def __init__(self, dim):
                super().__init__()
                self.fc = nn.Linear(dim, dim)
                self.head = nn.Linear(dim, dim)

            def forward(self, x):
                h = torch.tanh(x)
                unused = self.head(h)  # as heavy as what the model returns: its share is no rounding error
                return torch.relu(self.fc(h))


        batch_size = 8
        dim = 64


        def get_inputs():
            return [torch.randn(batch_size, dim)]


        def get_init_inputs():
            return [dim]
        ''')
    out = tmp_path / "regions"
    manifest = extract(model, out)
    assert [(s["region"], s["reason"]) for s in manifest["skipped"]] == [
        ("linear", "linear: computes nothing the model reads")], manifest["skipped"]
    assert sorted(tuple(r["ops"]) for r in manifest["regions"]) == [("linear", "relu"), ("tanh",)]
    for region in manifest["regions"]:
        _, outs = run_problem(out / region["problem"])
        assert outs and all(o.numel() for o in outs)


SPECTRAL = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, width, modes):
        super().__init__()
        self.modes = modes
        self.weights = nn.Parameter(torch.randn(width, width, modes, dtype=torch.cfloat) / width)
        self.fc = nn.Linear(width, width)

    def forward(self, x):
        x_ft = torch.fft.rfft(x)
        out_ft = torch.einsum("bix,iox->box", x_ft[:, :, :self.modes], self.weights)
        y = torch.fft.irfft(out_ft, n=x.size(-1))
        return torch.relu(self.fc((y + x).transpose(1, 2)))


batch_size = 2
width = 16
modes = 4
length = 32


def get_inputs():
    return [torch.randn(batch_size, width, length)]


def get_init_inputs():
    return [width, modes]
'''


def test_complex_parameters_and_activations_are_drawn_and_complex_outputs_skipped(tmp_path):
    model = model_file(tmp_path, "spectral", SPECTRAL)
    out = tmp_path / "regions"
    manifest = extract(model, out)
    # the region that hands a complex tensor on cannot be judged: skipped, with the reason
    assert [s["region"] for s in manifest["skipped"]] == ["fft_rfft"], manifest["skipped"]
    assert "complex" in manifest["skipped"][0]["reason"]
    einsum = next(r for r in manifest["regions"] if r["ops"][0] == "einsum")
    assert einsum["where"] == ["weights"]
    text = (out / einsum["problem"]).read_text()
    assert "nn.Parameter(torch.view_as_complex(" in text  # the complex weight stays a parameter
    inputs, outs = run_problem(out / einsum["problem"])
    assert inputs[0].dtype == torch.complex64 and outs[0].dtype == torch.float32
    own_sweep(out, tmp_path / "sweep")
    report = apply(model, tmp_path / "sweep", "--keep-slower")
    assert report["status"] == "accepted", report["reason"]


def test_a_model_that_fails_on_its_own_inputs_is_told_so(tmp_path):
    model = model_file(tmp_path, "norm", '''
        import torch
        import torch.nn as nn


        class Model(nn.Module):
            def __init__(self, dim):
                super().__init__()
                self.fc = nn.Linear(dim, dim)
                self.norm = nn.BatchNorm1d(dim)

            def forward(self, x):
                return self.norm(self.fc(x))


        batch_size = 4
        dim = 8


        def get_inputs():
            return [torch.randn(batch_size, dim)]


        def get_init_inputs():
            return [dim]
        ''')
    done = kevo("extract", model, "-o", tmp_path / "out", "--device", "cpu", "--no-compile",
                "--shape", "batch_size=1")  # BatchNorm in training takes more than one value per channel
    assert done.returncode == 2, done.stderr
    line = done.stderr.strip().splitlines()[-1]
    assert line.startswith("kevo extract:") and "Traceback" not in done.stderr
    assert "without torch.compile" in line and "more than 1 value per channel" in line, line


def test_describe_takes_a_slice_of_a_large_tensor_at_a_time():
    script = textwrap.dedent('''
        import resource, torch
        from evolve.models.regions import describe
        x = torch.randn(32 << 20)  # 128 MiB
        describe(torch.randn(1000))
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        stats = describe(x)
        print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024, stats.form)
        ''')
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    grown_mib, form = done.stdout.split()
    # by slices: about 42 MiB, up to 76 seen on a loaded machine; the whole tensor at once, as float64,
    # would be 256 MiB, and even one float32 copy 128
    assert form == "draw" and float(grown_mib) < 100, f"describing 128 MiB took {grown_mib} MiB more"


def test_moments_by_slices_are_the_whole_tensors():
    torch.manual_seed(0)
    x = torch.randn(1001) * 3 + 5
    x[7], x[500] = float("inf"), float("nan")
    finite = x[torch.isfinite(x)].double()
    for step in (1, 7, 64, 1 << 22):
        count, mean, std, lo, hi = _moments(x, step)
        assert count == 999
        assert mean == pytest.approx(float(finite.mean()), rel=1e-12)
        assert std == pytest.approx(float(finite.std()), rel=1e-9)
        assert (lo, hi) == (float(finite.min()), float(finite.max()))
    stats = describe(x.reshape(7, 143))
    assert stats.form == "draw" and stats.shape == (7, 143)
    assert describe(torch.tril(torch.ones(5, 5))).form == "tril"
    assert describe(torch.full((3,), 2.0)).form == "constant"
    assert describe(torch.randn(4, dtype=torch.cfloat)).form == "complex"


_SPIKE = {"calls": 0, "at": 0}


@torch.library.custom_op("kevo_test::spike", mutates_args=())
def _spike(x: torch.Tensor) -> torch.Tensor:
    """``x + 1``, and on the call counted ``_SPIKE["at"]`` a burst of other work (as if the machine
    were busy with something else)."""
    _SPIKE["calls"] += 1
    if _SPIKE["calls"] == _SPIKE["at"]:
        a = torch.randn(256, 256)
        for _ in range(200):
            a = torch.tanh(a @ a)
    return x + 1


@_spike.register_fake
def _(x):
    return torch.empty_like(x)


def test_a_forward_slowed_by_something_else_does_not_make_its_region_hot(tmp_path):
    from evolve.models.model import capture, profile
    from platforms import get_platform

    model = model_file(tmp_path, "spiky", '''
        import torch
        import torch.nn as nn


        class Model(nn.Module):
            def __init__(self, dim):
                super().__init__()
                self.fc = nn.Linear(dim, dim)

            def forward(self, x):
                h = torch.ops.kevo_test.spike(torch.sigmoid(x))
                return torch.relu(self.fc(h))


        batch_size = 64
        dim = 256


        def get_inputs():
            return [torch.randn(batch_size, dim)]


        def get_init_inputs():
            return [dim]
        ''')
    problem = load_problem(model)
    platform = get_platform("cpu")
    captured = capture(problem, platform)
    inputs = make_inputs(problem, 0, "cpu")
    _SPIKE["calls"], _SPIKE["at"] = 0, 3  # one warm-up forward, then the second of three profiled
    prof = profile(captured, inputs, platform, forwards=3)
    assert _SPIKE["calls"] == 4
    spiky = next(k for k in captured.keys() if "spike" in captured.region(k).region.ops)
    times = prof.regions[spiky].per_forward
    assert len(times) == 3 and prof.regions[spiky].calls == 3
    assert prof.region_ms(spiky) == statistics.median(times)
    assert max(times) > 20 * prof.region_ms(spiky), times  # the burst is there, in one forward
    assert prof.total_ms < max(times) / 2
    assert prof.total_ms >= sum(r.ms for r in prof.regions.values()) * (1 - 1e-9)  # summed in another order
