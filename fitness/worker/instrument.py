"""The worker's instruments: launch and thread counters, and the watch on what it relies on.

Installed in the sandboxed worker before any candidate code runs.
``instrument_launches`` wraps Triton's launch entry points to count launches
(a forward must launch a kernel) and to let the launcher's own tensor ops
through the dispatch trace; ``instrument_threads`` counts threads started (a
thread escapes the thread-local trace); ``instrument_compiles`` brackets each
Triton compile, so that the worker can lend the device out while it
compiles (``fitness.judge.lane``). ``Watch`` keeps a reference to every
object the worker trusts (the timer, ``platforms.timing``, and every name it
looks up: clocks, events, synchronisation, the device trace; the tensor methods
that ship outputs; these instruments) and their code, and says after each step
whether any was replaced or rewritten.
"""

from __future__ import annotations

import _thread
import bisect
import builtins
import contextlib
import hashlib
import json
import os
import secrets
import statistics
import sys
import threading
import time
from typing import Any

from platforms import timeline, timing


def watched_objects(torch, triton_jit, interpreter, platform) -> dict[str, tuple[Any, str]]:
    """Objects whose attributes the worker relies on, by readable name."""
    watched = {
        "time.perf_counter": (time, "perf_counter"),
        "time.perf_counter_ns": (time, "perf_counter_ns"),
        "time.monotonic": (time, "monotonic"),
        "os.write": (os, "write"),
        "os.read": (os, "read"),
        "json.dumps": (json, "dumps"),
        "builtins.isinstance": (builtins, "isinstance"),
        "builtins.type": (builtins, "type"),
        "torch.manual_seed": (torch, "manual_seed"),
        "torch.equal": (torch, "equal"),
        "torch.device": (torch, "device"),
        "torch.Tensor": (torch, "Tensor"),
        "torch.uint8": (torch, "uint8"),
        "triton JITFunction.run": (triton_jit.JITFunction, "run"),
        "triton InterpretedFunction.run": (interpreter.InterpretedFunction, "run"),
        "triton KernelInterface.__getitem__": (triton_jit.KernelInterface, "__getitem__"),
        "torch.utils._python_dispatch.TorchDispatchMode.__enter__": (
            sys.modules["torch.utils._python_dispatch"].TorchDispatchMode, "__enter__"),
        "torch.utils._python_dispatch.TorchDispatchMode.__exit__": (
            sys.modules["torch.utils._python_dispatch"].TorchDispatchMode, "__exit__"),
    }
    if "_do_compile" in vars(triton_jit.JITFunction):
        watched["triton JITFunction._do_compile"] = (triton_jit.JITFunction, "_do_compile")
    for method in ("clone", "cpu", "contiguous", "view", "reshape", "numpy", "detach",
                   "to", "numel", "__getitem__", "data_ptr", "untyped_storage",
                   "sum", "mul_", "add_", "item", "is_contiguous", "storage_offset", "element_size"):
        watched[f"torch.Tensor.{method}"] = (torch.Tensor, method)
    # how an input's witness is checked: bit for bit, or by its fingerprint (platforms.fingerprint)
    for name in ("randint", "zeros", "Generator", "mul", "tensor"):
        watched[f"torch.{name}"] = (torch, name)
    from platforms import fingerprint, fingerprint_triton

    for module in (fingerprint, fingerprint_triton):
        for name in vars(module):
            if not name.startswith("__"):
                watched[f"{module.__name__}.{name}"] = (module, name)
    for method in ("matches", "__eq__", "__init__"):  # (of, a classmethod, is a new object at each lookup)
        watched[f"Fingerprint.{method}"] = (fingerprint.Fingerprint, method)
    # watched on every platform: a CPU run must not teach a kernel to patch them
    watched["torch.cuda.synchronize"] = (torch.cuda, "synchronize")
    watched["torch.cuda.Event"] = (torch.cuda, "Event")
    for method in ("record", "elapsed_time", "synchronize"):
        watched[f"torch.cuda.Event.{method}"] = (torch.cuda.Event, method)
    watched.update(_timer_objects(platform))
    # the thread counters (instrument_threads)
    watched["threading.Thread.start"] = (threading.Thread, "start")
    watched["_thread.start_new_thread"] = (_thread, "start_new_thread")
    # how the CPU platform tells that an input was changed
    watched["hashlib.blake2b"] = (hashlib, "blake2b")
    # how outputs reach the evaluator on the device
    watched["torch.UntypedStorage._share_cuda_"] = (torch.UntypedStorage, "_share_cuda_")
    watched["torch.UntypedStorage.size"] = (torch.UntypedStorage, "size")
    # the platform's own methods: what the timer asks of it, and the checks and hand-over
    for attr in ("synchronize", "flush_cache", "events", "device_trace", "poison_memory",
                 "export_tensor", "release_memory", "witness", "unchanged", "persisting_l2_bytes"):
        watched[f"platform.{attr}"] = (type(platform), attr)
    return watched


# What the timer's code looks up as it runs, besides its own modules' names.
_TIMER_STDLIB = (
    (statistics, ("median",)), (contextlib, ("nullcontext",)), (bisect, ("bisect_left", "bisect_right")),
    (secrets, ("token_hex",)),
    (builtins, ("len", "max", "min", "int", "range", "sorted", "zip", "all", "str")),
)


def _timer_objects(platform) -> dict[str, tuple[Any, str]]:
    """The timer (``platforms.timing``), the device trace it reads (``platforms.timeline``)
    and the platform's events, wherever they are looked up by name.

    Every global name of those modules and of the modules that define the platform's
    class (a replaced ``time`` there would be the CPU platform's clock); every module
    binding, in any module loaded now, of a function or class those timer modules
    define (the worker's own ``from platforms import time_runs``, the package's
    re-export); the methods of the device trace and the timing records; and what the
    timer's code calls from the standard library.
    """
    import torch.profiler

    watched: dict[str, tuple[Any, str]] = {
        "torch.profiler.profile": (torch.profiler, "profile"),
        "torch.profiler.record_function": (torch.profiler, "record_function"),
    }
    platform_modules = {sys.modules[cls.__module__] for cls in type(platform).__mro__
                        if cls.__module__.startswith("platforms.")}
    for module in (timing, timeline, *sorted(platform_modules, key=lambda m: m.__name__)):
        for name in vars(module):
            if not name.startswith("__"):
                watched[f"{module.__name__}.{name}"] = (module, name)
    timer_modules = (timing.__name__, timeline.__name__)
    own = {id(value) for module in (timing, timeline) for value in vars(module).values()
           if callable(value) and getattr(value, "__module__", None) in timer_modules}
    for module_name, module in list(sys.modules.items()):
        namespace = getattr(module, "__dict__", None)
        if not isinstance(namespace, dict):
            continue
        for name, value in list(namespace.items()):
            if id(value) in own and not name.startswith("__"):
                watched.setdefault(f"{module_name}.{name}", (module, name))
    for cls, methods in ((timeline.DeviceTimeline, ("__init__", "__enter__", "__exit__", "run", "spans", "runs")),
                         (timing.Timing, ("__init__",)), (timing.TimingSettings, ("__init__", "window_runs"))):
        for method in methods:
            watched[f"{cls.__name__}.{method}"] = (cls, method)
    for module, names in _TIMER_STDLIB:
        for name in names:
            watched[f"{module.__name__}.{name}"] = (module, name)
    return watched


def instrument_launches(harness: Any, *kernel_classes: type) -> None:
    """Count Triton launches and let the launcher's own tensor ops through the trace. While
    ``harness.dry`` (a warm step, ``fitness.worker.load_step.warm``), a launch of the first class
    (Triton's JIT) only compiles (``warmup``), and one of the others (the interpreter) does nothing."""
    for cls in kernel_classes:
        original = cls.run

        def run(self_, *args, _original=original, _compiles=cls is kernel_classes[0], **kwargs):
            dry = harness.dry
            if dry and not _compiles:
                return None
            if dry:  # compiled, not launched: a warm step's launch counts as none
                kwargs["warmup"] = True
            else:
                harness.launches += 1
            trace = harness.trace
            if trace is not None:
                trace.launch_depth += 1
            # Inside a launch only Triton runs (its interpreter on the CPU
            # executes the kernel as Python): the call profile would cost
            # more than the kernel and sees nothing of the candidate's.
            # Only where a profile is on (checked calls): each sys.setprofile is an audited
            # event, and the guard's audit hook would charge it to a timed run's launches.
            profile = sys.getprofile()
            if profile is not None:
                sys.setprofile(None)
            try:
                return _original(self_, *args, **kwargs)
            finally:
                if sys.getprofile() is not profile:
                    sys.setprofile(profile)
                if trace is not None:
                    trace.launch_depth -= 1

        cls.run = run


class AheadStop(Exception):
    """Ends a warm step early: what it cannot compile ahead, the evaluation compiles."""


def instrument_autotuners(harness: Any, autotuner_cls: type) -> None:
    """An autotuner called in a warm step ends it (``AheadStop``): its pick comes from timing
    each config, which a warm step cannot do."""
    original = autotuner_cls.run

    def run(self_, *args, _original=original, **kwargs):
        if harness.dry:
            raise AheadStop("an autotuner picks its config by running it")
        return _original(self_, *args, **kwargs)

    autotuner_cls.run = run


def instrument_compiles(harness: Any, jit_cls: type) -> None:
    """Run each compile of a Triton kernel inside ``harness.compiling()``, its seconds added to
    ``harness.compile_s`` (a Triton with no single compile entry point is left alone: its
    compiles keep the device's lane)."""
    original = getattr(jit_cls, "_do_compile", None)
    if original is None:
        return

    def _do_compile(self_, *args, _original=original, **kwargs):
        with harness.compiling():
            started = time.perf_counter()
            try:
                return _original(self_, *args, **kwargs)
            finally:
                harness.compile_s += time.perf_counter() - started

    jit_cls._do_compile = _do_compile


def triton_hooks() -> tuple:
    """Triton's compile and launch hooks as they are now: a hook set by a candidate could
    run anything while its kernel compiles."""
    from triton import knobs

    state = []
    for group, names in (("runtime", ("jit_cache_hook", "jit_post_compile_hook", "add_stages_inspection_hook",
                                      "launch_enter_hook", "launch_exit_hook", "kernel_load_start_hook",
                                      "kernel_load_end_hook", "kernel_unload_hook")),
                         ("compilation", ("listener",)), ("cache", ("manager_class", "remote_manager_class"))):
        owner = getattr(knobs, group, None)
        for name in names:
            value = getattr(owner, name, None)
            calls = getattr(value, "calls", None)  # a HookChain keeps its hooks in a list
            state.append((value, tuple(calls) if isinstance(calls, list) else ()))
    return tuple(state)


def same_hooks(a: tuple, b: tuple) -> bool:
    """Whether two ``triton_hooks()`` states hold the very same hooks."""
    return len(a) == len(b) and all(
        x is y and len(xs) == len(ys) and all(p is q for p, q in zip(xs, ys))
        for (x, xs), (y, ys) in zip(a, b))


def instrument_threads(harness: Any) -> None:
    """Count threads started: a thread escapes the (thread-local) dispatch trace."""
    original_start = threading.Thread.start
    original_new = _thread.start_new_thread

    def start(self_, *args, **kwargs):
        harness.threads_started += 1
        return original_start(self_, *args, **kwargs)

    def start_new_thread(*args, **kwargs):
        harness.threads_started += 1
        return original_new(*args, **kwargs)

    threading.Thread.start = start
    _thread.start_new_thread = start_new_thread


class Watch:
    """The watched objects as they were when the worker started, and their code."""

    def __init__(self, watched: dict[str, tuple[Any, str]]) -> None:
        self.watched = watched
        self.originals = {name: getattr(owner, attr) for name, (owner, attr) in watched.items()}
        self.codes = {name: getattr(obj, "__code__", None) for name, obj in self.originals.items()}

    def tampered(self) -> str:
        """What was done to a watched object (``replaced X``, ``rewrote the code of X``), or ``""``."""
        for name, (owner, attr) in self.watched.items():
            current = owner.__dict__.get(attr, getattr(owner, attr, None))
            if current is not self.originals[name]:
                return f"replaced {name}"
            # a function keeps its identity when its code is swapped
            if getattr(current, "__code__", None) is not self.codes[name]:
                return f"rewrote the code of {name}"
        return ""
