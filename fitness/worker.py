"""The sandboxed worker: runs candidates, never judges them.

Started by ``fitness.evaluator`` as ``python -m fitness.worker IN OUT PLATFORM
INDEX`` with a scrubbed environment, its stdout and stderr sent to a log
file, and two pipes for messages. It loads a candidate, runs it on inputs it
draws from seeds it is given, and sends back raw outputs and timings; the
reference outputs and the verdict stay in the evaluator's process.

Before any candidate code runs, the worker keeps references to everything it
relies on (timers, events, synchronisation, the tensor methods it uses to
ship outputs, the Triton launch entry points it instruments) and checks after
every step that none was replaced.
"""

from __future__ import annotations

import contextlib
import gc
import hashlib
import importlib.util
import os
import random
import shutil
import signal
import sys
import tempfile
import threading
import time
import traceback
from typing import Any

from fitness import wire
from fitness.probes import Probe
from fitness.problem import Problem, build_model, load_problem, make_inputs
from fitness.guard import Guard
from fitness.instrument import (Watch, instrument_compiles, instrument_launches, instrument_threads, same_hooks,
                                triton_hooks, watched_objects)
from fitness.settings import RELEASE_ABOVE
from fitness.refusal import Refusal, classify, describe, forbidden_reason, out_of_memory
from fitness.trace import INIT_OPS
from platforms import TimingSettings, get_platform


class Harness:
    """State of one worker process: the platform, the candidate, the problem."""

    def __init__(self, platform_name: str, index: int) -> None:
        import torch
        import torch._dynamo  # noqa: F401  (on import it rewraps torch.manual_seed: do it before capturing)
        import triton.language.extra.libdevice  # noqa: F401  (a candidate imports it; its load may not run the import machinery)
        import triton.runtime.interpreter as interpreter
        import triton.runtime.jit as triton_jit

        from fitness.trace import ComputeTrace

        self.torch = torch
        self.platform = get_platform(platform_name, index)
        self.device = self.platform.device()
        self.trace_cls = ComputeTrace
        self.launches = 0
        self.trace: Any = None
        instrument_launches(self, triton_jit.JITFunction, interpreter.InterpretedFunction)
        instrument_compiles(self, triton_jit.JITFunction)
        self.lending = False  # whether this step may lend the device out while a kernel compiles
        self.lent_s = 0.0  # seconds the device was lent out in this step (the evaluator keeps its own count)
        self.hooks = triton_hooks()
        self.own_threads = {t.ident for t in threading.enumerate()}  # the harness's (the parent watch)
        self.threads_started = 0
        instrument_threads(self)
        self.bounds = self.platform.memory_guard()
        watched = watched_objects(torch, triton_jit, interpreter, self.platform)
        watched.update(self.platform.worker_setup())
        if self.bounds is not None:
            watched.update(self.bounds.watched())
        self.watch = Watch(watched)
        self.source_hash = ""
        self.module: Any = None
        self.model: Any = None
        self.problem: Problem | None = None
        self.tmpdir = tempfile.mkdtemp(prefix="kevo-worker-")
        self.guard = Guard()
        self.nonce = ""  # of the step being handled: the hand-overs of a time step carry it too
        self.in_fd, self.out_fd, self.spill_dir = -1, -1, None  # the channel (set by main)
        self.shipped: list = []  # outputs shared with the evaluator, kept until its next message

    def _check_guard(self) -> None:
        if self.guard.violations:
            what = "; ".join(dict.fromkeys(self.guard.violations))
            raise Refusal("forbidden", f"the candidate tried to {what}", fatal=True)
        if self.bounds is not None and self.bounds.violations:
            # refused before the access happened: the worker's memory is intact
            what = "; ".join(dict.fromkeys(self.bounds.violations))
            raise Refusal("out_of_bounds", f"a kernel's {what}")

    # -- checks ---------------------------------------------------------------

    def check_tamper(self) -> None:
        problem = self.watch.tampered()
        if problem:
            raise Refusal("forbidden", f"the candidate {problem}", fatal=True)
        if not same_hooks(self.hooks, triton_hooks()):
            # they would run in the compiles of every later candidate of this worker
            raise Refusal("forbidden", "the candidate changed Triton's compile or launch hooks", fatal=True)

    @contextlib.contextmanager
    def compiling(self) -> Any:
        """Around one Triton compile: lend the device's lane out while it runs (``fitness.lane``).

        Compiling is host work; the lane is lent only once this worker's device
        work so far has finished, and taken back (the evaluator waits for any
        timing in progress) before anything else of the candidate's runs: the
        first start of candidate code inside the compile (a compile-time
        function, a hook) ends the loan. A step that holds the device to itself
        (timing) never lends it; nor does a worker whose Triton hooks the
        candidate has changed, or while another thread runs Python (one of the
        candidate's could launch work while the lane is lent).
        """
        if not self.lending or not same_hooks(self.hooks, triton_hooks()) or self._other_threads():
            yield
            return
        self.platform.synchronize()
        started = time.monotonic()
        self._interim("compiling")
        lent = True

        def take_back() -> None:
            nonlocal lent
            if lent:
                lent = False
                self.lent_s += time.monotonic() - started
                self._interim("compiled")

        self.lending = False  # one loan at a time
        try:
            with self.guard.on_candidate_code(take_back):
                yield
        finally:
            take_back()
            self.lending = True

    def _other_threads(self) -> bool:
        """Whether a thread besides this one and the harness's has Python frames."""
        return bool(set(sys._current_frames()) - self.own_threads - {threading.get_ident()})

    def _interim(self, kind: str) -> None:
        """Tell the evaluator ``kind`` in the middle of a step and wait for its word."""
        self.send({"ok": True, "interim": kind}, [], "")
        message, _ = wire.receive(self.in_fd)
        if message.get("step") != "continue":
            raise Refusal("internal_error", f"the evaluator answered {kind!r} with {message.get('step')!r}")

    # -- steps -----------------------------------------------------------------

    def load(self, source: str, problem_path: str, shapes: dict[str, int], init_seed: int,
             dtype: str | None = None) -> dict:
        """Import the candidate (once per source) and build ``ModelNew`` for ``shapes``."""
        digest = hashlib.sha256(source.encode()).hexdigest()[:16]
        if digest != self.source_hash:
            self.module, self.model = None, None
            path = os.path.join(self.tmpdir, f"candidate_{digest}.py")
            with open(path, "w", encoding="utf-8") as f:
                f.write(source)
            name = f"kevo_candidate_{digest}"
            spec = importlib.util.spec_from_file_location(name, path)
            module = importlib.util.module_from_spec(spec)
            sys.modules[name] = module  # Triton reads a kernel's source through its module
            self.guard.candidate_files.add(path)
            try:
                with self.guard.running():
                    spec.loader.exec_module(module)
            except SyntaxError as exc:
                raise Refusal("compile_error", f"does not compile: line {exc.lineno}: {exc.msg}")
            except Exception as exc:
                raise Refusal("compile_error", f"failed to import: {describe(exc)}")
            if not isinstance(getattr(module, "ModelNew", None), type):
                raise Refusal("compile_error", "defines no class ModelNew")
            self.module, self.source_hash = module, digest
        self.problem = load_problem(problem_path, shapes, dtype)
        # The constructor is traced too: it may create and initialise
        # parameters, not precompute answers with PyTorch.
        self.trace = trace = self.trace_cls(INIT_OPS)
        @contextlib.contextmanager
        def guarded():
            with trace, self.guard.running():
                yield

        try:
            self.model = build_model(self.module.ModelNew, self.problem, init_seed, self.device, around=guarded)
        except BaseException as exc:
            if trace.violations:
                raise Refusal("forbidden", "in __init__: " + forbidden_reason(trace.violations))
            raise classify(exc, "building ModelNew", self.platform)
        finally:
            self.trace = None
        if trace.violations:
            raise Refusal("forbidden", "in __init__: " + forbidden_reason(trace.violations))
        return {"ok": True}

    def reset(self) -> dict:
        """Drop the candidate, its model and the problem, and give all cached device memory
        back: the worker goes on for another problem's evaluator on this device."""
        self.module, self.model, self.problem, self.source_hash = None, None, None, ""
        for name in [n for n in sys.modules if n.startswith("kevo_candidate_")]:
            del sys.modules[name]  # what candidates kept at module level goes with them
        gc.collect()
        self.platform.release_memory()
        return {"ok": True}

    def _inputs(self, seed: int, probe: Probe | None = None) -> list:
        return make_inputs(self.problem, seed, self.device, probe)

    def _run(self, args: list, profile: bool = True) -> Any:
        """One traced, guarded forward; returns its outputs after the device is idle."""
        torch = self.torch
        self.trace = self.trace_cls()
        launches_before = self.launches
        try:
            with self.trace, torch.no_grad(), self.guard.running(profile):
                outputs = self.model(*args)
            self.platform.synchronize()
        except Refusal:
            raise
        except BaseException as exc:  # the candidate's failure, whatever it raised
            if self.trace.violations:
                raise Refusal("forbidden", forbidden_reason(self.trace.violations))
            raise classify(exc, "running forward", self.platform)
        finally:
            trace, self.trace = self.trace, None
        if trace.violations:
            raise Refusal("forbidden", forbidden_reason(trace.violations))
        if self.launches == launches_before:
            raise Refusal("forbidden", "forward launched no Triton kernel")
        return outputs

    def _outputs(self, outputs: Any) -> list:
        torch = self.torch
        items = list(outputs) if isinstance(outputs, (tuple, list)) else [outputs]
        for i, t in enumerate(items):
            if type(t) is not torch.Tensor:
                raise Refusal("forbidden" if isinstance(t, torch.Tensor) else "wrong",
                              f"output {i} is a {type(t).__name__}, not a plain torch.Tensor")
            if t.device != torch.device(self.device):
                raise Refusal("wrong", f"output {i} is on {t.device}, expected {self.device}")
        return items

    def _witnesses(self, inputs: list) -> list:
        """What tells, after the candidate ran, whether it changed ``inputs`` (``Platform.witness``)."""
        return [self.platform.witness(x) if isinstance(x, self.torch.Tensor) else None for x in inputs]

    def _changed(self, witnesses: list, used: list) -> int | None:
        """The index of the first input the candidate changed, or None."""
        for j, (w, x) in enumerate(zip(witnesses, used)):
            if w is not None and not self.platform.unchanged(w, x):
                return j
        return None

    def call(self, seed: int, poison: list[int], probe: Probe | None = None) -> tuple[dict, list]:
        """Run forward once on the inputs drawn from ``seed`` (transformed by ``probe``, if
        given), witnessed before the call."""
        args = self._inputs(seed, probe)
        witnesses = self._witnesses(args)
        self.platform.poison_memory(poison)
        outputs = self._outputs(self._run(args))
        changed = self._changed(witnesses, args)
        if changed is not None:
            raise Refusal("mutated_input", f"forward changed input {changed}")
        return {"ok": True}, outputs

    def time(self, base_seed: int, check_seed: int, checks: int, poison: list[int],
             timing: dict) -> tuple[dict, list]:
        """Time forward, every run on new inputs; hand the outputs of some runs over as they end.

        Run ``i`` draws its inputs from ``base_seed + i`` (warm-up runs from
        seeds past the window), so no two timed runs see the same data and a
        kernel that memoises answers gains nothing. Once the window's length is
        known, ``checks`` of its runs are drawn uniformly with a secret seed,
        besides the last, so a kernel cannot know which runs are judged. Each
        of those runs' outputs goes to the evaluator right after the run, outside
        the timed region, and the worker waits until the evaluator has judged
        them (``_hand_over``): the worker never holds more than one run's outputs.
        """
        rng = random.Random(check_seed)
        chosen: set[int] = set()
        current: dict[str, Any] = {}
        clock = time.perf_counter
        # where the step's wall time goes (seconds), for kevo's own breakdowns: never judged
        phases = dict.fromkeys(("warm-up", "prepare", "input check", "hand-over"), 0.0)
        marks = {"start": clock()}

        def seed_of(i: int) -> int:
            return base_seed + i if i >= 0 else base_seed + (1 << 20) - i

        def window(n_runs: int) -> None:
            marks["window"] = clock()
            chosen.update(rng.sample(range(n_runs), min(checks, n_runs)))
            chosen.add(n_runs - 1)

        def prepare(i: int) -> list:
            t0 = clock()
            args = self._inputs(seed_of(i))
            current["witnesses"] = self._witnesses(args)
            self.platform.poison_memory(poison)
            if i >= 0:
                phases["prepare"] += clock() - t0
            return args

        def run(i: int, args: list) -> Any:
            return self._run(args, profile=False)

        def finish(i: int, args: list, outputs: Any) -> None:
            # outside the timed region: the input check and the hand-over are not the kernel's time
            t0 = clock()
            changed = self._changed(current.pop("witnesses"), args)
            if changed is not None:
                where = f"timed run {i}" if i >= 0 else "a warm-up run"
                raise Refusal("mutated_input", f"forward changed input {changed} in {where}")
            t1 = clock()
            if i in chosen:
                self._hand_over(i, seed_of(i), self._outputs(outputs))
            if i >= 0:
                phases["input check"] += t1 - t0
                phases["hand-over"] += clock() - t1

        collecting = gc.isenabled()
        gc.disable()  # a collection inside a timed run would be charged to the candidate
        try:
            timing_result = self.platform.time_runs(run, TimingSettings(**timing), prepare, finish, window)
        finally:
            if collecting:
                gc.enable()
        end = clock()
        phases["warm-up"] = marks.get("window", end) - marks["start"]
        phases["window"] = end - marks.get("window", end)
        return {"ok": True, "runs_ms": timing_result.runs_ms, "wall_ms": timing_result.wall_ms,
                "overhead_ms": timing_result.overhead_ms, "device_ms": timing_result.device_ms,
                "checked": sorted(chosen), "phases_s": phases}, []

    def _hand_over(self, run: int, seed: int, outputs: list) -> None:
        """Send a checked timed run's outputs now and wait for the evaluator's word: it
        takes its copy and judges it while the worker waits, between two timed runs."""
        self.send({"ok": True, "interim": "timed_run", "run": run, "seed": seed}, outputs, f"r{run}")
        message, _ = wire.receive(self.in_fd)
        self.shipped = []
        if message.get("step") != "continue":
            # the evaluator has its verdict (this run's outputs were wrong): the window ends here
            raise Refusal("wrong", f"timed run {run} was judged wrong")

    def send(self, reply: dict, tensors: list, tag: str = "") -> None:
        """Send ``reply`` and ``tensors`` for the step being handled (its nonce; large
        tensors off the device through a spill file named after it and ``tag``). The
        tensors are made contiguous and kept until the next message, so that the
        evaluator can take its copy of them where they lie (``Platform.export_tensor``)."""
        nonce = self.nonce
        spill = os.path.join(self.spill_dir, f"{nonce}{tag}.bin") if self.spill_dir and nonce.isalnum() else None
        self.shipped = [t.contiguous() for t in tensors]
        wire.send(self.out_fd, {**reply, "nonce": nonce}, self.shipped, spill, self.platform.export_tensor)

    def handle(self, message: dict) -> tuple[dict, list]:
        step = message["step"]
        self.shipped = []  # the evaluator has its copies of what was shipped last
        threads_before = self.threads_started
        self.lending = message.get("lend") is True and step in ("load", "call")
        self.lent_s = 0.0
        self.guard.violations.clear()
        if self.bounds is not None:
            self.bounds.violations.clear()
        try:
            if step == "load":
                reply, tensors = self.load(message["source"], message["problem"], message["shapes"],
                                           message["init_seed"], message.get("dtype")), []
            elif step == "call":
                reply, tensors = self.call(message["seed"], message["poison"],
                                           Probe.from_message(message.get("probe")))
            elif step == "time":
                reply, tensors = self.time(message["base_seed"], message["check_seed"], message["checks"],
                                           message["poison"], message["timing"])
            elif step == "ping":
                reply, tensors = {"ok": True}, []
            elif step == "reset":
                reply, tensors = self.reset(), []
            elif step == "info":
                reply, tensors = {"ok": True, "env": sorted(os.environ)}, []
            else:
                raise ValueError(f"unknown step {step!r}")
            self.check_tamper()
            self._check_guard()
            # what the caching allocator keeps beyond a little is for the other processes on the device
            self.platform.release_memory(keep_bytes=RELEASE_ABOVE)
            if self.threads_started != threads_before:
                raise Refusal("forbidden", "the candidate started a thread", fatal=True)
        except Refusal as refusal:
            reply, tensors = self._refused(refusal), []
        except BaseException as exc:
            if self.platform.context_lost(exc):
                # an error of the candidate's kernels the device reports late, at whatever
                # call of the harness's comes next: the worker cannot use the device again
                reply = self._refused(Refusal("crashed", f"during {step}: {describe(exc)} (device context lost)",
                                              fatal=True))
                return reply, []
            if not out_of_memory(exc):
                raise
            # The harness's own allocation (inputs, their clones, the input check): not the
            # candidate's doing; the evaluator decides whether to try again with more room.
            exc = None  # its traceback holds the frames (and tensors) of the failed step: drop them first
            self.platform.release_memory()
            reply, tensors = self._refused(Refusal("out_of_memory", f"kevo's worker ran out of memory during {step}")), []
            reply["harness"] = True
        return reply, tensors

    def _refused(self, refusal: Refusal) -> dict:
        try:
            self.check_tamper()
            self._check_guard()
        except Refusal as stronger:
            refusal = stronger
        return {"ok": False, "status": refusal.status, "reason": refusal.reason, "fatal": refusal.fatal}


def _exit_with_parent(leftovers: list[str]) -> None:
    """Never outlive the evaluator that started this worker.

    An idle worker sees its channel close when the evaluator dies; one in the
    middle of a step (a hanging kernel holding the GPU, say) would not, and
    would go on after a ``kill -9`` of the run, in the way of its resume. A
    thread of the harness, started before the thread counter is installed,
    looks for a new parent twice a second and then removes what the worker
    leaves on disk and kills its process group (the worker and any compiler
    it started).
    """
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(0.5)
        for path in leftovers:
            shutil.rmtree(path, ignore_errors=True)
        os.killpg(os.getpgrp(), signal.SIGKILL)

    threading.Thread(target=watch, name="kevo-parent-watch", daemon=True).start()


def main(argv: list[str]) -> None:
    in_fd, out_fd, platform_name, index = int(argv[0]), int(argv[1]), argv[2], int(argv[3])
    limit = int(argv[4]) if len(argv) > 4 else 0
    spill_dir = argv[5] if len(argv) > 5 else None
    if limit:
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    leftovers = [spill_dir] if spill_dir else []
    _exit_with_parent(leftovers)
    harness = Harness(platform_name, index)
    harness.in_fd, harness.out_fd, harness.spill_dir = in_fd, out_fd, spill_dir
    leftovers.append(harness.tmpdir)
    wire.send(out_fd, {"ok": True, "ready": True, "device_name": harness.platform.device_name(), "pid": os.getpid()})
    while True:
        try:
            message, _ = wire.receive(in_fd)
        except wire.ChannelClosed:
            # the evaluator is gone (closed, or killed): leave nothing behind
            shutil.rmtree(harness.tmpdir, ignore_errors=True)
            if spill_dir:
                shutil.rmtree(spill_dir, ignore_errors=True)
            return
        nonce = message.get("nonce")
        harness.nonce = nonce if isinstance(nonce, str) else ""
        try:
            reply, tensors = harness.handle(message)
        except Exception:  # a bug of kevo: report it as such, then stop
            reply, tensors = {"ok": False, "status": "internal_error", "reason": traceback.format_exc(), "fatal": True}, []
        harness.send(reply, tensors)
        if reply.get("fatal"):
            os._exit(3)


if __name__ == "__main__":
    main(sys.argv[1:])
