"""The evaluator's side of its sandboxed worker: starting it, handing it to another
problem's evaluator, and one step at a time over its channel.

``WorkerChannel`` is mixed into ``fitness.evaluator.Evaluator``, which sets what it
uses (``platform``, ``settings``, ``walls``, ``_timed``, ``_worker``, ``_served``, ``_loaded``).
A step may carry messages in its middle: the time step's checked runs, and a check's
worker lending the device's timing lane out while Triton compiles
(``fitness.lane``, ``Harness.compiling``); anything else there is forged.
"""

from __future__ import annotations

import time
from typing import Any

from fitness.lane import Hold
from fitness.sandbox import WorkerGone, WorkerProcess


class WorkerChannel:
    """Worker handling for ``Evaluator`` (see the module's docstring)."""

    def _get_worker(self, check: bool = False) -> WorkerProcess:
        if check and self._worker is not None:
            # A worker that died between evaluations must not be charged to the
            # next candidate: make sure it still answers before handing it one.
            try:
                self._worker.request({"step": "ping"}, timeout=30)
            except WorkerGone:
                self._discard_worker()
        if self._worker is None or not self._worker.alive():
            if self._worker is not None:
                self._worker.close()
            index = getattr(self.platform, "index", 0)
            self._served, self._loaded = 0, None
            self._worker = WorkerProcess(
                self.platform.name, index, dict(self.platform.worker_env),
                self.settings.startup_timeout_s, self.settings.memory_limit_bytes,
                open_shared=self._open_shared,
            )
            self._worker.kind = self._worker_kind()
        return self._worker

    def _worker_kind(self) -> tuple:
        """What a worker is started with: a worker of the same kind can serve this evaluator."""
        return (self.platform.name, getattr(self.platform, "index", 0),
                tuple(sorted(self.platform.worker_env.items())), self.settings.memory_limit_bytes)

    def hand_over_worker(self) -> WorkerProcess | None:
        """This evaluator's idle worker, reset (``Harness.reset``), for another problem's
        evaluator on the same device (``adopt_worker``); None if it has none alive."""
        worker, self._worker = self._worker, None
        if worker is None:
            return None
        try:
            if worker.alive() and worker.request({"step": "reset"}, timeout=30)[0].get("ok"):
                return worker
        except WorkerGone:
            pass
        worker.stop()
        return None

    def adopt_worker(self, worker: WorkerProcess) -> bool:
        """Take ``worker`` (from ``hand_over_worker``) as this evaluator's, if it has none and
        the worker is of its kind. It has judged other candidates: a crash is retried on a
        fresh one, as for any reused worker."""
        if self._worker is not None or getattr(worker, "kind", None) != self._worker_kind() or not worker.alive():
            return False
        worker._open_shared = self._open_shared
        self._worker, self._served, self._loaded = worker, 1, None
        return True

    def _open_shared(self, shared: dict, dtype: Any, shape: list, pid: int) -> Any:
        with self._timed("hand-over"):
            return self.platform.import_tensor(shared, dtype, shape, pid)

    def start_worker(self) -> None:
        """Start the worker now rather than at the first evaluation (a worker that fails
        to start is retried then, and its failure reported there)."""
        try:
            self._get_worker()
        except (WorkerGone, RuntimeError):
            self._discard_worker()

    def _discard_worker(self) -> None:
        if self._worker is not None:
            self._worker.stop()
            self._worker = None

    def _step(self, message: dict[str, Any], meanwhile: Any = None, interim: Any = None) -> tuple[dict[str, Any], list]:
        """One worker step; ``meanwhile()`` (if given) runs here while the worker works.

        A step may send messages of its own before its reply (the time step hands
        checked runs over): ``interim(message, tensors)`` answers each with the
        message the worker waits for. Raises ``WorkerGone``.
        """
        worker = self._get_worker()
        started = time.monotonic()
        try:
            nonce = worker.send(message)
            if meanwhile is not None:
                meanwhile()
            reply, tensors = worker.answer(nonce, self.settings.timeout_s)
            while interim is not None and reply.get("interim"):
                answer = interim(reply, tensors)
                del tensors  # our copy of these outputs goes before the next ones arrive
                worker.send(answer)
                reply, tensors = worker.answer(nonce, self.settings.timeout_s)
        except WorkerGone:
            self._discard_worker()
            raise
        finally:
            self.walls[f"step {message['step']}"] += time.monotonic() - started
        if reply.get("fatal"):
            self._discard_worker()
        return reply, tensors

    def _lending(self, hold: Hold) -> Any:
        """The answer to a worker that lends the lane out while it compiles, and takes it
        back (``Harness.compiling``): anything else in the middle of the step is forged."""
        lent_at = 0.0

        def answer(reply: dict[str, Any], tensors: list) -> dict[str, Any]:
            nonlocal lent_at
            kind = reply.get("interim")
            if kind == "compiling" and hold.held and not tensors:
                self.platform.synchronize()  # the reference's work for this check is done too
                hold.release()
                lent_at = time.monotonic()
            elif kind == "compiled" and not hold.held and not tensors:
                hold.acquire()  # waits for a timing in progress
                self.walls["lane lent"] += time.monotonic() - lent_at
            else:
                raise WorkerGone("forbidden", "the worker sent a message its step does not have")
            return {"step": "continue"}

        return answer
