"""A problem made ready to judge on one device, shared by the evaluators there.

``PreparedProblem`` loads the reference at the main shapes (its outputs on
the fixed inputs must be finite enough for the cutoff check to pass), the
held-out shape variants, and what one evaluation in flight costs in memory
(``footprint``). It keeps no reference outputs: each check computes its
reference on the device while the worker runs the candidate, so a problem
costs the memory of the evaluations in flight and nothing per variant.

Several evaluators of one device (the slots of a Ray actor) share one
``PreparedProblem``: the problem is loaded, its cutoff checked and its
reference timed once per device, not once per slot.
"""

from __future__ import annotations

import dataclasses
import logging
import random
import secrets
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fitness.judge.compare import CutoffError, Trivial, all_finite, output_means, trivial_passes
from fitness.judge.cutoff import derived_cutoff, output_scale
from fitness.judge.floor import Floor, floor_for, reduction_terms
from fitness.judge.memory_plan import Variant, phases_of
from fitness.judge.probe_rounding import probe_cutoff
from fitness.problems.probes import FACTOR_RANGE, Probe, changes
from fitness.problems.problem import (NoRoomNow, Problem, ProblemError, build_model, declared_cutoff, held_out_shapes,
                                      input_domains, load_problem, make_inputs)
from fitness.refusal import out_of_memory
from fitness.settings import EvalSettings
from platforms import Platform, PlatformUnavailable, Timing, time_runs
from platforms.device_lock import window as device_window

log = logging.getLogger(__name__)

# Draws what a candidate must not predict: which held-out shapes it is checked on.
_SECRET = secrets.SystemRandom()

GB = float(1 << 30)
#: An evaluation that needs at most this share of the device's memory would fit it were nothing else
#: there: when less is free, that is ``NoRoomNow``, not the problem's fault.
ROOM_SHARE = 0.9
#: Where a check overlaps the reference with the candidate, (main shapes, held-out shapes), from the
#: fastest to the leanest: a grown held-out shape is the largest, and is checked once an evaluation.
PLANS = ((True, True), (True, False), (False, False))


class PreparedProblem:
    """The reference of one problem at its main and held-out shapes, on ``platform``'s device.

    Raises ``ProblemError`` (the reference fails, or one evaluation would not
    fit in the device's memory) and ``CutoffError``.
    """

    def __init__(
        self,
        reference: str | Path,
        platform: Platform,
        shapes: dict[str, int] | None = None,
        max_abs_diff: float | None = None,
        held_out: list[dict[str, int]] | None = None,
        settings: EvalSettings | None = None,
        dtype: str | None = None,
        held_out_rng: random.Random | None = None,
    ) -> None:
        self.reference_path = Path(reference).resolve()
        if not self.reference_path.is_file():
            raise ProblemError(f"reference file not found: {self.reference_path}")
        self.reference_source = self.reference_path.read_text(encoding="utf-8")  # both sides build from it
        why = platform.cannot_run_kernels()
        if why:
            raise PlatformUnavailable(f"platform {platform.name!r}: {why}")
        self.platform = platform
        self.settings = settings or EvalSettings()
        self.timing = self.settings.timing or platform.timing
        self.shapes = dict(shapes or {})
        self.dtype = dtype  # None: the problem's own dtypes; else floating inputs and weights cast to it
        declared = declared_cutoff(self.reference_path)
        # The cutoff, and where it comes from; with neither given, derived from the reference's
        # outputs on the first fixed inputs (derived_cutoff) before the cutoff check runs.
        self.cutoff: float | None = None
        self.cutoff_rule = ""
        if max_abs_diff is not None:
            self.cutoff, self.cutoff_rule = float(max_abs_diff), "given"
        elif declared is not None:
            self.cutoff, self.cutoff_rule = declared, "the problem's MAX_ABS_DIFF"
        self.device = platform.device()
        self._lock = threading.Lock()
        self._reference_ms: float | None = None
        #: torch.compile of the main shapes' model, by whether TF32 was allowed (fitness.judge.incumbent)
        self.incumbents: dict[bool, Any] = {}
        # What the problem's own draws cannot tell from the answer (the cutoff check), the
        # reference's scale and finiteness on the first fixed inputs: set by _variant.
        self._suspects: list[Trivial] = []
        self._main_scale, self._main_finite = 0.0, True
        #: Things said once about this problem (a probe dropped, what the probes tell apart).
        self.notes: list[str] = []
        self.main = self._prepare(self.shapes, required=True)
        #: The probes every evaluation checks at the main shapes (fitness.problems.probes), each with its cutoff.
        self.probes: list[Probe] = self._prepare_probes() if self.settings.probes else []
        self._settle_suspects()
        # Held-out shapes in groups; each evaluation checks one of every group,
        # chosen in secret. Derived groups are drawn in secret too (see
        # fitness.problems.problem.held_out_shapes): a kernel cannot know them.
        # held_out_rng is for tests that must know the draw; None draws in secret.
        self.held_out_rng = held_out_rng or _SECRET
        if held_out is None:
            groups = held_out_shapes(self.reference_path, self.shapes, rng=self.held_out_rng)
        else:
            groups = [[extra] for extra in held_out]
        self.held_out_groups: list[list[Variant]] = []
        for group in groups:
            variants = [v for v in (self._prepare({**self.shapes, **extra}, required=False) for extra in group)
                        if v is not None]
            if variants:
                self.held_out_groups.append(variants)
        if held_out is None and not self.held_out_groups:
            self._note("no held-out shapes: no size of 8 or more here is the data's alone (the model's settings "
                       "and the sizes its weights fix stay), so kernels are checked at these shapes only; "
                       "HELD_OUT_SHAPES in the problem or held_out_shapes in the config gives others")
        #: Whether a check at the main shapes computes the reference's outputs while the worker runs
        #: the candidate (faster) or after it (less memory: fitness.judge.memory_plan), and a check at a
        #: held-out shape (grown, the larger); slots_that_fit may turn either off.
        self.overlap_reference = self.overlap_held_out = True
        # what preparing cached at every variant's sizes goes back: the free memory counted below is
        # this process's and the worker's, and the worker cannot use this process's cache
        platform.release_memory()
        free = platform.free_memory()
        if self.footprint(overlap=False) > free:
            need, total = self.footprint(overlap=False), platform.total_memory()
            if total is not None and need <= total * ROOM_SHARE:  # other work holds what it needs
                raise NoRoomNow(self._too_big(need, free, f"the device has {total / GB:.1f} GB: other work holds "
                                                          "the rest now"))
            raise ProblemError(self._too_big(need, free))
        self.overlap_reference, self.overlap_held_out = next(
            (plan for plan in PLANS if self.footprint(*plan) <= free), PLANS[-1])
        #: The floor at the main shapes on this device (fitness.judge.floor; peaks measured on first use).
        self.floor: Floor | None
        self.floor, why = floor_for(self.main.problem, platform, self.main.input_bytes + sum(self.main.output_bytes))
        if self.floor is None:
            self._note(f"no speed-of-light floor, so no SOL: {why}")
        #: The timer's own overhead as this process measures it (bounds the worker's, fitness.judge.timing_checks).
        self.overhead_ms: float | None = None
        #: The shape a parent's profile ended at, where it had to grow (fitness.profiling.candidate): the
        #: next starts there.
        self.profile_shapes: dict = {}

    # -- the reference ------------------------------------------------------------

    def reference_outputs(self, variant: Variant, seed: int, probe: Probe | None = None) -> list:
        """The reference's outputs, on the device, for the inputs drawn from ``seed``
        (transformed by ``probe``, if given)."""
        import torch

        inputs = make_inputs(variant.problem, seed, self.device, probe)
        with torch.no_grad():
            out = variant.model(*inputs)
        del inputs
        self.platform.synchronize()
        outs = list(out) if isinstance(out, (tuple, list)) else [out]
        return [o.detach() for o in outs]

    def _prepare(self, shapes: dict[str, int], required: bool) -> Variant | None:
        try:
            return self._variant(shapes, required)
        except (ProblemError, CutoffError):
            if required:
                raise
            log.warning("held-out shapes %s: the problem itself fails there; skipped", shapes)
        except Exception as exc:  # the reference is user input
            if required:
                what = "runs out of memory" if out_of_memory(exc) else "fails"
                raise ProblemError(
                    f"the reference {self.reference_path} {what} at shapes {shapes or 'as written'}: "
                    f"{type(exc).__name__}: {str(exc).strip()[:300]}"
                ) from None
            log.warning("held-out shapes %s: the reference fails there (%s); skipped", shapes,
                        str(exc).strip()[:200])
        self.platform.release_memory()
        return None

    def _variant(self, shapes: dict[str, int], required: bool) -> Variant:
        import torch

        problem = load_problem(self.reference_path, shapes, self.dtype, source=self.reference_source)
        model = build_model(problem.Model, problem, self.settings.init_seed, self.device)
        # Held-out shapes are checked on fresh inputs: one fixed set proves the reference works there.
        seeds = self.settings.fixed_seeds if required else self.settings.fixed_seeds[:1]
        output_bytes, input_bytes, witness_bytes, scratch, largest = [], 0, 0, 0, 0
        # A constant counts against the cutoff only when taken from another draw: the mean of
        # one draw's scalar output is that output itself (the first draw gives the second its constant).
        constants: list | None = None
        for seed in seeds:
            inputs = make_inputs(problem, seed, self.device)
            sizes = [x.numel() * x.element_size() for x in inputs if isinstance(x, torch.Tensor)]
            input_bytes, witness_bytes = sum(sizes), sum(self.platform.witness_bytes(b) for b in sizes)
            before = self.platform.track_peak()
            with torch.no_grad():
                out = model(*inputs)
            self.platform.synchronize()
            references = [o.detach() for o in (out if isinstance(out, (tuple, list)) else [out])]
            output_bytes = [o.numel() * o.element_size() for o in references]
            largest = max([largest, *(t.numel() for t in [*inputs, *references] if isinstance(t, torch.Tensor))])
            peak = self.platform.peak_since(before)
            if peak is not None:
                scratch = max(scratch, peak - sum(output_bytes))
            del inputs, out
            if required and seed == seeds[0]:
                self._main_scale = output_scale(references)
                self._main_finite = all(all_finite(r) for r in references)
                if self.cutoff is None:
                    terms = reduction_terms(problem, self.device, sum(r.numel() for r in references))
                    self.cutoff, self.cutoff_rule = derived_cutoff(references, self._main_scale, terms)
            if required:
                # on the inputs as drawn: the reference may have changed the ones it was given
                found = trivial_passes(references, make_inputs(problem, seed, self.device), self.cutoff,
                                       constants if constants is not None else [None] * len(references))
                known = {(t.output, t.name) for t in self._suspects}
                self._suspects += [t for t in found if (t.output, t.name) not in known]
                constants = output_means(references)
            del references
        params = sum(t.numel() * t.element_size() for t in [*model.parameters(), *model.buffers()])
        return Variant(shapes, problem, model, output_bytes, input_bytes, scratch, witness_bytes, params, largest)

    # -- probes -------------------------------------------------------------------------

    def _prepare_probes(self) -> list[Probe]:
        """The probes this problem takes: random signs, random signs at a large scale drawn
        in secret, and that scale alone, each as it acts on these inputs (``_as_acting``).
        A probe the reference cannot take (it raises, or its outputs are not finite where
        the problem's own inputs gave finite ones) is tried without its sign changes, then
        dropped with a note; probes that end up the same are tried once. Each kept probe's
        cutoff follows the reference's scale there, ``cutoff * max(1, max |ref on probe| /
        max |ref|)``, and covers 8 times the reference's own rounding there (against itself in
        float64); a probe where that reaches the reference's scale is dropped too
        (``fitness.judge.probe_rounding``)."""
        factor = float(round(_SECRET.uniform(*FACTOR_RANGE)))
        acting = self._as_acting()
        kept: list[Probe] = []
        tried: set[Probe] = set()
        # The scale without sign changes too: a kernel that takes the exact path only when it
        # sees a negative value would otherwise pass both signed probes with a fitted one.
        for probe in (Probe(signs=True), Probe(signs=True, factor=factor), Probe(signs=False, factor=factor)):
            probe = acting(probe)
            while probe is not None and probe not in tried:
                tried.add(probe)
                outcome = self._try_probe(probe)
                if isinstance(outcome, Probe):
                    kept.append(outcome)
                    break
                self._note(f"probe ({probe.describe()}) dropped: {outcome}")
                probe = probe.unsigned()
        return kept

    def _as_acting(self) -> Callable[[Probe], Probe | None]:
        """A function giving a probe as it acts on this problem's inputs: without its sign
        changes where no input may change sign (``INPUT_DOMAIN``), None where it changes
        no input at all (none is floating-point, or none may change)."""
        inputs = make_inputs(self.main.problem, self.settings.fixed_seeds[0], self.device)
        domains = input_domains(self.main.problem, len(inputs))
        signed = any(changes(Probe(signs=True), x, d) for x, d in zip(inputs, domains))
        scaled = any(changes(Probe(signs=False, factor=2.0), x, d) for x, d in zip(inputs, domains))
        del inputs

        def acting(probe: Probe) -> Probe | None:
            if probe.signs and not signed:
                probe = probe.unsigned()
            if probe is None or (probe.factor != 1.0 and not scaled) or (probe.factor == 1.0 and not probe.signs):
                return None
            return probe

        return acting

    def _try_probe(self, probe: Probe) -> Probe | str:
        """``probe`` with its cutoff (``fitness.judge.probe_rounding.probe_cutoff``: the reference's
        scale and its own rounding there), or why the reference cannot take it or why no cutoff
        there tells right from wrong. Suspects it tells from the answer at that cutoff are cleared."""
        import torch

        main, seed = self.main, self.settings.fixed_seeds[0]
        try:
            inputs = make_inputs(main.problem, seed, self.device, probe)
            with torch.no_grad():
                out = main.model(*inputs)
            self.platform.synchronize()
        except ProblemError:
            raise
        except Exception as exc:  # the reference is user input
            self.platform.release_memory()
            return f"the reference fails on them ({type(exc).__name__}: {str(exc).strip()[:200]})"
        references = [o.detach() for o in (out if isinstance(out, (tuple, list)) else [out])]
        del inputs, out
        if self._main_finite and not all(all_finite(r) for r in references):
            return "the reference's outputs are not finite there, though they are on the problem's own inputs"
        cutoff = probe_cutoff(main, lambda: make_inputs(main.problem, seed, self.device, probe), references,
                              self.cutoff, self._main_scale, self.platform, probe.describe(), self._note)
        if isinstance(cutoff, str):
            return cutoff
        probe = dataclasses.replace(probe, cutoff=cutoff)
        if self._suspects:
            probe_inputs = make_inputs(main.problem, seed, self.device, probe)
            for suspect in list(self._suspects):
                if not suspect.matches(references, probe_inputs, probe.cutoff):
                    self._suspects.remove(suspect)
                    self._note(f"on the problem's own inputs {suspect.name} matches output {suspect.output} "
                               f"within the cutoff; the probe ({probe.describe()}) tells it from the answer")
        return probe

    def _settle_suspects(self) -> None:
        """Refuse the cutoff if a trivial output passes on the problem's own inputs and on
        every probe too (or there are no probes)."""
        if self._suspects:
            extra = "; the probe inputs do not tell it from the answer either" if self.probes else ""
            raise CutoffError(self._suspects[0].message + extra)

    def _note(self, text: str) -> None:
        self.notes.append(text)
        log.warning("%s: %s", self.reference_path.name, text)

    def reference_ms(self) -> float:
        """Median runtime of the reference (eager PyTorch) at the main shapes, timed once."""
        with self._lock:
            if self._reference_ms is None:
                self._reference_ms = self.time_in_process(self.main.model)
            return self._reference_ms

    def time_in_process(self, model: Any) -> float:
        """Median runtime of a trusted ``model`` (the reference, or a compiled
        form of it) at the main shapes, timed here as candidates are timed."""
        return self.timing_in_process(model).median_ms

    def timing_in_process(self, model: Any) -> Timing:
        """``time_in_process``'s whole timing (the runs, their spread)."""
        import torch

        seeds = self.settings.fixed_seeds

        def prepare(i: int) -> list:  # one input set at a time, drawn afresh as a candidate's are
            return make_inputs(self.main.problem, seeds[i % len(seeds)], self.device)

        def run(_i: int, args: list) -> None:
            with torch.no_grad():
                model(*args)

        with device_window(self.platform):
            timing = time_runs(self.platform, run, self.timing, prepare)
        self.overhead_ms = timing.overhead_ms
        return timing

    # -- the memory plan ------------------------------------------------------------

    def variants(self) -> list[Variant]:
        return [self.main, *(v for group in self.held_out_groups for v in group)]

    def footprint(self, overlap: bool | None = None, held_out_overlap: bool | None = None) -> int:
        """Bytes of device memory one evaluation in flight needs at most: its largest phase
        (``fitness.judge.memory_plan``) over the variants it goes through (the main shapes checked
        and timed, each held-out shape only checked), plus a process's own overhead;
        ``overlap`` (at the main shapes) and ``held_out_overlap`` (at held-out ones; ``overlap``
        if not given) as the checks run now unless given."""
        if overlap is None:
            overlap, held_out_overlap = self.overlap_reference, self.overlap_held_out
        held_out_overlap = overlap if held_out_overlap is None else held_out_overlap
        return (max(size for _, _, size in phases_of(self.variants(), self.main, overlap, held_out_overlap))
                + self.platform.process_overhead_bytes)

    def slots_that_fit(self, wanted: int) -> int:
        """How many of ``wanted`` evaluations at once fit in the device's free memory (at least 1:
        ``__init__`` refused a problem where one does not). The checks overlap the reference with
        the candidate (``PLANS``, in order: everywhere, at the main shapes only, nowhere) as far as
        that does not let fewer run at once."""
        free = self.platform.free_memory()
        best: tuple[int, tuple[bool, bool]] | None = None
        for plan in PLANS:
            fit = int(free // max(self.footprint(*plan), 1))
            if best is None or fit > best[0]:
                best = (fit, plan)
            if fit >= wanted:
                break
        assert best is not None
        (self.overlap_reference, self.overlap_held_out), fit = best[1], max(1, min(wanted, best[0]))
        if fit < wanted or best[1] != PLANS[0]:
            where = {PLANS[0]: "", PLANS[1]: " (references at held-out shapes computed after the candidate)",
                     PLANS[2]: " (references computed after the candidate, not beside it)"}[best[1]]
            log.warning("%s: %d evaluation(s) at once of the %d wanted, each needing about %.1f GB of the %.1f GB "
                        "free%s", self.reference_path.name, fit, wanted, self.footprint() / GB, free / GB, where)
        return fit

    def _too_big(self, need: int, free: int, advice: str = "choose smaller `shapes:`") -> str:
        main = self.main
        return (f"{self.reference_path.name} at shapes {self.shapes or 'as written'}: one evaluation needs about "
                f"{need / GB:.1f} GB of memory (inputs {main.input_bytes / GB:.2f} GB, outputs "
                f"{sum(main.output_bytes) / GB:.2f} GB at the main shapes, more at larger held-out ones; the "
                f"reference's scratch {main.scratch_bytes / GB:.2f} GB), but only {free / GB:.1f} GB is free "
                f"on {self.platform.device_name()}; {advice}")
