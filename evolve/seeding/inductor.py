"""Capture what torch.compile's Inductor writes for a problem (``kevo seed``'s first half).

On a GPU, ``capture(problem_path)`` compiles the problem's ``Model`` with
every dimension of every input and parameter symbolic (so the generated code
takes its sizes as arguments instead of baking them in), runs it once on the
problem's inputs, and returns a *recording*: a JSON-able dict with

- ``codes``: the wrapper modules Inductor generated (the Triton kernels, their
  autotuning decorators and the ``call()`` that launches them);
- ``graph_args``: for each compiled graph, where each argument of its
  ``call()`` comes from, in order (Dynamo's placeholder sources: an input, a
  size of one, a parameter);
- ``kernels``: per Triton kernel, the configs Inductor's autotuner considered
  and the one it picked;
- ``outputs``, the versions, and eager/compiled runtimes (``do_bench``, and
  ``compiled_protocol_ms``: the compiled model timed the way kevo times a
  candidate);
- where its time went: ``compile_s`` (compiling and the first run, autotuning included), ``timing_s`` (the
  runtimes), ``retried_s`` (each attempt in another form before, below).

``operators.seeds.convert`` turns a recording into a candidate file; the recordings under
``tests/fixtures/inductor/`` were made here, so the conversion is tested without a GPU.

``variant`` names one of ``VARIANTS``: the Inductor configuration the capture is made under
(persistent or looped reductions, split reductions off, coordinate-descent tuning, max-autotune
with its Triton GEMM and convolution templates, and those templates with
``scaled_dot_product_attention`` traced by its math: ``entry["attention"] == "math"``), recorded
as ``entry["variant"]`` and ``entry["inductor_config"]``; ``evolve.seeding.seed.compile_seeds``
captures a problem under each and keeps the distinct programs. Every benchmark Inductor times
takes the device's timed-window lock (``evolve.seeding.room``).

``device="cpu"`` compiles with Inductor's Triton backend for the CPU (``cpu_backend="triton"``)
and runs its kernels under Triton's interpreter (``_cpu_triton``): real Inductor output,
templates and their autotuning included, made without a GPU. Its heuristics are the CPU's (two
"SMs" on a two-core machine: splits and block sizes differ from a GPU's); its kernels'
autotuners launch their first config (no pick is recorded), while max-autotune's template
benchmark runs, under the interpreter. kevo's CPU fixtures of the configuration variants
(``tests/fixtures/seed_variants/``) are made this way; ``kevo seed`` itself asks for a GPU.
"""

from __future__ import annotations

import contextlib
import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from evolve.seeding.conv_forms import template_forms
from evolve.seeding.room import benchmarks_alone
from evolve.seeding.symbolic import symbolic_sizes
from fitness.problems.problem import build_model, load_problem, make_inputs
from platforms import get_platform, time_runs
from platforms.device_lock import window as device_window

#: One capture at a time in a process: Inductor's configuration is process-wide (a variant's patch would
#: leak into another thread's compile) and so is the profiler that times eager and compiled code. (A
#: sweep's runs side by side capture in child processes of their own instead: evolve.seeding.apart.)
_ONE_CAPTURE = threading.Lock()

#: Inductor configurations a problem is captured under, in the order seeds are offered: name ->
#: ``torch._inductor.config`` settings. Each seed is named by its configuration. A configuration that
#: only moves numbers (coordinate descent's blocks and warps) gives a duplicate program, dropped then.
_TEMPLATES = {"max_autotune": True, "max_autotune_gemm_backends": "TRITON", "max_autotune_conv_backends": "TRITON"}
VARIANTS: dict[str, dict[str, Any]] = {
    "default": {},
    "looped_reductions": {"triton.persistent_reductions": False},
    "no_split_reductions": {"split_reductions": False},
    "coordinate_descent": {"coordinate_descent_tuning": True},
    "max_autotune": _TEMPLATES,
    # max-autotune's templates with scaled_dot_product_attention decomposed into its math (two batched
    # matmuls around a softmax): Inductor otherwise hands it whole to a fused ATen kernel (flash,
    # memory-efficient, cuDNN), which no seed can hold. Captured only where the default code calls one.
    "attention_math": _TEMPLATES,
}
#: Configurations compiled with attention computed by its math (``torch.nn.attention.SDPBackend.MATH``).
MATH_ATTENTION = frozenset({"attention_math"})
#: ``capture``'s older ``mode`` names, and the variant each is.
MODES = {"max-autotune-triton": "max_autotune"}


def _config_dict(config: Any) -> dict[str, Any]:
    return {"kwargs": {k: v for k, v in dict(getattr(config, "kwargs", {})).items() if isinstance(v, (int, bool))},
            "num_warps": int(getattr(config, "num_warps", 4)),
            "num_stages": int(getattr(config, "num_stages", 1))}


@contextlib.contextmanager
def _autotuners_made() -> Iterator[list[Any]]:
    """The Triton kernels (Inductor's ``CachingAutotuner``) built inside the block, as they are made."""
    from torch._inductor.runtime.triton_heuristics import CachingAutotuner

    made: list[Any] = []
    original = CachingAutotuner.__init__

    def init(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        made.append(self)

    CachingAutotuner.__init__ = init
    try:
        yield made
    finally:
        CachingAutotuner.__init__ = original


def _module_kernels(codes: list[str]) -> list[Any]:
    """The kernel objects of the loaded wrapper modules whose source is one of ``codes``
    (after their first run: autotuned). Other modules of the process are left out, though
    their kernels may have the same names (``triton_red_fused_linalg_vector_norm_0`` of an
    earlier problem, whose config is not this one's)."""
    from torch._inductor.codecache import PyCodeCache

    wanted = {code.strip() for code in codes}
    names = {m for code in codes for m in re.findall(r"^(\w+) = async_compile\.triton\(", code, re.MULTILINE)}
    modules = PyCodeCache.modules
    modules = list(modules.values()) if isinstance(modules, dict) else list(modules)
    found = []
    for module in modules:
        try:
            source = Path(module.__file__).read_text(encoding="utf-8").strip()
        except (AttributeError, OSError, TypeError):
            continue
        if source not in wanted:
            continue
        for name in names:
            kernel = getattr(module, name, None)
            if kernel is not None and hasattr(kernel, "launchers"):
                found.append(kernel)
    return found


def _kernel_configs(tuners: list[Any]) -> dict[str, dict[str, Any]]:
    """Per kernel name: the configs its autotuner held and the one it picked (None if unknown)."""
    kernels = {}
    for tuner in tuners:
        fn = getattr(tuner, "fn", None)
        name = getattr(fn, "__name__", None) or (getattr(tuner, "inductor_meta", None) or {}).get("kernel_name")
        launchers = list(getattr(tuner, "launchers", None) or [])
        chosen = _config_dict(launchers[0].config) if launchers and hasattr(launchers[0], "config") else None
        configs = [_config_dict(c) for c in (getattr(tuner, "configs", None) or [])]
        if str(name) not in kernels or (chosen and not kernels[str(name)]["chosen"]):
            kernels[str(name)] = {"configs": configs, "chosen": chosen}
    return kernels


def _protocol_ms(forward: Any, inputs: Any) -> float:
    """``forward(inputs(i))``'s median time as kevo's evaluator times a candidate
    (``platforms.time_runs``: each run on an idle device with a cold cache and inputs of its
    own, drawn before the run; its device span), so that torch.compile and kevo's kernels
    are compared under one protocol; ``do_bench`` enqueues its runs back to back on one
    set of inputs, which hides the host's time between the launches of one run."""
    platform = get_platform("auto")
    with device_window(platform):  # no other process's window meanwhile (platforms.device_lock)
        return time_runs(platform, lambda i, args: forward(args), platform.timing, inputs).median_ms


def capture(path: str | Path, device: str = "cuda", mode: str | None = None, time_it: bool = True,
            shapes: dict[str, int] | None = None, dtype: str | None = None,
            variant: str | None = None, form: dict[str, bool] | None = None, static: bool = False) -> dict[str, Any]:
    """The recording of Inductor's output for the problem at ``path`` (see the module doc),
    compiled and run at the problem's own shapes or ``shapes`` (and ``dtype``, if given),
    under the Inductor configuration ``variant`` (a name of ``VARIANTS``; "default" if None).

    Every dimension of the inputs, parameters and buffers is first marked dynamic
    outright; where the model's own code fixes one (``nn.LayerNorm`` passes its
    ``normalized_shape`` as Python ints) or Inductor's lowering does (a
    convolution template's weight sizes), Dynamo refuses, and the capture is made
    again with the marks as hints, so that such dimensions are constants in the
    code (``entry["static_dims"]`` is then True: the seed holds at those sizes only).
    ``form`` (``entry["form"]`` of an earlier configuration's recording) starts where that
    capture ended: a refusal the model's own code causes recurs in every configuration,
    and a template configuration autotunes at full size before Dynamo refuses.

    ``mode="max-autotune-triton"`` (the variant "max_autotune") lets Inductor
    benchmark its Triton templates for matmuls and convolutions instead of
    calling an extern library. ``static=True``: every size static, as a user's ``torch.compile``
    has them (``operators.seeds.fast_path``). Raises what compiling or running raises.
    """
    if mode not in (None, *MODES):
        raise ValueError(f"unknown capture mode {mode!r} (known: {', '.join(MODES)})")
    if mode is not None and variant not in (None, MODES[mode]):
        raise ValueError(f"capture mode {mode!r} is the variant {MODES[mode]!r}, not {variant!r}")
    variant = variant or (MODES[mode] if mode else "default")
    if variant not in VARIANTS:
        raise ValueError(f"unknown Inductor configuration {variant!r} (known: {', '.join(VARIANTS)})")
    mode = next((m for m, v in MODES.items() if v == variant), None)
    time_it = time_it and device != "cpu"  # interpreted kernels: no figure worth keeping (nor a driver to time on)
    with _ONE_CAPTURE, _cpu_triton() if device == "cpu" else contextlib.nullcontext():
        strict, oblivious = (form or {}).get("strict", True), (form or {}).get("oblivious", True)
        retries: list[float] = []  # the seconds of each attempt made again in another form
        while True:
            started = time.perf_counter()
            try:
                with _quiet("torch._guards", "torch._dynamo", "torch.fx.experimental.symbolic_shapes") \
                        if strict else contextlib.nullcontext():
                    entry = _capture(Path(path), device, mode, time_it, shapes, dtype, variant, strict, oblivious,
                                     static)
                    return {**entry, "retried_s": retries, "form": {"strict": strict, "oblivious": oblivious}}
            except Exception as exc:
                retries.append(round(time.perf_counter() - started, 2))
                if oblivious and not static and _broke_a_broadcast(exc):
                    oblivious = False  # a size of 1 kept symbolic cannot broadcast (a bias shaped (C, 1, 1))
                elif strict and not static and ("ConstraintViolation" in type(exc).__name__
                                 or "specialized it to be a constant" in str(exc)):
                    strict = False
                else:
                    raise


@contextlib.contextmanager
def _math_attention() -> Iterator[None]:
    """``scaled_dot_product_attention`` computed by its math (``SDPBackend.MATH``): what Dynamo traces
    then is the decomposition, two batched matmuls around a softmax, which Inductor lowers itself."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    with sdpa_kernel([SDPBackend.MATH]):
        yield


#: ATen's fused attention kernels, as Inductor's code calls them (a fallback no seed can hold).
FUSED_ATTENTION = re.compile(r"\b_(?:scaled_dot_product_\w*attention\w*|efficient_attention_forward|"
                             r"flash_attention_forward)\b")


def _broke_a_broadcast(exc: BaseException) -> bool:
    """Whether tracing failed where a symbolic size had to equal another to broadcast."""
    while exc is not None:
        if "must match the size of tensor" in str(exc):
            return True
        exc = exc.__cause__ or exc.__context__  # type: ignore[assignment]
    return False


#: What Inductor's Triton backend for the CPU needs set while it compiles (see ``_cpu_triton``).
_CPU_TRITON = {"cpu_backend": "triton",
               # torch 2.13's CPU path writes the module of a fusion benchmark with a misplaced
               # indented import (IndentationError); max-autotune turns those benchmarks on
               "benchmark_epilogue_fusion": False, "benchmark_fusion": False}


@contextlib.contextmanager
def _cpu_triton() -> Iterator[None]:
    """Inductor's Triton code for CPU tensors, its kernels run by Triton's interpreter.

    The interpreter is the CPU platform's (``TRITON_INTERPRET=1`` and its
    libdevice). Triton reads that variable as it defines its own jit functions
    (``tl.sum``, Inductor's helpers), so it must be in the environment before
    Triton is first imported, as a CPU worker's is (``tests/fixtures/seed_variants/
    record.py`` sets it first thing); without it the interpreted kernels fail
    calling them, and the capture is refused here with that said. Triton has no
    active driver on the CPU, so the backend hash Inductor stamps on each kernel
    (``torch.utils._triton.triton_hash_with_backend``, which asks the driver) is
    a fixed name instead, restored on the way out.
    """
    import os
    import warnings

    platform = get_platform("cpu")
    interpret = platform.worker_env.get("TRITON_INTERPRET", "1")
    if os.environ.get("TRITON_INTERPRET") != interpret:
        raise RuntimeError("a CPU capture runs Inductor's Triton kernels under Triton's interpreter: start the "
                           f"process with TRITON_INTERPRET={interpret} (it must be set before Triton is imported)")
    import torch.utils._triton as torch_triton
    from torch._inductor import config as inductor_config

    platform.worker_setup()
    saved_hash = torch_triton.triton_hash_with_backend
    torch_triton.triton_hash_with_backend = lambda: "TRITON-INTERPRETER"
    try:
        with warnings.catch_warnings(), inductor_config.patch(_CPU_TRITON):
            warnings.filterwarnings("ignore", message="Could not find an active CPU backend")
            yield
    finally:
        torch_triton.triton_hash_with_backend = saved_hash


def _warn_after(torch: Any) -> dict[str, Any]:
    """``warnings.warn`` in a forward run after the graph, not a break in it (a seed needs one graph)."""
    import warnings

    known = hasattr(torch._dynamo.config, "reorderable_logging_functions")
    return {"reorderable_logging_functions": {warnings.warn}} if known else {}


def _size_oblivious(fx_config: Any) -> dict[str, bool]:
    """Keep a size of 1 symbolic too (Dynamo otherwise makes it a constant), where torch can."""
    return {"backed_size_oblivious": True} if hasattr(fx_config, "backed_size_oblivious") else {}


@contextlib.contextmanager
def _quiet(*names: str) -> Iterator[None]:
    """Loggers that report the refusal of a first attempt as an error of their own, silenced."""
    import logging

    loggers = [logging.getLogger(n) for n in names]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        for lg, level in zip(loggers, levels):
            lg.setLevel(level)


def _capture(path: Path, device: str, mode: str | None, time_it: bool, shapes: dict[str, int] | None,
             dtype: str | None, variant: str, strict: bool, oblivious: bool = True,
             static: bool = False) -> dict[str, Any]:
    import torch
    import torch.fx.experimental._config as fx_config
    import triton
    from torch._inductor import config as inductor_config
    from torch._inductor.compile_fx import compile_fx
    from torch._inductor.utils import run_and_get_code

    torch._dynamo.reset()
    problem = load_problem(path, shapes, dtype)
    # as kevo runs it: in the mode it is built in (training, for nn.BatchNorm: batch statistics)
    model = build_model(problem.Model, problem, 0, device)
    inputs = make_inputs(problem, 1, device)
    mark = torch._dynamo.mark_dynamic if strict else torch._dynamo.maybe_mark_dynamic
    for value in [] if static else [*inputs, *model.parameters(), *model.buffers()]:
        if isinstance(value, torch.Tensor):
            for dim in range(value.dim()):
                mark(value, dim)
    graphs: list[list[str | None]] = []

    def backend(gm: Any, example_inputs: Any) -> Any:
        # where each argument of the graph comes from, in the order Inductor's call() takes them
        sources = []
        for node in gm.graph.find_nodes(op="placeholder"):
            source = getattr(node.meta.get("grapharg"), "source", None)
            name = getattr(source, "name", None)
            sources.append(name() if callable(name) else name)  # a method in older torch, a property in newer
        compiled = compile_fx(gm, example_inputs)
        graphs.append(sources)  # only a graph Inductor compiled (Dynamo may retry one with fewer inputs)
        return compiled

    # compile in this process: kernels built in a compile worker reach us pickled, and
    # their autotuning (the config picked) would not be seen here
    patches: dict[str, Any] = {"compile_threads": 1, **VARIANTS[variant]}
    compiled = torch.compile(model, dynamic=not static, backend=backend)
    entry: dict[str, Any] = {"problem": path.stem, "mode": mode, "variant": variant,
                             "inductor_config": dict(VARIANTS[variant]), "device": device, "static": static,
                             "shapes": dict(shapes or {}), "static_dims": not strict,
                             "torch": torch.__version__, "triton": triton.__version__}
    if variant in MATH_ATTENTION:
        entry["attention"] = "math"

    @contextlib.contextmanager
    def compiling() -> Iterator[None]:
        """Where the compiled model runs: ops that would fix a size traced in a form that does not
        (``evolve.seeding.symbolic``); under the templates, convolutions in forms they take
        (``evolve.seeding.conv_forms``); attention by its math for ``MATH_ATTENTION``; each of
        Inductor's benchmarks in a timed window of its own (``evolve.seeding.room.benchmarks_alone``)."""
        templates = bool(VARIANTS[variant].get("max_autotune"))
        with symbolic_sizes(), benchmarks_alone(device), \
                template_forms() if templates else contextlib.nullcontext(), \
                _math_attention() if variant in MATH_ATTENTION else contextlib.nullcontext():
            yield
    started = time.perf_counter()
    with (_autotuners_made() as tuners, torch.no_grad(), inductor_config.patch(patches),
          torch._dynamo.config.patch(force_parameter_static_shapes=False,  # warnings.warn: after the graph
                                     force_nn_module_property_static_shapes=False, **_warn_after(torch)),
          fx_config.patch(use_duck_shape=False, **(_size_oblivious(fx_config) if oblivious else {}))):
        with compiling():
            out, codes = run_and_get_code(compiled, *inputs)
        if device != "cpu":
            get_platform("auto").synchronize()
        entry["compile_s"] = round(time.perf_counter() - started, 2)
        ref = model(*inputs)
        outs = list(out) if isinstance(out, (tuple, list)) else [out]
        refs = list(ref) if isinstance(ref, (tuple, list)) else [ref]
        entry["max_abs_diff"] = max(float((o - r).abs().max()) for o, r in zip(outs, refs))
        if time_it:
            timing_started = time.perf_counter()
            # with the device to itself across processes, as a timed window (a sweep's other runs
            # evaluate meanwhile: neither's timing may see the other's kernels)
            with device_window(get_platform("auto")):  # (time_it is False on the CPU)
                entry["eager_ms"] = triton.testing.do_bench(lambda: model(*inputs))
                with compiling():  # the code compiled above, not a recompile of the model as written
                    entry["compiled_ms"] = triton.testing.do_bench(lambda: compiled(*inputs))
            if device != "cpu":
                with compiling():
                    entry["compiled_protocol_ms"] = _protocol_ms(
                        lambda args: compiled(*args), lambda i: make_inputs(problem, 1000 + i, device))
            entry["timing_s"] = round(time.perf_counter() - timing_started, 2)
    entry["codes"] = list(codes)
    entry["graph_args"] = graphs
    try:
        entry["kernels"] = _kernel_configs([*tuners, *_module_kernels(entry["codes"])])
    except Exception as exc:  # the code is still worth keeping; the conversion says what is missing
        entry["kernels"], entry["kernels_error"] = {}, f"{type(exc).__name__}: {exc}"
    entry["outputs"] = [list(o.shape) for o in outs]
    entry["returns_tuple"] = isinstance(ref, (tuple, list))
    return entry
