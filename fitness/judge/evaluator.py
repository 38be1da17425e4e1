"""The evaluation protocol: one synchronous entry point.

``Evaluator(reference, platform, ...)`` prepares a problem once (``fitness.judge.prepared``:
the reference at the main and held-out shapes, the cutoff check, the memory plan) and
then ``evaluate(source)`` returns the verdict on one candidate. The candidate runs in a
sandboxed worker (``fitness.boundary.sandbox``); its outputs reach this process on the device (IPC
handles on a GPU, shared memory on the CPU), where this process takes its own copy and
judges it against a reference it computes meanwhile. An accepted verdict carries the
problem's speed of light; one faster than the floor is judged again with every timed run
checked (``fitness.judge.sol``).
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import logging
import random
import secrets
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from fitness.boundary.protocol import Call, Load, Refused, Reply, Time
from fitness.boundary.sandbox import WorkerGone, WorkerProcess
from fitness.boundary.screen import screen
from fitness.judge.channel import WorkerChannel
from fitness.judge.compare import Comparison, compare
from fitness.judge.floor import measure_peaks_alone
from fitness.judge.incumbent import Incumbent, time_incumbent
from fitness.judge.lane import NoLane, TimingLane, both, device_alone
from fitness.judge.memory_plan import Variant
from fitness.judge.prepared import PreparedProblem
from fitness.judge.sol import judged_again, needs_second_judgement, with_floor
from fitness.judge.timing_checks import handed_over, timer_disagrees, trusted_timing
from fitness.judge.where import inputs_at, refused_at
from fitness.judge.window_judge import WindowJudge, set_aside_runs
from fitness.problems.probes import Probe
from fitness.profiling.candidate import profile_candidate
from fitness.refusal import out_of_memory
from fitness.result import EvalResult, Status
from fitness.settings import RELEASE_ABOVE, EvalSettings
from platforms import Platform, get_platform
from platforms.device_lock import window as device_window
from platforms.profiling import Profiler, profiler_for

log = logging.getLogger(__name__)


class Evaluator(contextlib.AbstractContextManager):
    """Judges candidates for one problem on one platform.

    ``prepared`` shares one ``PreparedProblem`` between the evaluators of a
    device (the slots of a Ray actor); without it the evaluator prepares its
    own from the other arguments. The evaluator's worker and the steps run
    there are its ``channel`` (``fitness.judge.channel``).

    >>> ev = Evaluator("problems/elementwise/reference.py", platform="cpu",
    ...                shapes={"batch_size": 4, "dim": 64})  # doctest: +SKIP
    >>> ev.evaluate(open("problems/elementwise/seed.py").read()).status  # doctest: +SKIP
    <Status.ACCEPTED: 'accepted'>
    """

    def __init__(
        self,
        reference: str | Path,
        platform: str | Platform = "auto",
        shapes: dict[str, int] | None = None,
        max_abs_diff: float | None = None,
        held_out: list[dict[str, int]] | None = None,
        settings: EvalSettings | None = None,
        lane: TimingLane | NoLane | None = None,
        dtype: str | None = None,
        held_out_rng: random.Random | None = None,
        prepared: PreparedProblem | None = None,
    ) -> None:
        # Shared with the other evaluators on this device, if any (fitness.judge.lane).
        self.lane = lane or NoLane()
        if prepared is None:
            platform = get_platform(platform) if isinstance(platform, str) else platform
            measure_peaks_alone(platform, device_alone(self.lane, platform))  # once per device, then cached
            with self.lane.shared():  # the references run on the device: never in another's window
                prepared = PreparedProblem(reference, platform, shapes, max_abs_diff, held_out, settings,
                                           dtype, held_out_rng)
        self.prepared = prepared
        # Wall seconds of the last evaluation by part (worker steps, the evaluator's own checks), and of the warm
        # step before the next one (fitness.judge.ahead), with the held-out variants it drew for that one
        self.walls: collections.Counter[str] = collections.Counter()
        self.ahead: dict[str, float] = {}
        self.picked: list[Variant] | None = None
        # (source, name) of the Triton cache of the warm step just run, for that source's evaluation (Load.cache)
        self.warmed_cache: tuple[str, str] | None = None
        self.cache = ""  # the evaluation's
        self.channel = WorkerChannel(prepared.platform, prepared.settings, self.walls)
        # Built once: a tool that fails stays off for this evaluator (ProfilerConfigError for a bad path).
        self.profiler: Profiler = profiler_for(self.platform.name, self.settings.ncu_bin_path,
                                               self.settings.rocprof_bin_path, self.settings.profiler_enabled)
        self.held_out: list[Variant] = [g[0] for g in prepared.held_out_groups]  # the last evaluation's (first: each first)

    # The problem's facts, as its PreparedProblem has them.
    platform, settings = property(lambda self: self.prepared.platform), property(lambda self: self.prepared.settings)
    device, cutoff = property(lambda self: self.prepared.device), property(lambda self: self.prepared.cutoff)
    main = property(lambda self: self.prepared.main, doc="The variant at the main shapes.")
    cutoff_rule = property(lambda self: self.prepared.cutoff_rule, doc="Where the cutoff comes from.")

    def start_worker(self) -> None:
        """Start the worker now rather than at the first evaluation (``WorkerChannel.start``)."""
        self.channel.start()

    def hand_over_worker(self) -> WorkerProcess | None:
        """This evaluator's idle worker, reset, for another problem's evaluator (``WorkerChannel.hand_over``)."""
        return self.channel.hand_over()

    def adopt_worker(self, worker: WorkerProcess) -> bool:
        """Take ``worker`` from ``hand_over_worker`` if it can serve here (``WorkerChannel.adopt``)."""
        return self.channel.adopt(worker)

    def reference_ms(self) -> float:
        """Median runtime of the reference (eager PyTorch) at the main shapes."""
        return self.prepared.reference_ms()

    def _load(self, source: str, variant: Variant) -> Reply:
        """Load ``source`` in the worker at ``variant``'s shapes; the worker's reply."""
        self.channel.loaded = None
        self.platform.release_memory(keep_bytes=RELEASE_ABOVE)  # this cache's blocks fit no other sizes, nor the worker
        step = Load(source, str(self.prepared.reference_path), self.prepared.reference_source, variant.shapes,
                    self.settings.init_seed, self.prepared.dtype, lend=True, cache=self.cache)
        with self._waiting("wait: lane", self.lane.shared()) as hold:
            reply, _ = self.channel.step(step, interim=self.channel.lending(hold))
        if not isinstance(reply, Refused):
            self.channel.loaded = variant
        return reply

    def _checked_call(self, variant: Variant, seed: int, probe: Probe | None = None, keep: list | None = None,
                      against: list | None = None) -> tuple[Reply, Any]:
        """(the worker's reply, the comparison) for one call of the candidate on ``seed``'s inputs (transformed by
        ``probe``, if given, and judged at its cutoff), with the device's lane shared; the reference's outputs are
        computed here while the worker runs it. ``keep`` gets the candidate's outputs; given ``against`` (the
        outputs of an earlier call on the same inputs), the outputs are judged against those, with no reference."""
        refs: list = [] if against is None else against

        def reference() -> None:
            with self._timed("reference outputs"):
                refs.extend(self.prepared.reference_outputs(variant, seed, probe))

        step = Call(seed, variant.output_bytes, probe, lend=True)
        overlap = self.prepared.overlap_reference if variant is self.main else self.prepared.overlap_held_out  # once
        meanwhile = reference if overlap and against is None else None
        with self._waiting("wait: lane", self.lane.shared()) as hold:
            reply, outputs = self.channel.step(step, meanwhile, self.channel.lending(hold))
            if isinstance(reply, Refused):
                return reply, None
            if not hold.held:  # lent for a compile and not taken back: the comparison is device work too
                hold.acquire()
            if not overlap and against is None:  # one after the other, for less memory (fitness.judge.memory_plan):
                self.channel.let_go()  # the worker's outputs go first, then the reference runs
                reference()
            if keep is not None:
                keep.extend(outputs)
            with self._timed("compare"):  # inside the hold: never in another evaluation's timed window
                return reply, compare(outputs, refs, probe.cutoff if probe is not None else self.cutoff)

    def evaluate(self, source: str) -> EvalResult:
        """The verdict on candidate ``source`` (the text of a ModelNew file)."""
        base = dict(platform=self.platform.name, device_name=self.channel.device_name())
        self.walls.clear()  # in place: the channel counts into it too
        started = time.monotonic()
        # Triton's cache of this evaluation alone (its warm step's, if any): nothing another candidate wrote
        warmed, self.warmed_cache = self.warmed_cache, None
        self.cache = warmed[1] if warmed and warmed[0] == source else secrets.token_hex(16)
        try:
            result = self._judge(source, base)
            if self.main.input_bytes + sum(self.main.output_bytes) >= RELEASE_ABOVE:
                self.channel.idle()  # a worker between candidates holds nothing: other slots need the room
        except Exception as exc:
            if not out_of_memory(exc):
                raise
            # kevo's own side (a reference, a comparison, a copy of the outputs) ran out;
            # the worker may be waiting in the middle of a step: it goes too
            self.channel.discard()
            self.platform.release_memory()
            result = EvalResult(Status.OUT_OF_MEMORY, f"kevo's evaluator ran out of memory while judging "
                                f"({type(exc).__name__})", harness_failure=True, **base)
        finally:
            self.platform.release_memory(keep_bytes=RELEASE_ABOVE)
            self.walls["total"] = time.monotonic() - started
        result.confinement = self.channel.confinement()  # of the worker that judged it
        result.walls_s, self.ahead = {**self.ahead, **{p: round(s, 4) for p, s in self.walls.items()}}, {}
        return result

    def time_incumbent(self, job: Incumbent) -> EvalResult:
        """torch.compile of the reference timed by this evaluator's clock with the device to itself, eager beside
        it (``fitness.judge.incumbent``): what every speed a user reads is against (a run asks for it on a GPU only)."""
        try:
            return time_incumbent(self.prepared, self.lane, job, dict(platform=self.platform.name,
                                                                      device_name=self.channel.device_name()))
        finally:
            self.platform.release_memory(keep_bytes=RELEASE_ABOVE)

    def _judge(self, source: str, base: dict[str, Any]) -> EvalResult:
        if self.settings.screen:
            verdict = screen(source)
            if not verdict.ok:
                return EvalResult(Status(verdict.status), verdict.reason, **base)
        reused, result = self._attempt(source, base)
        if result.status is Status.CRASHED and reused:
            # The worker had judged other candidates before: damage one of them
            # left (a stray write) may be what crashed it. A crash counts against
            # this candidate only if a fresh worker sees it too.
            self.channel.discard()
            _, result = self._attempt(source, base)
        floor = self.prepared.floor
        if needs_second_judgement(result, floor):
            # faster than physics: every timed run checked before it may be a parent or the best
            again = self._again(source, base, result)
            result = judged_again(result, again, floor)  # type: ignore[arg-type]  (a floor is known)
        return with_floor(result, floor)

    def _again(self, source: str, base: dict[str, Any], first: EvalResult) -> EvalResult:
        """``first``'s candidate timed again with every timed run checked (the worker may have
        died meanwhile: a fresh one is loaded then)."""
        try:
            return self._time(source, base, first.checks, first.max_abs_diff or 0.0, every_run=True)
        except WorkerGone as gone:
            return EvalResult(Status(gone.status), gone.reason, **base)

    def _attempt(self, source: str, base: dict[str, Any]) -> tuple[bool, EvalResult]:
        """(whether the worker had judged another candidate before, the verdict)."""
        reused = False
        try:
            self.channel.get_worker(check=True)
            reused = self.channel.served > 0
            self.channel.served += 1
            return reused, self._evaluate(source, base)
        except WorkerGone as gone:
            return reused, EvalResult(Status(gone.status), gone.reason, **base)

    def _evaluate(self, source: str, base: dict[str, Any]) -> EvalResult:
        checks, worst = 0, 0.0
        rng, picked, self.picked = self.prepared.held_out_rng, self.picked, None
        self.held_out = picked or [rng.choice(group) for group in self.prepared.held_out_groups]
        # The main shapes last: the timing that follows runs on the model loaded there.
        for variant in [*self.held_out, self.main]:
            reply = self._load(source, variant)
            if isinstance(reply, Refused):
                return _refused(reply, "", base)
            fresh = [secrets.randbelow(2**31 - 1) for _ in range(self.settings.fresh_inputs)]
            # The main shapes get every fixed and fresh input set (and the timed runs'
            # checks); a held-out shape is there to catch shape-specific code, which
            # one fresh input set does as well as three and costs a third. With probes,
            # the main shapes' fresh draws are the probes' (fresh and secret too); the
            # problem's own fresh draw is checked when a probe fails (_probe), and in
            # the timed runs.
            probing = variant is self.main and bool(self.prepared.probes)
            if variant is not self.main:
                seeds = fresh or [self.settings.fixed_seeds[0]]
            else:
                seeds = [*self.settings.fixed_seeds, *([] if probing else fresh)]
            for k, seed in enumerate(seeds):
                # Run twice: the main shapes' first inputs are run again at once, memory poisoned between as
                # before every call, and the two outputs must agree within the cutoff (the second is judged
                # against the first: no reference). A kernel whose answer is whatever memory it never wrote
                # happened to hold (the last answer, say) disagrees with itself.
                first: list | None = [] if variant is self.main and k == 0 else None
                for again in ([None, first] if first is not None else [None]):
                    reply, verdict = self._checked_call(variant, seed, keep=first if again is None else None,
                                                        against=again)
                    if isinstance(reply, Refused):  # a crash, say: where it happened, and at what size
                        return _refused(reply, refused_at(variant, self.main), base)
                    where = inputs_at(variant, self.main, seed in self.settings.fixed_seeds)
                    if again is not None:
                        where += ", run twice: the second run against the first"
                    if verdict.status != "accepted":
                        return EvalResult(Status(verdict.status), f"{where}: {verdict.reason}",
                                          max_abs_diff=verdict.max_abs_diff, checks=checks, **base)
                    checks += 1
                    if again is None:  # the difference between the two runs is not one from the reference
                        worst = max(worst, verdict.max_abs_diff)
                first = None  # its outputs go before the next inputs are drawn
            if probing:
                refused = self._probe(base, checks, fresh)
                if refused is not None:
                    return refused
                checks += len(self.prepared.probes)
        return self._time(source, base, checks, worst)

    def _probe(self, base: dict[str, Any], checks: int, fresh: list[int]) -> EvalResult | None:
        """Check the candidate on each probe (``fitness.problems.probes``) at the main shapes, on
        fresh secret inputs; the verdict if it fails one, else None.

        A candidate that fails a probe is then checked on the problem's own ``fresh``
        draws: wrong there too, the verdict is that (``wrong``, say: it memorised the
        fixed inputs); right there, it is ``wrong_off_distribution``. A probe's
        differences are at its own scale: ``max_abs_diff`` stays the problem's own."""
        for probe in self.prepared.probes:
            reply, verdict = self._checked_call(self.main, secrets.randbelow(2**31 - 1), probe)
            if isinstance(reply, Refused):
                return _refused(reply, f"on the probe ({probe.describe()}): ", base)
            if verdict.status != "accepted":
                for seed in fresh:
                    own_reply, own = self._checked_call(self.main, seed)
                    if isinstance(own_reply, Refused):
                        return _refused(own_reply, "", base)
                    if own.status != "accepted":
                        return EvalResult(Status(own.status), f"fresh inputs: {own.reason}",
                                          max_abs_diff=own.max_abs_diff, checks=checks, **base)
                return EvalResult(Status.WRONG_OFF_DISTRIBUTION,
                                  f"right on the problem's own inputs, {verdict.status} on the probe "
                                  f"({probe.describe()}; cutoff {probe.cutoff:.3g} there): {verdict.reason}",
                                  checks=checks, **base)
            checks += 1
        return None

    def _time(self, source: str, base: dict[str, Any], checks: int, worst: float,
              every_run: bool = False) -> EvalResult:
        """Time the candidate, some of its timed runs checked (``every_run``: all of them)."""
        # the window has at most max_runs runs: that many checks is every one
        n_checks = self.prepared.timing.max_runs if every_run else self.settings.timed_checks
        self.channel.get_worker()  # replaced (and so not loaded) if it died since the checks
        if self.channel.loaded is not self.main:
            reply = self._load(source, self.main)
            if isinstance(reply, Refused):
                return _refused(reply, "", base)
        # Timed inputs are fresh too, and new for every run: a candidate that recognises inputs it has seen
        # must not answer them from a cache.
        window = WindowJudge(secrets.randbelow(2**30), set_aside_runs(sum(self.main.output_bytes)), self._judge_run)
        with self._waiting("wait: lane", self.lane.exclusive()) as held, \
                self._waiting("wait: device lock", device_window(self.platform)) as turn:  # across processes too
            window.sharing = lambda: held.sharing(turn)  # a run judged as it ends shares the device meanwhile
            with self._timed("reference timing"):
                self.reference_ms()  # timed with the device to itself, like the candidate
            started = time.monotonic()
            reply = self._timed_window(window, n_checks)
            wall_s = time.monotonic() - started
            self.walls["window"] += wall_s
        if window.set_aside:
            with self._waiting("wait: lane", self.lane.shared()), self._timed("judging set aside"):
                window.finish()  # the runs set aside, judged with the device shared again
        failure = window.failure()
        if failure is not None:
            run, verdict = failure
            return EvalResult(Status(verdict.status), f"timed run {run}: {verdict.reason}",
                              max_abs_diff=verdict.max_abs_diff, checks=checks + window.checked - 1, **base)
        if isinstance(reply, Refused):
            return _refused(reply, "while timing: ", base)
        for part, seconds in reply.phases_s.items():  # the worker's own account, for breakdowns only
            self.walls[f"time: {part}"] += seconds
        if not handed_over(reply, window.judged, n_checks):
            self.channel.discard()
            return EvalResult(Status.FORBIDDEN, "the worker did not hand over the timed runs it had to",
                              checks=checks, **base)
        checks += len(window.judged)
        worst = max(worst, window.worst())
        problem = timer_disagrees(reply.runs_ms, reply.wall_ms, wall_s)
        if problem:
            self.channel.discard()
            return EvalResult(Status.FORBIDDEN, problem, max_abs_diff=worst, checks=checks, **base)
        timing = trusted_timing(reply, self.prepared.overhead_ms)  # its overhead bounded by the judge's own
        return EvalResult(Status.ACCEPTED, "", max_abs_diff=worst, runtime_ms=timing.median_ms,
                          runtime_spread=timing.spread, reference_ms=self.reference_ms(), checks=checks, **base)

    def _timed_window(self, window: WindowJudge, checks: int) -> Reply:
        """The worker's time step, its checked runs handed to ``window`` as they end (the worker waits for the
        answer, so it keeps one run's outputs at a time); the step's final reply. A forged hand-over raises
        ``WorkerGone``."""
        step = Time(window.base_seed, secrets.randbits(64), checks, self.main.output_bytes,
                    dataclasses.asdict(self.prepared.timing))
        reply, _ = self.channel.step(step, interim=window.hand)
        return reply

    def _judge_run(self, seed: int, outputs: list) -> Comparison:  # a timed run's outputs against the reference's
        with self._timed("reference outputs"):
            references = self.prepared.reference_outputs(self.main, seed)
        with self._timed("compare"):
            return compare(outputs, references, self.cutoff)

    def profile(self, source: str, runtime_ms: float | None = None,
                room: Callable[[], contextlib.AbstractContextManager] | None = None) -> dict[str, Any]:
        """The profile of candidate ``source`` (a parent), as ``ProfileRecord.to_dict()``.

        The platform's profiler runs the candidate at the main shapes, or a reduced shape for a large problem
        (``fitness.profiling.shape``), with the device to itself while it uses it (the lane held exclusively, and
        the device's lock between processes); without one, or once it has failed, the record is the analytic
        roofline from ``runtime_ms`` and says why in its ``reason``. ``room()``, where given, is entered before
        the lane while the program is on the device (an actor's admission). ``ProblemError``: unusable ``FLOPS``."""
        alone = device_alone(self.lane, self.platform)
        record = profile_candidate(self.profiler, self.prepared.reference_path, self.prepared.shapes, source,
                                   self.platform.name, getattr(self.platform, "index", 0),
                                   self.settings.profile_timeout_s, runtime_ms=runtime_ms,
                                   device_name=self.channel.device_name(), dtype=self.prepared.dtype,
                                   exclusive=alone if room is None else both(room, alone),
                                   shapes_seen=self.prepared.profile_shapes)
        return record.to_dict()

    @contextlib.contextmanager
    def _waiting(self, part: str, lock: contextlib.AbstractContextManager[Any]) -> Iterator[Any]:
        """``lock`` held for the block; the time taken to get it counted under ``part``."""
        started = time.monotonic()
        with lock as held:
            self.walls[part] += time.monotonic() - started
            yield held

    @contextlib.contextmanager
    def _timed(self, part: str) -> Iterator[None]:
        started = time.monotonic()
        try:
            yield
        finally:
            self.walls[part] += time.monotonic() - started

    def close(self) -> None:  # stops the worker
        self.channel.discard()

    def __exit__(self, *exc: object) -> None:
        self.close()


def _refused(reply: Refused, where: str, base: dict[str, Any]) -> EvalResult:
    """The result of a step the worker refused (``harness``: its own allocation failed)."""
    return EvalResult(reply.status, where + reply.reason, harness_failure=reply.harness, **base)
