"""The sandboxed worker: runs candidates, never judges them.

Started by ``fitness.judge.evaluator`` as ``python -m fitness.worker IN OUT PLATFORM
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
import dataclasses
import gc
import hashlib
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable
from typing import Any

from fitness.boundary import wire
from fitness.boundary.protocol import (MAX_REASON, Answer, Call, Compiled, Compiling, Continue, Environment, Failed,
                                       Info, Load, Message, Ok, Outputs, Ping, ProtocolViolation, Refused, Reset, Stop,
                                       Time, Timed, TimedRun, Warm, Warmed, read_answer, read_step)
from fitness.problems.probes import Probe
from fitness.problems.problem import Problem, load_problem, make_inputs
from fitness.refusal import HarnessFault, Refusal, classify, describe, forbidden_reason, out_of_memory
from fitness.result import Status
from fitness.settings import RELEASE_ABOVE
from fitness.worker.guard import Guard
from fitness.worker.instrument import (Watch, instrument_autotuners, instrument_compiles, instrument_launches,
                                       instrument_threads, same_hooks, triton_hooks, watched_objects)
from fitness.worker.load_step import build_candidate, import_candidate, warm
from fitness.worker.loan import CompileLoan
from fitness.worker.timed_step import TimedWindow, addresses, apart
from fitness.worker.trace import INIT_OPS, UNRECORDED, host_violations
from platforms import TimingSettings, get_platform, time_runs


class Harness:
    """State of one worker process: the platform, the candidate, the problem."""

    def __init__(self, platform_name: str, index: int) -> None:
        import torch
        import torch._dynamo  # noqa: F401  (on import it rewraps torch.manual_seed: do it before capturing)
        import triton.language.extra.libdevice  # noqa: F401  (a candidate imports it; its load may not run the import machinery)
        from triton.runtime import autotuner, interpreter
        import triton.runtime.jit as triton_jit

        from fitness.worker.trace import ComputeTrace

        self.torch = torch
        self.platform = get_platform(platform_name, index)
        self.device = self.platform.device()
        self.platform.warm_up()  # before the instruments: kevo's own compile, lending no lane
        self.trace_cls = ComputeTrace
        self.launches = 0
        self.run_launches = 0  # the last forward's
        self.input_addresses: set[int] = set()  # where the last inputs drawn lay (fitness.worker.timed_step.apart)
        self.compile_s = 0.0  # seconds Triton compiled in this step (fitness.worker.instrument)
        self.trace: Any = None
        self.dry = False  # a warm step: launches compile, nothing runs (fitness.worker.load_step.warm)
        instrument_launches(self, triton_jit.JITFunction, interpreter.InterpretedFunction)
        instrument_autotuners(self, autotuner.Autotuner)
        instrument_compiles(self, triton_jit.JITFunction)
        self.hooks = triton_hooks()
        own_threads = {t.ident for t in threading.enumerate()}  # the harness's (the parent watch)
        self.threads_started = 0
        instrument_threads(self)
        self.bounds = self.platform.memory_guard()
        watched = watched_objects(torch, triton_jit, interpreter, self.platform)
        watched.update(self.platform.worker_setup())
        if self.bounds is not None:
            watched.update(self.bounds.watched())
        self.watch = Watch(watched)
        self.source_hash = ""
        self.cache = ""  # the evaluation's Triton cache (use_cache)
        self.module: Any = None
        self.model: Any = None
        self.problem: Problem | None = None
        self.tmpdir = tempfile.mkdtemp(prefix="kevo-worker-")
        self.guard = Guard()
        self.loan = CompileLoan(self.platform, self.guard, self.hooks, own_threads, self._interim)
        self.nonce = ""  # of the step being handled: the hand-overs of a time step carry it too
        self.in_fd, self.out_fd, self.spill_dir = -1, -1, None  # the channel (set by main)
        self.shipped: list = []  # outputs shared with the evaluator, kept until its next message
        # Each step's handler, by the step's name (fitness.boundary.protocol): (the reply, the tensors it carries).
        self.steps: dict[str, Callable[[Any], tuple[Message, list]]] = {
            Warm.KIND: lambda step: (Warmed(*warm(self, step)), []),
            Load.KIND: lambda step: (self.load(step.source, step.problem, step.problem_source, step.shapes,
                                               step.init_seed, step.dtype, step.cache), []),
            Call.KIND: lambda step: self.call(step.seed, step.poison, step.probe),
            Time.KIND: lambda step: self.time(step.base_seed, step.check_seed, step.checks, step.poison, step.timing),
            Ping.KIND: lambda step: (Ok(), []),
            Reset.KIND: lambda step: (self.reset(), []),
            Info.KIND: lambda step: (Environment(sorted(os.environ)), []),
        }

    def _check_guard(self) -> None:
        if self.guard.violations:
            what = "; ".join(dict.fromkeys(self.guard.violations))
            raise Refusal(Status.FORBIDDEN, f"the candidate tried to {what}", fatal=True)
        if self.bounds is not None and self.bounds.violations:
            # refused before the access happened: the worker's memory is intact
            what = "; ".join(dict.fromkeys(self.bounds.violations))
            raise Refusal(Status.OUT_OF_BOUNDS, f"a kernel's {what}")

    # -- checks ---------------------------------------------------------------

    def check_tamper(self) -> None:
        problem = self.watch.tampered()
        if problem:
            raise Refusal(Status.FORBIDDEN, f"the candidate {problem}", fatal=True)
        if not same_hooks(self.hooks, triton_hooks()):
            # they would run in the compiles of every later candidate of this worker
            raise Refusal(Status.FORBIDDEN, "the candidate changed Triton's compile or launch hooks", fatal=True)

    def compiling(self) -> Any:
        """Around one Triton compile (``fitness.worker.instrument``): the lane lent out meanwhile, if
        the step allows (``CompileLoan.compiling``)."""
        return self.loan.compiling()

    def _interim(self, message: Compiling | Compiled) -> None:
        """Tell the evaluator ``message`` in the middle of a step and wait for its word to go on."""
        self.send(message.to_wire(), [], "")
        answer = self._answer()
        if not isinstance(answer, Continue):
            raise HarnessFault(f"the evaluator answered {type(message).__name__} with {type(answer).__name__}")

    def _answer(self) -> Answer:
        """The evaluator's answer to the interim message just sent."""
        data, _ = wire.receive(self.in_fd)
        try:
            return read_answer(data)
        except ProtocolViolation as violation:
            raise HarnessFault(f"the evaluator's answer is malformed ({violation})") from None

    # -- steps -----------------------------------------------------------------

    def use_cache(self, name: str) -> None:
        """Triton's cache, from now on, in a directory of this worker's own for the evaluation ``name`` (drawn by
        the evaluator, secret until sent: ``fitness.boundary.protocol.cache_name``); the last evaluation's is
        removed. What one candidate writes there (a binary under a kernel's key that another candidate would
        compile) reaches no other evaluation: no other worker may write beneath this one's scratch directory
        (``fitness.boundary.confine``), and an evaluation's name is not known before it starts. '' keeps the cache
        as it is (the worker's own, beneath its scratch directory: ``fitness.boundary.sandbox``)."""
        if not name or name == self.cache:
            return
        import triton

        if self.cache:
            shutil.rmtree(os.path.join(self.tmpdir, f"triton-{self.cache}"), ignore_errors=True)
        path = os.path.join(self.tmpdir, f"triton-{name}")
        os.makedirs(path, exist_ok=True)
        triton.knobs.cache.dir = path
        self.cache = name

    def load(self, source: str, problem_path: str, problem_source: str, shapes: dict[str, int], init_seed: int,
             dtype: str | None = None, cache: str = "") -> Ok:
        """Import the candidate (once per source), build ``ModelNew`` for ``shapes`` (``fitness.worker.load_step``)
        from the problem's text ``problem_source`` (the file at ``problem_path`` is not read), Triton's cache
        that of the evaluation ``cache`` (``use_cache``)."""
        self.use_cache(cache)
        digest = hashlib.sha256(source.encode()).hexdigest()[:16]
        if digest != self.source_hash:
            self.module, self.model = None, None
            self.module, self.source_hash = import_candidate(source, digest, self.tmpdir, self.guard), digest
        self.problem = load_problem(problem_path, shapes, dtype, source=problem_source)
        # the launch counter's (fitness.worker.instrument) while it builds
        self.trace = trace = self.trace_cls(INIT_OPS)
        try:
            self.model = build_candidate(self.module.ModelNew, self.problem, init_seed, self.device, trace,
                                         self.guard, self.platform)
        finally:
            self.trace = None
        return Ok()

    def reset(self) -> Ok:
        """Drop the candidate, its model and the problem, and give all cached device memory
        back: the worker goes on for another problem's evaluator on this device."""
        self.module, self.model, self.problem, self.source_hash = None, None, None, ""
        for name in [n for n in sys.modules if n.startswith("kevo_candidate_")]:
            del sys.modules[name]  # what candidates kept at module level goes with them
        gc.collect()
        self.platform.release_memory()
        return Ok()

    def _run(self, args: list, profile: bool = True, traced: bool = True) -> Any:
        """One guarded forward, traced unless ``traced`` is False (a timed run whose PyTorch
        operators the profiler records: ``Harness.time``); returns its outputs after the
        device is idle."""
        torch = self.torch
        self.trace = self.trace_cls() if traced else None
        launches_before = self.launches
        try:
            with self.trace or contextlib.nullcontext(), torch.no_grad(), self.guard.running(profile):
                outputs = self.model(*args)
            self.platform.synchronize()
        except (Refusal, HarnessFault):
            raise
        except BaseException as exc:  # the candidate's failure, whatever it raised
            if self.trace is not None and self.trace.violations:
                raise Refusal(Status.FORBIDDEN, forbidden_reason(self.trace.violations))
            raise classify(exc, "running forward", self.platform)
        finally:
            trace, self.trace = self.trace, None
        if trace is not None and trace.violations:
            raise Refusal(Status.FORBIDDEN, forbidden_reason(trace.violations))
        self.run_launches = self.launches - launches_before
        if self.run_launches == 0:
            raise Refusal(Status.FORBIDDEN, "forward launched no Triton kernel")
        return outputs

    def _outputs(self, outputs: Any) -> list:
        torch = self.torch
        items = list(outputs) if isinstance(outputs, (tuple, list)) else [outputs]
        for i, t in enumerate(items):
            if type(t) is not torch.Tensor:
                raise Refusal(Status.FORBIDDEN if isinstance(t, torch.Tensor) else Status.WRONG,
                              f"output {i} is a {type(t).__name__}, not a plain torch.Tensor")
            if t.device != torch.device(self.device):
                raise Refusal(Status.WRONG, f"output {i} is on {t.device}, expected {self.device}")
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

    def _inputs(self, seed: int, probe: Probe | None = None) -> list:
        """The inputs drawn from ``seed``, at addresses the last inputs drawn did not have."""
        args = apart(lambda: make_inputs(self.problem, seed, self.device, probe), self.input_addresses)
        self.input_addresses = addresses(args)
        return args

    def call(self, seed: int, poison: list[int], probe: Probe | None = None) -> tuple[Outputs, list]:
        """Run forward once on the inputs drawn from ``seed`` (transformed by ``probe``, if
        given), witnessed before the call."""
        clock, marks = time.perf_counter, [time.perf_counter()]  # where the step's time goes, for breakdowns
        args = self._inputs(seed, probe)
        self.platform.synchronize()  # the device's draw is the inputs' time, not the witness's
        marks.append(clock())
        witnesses = self._witnesses(args)
        marks.append(clock())
        self.platform.poison_memory(poison)
        marks.append(clock())
        outputs = self._outputs(self._run(args))
        marks.append(clock())
        changed = self._changed(witnesses, args)
        if changed is not None:
            raise Refusal(Status.MUTATED_INPUT, f"forward changed input {changed}")
        parts = ("inputs", "witness", "poison", "forward", "input check")
        return Outputs(phases_s={p: b - a for p, a, b in zip(parts, marks, [*marks[1:], clock()])}), outputs

    def time(self, base_seed: int, check_seed: int, checks: int, poison: list[int],
             timing: dict) -> tuple[Timed, list]:
        """Time forward, every run on new inputs; hand the outputs of some runs over as they
        end (``fitness.worker.timed_step``)."""

        def draw(seed: int) -> tuple[list, list]:
            args = self._inputs(seed)
            witnesses = self._witnesses(args)
            self.platform.poison_memory(poison)
            return args, witnesses

        settings = TimingSettings(**timing)
        # where the profiler that times the window records each run's operators, the window's runs
        # go without the dispatch trace (its cost on every operator would be the kernel's time) and
        # their operators are checked once the window is over; warm-up runs stay traced
        recorded = settings.device_trace and self.platform.has_device_trace
        steps = TimedWindow(base_seed, check_seed, checks, draw,
                            lambda args, i: self._run(args, profile=False, traced=i < 0 or not recorded),
                            self._changed, lambda i, seed, outputs: self._hand_over(i, seed, self._outputs(outputs)),
                            lambda: self.run_launches)
        run, prepare, finish, window = steps.run, steps.prepare, steps.finish, steps.window  # time_runs' callbacks
        collecting = gc.isenabled()
        gc.disable()  # a collection inside a timed run would be charged to the candidate
        try:
            timing_result = time_runs(self.platform, run, settings, prepare, finish, window)
        finally:
            if collecting:
                gc.enable()
        if recorded:
            if timing_result.host_ops is None:
                raise Refusal(Status.FORBIDDEN, UNRECORDED)
            computed = host_violations(timing_result.host_ops)
            if computed:
                raise Refusal(Status.FORBIDDEN, forbidden_reason(computed))
        kept = self.platform.persisting_l2_bytes()
        if kept:  # lines it marked persisting would stay in L2 through every flush
            raise Refusal(Status.FORBIDDEN, f"the candidate set aside {kept} bytes of L2 for persisting lines",
                          fatal=True)
        return steps.reply(timing_result), []

    def _hand_over(self, run: int, seed: int, outputs: list) -> None:
        """Send a checked timed run's outputs now and wait for the evaluator's word: it
        takes its copy and judges it while the worker waits, between two timed runs. The run's
        inputs are gone by now (``TimedWindow.finish``): what the allocator keeps of them beyond
        a little goes back to the device, for the evaluator's reference."""
        self.platform.release_memory(keep_bytes=RELEASE_ABOVE)
        self.send(TimedRun(run, seed).to_wire(), outputs, f"r{run}")
        answer = self._answer()
        self.shipped = []
        if isinstance(answer, Stop):
            # the evaluator has its verdict (this run's outputs were wrong): the window ends here
            raise Refusal(Status.WRONG, f"timed run {run} was judged wrong")

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
        """Run the step ``message`` (its wire form) names: (the reply's wire form, its tensors)."""
        step = read_step(message)
        self.shipped = []  # the evaluator has its copies of what was shipped last
        threads_before = self.threads_started
        self.loan.start_step(getattr(step, "lend", False))  # a load or a call may lend the lane out, a warm step does
        self.compile_s = 0.0
        self.guard.violations.clear()
        if self.bounds is not None:
            self.bounds.violations.clear()
        reply: Message
        try:
            reply, tensors = self.steps[step.KIND](step)
            if isinstance(reply, (Outputs, Timed, Warmed)):
                reply = dataclasses.replace(reply, compile_s=self.compile_s)
            self.check_tamper()
            self._check_guard()
            # what the caching allocator keeps beyond a little is for the other processes on the device
            self.platform.release_memory(keep_bytes=RELEASE_ABOVE)
            if self.threads_started != threads_before:
                raise Refusal(Status.FORBIDDEN, "the candidate started a thread", fatal=True)
        except Refusal as refusal:
            reply, tensors = self._refused(refusal), []
        except HarnessFault as fault:
            reply, tensors = Failed(str(fault)), []
        except BaseException as exc:
            if self.platform.context_lost(exc):
                # an error of the candidate's kernels the device reports late, at whatever
                # call of the harness's comes next: the worker cannot use the device again
                reason = f"during {step.KIND}: {describe(exc)} (device context lost)"
                return self._refused(Refusal(Status.CRASHED, reason, fatal=True)).to_wire(), []
            if not out_of_memory(exc):
                raise
            # The harness's own allocation (inputs, their clones, the input check): not the
            # candidate's doing; the evaluator decides whether to try again with more room.
            exc = None  # its traceback holds the frames (and tensors) of the failed step: drop them first
            self.platform.release_memory()
            refusal = Refusal(Status.OUT_OF_MEMORY, f"kevo's worker ran out of memory during {step.KIND}")
            reply, tensors = dataclasses.replace(self._refused(refusal), harness=True), []
        return reply.to_wire(), tensors

    def _refused(self, refusal: Refusal) -> Refused:
        try:
            self.check_tamper()
            self._check_guard()
        except Refusal as stronger:
            refusal = stronger
        return Refused(refusal.status, refusal.reason[:MAX_REASON], refusal.fatal)


def _exit_with_parent(leftovers: list[str]) -> None:
    """Never outlive the evaluator that started this worker.

    An idle worker sees its channel close when the evaluator dies; one in the middle of a step
    (a hanging kernel holding the GPU, say) would not, and would go on after a ``kill -9`` of the
    run, in the way of its resume. A thread of the harness, started before the thread counter is
    installed, looks for a new parent twice a second and then removes what the worker leaves on
    disk and kills its process group (the worker and any compiler it started). Its confinement
    (``fitness.boundary.confine``) lets it empty its scratch directory but not remove the directory itself
    from the temp folder: the next worker started on the machine does (``fitness.boundary.sandbox``).
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
    # fitness.boundary.sandbox's directory for this worker: its working directory and TMPDIR
    scratch = argv[6] if len(argv) > 6 else None
    if scratch and not os.path.basename(scratch).startswith("kevo-worker-"):
        raise SystemExit(f"fitness.worker: {scratch} is no worker's scratch directory")
    if limit:
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    from fitness.boundary import confine

    # what fitness.boundary.confine put in force before this process became the worker
    confinement = confine.in_force()
    leftovers = [path for path in (spill_dir, scratch) if path]
    _exit_with_parent(leftovers)
    harness = Harness(platform_name, index)
    harness.in_fd, harness.out_fd, harness.spill_dir = in_fd, out_fd, spill_dir
    if confinement.writable:  # else the guard keeps its own (the temp folder, the compile caches)
        harness.guard.confine_files(confinement.writable)
    leftovers.append(harness.tmpdir)
    wire.send(out_fd, {"ok": True, "ready": True, "device_name": harness.platform.device_name(), "pid": os.getpid(),
                       "confinement": confinement.in_force})
    while True:
        try:
            message, _ = wire.receive(in_fd)
        except wire.ChannelClosed:
            # the evaluator is gone (closed, or killed): leave nothing behind
            for path in leftovers:
                shutil.rmtree(path, ignore_errors=True)
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
