"""What one evaluation in flight holds on the device, phase by phase.

A problem at one set of shapes (``Variant``) has inputs ``I``, outputs
``O``, the reference's scratch ``S`` (what its forward allocated besides
them; the candidate's is taken to be the same), parameters ``P``, and the
witnesses ``W`` the worker keeps of its inputs (a copy of a small input, a
fingerprint of a large one: ``Platform.witness``). An evaluation goes
through these phases, the worker (``fitness.worker``) and the evaluator
(``fitness.judge.evaluator``) each holding:

- ``checked call``: the worker runs the candidate on its inputs
  (I + W + O + S + P). The evaluator computes the reference's outputs on
  its own inputs (I + O + S) meanwhile, when ``overlap`` is on. Otherwise
  it computes them afterwards, once it has its copy of the candidate's
  outputs and the worker has let its own go (P + O + I + O + S), so that
  the phase holds only the larger of the two.
- ``hand-over``: the worker has dropped its inputs; the evaluator copies
  its outputs (worker O + P, the copy O, and with ``overlap`` the
  reference's O computed meanwhile).
- ``drawing inputs``: new inputs that landed where the last ones lay are held
  while they are drawn again elsewhere (``fitness.worker.timed_step.apart``):
  2 I + P in the worker, beside the reference with ``overlap``.
- ``run twice`` (the main shapes): the first inputs are run again and judged
  against the first run's outputs, which the evaluator keeps meanwhile (no
  reference): the call and one O, then its hand-over, P + 3 O.
- ``timed run``: one timed run in the worker (I + W + O + S + P), besides
  the runs' outputs set aside to judge after the window (``k`` x O,
  ``fitness.judge.window_judge``); its inputs drawn, 2 I + P beside them.
- ``judging a timed run``: a checked timed run's outputs handed over (the
  worker has dropped that run's inputs: O + P), the evaluator's copy and
  the reference on the same inputs (O + I + O + S), besides ``k`` x O.

A held-out shape is only checked, never timed: its evaluation goes through
the first two phases alone (``timed=False``), and a grown held-out shape
(up to 130% of every size, so up to about 3 times the main shapes' bytes
for a problem of four sizes) counts for no more than that.

``footprint(overlap)`` is the largest phase. Overlapping the reference with
the candidate saves a reference's time per check; holding them one after
the other lets about twice as many evaluations of a problem at its real
sizes run at once (``PreparedProblem.slots_that_fit`` picks).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

from fitness.judge.window_judge import set_aside_runs
from fitness.problems.problem import Problem


@dataclasses.dataclass
class Variant:
    """The reference at one set of shapes, and what its evaluation allocates."""

    shapes: dict[str, int]
    problem: Problem
    model: Any
    output_bytes: list[int]
    input_bytes: int
    scratch_bytes: int  # what the reference's forward allocated besides inputs and outputs (0: unknown)
    witness_bytes: int = 0  # the worker's witnesses of the inputs (Platform.witness_bytes)
    param_bytes: int = 0  # the model's parameters and buffers: the candidate's ModelNew holds as much
    largest_elements: int = 0  # the most elements of one input or output (past 2**31, 32-bit indexing breaks)

    def phases(self, overlap: bool, timed: bool = True) -> dict[str, int]:
        """Bytes held on the device in each phase of one evaluation (see the module doc); a variant
        that is only checked (``timed=False``: a held-out shape) has the first two."""
        i, s, w, p = self.input_bytes, self.scratch_bytes, self.witness_bytes, self.param_bytes
        o = sum(self.output_bytes)
        kept = set_aside_runs(o) * o
        candidate = i + w + o + s + p  # one forward in the worker
        reference = i + o + s  # one forward of the reference in the evaluator
        checked = {
            "checked call": candidate + reference if overlap else max(candidate, p + o + reference),
            "hand-over": p + (3 if overlap else 2) * o,
            "drawing inputs": 2 * i + p + (reference if overlap else 0),
        }
        if not timed:
            return checked
        return {**checked, "run twice": max(candidate + o, p + 3 * o),
                "timed run": max(candidate, 2 * i + p) + kept, "judging a timed run": p + o + o + reference + kept}

    def footprint(self, overlap: bool, timed: bool = True) -> int:
        """The largest phase (bytes)."""
        return max(self.phases(overlap, timed).values())


def phases_of(variants: list[Variant], main: Variant, overlap: bool, held_out_overlap: bool
              ) -> Iterator[tuple[Variant, str, int]]:
    """(variant, phase, bytes) for every phase an evaluation goes through: the main shapes checked and
    timed (``overlap``), each held-out shape only checked (``held_out_overlap``)."""
    for variant in variants:
        at_main = variant is main
        for phase, size in variant.phases(overlap if at_main else held_out_overlap, timed=at_main).items():
            yield variant, phase, size


def largest_phase(prepared: Any) -> str:
    """Where a ``PreparedProblem``'s footprint comes from, in words: its largest phase, and at
    which shapes (the sizes of a held-out shape that differ from the main ones)."""
    main = prepared.main
    phases = phases_of(prepared.variants(), main, prepared.overlap_reference, prepared.overlap_held_out)
    largest = max(phases, key=lambda p: p[2], default=None)
    if largest is None:
        return ""
    variant, phase, _ = largest
    shapes = {} if variant is main else {k: v for k, v in variant.shapes.items() if main.shapes.get(k) != v}
    where = (f"a held-out shape ({', '.join(f'{k}={v}' for k, v in shapes.items())})" if shapes
             else "the main shapes")
    return f"{phase} at {where}"
