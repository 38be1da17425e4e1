"""A candidate's kernels compiled before its evaluation holds device memory.

At a problem's own sizes the memory plan lets few evaluations run at once
(two of 23_Softmax at 4096 x 393216 fp32 on an H100), and the time they hold
their place is what paces a search. Triton compiles a kernel at its first
launch, so an evaluation compiled the candidate's kernels while it held its
place: on that H100, 45 of the 94 s that 24 evaluations held (48%).

``compile_ahead`` gives the evaluator's worker the warm step first
(``fitness.boundary.protocol.Warm``, ``fitness.worker.load_step.warm``): the candidate's
forward at the main shapes on PyTorch's ``meta`` device, each Triton launch
compiled and not run; then at the held-out shapes its evaluation will check,
drawn here and kept for it, since each may compile a specialisation of its
own (on the H100, with the main shapes alone warmed, evaluations of
23_Softmax at its own sizes still compiled for a median 0.97 s, twice their
warm steps' 0.41 s). The kernels are then in Triton's cache, where the
evaluation's own import finds them (a kernel's cache key is its source and
its specialisation, not its module). The Ray actor calls it before the memory
plan admits the evaluation (``evolve.dispatch.actor``), so compiling overlaps
the evaluations on the device.

Nothing of the verdict moves here. The candidate is screened first
(``fitness.boundary.screen``), as its evaluation would; a candidate that cannot run on
``meta`` (it reads a value, autotunes, allocates on the device itself) ends
the step and its evaluation compiles the rest, as before. What the step says
of the candidate is a verdict only where the evaluation would say the same:
a kernel whose compile passes ``compile_timeout_s`` (``timeout``, the worker
killed), and the guard's refusal of what the candidate did (``forbidden``).
"""

from __future__ import annotations

import logging
import secrets
import time
from typing import Any

from fitness.boundary.protocol import Refused, Warm, Warmed
from fitness.boundary.sandbox import WorkerGone
from fitness.boundary.screen import screen
from fitness.judge.lane import NoLane
from fitness.result import EvalResult, Status

log = logging.getLogger(__name__)

#: What a warm step may say that is the candidate's verdict already.
VERDICTS = frozenset({Status.TIMEOUT, Status.FORBIDDEN})
_TOLD: set[str] = set()  # why warm steps stopped early, each said once


def compile_ahead(evaluator: Any, source: str) -> EvalResult | None:
    """The warm step for ``source`` in ``evaluator``'s worker (see the module doc); its walls are
    kept for the evaluation that follows (``evaluator.ahead``, each part named ``ahead: ...``).
    Returns a verdict where the step gives one, else None: the evaluation goes on."""
    prepared, walls = evaluator.prepared, evaluator.walls
    if prepared.settings.screen and not screen(source).ok:
        return None  # the evaluation refuses it without running it
    # the held-out variants its evaluation will check, drawn now (as the evaluation would) and kept for it:
    # each compiles its own specialisation, so the step warms them too, after the main shapes
    rng = prepared.held_out_rng
    evaluator.picked = picked = [rng.choice(group) for group in prepared.held_out_groups]
    shapes: list[dict[str, int]] = []
    for variant in (prepared.main, *picked):
        if dict(variant.shapes) not in shapes:
            shapes.append(dict(variant.shapes))
    evaluator.warmed_cache = (source, secrets.token_hex(16))  # the evaluation of source compiles into it too
    step = Warm(source, str(prepared.reference_path), prepared.reference_source, shapes, prepared.settings.init_seed,
                prepared.dtype, cache=evaluator.warmed_cache[1])
    walls.clear()
    started = time.monotonic()
    verdict: EvalResult | None = None
    base = dict(platform=evaluator.platform.name)
    try:
        with NoLane().shared() as hold:  # compiles lend a lane no one else waits for
            reply, _ = evaluator.channel.step(step, interim=evaluator.channel.lending(hold))
    except WorkerGone as gone:
        if Status(gone.status) in VERDICTS:
            verdict = EvalResult(Status(gone.status), gone.reason, **base)
    else:
        if isinstance(reply, Refused) and reply.status in VERDICTS:
            verdict = EvalResult(reply.status, reply.reason, **base)
        elif isinstance(reply, Warmed) and reply.stopped and reply.stopped not in _TOLD:
            _TOLD.add(reply.stopped)  # once a reason: a search's candidates share their ways
            log.info("compiling ahead stopped after %d of %d shape(s): %s (the evaluation compiles the rest)",
                     reply.reached, len(step.shapes), reply.stopped)
    walls["total"] = time.monotonic() - started
    evaluator.ahead = {("ahead" if part == "total" else f"ahead: {part}"): round(seconds, 4)
                       for part, seconds in walls.items()}
    walls.clear()
    if verdict is not None:
        verdict.confinement = evaluator.channel.confinement()
        verdict.walls_s, evaluator.ahead = evaluator.ahead, {}
    return verdict
