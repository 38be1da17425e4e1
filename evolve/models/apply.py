"""``kevo apply``: a sweep's best kernels back in the whole model, checked and timed end to end.

The sweep's runs (``kevo sweep`` over the ``sweep.yaml`` that ``kevo extract``
wrote) each hold the best kernel found for one region. The model is captured
again as extract captured it (``evolve.models.model``, at the manifest's
shapes), and every region whose spec key is in the manifest and has a kernel
faster than the region's own code (as the judge timed the two) runs that
kernel's ``ModelNew`` instead, holding the model's own parameters
(``evolve.models.regions.bind_state``); a region whose best kernel is slower
keeps its code, and the report says so (``keep_slower`` puts it in anyway).
Then:

- the check: on fresh inputs, the patched model against the original, under a
  model-level cutoff, and every patched region against its own code on the
  activations it meets in the model, under the region's cutoff. One wrong
  region refuses the whole model, and the refusal names it;
- the compiled model (``evolve.models.choose``): the model under torch.compile with the
  kernels as custom operators that Inductor keeps as they are (``evolve.models.compiled``),
  a kernel in only where the whole compiled model gets faster with it; checked again on fresh
  inputs, then eager, torch.compile of the same model and the patched one timed in interleaved
  rounds, each alone on the device: the figure over torch.compile with its interval. Beside it,
  the bound the manifest's shares allow (Amdahl: ``1 / (1 - covered)``, and with the kernels'
  own speedups, ``1 / ((1 - covered) + sum(share / speedup))``);
- ``module``: a package holding the chosen kernels and ``patch(model)``, for a user's own code.

The kernels run in this process: they are the ones kevo's judge accepted, read
from the sweep's stores.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import secrets
import statistics
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from evolve.models.manifest import CaptureError, Manifest, RegionEntry, read_manifest
from evolve.models.choose import Compiled, choose, output_tensors, versus
from evolve.models.compiled import RegionKernel, write_module
from evolve.models.model import Captured, Key, capture
from evolve.models.regions import (NotWritable, RegionSpec, before_writes, bind_state, describe, region_spec,
                                    write_back)
from evolve.sweep_file import stored_entries
from fitness.judge.compare import compare
from fitness.judge.cutoff import derived_cutoff, output_scale
from fitness.problems.problem import build_model, declared_cutoff, load_problem, make_inputs
from operators.seeds.precision import lower_precision_dots
from platforms import Platform, get_platform
from population_store import STORE_FILE, RunStore


@dataclasses.dataclass
class Kernel:
    """The best accepted kernel of one region's run."""

    problem: str  # the region's problem file name
    source: str
    run: str  # the run's directory, under the sweep's
    kernel_id: int
    speedup: float | None  # over the region's reference, as the judge timed it
    cutoff: float | None  # the run's max_abs_diff, when its config set one


@dataclasses.dataclass
class RegionOutcome:
    problem: str
    share: float
    count: int
    applied: int  # instances that ran the kernel
    kernel: str | None  # run/kernel id, or None
    speedup: float | None
    max_abs_diff: float | None  # worst over the checks, on the model's own activations
    cutoff: float | None
    note: str = ""


@dataclasses.dataclass
class ApplyReport:
    """What ``kevo apply`` found: accepted or refused, and the times."""

    model: str
    status: str  # accepted | refused | unchanged (no kernel makes the model faster: torch.compile as it is)
    reason: str
    regions: list[RegionOutcome]
    max_abs_diff: float | None
    cutoff: float | None
    cutoff_rule: str
    checks: int
    covered: float  # the manifest's share of the regions that run a kernel
    bound: float | None  # 1 / (1 - covered): every patched region free
    expected: float | None  # Amdahl with each kernel's own speedup
    eager_ms: float | None = None
    compiled_ms: float | None = None
    patched_ms: float | None = None
    device: str = ""
    #: The patched model over torch.compile of the same model, round by round: ``ratio`` (the median),
    #: ``low``, ``high``, ``rounds``, ``faster`` (who is, in every round); or ``why`` there is none.
    vs_compile: dict[str, Any] | None = None
    module: str = ""  # the package written with the chosen kernels and patch(model), or ""
    #: Where a chosen kernel's dots multiply fp32 below fp32: the patched model over torch.compile with TF32
    #: allowed (``torch.set_float32_matmul_precision("high")``), as ``vs_compile``.
    vs_compile_tf32: dict[str, Any] | None = None

    @property
    def speedup(self) -> float | None:
        return self.eager_ms / self.patched_ms if self.eager_ms and self.patched_ms else None

    @property
    def speedup_compiled(self) -> float | None:
        return self.compiled_ms / self.patched_ms if self.compiled_ms and self.patched_ms else None

    def to_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "speedup": self.speedup, "speedup_compiled": self.speedup_compiled}


def sweep_kernels(sweep_dir: str | Path) -> tuple[Path, dict[str, Kernel]]:
    """The directory ``kevo extract`` wrote the sweep's problems into, and per problem file the
    best accepted kernel of its run (problems without one left out)."""
    sweep_dir = Path(sweep_dir)
    entries = stored_entries(sweep_dir)
    if entries is None:
        raise CaptureError(f"{sweep_dir} is not a sweep's directory (no sweep.json): run "
                           f"'kevo sweep DIR/sweep.yaml --run-dir {sweep_dir}' first")
    folders = {Path(e.config["problem"]["reference"]).parent for e in entries}
    if len(folders) != 1:
        raise CaptureError(f"{sweep_dir}: its problems lie in {len(folders)} folders; kevo apply takes the sweep "
                           "that kevo extract wrote (one folder, with manifest.json)")
    kernels: dict[str, Kernel] = {}
    for entry in entries:
        store_path = sweep_dir / entry.name / STORE_FILE
        if not store_path.is_file():
            continue
        with RunStore.open(store_path, readonly=True) as store:
            best = store.best(1)
        if not best:
            continue
        name = Path(entry.config["problem"]["reference"]).name
        result = best[0].result or {}
        cutoff = (entry.config.get("fitness") or {}).get("max_abs_diff")
        found = Kernel(name, best[0].source, entry.name, best[0].id, result.get("speedup"), cutoff)
        if name not in kernels or best[0].runtime_ms < _runtime(kernels[name], sweep_dir):
            kernels[name] = found
    return folders.pop(), kernels


def _runtime(kernel: Kernel, sweep_dir: Path) -> float:
    with RunStore.open(sweep_dir / kernel.run / STORE_FILE, readonly=True) as store:
        return store.get(kernel.kernel_id).runtime_ms or math.inf


class _Refused(Exception):
    """A region's kernel cannot stand in the model; the message names the region."""


@contextlib.contextmanager
def _kernel_env(platform: Platform) -> Iterator[None]:
    """What a kernel needs in this process: the platform's worker environment (Triton's
    interpreter on the CPU) while kernels are loaded and run, and its setup."""
    saved = {name: os.environ.get(name) for name in platform.worker_env}
    os.environ.update(platform.worker_env)
    try:
        platform.worker_setup()
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _load_kernel(kernel: Kernel, folder: Path) -> type:
    from fitness.profiling.target import load_candidate

    path = folder / f"{Path(kernel.problem).stem}__{kernel.run}__{kernel.kernel_id}.py"
    path.write_text(kernel.source, encoding="utf-8")
    try:
        return load_candidate(path)
    except Exception as exc:  # accepted by the judge, yet it does not load here
        raise _Refused(f"region {kernel.problem}: its kernel ({kernel.run}, #{kernel.kernel_id}) does not load: "
                       f"{type(exc).__name__}: {str(exc)[:200]}") from None


class _Patch:
    """The observer that runs each region's kernel in place of its code (and, while ``checking``,
    compares the two on the region's arguments)."""

    def __init__(self, captured: Captured, manifest: Manifest, folder: Path, classes: dict[str, type],
                 kernels: dict[str, Kernel], platform: Platform) -> None:
        self.captured, self.folder, self.classes, self.kernels = captured, folder, classes, kernels
        self.platform = platform
        self.by_key = {r.key: r for r in manifest.regions}
        self.made: dict[Key, tuple[Any, RegionEntry, RegionSpec] | None] = {}
        self.checking = False
        self.worst: dict[str, tuple[float, float]] = {}  # problem -> (max_abs_diff, cutoff)
        self.failures: list[str] = []

    def __call__(self, key: Key, inner: Any, args: tuple) -> Any:
        made = self.made[key] if key in self.made else self._make(key, args)
        if made is None:
            return inner(*args)
        module, entry, spec = made
        given = before_writes(args, spec) if self.checking else []
        out = module(*[a for a, r in zip(args, spec.roles) if r == "input"])
        out = tuple(out) if isinstance(out, (tuple, list)) else (out,)
        own = write_back(out, args, spec.mutated)  # what the region writes into its arguments, the kernel's
        if self.checking:
            refs = inner(*given)
            self._check(entry, (*refs, *[given[at] for at in spec.mutated]), out)
        return own

    def _make(self, key: Key, args: tuple) -> tuple[Any, RegionEntry, RegionSpec] | None:
        call = self.captured.region(key)
        where = self.captured.graphs[key[0]].state_of(call)
        self.made[key] = None
        try:
            spec = region_spec(call, where, [describe(a) for a in args])
        except NotWritable:
            return None
        entry = self.by_key.get(spec.key)
        if entry is None or entry.problem not in self.classes:
            return None
        problem = load_problem(self.folder / entry.problem)
        module = build_model(self.classes[entry.problem], problem, 0, self.platform.device())
        try:
            bind_state(module, list(args), spec.roles, f"region {entry.problem}")
        except NotWritable as exc:
            raise _Refused(str(exc)) from None
        self.made[key] = (module, entry, spec)
        return self.made[key]

    def _check(self, entry: RegionEntry, refs: tuple, outs: tuple) -> None:
        refs = tuple(r.detach() for r in refs)
        kernel = self.kernels[entry.problem]
        cutoff = kernel.cutoff or derived_cutoff(list(refs), output_scale(list(refs)))[0]
        verdict = compare(list(outs), list(refs), cutoff)
        worst = self.worst.get(entry.problem, (0.0, cutoff))
        diff = verdict.max_abs_diff if math.isfinite(verdict.max_abs_diff) else math.inf
        self.worst[entry.problem] = (max(worst[0], diff), cutoff)
        if verdict.status != "accepted":
            self.failures.append(f"region {entry.problem} ({' -> '.join(entry.ops)}): {verdict.reason}, on the "
                                 "activations it meets in the model")

    def applied(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for made in self.made.values():
            if made is not None:
                counts[made[1].problem] = counts.get(made[1].problem, 0) + 1
        return counts


def apply(model_path: str | Path, sweep_dir: str | Path, device: str = "auto", max_abs_diff: float | None = None,
          checks: int = 3, time_it: bool = True, keep_slower: bool = False,
          module: str | Path | None = None) -> ApplyReport:
    """Put the sweep's best kernels into the model at ``model_path`` (those faster than their region's
    own code and than torch.compile's, or all with ``keep_slower``), check it on ``checks`` fresh input
    sets and (if accepted and ``time_it``) time it under torch.compile; with ``module``, write the
    package of the chosen kernels into that folder; see the module doc.

    ``CaptureError`` when the sweep is not this model's or holds no kernel yet.
    """
    model_path = Path(model_path).resolve()
    folder, kernels = sweep_kernels(sweep_dir)
    manifest = read_manifest(folder)
    if Path(manifest.model).name != model_path.name:
        raise CaptureError(f"{sweep_dir}: its regions come from {Path(manifest.model).name}, not {model_path.name}")
    if not kernels:
        raise CaptureError(f"{sweep_dir}: no region has an accepted kernel yet (see 'kevo report {sweep_dir}')")
    slower = {} if keep_slower else {n: k for n, k in kernels.items() if k.speedup is not None and k.speedup <= 1}
    kernels = {n: k for n, k in kernels.items() if n not in slower}
    platform = get_platform(device)
    if not kernels:
        regions = [_outcome(e, None, 0, (None, None), slower) for e in manifest.regions]
        return ApplyReport(str(model_path), "unchanged", "no region's kernel is faster than the region's own code "
                           "(--keep-slower puts them in anyway)", regions, None, None, "", 0, 0.0, None, None,
                           device=platform.name)
    problem = load_problem(model_path, manifest.shapes)
    with _kernel_env(platform), tempfile.TemporaryDirectory(prefix=f"kevo-apply-{os.getpid()}-") as tmp:
        try:
            classes = {name: _load_kernel(kernel, Path(tmp)) for name, kernel in kernels.items()}
            patched = capture(problem, platform)
            patch = _Patch(patched, manifest, folder, classes, kernels, platform)
            report = _check(model_path, problem, patched, patch, manifest, kernels, slower, platform, max_abs_diff,
                            checks)
        except _Refused as exc:
            return ApplyReport(str(model_path), "refused", str(exc), [], None, None, "", 0, 0.0, None, None,
                               device=platform.name)
        if report.status == "accepted" and time_it:
            _compiled(report, problem, patch, manifest, folder, kernels, classes, platform, keep_slower, checks)
            if module is not None and report.status == "accepted":
                _write(report, Path(module), model_path, manifest, folder, kernels)
    return report


def _check(model_path: Path, problem: Any, patched: Captured, patch: _Patch, manifest: Manifest,
           kernels: dict[str, Kernel], slower: dict[str, Kernel], platform: Platform, max_abs_diff: float | None,
           checks: int) -> ApplyReport:
    """The patched model against the original on ``checks`` fresh input sets (see the module doc)."""
    import torch

    original = build_model(problem.Model, problem, 0, platform.device())
    cutoff, rule = (max_abs_diff, "given") if max_abs_diff is not None else (declared_cutoff(model_path), "")
    rule = rule or ("the model's MAX_ABS_DIFF" if cutoff is not None else "")
    worst, model_fault = 0.0, ""
    with patched.observed(patch):
        for _ in range(checks):
            inputs = make_inputs(problem, secrets.randbelow(1 << 30) + 1, platform.device())
            # a model that draws in its forward (an initial state, say) draws the same in both
            drawn = secrets.randbelow(1 << 30) + 1
            torch.manual_seed(drawn)
            with torch.no_grad():
                refs = original(*[x.clone() if isinstance(x, torch.Tensor) else x for x in inputs])
            refs = [r.detach() for r in output_tensors(refs)]
            if cutoff is None:
                cutoff, rule = derived_cutoff(refs, output_scale(refs))
            patch.checking = True
            torch.manual_seed(drawn)
            try:
                outs = patched(*inputs)
            finally:
                patch.checking = False
            verdict = compare(output_tensors(outs), refs, cutoff)
            worst = max(worst, verdict.max_abs_diff)
            if verdict.status != "accepted" and not model_fault:
                model_fault = f"the model's {verdict.reason}"
    applied = patch.applied()
    regions = [_outcome(e, kernels.get(e.problem), applied.get(e.problem, 0), patch.worst.get(e.problem, (None, None)),
                        slower) for e in manifest.regions]
    status, reason = "accepted", ""
    if patch.failures:
        status, reason = "refused", patch.failures[0]
    elif model_fault:
        blame = max(patch.worst.items(), key=lambda kv: kv[1][0] / kv[1][1], default=None)
        status, reason = "refused", model_fault + (
            f"; every region stays within its own cutoff, {blame[0]} the closest to it "
            f"({blame[1][0]:.3g} of {blame[1][1]:.3g})" if blame else "")
    covered = sum(r.share for r in regions if r.applied)
    speedups = [(r.share, r.speedup) for r in regions if r.applied]
    expected = None
    if covered and all(s for _, s in speedups):
        expected = 1.0 / max((1.0 - covered) + sum(share / s for share, s in speedups), 1e-12)
    bound = 1.0 / (1.0 - covered) if covered < 1.0 else None
    if not applied and status == "accepted":
        status, reason = "refused", "no region of the model matches a kernel of the sweep (extracted at other shapes?)"
    return ApplyReport(str(model_path), status, reason, regions, worst, cutoff, rule, checks, covered, bound,
                       expected, device=platform.name)


def _outcome(entry: RegionEntry, kernel: Kernel | None, applied: int, worst: tuple[float | None, float | None],
             slower: dict[str, Kernel]) -> RegionOutcome:
    """One region's line of the report: the kernel it ran, or why it kept its own code."""
    if kernel is None and entry.problem in slower:
        kernel = slower[entry.problem]
        note = f"kept its own code: its best kernel is {kernel.speedup:.3g}x of it"
    else:
        note = ("no accepted kernel in the sweep" if kernel is None else
                "" if applied else "no region of the model matches it at these shapes")
    return RegionOutcome(entry.problem, entry.share, entry.count, applied,
                         f"{kernel.run}#{kernel.kernel_id}" if kernel else None, kernel.speedup if kernel else None,
                         *worst, note)


def _compiled(report: ApplyReport, problem: Any, patch: _Patch, manifest: Manifest, folder: Path,
              kernels: dict[str, Kernel], classes: dict[str, type], platform: Platform, force: bool,
              checks: int) -> None:
    """The compiled model's choice, check and times into ``report`` (``evolve.models.choose``): a
    region's kernel in only where the whole compiled model is faster with it (all with ``force``)."""
    original = build_model(problem.Model, problem, 0, platform.device())
    entries = sorted((e for e in manifest.regions if e.problem in classes and patch.applied().get(e.problem)),
                     key=lambda e: -e.share)
    candidates = [RegionKernel(e.key, e.problem, classes[e.problem], load_problem(folder / e.problem),
                               bool(lower_precision_dots(kernels[e.problem].source))) for e in entries]
    try:
        outcome = choose(problem, candidates, platform, original, report.cutoff, checks, force=force)
    except Exception as exc:  # Inductor on this machine: no figure, and the report says why
        report.vs_compile = {"why": f"torch.compile failed here ({type(exc).__name__}: {str(exc)[:200]})"}
        return
    if outcome.fault:
        report.status, report.reason = "refused", outcome.fault
        return
    report.max_abs_diff = max(report.max_abs_diff or 0.0, outcome.max_abs_diff)
    _chosen(report, outcome, {e.key: e.problem for e in entries})
    report.eager_ms, report.compiled_ms, report.patched_ms = (statistics.median(outcome.times[n])
                                                              for n in ("eager", "compiled", "patched"))
    report.vs_compile = versus(outcome.times)
    if "compiled_tf32" in outcome.times:
        report.vs_compile_tf32 = versus(outcome.times, "compiled_tf32")
    if not outcome.chosen:  # what a user keeps is torch.compile as it is, not a patched model
        report.status, report.patched_ms = "unchanged", None
        report.reason = "no kernel makes the model under torch.compile faster: keep torch.compile as it is"
        report.vs_compile = {"same": "the model stays torch.compile's own"}


def _chosen(report: ApplyReport, outcome: Compiled, problems: dict[str, str]) -> None:
    """Each region's line after the choice: the instances that run its kernel under torch.compile, or
    why it keeps torch.compile's code; the covered share and the bounds over the chosen ones."""
    trials = {problems[t.key]: t for t in outcome.trials}
    chosen = {problems[k] for k in outcome.chosen}
    for region in report.regions:
        if not region.applied:
            continue
        key = next(k for k, p in problems.items() if p == region.problem)
        if region.problem in chosen:
            region.applied = outcome.found.get(key, 0)
            continue
        region.applied = 0
        trial = trials.get(region.problem)
        region.note = (f"kept torch.compile's code: the compiled model with its kernel was {trial.ratio:.3g}x of "
                       f"without (rounds {', '.join(f'{r:.3g}' for r in trial.ratios)})" if trial else
                       "kept torch.compile's code: no region of the traced graphs matches it")
    applied = [r for r in report.regions if r.applied]
    report.covered = sum(r.share for r in applied)
    report.bound = 1.0 / (1.0 - report.covered) if report.covered < 1.0 else None
    report.expected = None
    if report.covered and all(r.speedup for r in applied):
        report.expected = 1.0 / max((1.0 - report.covered) + sum(r.share / r.speedup for r in applied), 1e-12)


def _write(report: ApplyReport, folder: Path, model_path: Path, manifest: Manifest, source_folder: Path,
           kernels: dict[str, Kernel]) -> None:
    """The package of the chosen kernels (``evolve.models.compiled.write_module``)."""
    keys = {e.problem: e.key for e in manifest.regions}
    chosen = [(keys[r.problem], r.problem, kernels[r.problem].source, source_folder / r.problem)
              for r in report.regions if r.applied]
    package = "kevo_" + "".join(c if c.isalnum() else "_" for c in model_path.stem.lower()).strip("_")
    versus_ = report.vs_compile or {}
    figure = (f"{versus_['ratio']:.3g}x over torch.compile (rounds {versus_['low']:.3g} to {versus_['high']:.3g}), "
              f"{report.speedup:.3g}x over eager" if "ratio" in versus_ else versus_.get("why", "not timed"))
    report.module = str(write_module(folder, package, chosen, model_path.name, report.device, figure))
