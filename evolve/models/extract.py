"""``kevo extract``: a whole model's hot regions as KernelBench problems, a sweep over them,
and ``manifest.json``.

The model runs under torch.compile's graph capture and the profiler
(``evolve.models.model``); its regions are ranked by device time, identical
ones (a repeated block) counted together, and the hottest written, one problem
file each (``evolve.models.regions``), until they cover the share of the
model's time asked for. Every file written is checked before it is kept: built
with the model's own parameters and run on the model's own activations there,
it must give what the region gave. Each is timed as kevo times a kernel, eager
and (unless told not to) under torch.compile, and so is the whole model.
"""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path
from typing import Any

from evolve.models.manifest import (SWEEP_FILE, CaptureError, Manifest, RegionEntry, read_manifest,
                                     sweep_text, write_manifest)
from evolve.models.fusion import Region
from evolve.models.model import Captured, Key, Profile, capture, observe, profile, time_forward
from evolve.models.regions import (NotWritable, RegionSpec, before_writes, bind_state, describe, region_spec,
                                    render)
from fitness.problems.problem import build_model, load_problem, make_inputs
from platforms import Platform, get_platform

log = logging.getLogger(__name__)


@dataclasses.dataclass
class _Group:
    """Identical regions: one spec, every instance's key and time."""

    spec: RegionSpec
    region: Region  # the first instance's
    keys: list[Key]
    ms: float = 0.0  # per forward, all instances
    calls: float = 0.0  # instances per forward


def extract(model_path: str | Path, out_dir: str | Path, shapes: dict[str, int] | None = None,
            device: str = "auto", cover: float = 0.8, compiled: bool = True, forwards: int = 3) -> Manifest:
    """Write the regions of the model at ``model_path`` that cover ``cover`` of its device time
    into ``out_dir`` (see the module doc); return the manifest written there.

    ``ProblemError`` for a model file that cannot be loaded, ``CaptureError`` for one that
    cannot be captured or holds nothing to extract.
    """
    if not 0 < cover <= 1:
        raise CaptureError(f"--cover {cover}: a share of the model's time, above 0 and at most 1")
    import torch

    model_path, out_dir = Path(model_path).resolve(), Path(out_dir)
    problem = load_problem(model_path, shapes)
    platform = get_platform(device)
    captured = capture(problem, platform)
    inputs = make_inputs(problem, 0, platform.device())
    try:
        seen = observe(captured, inputs, describe)
        prof = profile(captured, inputs, platform, forwards=forwards)
    except torch._dynamo.exc.BackendCompilerFailed:
        raise  # our backend (the regions) failed: a bug of kevo's, with its traceback
    except Exception as exc:  # the user's model under Dynamo: its failure is the model's
        raise CaptureError(f"{model_path.name}: {_model_fault(problem, platform, exc)}") from None
    if not captured.graphs:
        raise CaptureError(f"{model_path.name}: torch.compile traced no graph of its forward: nothing to extract")
    groups, skipped = _groups(captured, prof, seen)
    if not groups:
        raise CaptureError(f"{model_path.name}: no region of its forward can be written as a problem "
                           f"({'; '.join(s['reason'] for s in skipped[:3]) or 'no operators found'})")
    out_dir.mkdir(parents=True, exist_ok=True)
    _forget_previous(out_dir)
    written = _write_covering(groups, cover, prof, model_path, out_dir, captured, inputs, platform, skipped)
    if not written:
        raise CaptureError(f"{model_path.name}: no region could be written ({skipped[0]['reason']})")
    entries = [_entry(group, path, share, platform, compiled) for group, path, share in written]
    covered = min(1.0, sum(e.share for e in entries))
    eager_ms = time_forward(platform, captured.model, problem)
    compiled_ms = _compiled_ms(platform, captured.model, problem) if compiled else None
    manifest = Manifest(str(model_path), dict(shapes or {}), platform.name, platform.device_name(), prof.total_ms,
                        cover, covered, _share(sum(g.ms for g in groups), prof.total_ms),
                        eager_ms, compiled_ms, entries, skipped)
    write_manifest(manifest, out_dir)
    (out_dir / SWEEP_FILE).write_text(sweep_text(manifest, model_path.name), encoding="utf-8")
    return manifest


def _groups(captured: Captured, prof: Profile, seen: dict[Key, list[Any]]) -> tuple[list[_Group], list[dict]]:
    """Regions that ran in the profiled forwards, identical ones together, the hottest first;
    and those that cannot be written, with the reason."""
    groups: dict[str, _Group] = {}
    skipped = []
    for key in captured.keys():
        if key not in prof.regions or key not in seen:
            continue
        call = captured.region(key)
        state = captured.graphs[key[0]].state_of(call)
        try:
            spec = region_spec(call, state, seen[key])
        except NotWritable as exc:
            if prof.region_ms(key) > 0:
                skipped.append({"region": call.region.name, "share": _share(prof.region_ms(key), prof.total_ms),
                                "reason": str(exc)})
            continue
        group = groups.setdefault(spec.key, _Group(spec, call.region, []))
        group.keys.append(key)
        group.ms += prof.region_ms(key)
        group.calls += prof.regions[key].calls / prof.forwards
    skipped = [s for s in skipped if s["share"] >= 0.01]  # state updates and the like: not worth a line
    return sorted(groups.values(), key=lambda g: -g.ms), skipped


def _share(ms: float, total_ms: float) -> float:
    """``ms`` as a share of the forward, in [0, 1] (a region that is the whole forward sums its
    kernels in another order than the total does, which can land one ulp above 1)."""
    return min(1.0, ms / total_ms) if total_ms > 0 else 0.0


def _forget_previous(out_dir: Path) -> None:
    """The problem files an earlier extract wrote into ``out_dir`` go (their manifest names them)."""
    try:
        previous = read_manifest(out_dir)
    except CaptureError:
        return
    for region in previous.regions:
        (out_dir / region.problem).unlink(missing_ok=True)


def _write_covering(groups: list[_Group], cover: float, prof: Profile, model_path: Path, out_dir: Path,
                    captured: Captured, inputs: list[Any], platform: Platform,
                    skipped: list[dict]) -> list[tuple[_Group, Path, float]]:
    """Write the hottest groups' problem files until they cover ``cover``; each file is kept
    only if it reproduces its region (one forward checks a batch), the next hottest taking
    the place of one that does not."""
    written: list[tuple[_Group, Path, float]] = []
    covered, queue = 0.0, list(groups)
    while queue and covered < cover - 1e-9:
        batch: list[tuple[_Group, Path, float]] = []
        planned = covered
        while queue and planned < cover - 1e-9:
            group = queue.pop(0)
            share = _share(group.ms, prof.total_ms)
            path = _write(group, len(written) + len(batch), share, model_path, out_dir, captured, platform)
            batch.append((group, path, share))
            planned += share
        faults = _reproduces(batch, captured, inputs, platform)
        for group, path, share in batch:
            why = faults.get(path.name, "")
            if why:
                path.unlink()
                log.warning("extract: %s not written: %s", path.name, why)
                skipped.append({"region": group.region.name, "share": share, "reason": why})
            else:
                written.append((group, path, share))
                covered += share
        # numbering stays dense: a file dropped leaves no gap once the rest are renamed
        for rank, (group, path, share) in enumerate(written):
            wanted = out_dir / f"{rank:02d}_{path.name.split('_', 1)[1]}"
            if wanted != path:
                path.rename(wanted)
                written[rank] = (group, wanted, share)
    return written


def _write(group: _Group, rank: int, share: float, model_path: Path, out_dir: Path, captured: Captured,
           platform: Platform) -> Path:
    region = group.region
    path = out_dir / f"{rank:02d}_{region.name}.py"
    count = round(group.calls) or 1
    doc = (f"Region {rank} of {model_path.name}: {' -> '.join(region.ops)} ({region.kind}),\n"
           f"{count}x per forward, {share:.1%} of the model's {platform.name} time. Written by kevo extract;\n"
           f"the inputs are shaped like the model's activations there and drawn over a range like theirs.\n")
    path.write_text(render(group.spec, doc), encoding="utf-8")
    return path


def _entry(group: _Group, path: Path, share: float, platform: Platform, compiled: bool) -> RegionEntry:
    """The manifest's entry for a written problem, timed eager and (with ``compiled``) compiled."""
    problem = load_problem(path)
    model = build_model(problem.Model, problem, 0, platform.device())
    eager_ms = time_forward(platform, model, problem)
    compiled_ms = _compiled_ms(platform, model, problem) if compiled else None
    calls = max(group.calls, 1e-9)
    return RegionEntry(path.name, group.spec.key, group.region.kind, group.region.ops, share, round(group.calls) or 1,
                       group.ms / calls, eager_ms, compiled_ms, group.spec.names)


def _reproduces(batch: list[tuple[_Group, Path, float]], captured: Captured, inputs: list[Any],
                platform: Platform) -> dict[str, str]:
    """Per problem file of ``batch`` that does not, given the model's parameters, compute on the
    model's activations what its region computed there: what went wrong."""
    import torch

    from fitness.judge.compare import compare

    firsts = {group.keys[0]: (group.spec, path) for group, path, _ in batch}
    faults: dict[str, str] = {path.name: "the region did not run" for _, path in firsts.values()}

    def check(key: Any, inner: Any, args: tuple) -> Any:
        spec, path = firsts.pop(key, (None, None))
        if path is None:
            return inner(*args)
        given = before_writes(args, spec)
        out = inner(*args)
        refs = [o.detach() for o in out] + [args[at] for at in spec.mutated]  # and what it wrote
        if any(isinstance(r, torch.Tensor) and r.is_complex() for r in refs):
            faults[path.name] = "an output is complex (kevo's judge compares real tensors)"
            return out
        try:
            problem = load_problem(path)
            model = build_model(problem.Model, problem, 0, platform.device())
            bind_state(model, given, spec.roles, path.name)
            mine = model(*[a for a, r in zip(given, spec.roles) if r == "input"])
            mine = list(mine) if isinstance(mine, (tuple, list)) else [mine]
            scale = max((float(r.abs().max()) for r in refs if r.numel() and r.is_floating_point()), default=1.0)
            verdict = compare(mine, refs, 1e-5 * max(1.0, scale))
        except Exception as exc:  # a file we wrote that does not run: said, and the model goes on
            faults[path.name] = f"the written problem fails: {type(exc).__name__}: {str(exc)[:200]}"
            return out
        faults[path.name] = ("" if verdict.status == "accepted" else
                             f"the written problem does not reproduce the region ({verdict.reason})")
        return out

    with torch.no_grad(), captured.observed(check):
        captured(*inputs)
    return faults


def _compiled_ms(platform: Platform, model: Any, problem: Any) -> float | None:
    """The model under torch.compile (Inductor), timed as kevo times a kernel; None if it does
    not compile here (said once in the log)."""
    import torch

    compiled = torch.compile(model)
    try:
        with torch.no_grad():
            compiled(*make_inputs(problem, 0, platform.device()))
        return time_forward(platform, compiled, problem)
    except Exception as exc:  # Inductor on this machine (a compiler missing, say): recorded as no figure
        log.warning("extract: torch.compile failed on %s: %s", problem.path.name, _first_line(exc))
        return None


def _model_fault(problem: Any, platform: Platform, exc: BaseException) -> str:
    """Why the model failed under the capture: its own failure when it fails without torch.compile
    too (a shape it cannot take, say), else Dynamo's, with the error beneath it."""
    import torch

    try:
        with torch.no_grad():
            build_model(problem.Model, problem, 0, platform.device())(*make_inputs(problem, 0, platform.device()))
    except Exception as own:  # the model's own code, run as KernelBench runs it
        return f"the model fails on its inputs (eagerly, without torch.compile): {_first_line(own)}"
    cause = exc
    while cause.__cause__ is not None and cause.__cause__ is not cause:
        cause = cause.__cause__
    beneath = f" ({_first_line(cause)})" if cause is not exc else ""
    return f"the model fails under torch.compile's graph capture: {_first_line(exc)}{beneath}"


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0][:300]}" if lines else type(exc).__name__
