"""The evaluator's side of its sandboxed worker: starting it, handing it to another
problem's evaluator, and one step at a time (``fitness.boundary.protocol``) over its channel.

``WorkerChannel`` is an object the evaluator holds, given what it needs: the
platform, the settings, and the counter of wall seconds by part that the
evaluator reports. Every message of the worker is read with
``fitness.boundary.protocol.read_reply``: a reply an honest worker does not send ends
the worker and is the candidate's ``forbidden``. A step may carry messages in
its middle: the time step's checked runs, and a check's worker lending the
device's timing lane out while Triton compiles (``fitness.judge.lane``,
``Harness.compiling``); anything else there is forged.
"""

from __future__ import annotations

import collections
import time
from collections.abc import Callable
from typing import Any

from fitness.boundary.protocol import (INTERIMS, Answer, Compiled, Compiling, Continue, Ok, Outputs, Ping,
                                       ProtocolViolation, Refused, Reply, Reset, Step, read_reply)
from fitness.boundary.sandbox import WorkerGone, WorkerProcess
from fitness.judge.lane import Hold
from fitness.judge.memory_plan import Variant
from fitness.result import Status
from fitness.settings import EvalSettings
from platforms import Platform

#: ``interim(message, tensors)``: the answer to an interim message of a step (raises ``WorkerGone``).
Interim = Callable[[Any, list], Answer]


class WorkerChannel:
    """One evaluator's worker (started when first needed, replaced when it dies) and its steps.

    ``served``: candidates the current worker has been handed; ``loaded``: the
    variant its model was last built at (the evaluator's to set; None for a new
    worker).
    """

    def __init__(self, platform: Platform, settings: EvalSettings, walls: collections.Counter[str]) -> None:
        self.platform, self.settings, self.walls = platform, settings, walls
        self.worker: WorkerProcess | None = None
        self.served = 0
        self.loaded: Variant | None = None
        self._confinement = ""  # of the latest worker (it outlives the worker, for the verdict it gave)

    def get_worker(self, check: bool = False) -> WorkerProcess:
        """The worker, started if there is none alive; ``check``: make sure it still answers."""
        if check and self.worker is not None:
            # A worker that died between evaluations must not be charged to the
            # next candidate: make sure it still answers before handing it one.
            try:
                self._request(self.worker, Ping())
            except WorkerGone:
                self.discard()
        if self.worker is None or not self.worker.alive():
            if self.worker is not None:
                self.worker.close()
            self.served, self.loaded = 0, None
            started = time.monotonic()
            self.worker = WorkerProcess(
                self.platform.name, getattr(self.platform, "index", 0), dict(self.platform.worker_env),
                self.settings.startup_timeout_s, self.settings.memory_limit_bytes,
                open_shared=self._open_shared,
            )
            self.worker.kind = self._worker_kind()
            self._confinement = getattr(self.worker, "confinement", "")
            # seconds an evaluation waits for a new worker (its first, or after one crashed or ran out of memory)
            self.walls["worker start"] += time.monotonic() - started
        return self.worker

    def _worker_kind(self) -> tuple:
        """What a worker is started with: a worker of the same kind can serve this channel."""
        return (self.platform.name, getattr(self.platform, "index", 0),
                tuple(sorted(self.platform.worker_env.items())), self.settings.memory_limit_bytes)

    def device_name(self) -> str:
        return self.worker.device_name if self.worker else self.platform.device_name()

    def confinement(self) -> str:
        """What the OS held the latest worker to (``fitness.boundary.confine``, as its ready message said);
        "" before any worker started."""
        return self._confinement

    def hand_over(self) -> WorkerProcess | None:
        """This channel's idle worker, reset (``Harness.reset``), for another problem's
        evaluator on the same device (``adopt``); None if it has none alive."""
        worker, self.worker = self.worker, None
        if worker is None:
            return None
        try:
            if worker.alive() and isinstance(self._request(worker, Reset()), Ok):
                return worker
        except WorkerGone:
            pass
        worker.stop()
        return None

    def adopt(self, worker: WorkerProcess) -> bool:
        """Take ``worker`` (from ``hand_over``) as this channel's, if it has none and the
        worker is of its kind. It has judged other candidates: a crash is retried on a
        fresh one, as for any reused worker."""
        if self.worker is not None or getattr(worker, "kind", None) != self._worker_kind() or not worker.alive():
            return False
        worker.open_shared = self._open_shared  # its copies are timed here now
        self.worker, self.served, self.loaded = worker, 1, None
        self._confinement = getattr(worker, "confinement", "")
        return True

    def _open_shared(self, shared: dict, dtype: Any, shape: list, pid: int) -> Any:
        started = time.monotonic()
        try:
            return self.platform.import_tensor(shared, dtype, shape, pid)
        finally:
            self.walls["hand-over"] += time.monotonic() - started

    def start(self) -> None:
        """Start the worker now rather than at the first step (a worker that fails to
        start is retried then, and its failure reported there)."""
        try:
            self.get_worker()
        except (WorkerGone, RuntimeError):
            self.discard()

    def let_go(self) -> None:
        """Tell the worker that the evaluator has its copies of what it shipped: it lets them go
        (at any message; a ping is the shortest). Raises ``WorkerGone`` (the worker is stopped)."""
        try:
            self._request(self.get_worker(), Ping())
        except WorkerGone:
            self.discard()
            raise

    def idle(self) -> None:
        """Have the worker drop the candidate and all it holds on the device while it waits for the
        next one: reset as for a hand-over (``hand_over``), and kept; a worker that cannot is stopped
        (the next step starts a fresh one)."""
        self.worker, self.loaded = self.hand_over(), None

    def discard(self) -> None:
        """Stop the worker (the next step starts a fresh one)."""
        if self.worker is not None:
            self.worker.stop()
            self.worker = None

    def step(self, step: Step, meanwhile: Callable[[], None] | None = None,
             interim: Interim | None = None) -> tuple[Reply, list]:
        """One worker step: (its reply, the tensors it carries); ``meanwhile()`` (if given)
        runs here while the worker works.

        A step may send messages of its own before its reply (``step.interims()``):
        ``interim(message, tensors)`` answers each. Raises ``WorkerGone``.
        """
        worker = self.get_worker()
        started = time.monotonic()
        try:
            nonce = worker.send(step.to_wire())
            if meanwhile is not None:
                meanwhile()
            reply, tensors = self._answer(worker, nonce, step)
            while isinstance(reply, INTERIMS):
                answer = interim(reply, tensors)  # type: ignore[misc]  (a step with interims is given one)
                del tensors  # our copy of these outputs goes before the next ones arrive
                worker.send(answer.to_wire())
                reply, tensors = self._answer(worker, nonce, step, compiling=isinstance(reply, Compiling))
        except WorkerGone:
            self.discard()
            raise
        finally:
            self.walls[f"step {step.KIND}"] += time.monotonic() - started
        if getattr(reply, "compile_s", 0.0):  # the worker's own account, for breakdowns only
            self.walls["compile"] += reply.compile_s
        if isinstance(reply, Outputs):
            for part, seconds in reply.phases_s.items():
                self.walls[f"call: {part}"] += seconds
        if isinstance(reply, Refused) and reply.fatal:
            self.discard()
        return reply, tensors

    def _answer(self, worker: WorkerProcess, nonce: str, step: Step, compiling: bool = False) -> tuple[Reply, list]:
        """The worker's next message in ``step``; ``compiling``: it has just said that it compiles
        a kernel, and gets ``compile_timeout_s`` for that (a step's own limit is ``timeout_s``)."""
        budget = self.settings.compile_timeout_s
        limit = min(budget, self.settings.timeout_s) if compiling else self.settings.timeout_s
        try:
            data, tensors = worker.answer(nonce, limit)
        except WorkerGone as gone:
            if limit < self.settings.timeout_s and gone.status == Status.TIMEOUT.value:
                raise WorkerGone(Status.TIMEOUT.value, f"compiling one kernel took more than {budget:g} s "
                                 "(fitness.compile_timeout_s); the worker was killed") from None
            raise
        return _read(step, data, tensors), tensors

    def _request(self, worker: WorkerProcess, step: Step) -> Reply:
        """A short step without interim messages (ping, reset); raises ``WorkerGone`` (the
        caller stops the worker)."""
        return _read(step, *worker.request(step.to_wire(), timeout=30))

    def lending(self, hold: Hold) -> Interim:
        """The answer to a worker that lends the lane out while it compiles, and takes it
        back (``Harness.compiling``): anything else in the middle of the step is forged."""
        lent_at = 0.0

        def answer(message: Any, tensors: list) -> Answer:
            nonlocal lent_at
            if isinstance(message, Compiling) and hold.held and not tensors:
                self.platform.synchronize()  # the reference's work for this check is done too
                hold.release()
                lent_at = time.monotonic()
            elif isinstance(message, Compiled) and not hold.held and not tensors:
                hold.acquire()  # waits for a timing in progress
                self.walls["lane lent"] += time.monotonic() - lent_at
            else:
                raise WorkerGone(Status.FORBIDDEN, "the worker sent a message its step does not have")
            return Continue()

        return answer


def _read(step: Step, data: Any, tensors: list) -> Reply:
    """The worker's message in ``step`` (``fitness.boundary.protocol.read_reply``); one no honest
    worker sends raises ``WorkerGone`` (forbidden)."""
    try:
        return read_reply(step, data, tensors)
    except ProtocolViolation as violation:
        raise WorkerGone(Status.FORBIDDEN, f"the worker broke the protocol ({violation})") from None
