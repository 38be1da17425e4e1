"""Seeds from torch.compile: ``kevo seed``, ``problem.seeds: compile`` and sweeps without seed files.

``compile_seed(problem_path)`` captures Inductor's output for the problem on this machine's GPU
(``evolve.seeding.inductor``) and converts it into a candidate file (``operators.seeds.convert``). A
matmul or convolution that Inductor hands to an extern library (cuBLAS, cuDNN) is captured again with
its max-autotune Triton templates, and an attention it hands to a fused ATen kernel, by its math with
those templates (``attention_math``); where that still calls the library, or the code holds anything but
Triton kernels, the problem gets no seed and ``SeedError`` says why in one line.

``compile_seeds(problem_path)`` captures the problem under each of Inductor's configurations in
``evolve.seeding.inductor.VARIANTS`` (persistent against looped reductions, split reductions off,
coordinate-descent tuning, max-autotune with its Triton GEMM and convolution templates, and where the
default code calls a fused attention kernel, attention by its math with those templates), converts each,
and keeps one seed per distinct program (``operators.seeds.variants``: equal up to tunable numbers, the
first configuration in that order keeps it). Each seed is named by its configuration, in its header and
in ``CompiledSeed.variant``. A configuration that cannot change what the default wrote is not captured
(looped reductions without a persistent reduction, split reductions off without a reduction); one whose
capture or conversion fails is left out, its reason kept in ``CompiledSeed.skipped`` of the first seed.
Where no configuration gives one, the problem's own model is run once uncompiled, and the ``SeedError``
says first if that fails too (the problem is broken at these shapes, not Inductor). A seed with
Inductor's matmul template is followed by its split-K and its persistent variants
(``operators.seeds.split_k``, ``operators.seeds.persistent``), named ``CONFIGURATION_split_k`` and
``CONFIGURATION_persistent``, and a seed with a grouped convolution template of one output channel a
group by its depthwise variant (``operators.seeds.depthwise``, ``CONFIGURATION_depthwise``); a template
a rewrite declines is named in ``skipped`` with its reason. A distinct seed whose matmul or convolution
template reads fp32 operands is followed first by its precision twins (``operators.seeds.precision``):
the same program with its dots at ``tf32`` and at ``tf32x3``, named ``CONFIGURATION_tf32`` and
``CONFIGURATION_tf32x3``, which the cutoff judges like any other seed (kept apart from the duplicates,
whose key does not tell precisions apart). ``kevo seed --all`` and ``problem.seeds: compile`` start from
all of them.

The default configuration's seed carries a fast path (``operators.seeds.fast_path``): the problem is
captured once more with every size static, as a user's torch.compile compiles it, and that code runs
where the forward's arguments are those it was compiled for; the general code holds elsewhere (a skipped
``default_fast_path`` says why where it cannot be made).

Convolutions come from the max-autotune configuration, through Inductor's Triton convolution template
(``operators.seeds.template``), where its benchmark picks the template over a 1x1 convolution's extern
matmul; such a seed holds at the weight sizes it was compiled for (Inductor fixes them). What Inductor
writes for a GPU is only seen on a GPU: kevo's tests convert recordings made on the CPU
(``device="cpu"``, Inductor's Triton backend for the CPU under the interpreter;
``tests/fixtures/seed_variants/``), whose heuristics, splits and autotuning differ from a GPU's. The GPU
recordings of the templates (``tests/fixtures/inductor/``) hold a matmul only: a convolution template
captured on a GPU has not been converted and judged yet.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from operators.seeds.convert import ConversionError, NotTritonOnly, seed_source
from operators.seeds.fast_path import fast_path_seed
from operators.seeds.depthwise import VARIANT as DEPTHWISE, DepthwiseError, depthwise_seed
from operators.seeds.persistent import VARIANT as PERSISTENT, PersistentError, persistent_seed
from operators.seeds.precision import PRECISIONS, precision_seed, reads_fp32
from operators.seeds.split_k import VARIANT as SPLIT_K, SplitKError, split_k_seed
from platforms import get_platform

log = logging.getLogger(__name__)


class SeedError(Exception):
    """No seed could be written for the problem; the message says why in one line."""


@dataclasses.dataclass(frozen=True)
class CompiledSeed:
    source: str  # the candidate file's text
    kernels: list[str]  # the Triton kernels it launches
    mode: str | None  # None, or "max-autotune-triton" when the templates were needed
    eager_ms: float | None
    compiled_ms: float | None
    recording: dict[str, Any]  # what Inductor wrote (evolve.seeding.inductor), kept with a run
    variant: str = "default"  # the Inductor configuration it came from (evolve.seeding.inductor.VARIANTS)
    duplicates: tuple[str, ...] = ()  # configurations that wrote the same program, dropped for this one
    skipped: tuple[tuple[str, str], ...] = ()  # (configuration, why it gave no seed), on compile_seeds' first


def _seed(recording: dict[str, Any], source: str, mode: str | None, variant: str) -> CompiledSeed:
    kernels = sorted((recording.get("kernels") or {}).keys())
    return CompiledSeed(source, [k for k in kernels if k in source], mode, recording.get("eager_ms"),
                        recording.get("compiled_ms"), recording, variant)


def compile_seed(problem_path: str | Path, device: str = "cuda", shapes: dict[str, int] | None = None,
                 dtype: str | None = None) -> CompiledSeed:
    """The seed for the problem at ``problem_path`` from torch.compile on ``device``, compiled at
    ``shapes`` (the problem's own if None); ``SeedError`` if none."""
    from evolve.seeding.inductor import capture

    problem_path = Path(problem_path)
    try:
        problem_source = problem_path.read_text(encoding="utf-8")
    except OSError as exc:
        raise SeedError(f"cannot read problem file {problem_path}: {exc.strerror}") from None
    _require_gpu(device)
    from evolve.seeding.inductor import FUSED_ATTENTION

    first: NotTritonOnly | None = None
    variant = "default"
    while True:
        try:
            recording = capture(problem_path, device=device, shapes=shapes, dtype=dtype, variant=variant)
        except Exception as exc:  # compiling the user's model: any error is the problem's
            reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
            raise SeedError(f"torch.compile failed on {problem_path.name}: {type(exc).__name__}: {reason}") from exc
        finally:
            _release(device)
        try:
            source = seed_source(recording, problem_source)
        except NotTritonOnly as exc:
            first = first or exc
            code = "\n".join(recording.get("codes") or [])
            # a fused attention kernel: its math, with the templates; an extern GEMM or convolution: the templates
            after = "attention_math" if FUSED_ATTENTION.search(code) else (
                "max_autotune" if variant == "default" and "extern" in str(exc) else None)
            if after is None or after == variant:
                raise SeedError(f"{problem_path.name}: no Triton-only seed: {first}") from None
            log.info("seed: %s: %s; trying Inductor's configuration %s", problem_path.name, exc, after)
            variant = after
            continue
        except ConversionError as exc:
            raise SeedError(f"{problem_path.name}: cannot turn Inductor's code into a seed: {exc}") from None
        seed = _seed(recording, source, recording.get("mode"), variant)
        if variant == "default":
            seed, why = _with_fast_path(seed, problem_path, problem_source, lambda: capture(
                problem_path, device=device, shapes=shapes, dtype=dtype, static=True), device)
            if why:
                log.info("seed: %s: %s", problem_path.name, why)
        return seed


def _with_fast_path(seed: CompiledSeed, problem_path: Path, problem_source: str,
                    capture_static: Callable[[], dict[str, Any]], device: str) -> tuple[CompiledSeed, str]:
    """``seed`` with torch.compile's code at these shapes, every size static (``capture_static()``), as the
    path its forward takes at them (``operators.seeds.fast_path``); else ``seed`` as it was, and why not."""
    if seed.recording.get("static_dims"):
        return seed, "no fast path: the seed's sizes are constants already"
    started = time.perf_counter()
    try:
        recording = capture_static()
    except Exception as exc:  # compiling the user's model: any error is the problem's
        reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
        return seed, f"no fast path: torch.compile with static sizes failed: {type(exc).__name__}: {reason}"
    finally:
        _release(device)
    try:
        merged = fast_path_seed(seed.source, seed_source(recording, problem_source), recording)
    except ConversionError as exc:
        return seed, f"no fast path: {exc}"
    log.info("seed: %s: fast path captured in %.1f s", problem_path.name, time.perf_counter() - started)
    fast = {k: recording.get(k) for k in ("kernels", "compile_s", "compiled_ms", "compiled_protocol_ms")}
    return dataclasses.replace(seed, source=merged, recording={**seed.recording, "fast_path": fast}), ""


def compile_seeds(problem_path: str | Path, device: str = "cuda", shapes: dict[str, int] | None = None,
                  dtype: str | None = None, variants: list[str] | None = None,
                  limit: int | None = None, memory_wait_s: float = 0.0) -> list[CompiledSeed]:
    """One seed per distinct program Inductor writes for the problem under ``variants`` (all of
    ``VARIANTS`` if None, in that order), on ``device`` (see the module doc); where ``compile_seed``
    gives a seed, the first is that one. ``SeedError`` if none. ``device="cpu"`` captures Inductor's Triton
    backend for the CPU under the interpreter (the process needs ``TRITON_INTERPRET=1`` from its start).
    ``limit``: the configurations after the one that gives the ``limit``-th distinct seed are not
    captured (a run evaluates no more seeds than its budget). ``memory_wait_s`` > 0: a configuration
    that runs out of device memory waits up to that long for it and is captured once more
    (``evolve.seeding.room``; a sweep's runs side by side)."""
    from evolve.seeding.inductor import VARIANTS, capture
    from evolve.seeding.room import captured_with_room
    from fitness.refusal import out_of_memory

    from operators.seeds.variants import distinct

    problem_path = Path(problem_path)
    try:
        problem_source = problem_path.read_text(encoding="utf-8")
    except OSError as exc:
        raise SeedError(f"cannot read problem file {problem_path}: {exc.strerror}") from None
    names = list(variants or VARIANTS)
    unknown = [n for n in names if n not in VARIANTS]
    if unknown:
        raise SeedError(f"unknown Inductor configuration(s) {', '.join(unknown)} (known: {', '.join(VARIANTS)})")
    if device != "cpu":
        _require_gpu(device)
    seeds: list[CompiledSeed] = []
    skipped: list[tuple[str, str]] = []
    turns = memory_wait_s > 0 and device != "cpu"  # side by side: a large capture takes its turn on the device
    default_times: dict[str, Any] = {}  # torch.compile's own times (its default configuration), kept with the seeds
    first_code: str | None = None  # what the default configuration wrote, once captured
    form: dict[str, bool] | None = None  # where the last capture's sizes ended (symbolic, or some fixed)
    for name in names:
        if limit is not None and len(distinct(seeds, lambda s: s.source, lambda s: s.variant)) >= limit:
            skipped.append((name, f"not captured: {limit} distinct seed(s) are all the run can evaluate"))
            continue
        why_not = _cannot_change(name, first_code)
        if why_not:
            skipped.append((name, why_not))
            continue
        started = time.perf_counter()
        wait_s = memory_wait_s if device != "cpu" else 0.0
        try:
            recording = captured_with_room(
                lambda: capture(problem_path, device=device, shapes=shapes, dtype=dtype, variant=name, form=form),
                problem_path, shapes, dtype, wait_s, lambda: _release(device), turns=turns)
        except Exception as exc:  # compiling the user's model: any error is the problem's
            reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
            skipped.append((name, f"torch.compile failed: {type(exc).__name__}: {reason}"))
            if wait_s > 0 and out_of_memory(exc):
                # it waited for room in vain: the next configurations do not wait again (up to
                # memory_wait_s each); out of memory at once, the run is set aside to go alone
                memory_wait_s = 0.0
            log.info("seed: %s: configuration %s failed after %.1f s", problem_path.name, name,
                     time.perf_counter() - started)
            continue
        finally:
            _release(device)
        # progress: a problem at its own shapes takes minutes over all its configurations
        log.info("seed: %s: configuration %s captured in %.1f s (%s)", problem_path.name, name,
                 time.perf_counter() - started, _capture_parts(recording))
        form = recording.get("form", form)  # the next configuration does not try again what Dynamo refused here
        if name == "default":
            first_code = "\n".join(recording.get("codes") or [])
            default_times = {f"default_{k}": recording.get(k) for k in ("compiled_ms", "compiled_protocol_ms")}
        try:
            source = seed_source(recording, problem_source)
        except ConversionError as exc:
            kind = "no Triton-only seed" if isinstance(exc, NotTritonOnly) else "cannot turn its code into a seed"
            skipped.append((name, f"{kind}: {exc}"))
            continue
        seeds.append(_seed(recording, source, recording.get("mode"), name))
        for variant, rewrite in ((SPLIT_K, split_k_seed), (PERSISTENT, persistent_seed), (DEPTHWISE, depthwise_seed)):
            try:  # a GEMM template's split-K and persistent variants, a depthwise convolution's: more starts
                made = rewrite(source)
            except (SplitKError, PersistentError, DepthwiseError) as exc:
                skipped.append((f"{name}_{variant}", f"no {variant} variant: {exc}"))
            else:
                if made is not None:
                    seeds.append(_seed(recording, made, recording.get("mode"), f"{name}_{variant}"))
    if not seeds:
        why_eager = _reference_error(problem_path, device, shapes, dtype)
        raise SeedError(f"{problem_path.name}: no seed from any Inductor configuration: "
                        + (f"the problem's own model fails at these shapes, uncompiled ({why_eager}); "
                           if why_eager else "")
                        + "; ".join(f"{name}: {why}" for name, why in skipped))
    kept = distinct(seeds, lambda s: s.source, lambda s: s.variant)
    out = _with_precision_twins([dataclasses.replace(seed, duplicates=tuple(dropped)) for seed, dropped in kept])
    if out[0].variant == "default":  # torch.compile's static code at these shapes as its fast path
        out[0], why = _with_fast_path(out[0], problem_path, problem_source, lambda: captured_with_room(
            lambda: capture(problem_path, device=device, shapes=shapes, dtype=dtype, static=True),
            problem_path, shapes, dtype, memory_wait_s if device != "cpu" else 0.0, lambda: _release(device),
            turns=turns), device)
        if why:
            skipped.append(("default_fast_path", why))
    # torch.compile as a user gets it (cuBLAS for a GEMM), beside the configuration the first seed came from
    out[0] = dataclasses.replace(out[0], skipped=tuple(skipped), recording={**out[0].recording, **default_times})
    for name, why in skipped:
        log.info("seed: %s: %s: %s", problem_path.name, name, why)
    return out


def _with_precision_twins(seeds: list[CompiledSeed]) -> list[CompiledSeed]:
    """``seeds``, each configuration's own seed with a template on fp32 operands followed by its
    precision twins (not the split-K and persistent rewrites: the search moves their dots); a
    depthwise rewrite comes right after its base, before the twins."""
    out = []
    for seed in seeds:
        out.append(seed)
        templates = [k for k in seed.kernels if k.startswith("triton_tem_")]
        if seed.variant.endswith((f"_{SPLIT_K}", f"_{PERSISTENT}", f"_{DEPTHWISE}")) or not templates \
                or not reads_fp32(seed.recording.get("codes") or [], templates):
            continue
        for precision in PRECISIONS:
            twin = precision_seed(seed.source, precision)
            if twin is not None:
                out.append(dataclasses.replace(seed, source=twin, variant=f"{seed.variant}_{precision}",
                                               duplicates=()))
    # a depthwise start right after its template's seed, before the twins: the template is far slower
    # on a depthwise convolution (82 on the H200: 1053 ms against eager's 9.8), and with the slots
    # taken by the template's seeds the depthwise one was still waiting at a 60 s wall
    for rewrite in [s for s in out if s.variant.endswith(f"_{DEPTHWISE}")]:
        base = next((i for i, s in enumerate(out) if s.variant == rewrite.variant[:-len(DEPTHWISE) - 1]), None)
        if base is not None:
            out.remove(rewrite)
            out.insert(base + 1, rewrite)
    return out


def _capture_parts(recording: dict[str, Any]) -> str:
    """Where a capture's time went, for its progress line.

    >>> _capture_parts({"compile_s": 1.8, "timing_s": 21.0, "retried_s": [190.5]})
    'compile 1.8 s, timing 21.0 s, 1 attempt made again after 190.5 s'
    >>> _capture_parts({"compile_s": 0.2})
    'compile 0.2 s'
    """
    parts = [f"compile {recording.get('compile_s', '?')} s"]
    if recording.get("timing_s") is not None:
        parts.append(f"timing {recording['timing_s']} s")
    retried = recording.get("retried_s") or []
    if retried:
        parts.append(f"{len(retried)} attempt{'s' if len(retried) > 1 else ''} made again after "
                     + " + ".join(f"{s} s" for s in retried))
    return ", ".join(parts)


def _cannot_change(variant: str, default_code: str | None) -> str:
    """Why capturing ``variant`` could not give a program the default capture did not ("" if it could)."""
    from evolve.seeding.inductor import FUSED_ATTENTION, MATH_ATTENTION

    fused = default_code is not None and FUSED_ATTENTION.search(default_code) is not None
    if variant in MATH_ATTENTION:
        if default_code is not None and not fused:
            return "not captured: the default code calls no fused attention kernel to decompose"
        return ""
    if fused:
        return "not captured: the default code calls a fused attention kernel, which only attention_math decomposes"
    if default_code is None or variant == "max_autotune":
        return ""
    if "extern_kernels." in default_code:
        return "not captured: the default code calls an extern library, which only max-autotune's templates replace"
    if variant == "looped_reductions" and "triton_heuristics.persistent_reduction(" not in default_code:
        return "not captured: the default code has no persistent reduction to loop"
    if variant == "no_split_reductions" and "triton_heuristics.reduction(" not in default_code \
            and "triton_heuristics.persistent_reduction(" not in default_code:
        return "not captured: the default code has no reduction to split"
    return ""


def _require_gpu(device: str) -> None:
    if device == "cpu" or get_platform("auto").name == "cpu":
        raise SeedError("no GPU: seeds from torch.compile need one (Inductor writes Triton kernels only for GPU devices; "
                        "this machine has none visible to torch)")


def _reference_error(problem_path: Path, device: str, shapes: dict[str, int] | None, dtype: str | None) -> str:
    """Why the problem's own model, uncompiled, fails to build or run once at these shapes ("" if it runs,
    or runs out of memory, which says nothing of the model): no configuration's failure is then Inductor's."""
    import torch

    from fitness.problems.problem import build_model, load_problem, make_inputs
    from fitness.refusal import describe, out_of_memory

    try:
        with torch.no_grad():
            problem = load_problem(problem_path, shapes, dtype)
            build_model(problem.Model, problem, 0, device)(*make_inputs(problem, 1, device))
    except Exception as exc:  # the user's model: whatever it raises is its own, but memory others may hold
        return "" if out_of_memory(exc) else describe(exc)
    finally:
        _release(device)
    return ""


def _release(device: str) -> None:
    import gc

    gc.collect()
    if device != "cpu":
        get_platform("auto").release_memory()


def describe(seed: CompiledSeed, output: Any) -> str:
    """One line on what ``kevo seed`` wrote."""
    timing = ""
    if seed.eager_ms and seed.compiled_ms:
        timing = f"; torch.compile ran {seed.compiled_ms:.4g} ms against eager {seed.eager_ms:.4g} ms"
    how = " (max-autotune Triton templates)" if seed.mode else ""
    static = ("; some sizes are constants in Inductor's code (the model fixes them): the seed holds at "
              "these shapes only") if seed.recording.get("static_dims") else ""
    return (f"wrote {output}: {len(seed.kernels)} Triton kernel(s) from torch.compile{how}: "
            f"{', '.join(seed.kernels)}{timing}{static}")


def describe_variant(seed: CompiledSeed, output: Any) -> str:
    """One line on one seed of ``compile_seeds``: its configuration, kernels and the duplicates it stands for."""
    same = f"; the same program as {', '.join(seed.duplicates)}" if seed.duplicates else ""
    timing = f"; torch.compile ran {seed.compiled_ms:.4g} ms" if seed.compiled_ms else ""
    return (f"wrote {output}: Inductor configuration {seed.variant}: {len(seed.kernels)} Triton kernel(s): "
            f"{', '.join(seed.kernels)}{timing}{same}")


def write_seeds(problem_path: str | Path, folder: str | Path | None) -> list[str]:
    """``kevo seed --all -o DIR``: ``compile_seeds``' seeds written to ``DIR/CONFIGURATION.py``; the
    lines to show (one per seed, then one per configuration that gave none). ``SeedError`` if none."""
    if folder is None:
        raise SeedError("kevo seed --all writes one file per Inductor configuration: name a folder with -o DIR")
    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        raise SeedError(f"kevo seed --all: {folder} is a file; -o names a folder")
    seeds = compile_seeds(problem_path)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        for seed in seeds:
            (folder / f"{seed.variant}.py").write_text(seed.source, encoding="utf-8")
    except OSError as exc:
        raise SeedError(f"cannot write into {folder}: {exc.strerror}") from None
    return ([describe_variant(seed, folder / f"{seed.variant}.py") for seed in seeds]
            + [f"no seed from {name}: {why}" for name, why in seeds[0].skipped])
