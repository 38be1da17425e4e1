"""One pool of Ray actors evaluating the candidates of several runs at once (a sweep's problems
side by side).

Each run's loop, in its own thread, talks to a ``View``: a ``Dispatcher`` of
its own problem, with its own keys. One thread of the ``SharedDispatcher``
talks to the ``RayDispatcher``: it hands the views' candidates to the actors
in the order they were submitted, each under its problem's spec (an actor
serves whichever problem has work, building a problem's evaluators at its
first candidate of it), and routes every result back to its view. A view
prepares its problem on one actor first, so that a problem the evaluator
refuses raises in its own run.

>>> shared = SharedDispatcher(ray_dispatcher)  # doctest: +SKIP
>>> with shared.view(spec) as view:  # in a run's thread  # doctest: +SKIP
...     view.submit(1, source)
...     view.next_result()
(1, EvalResult(...))
"""

from __future__ import annotations

import collections
import itertools
import logging
import threading
import time
from typing import Any

from evolve.dispatch.actor import EvaluatorSpec
from evolve.dispatch.base import Dispatcher
from evolve.dispatch.connect import actor_errors, get_answer, import_ray
from evolve.dispatch.ray import RayDispatcher
from fitness import EvalResult, Job

log = logging.getLogger(__name__)

#: How long the dispatching thread waits for results before it looks for new submissions (seconds).
POLL_S = 0.05


class PoolClosed(RuntimeError):
    """The shared pool was closed (the sweep is stopping) while a run still used it."""


class SharedDispatcher:
    """A ``RayDispatcher`` shared by runs in several threads, each through a ``View``."""

    def __init__(self, dispatcher: RayDispatcher) -> None:
        self.dispatcher = dispatcher
        # The lock the dispatch thread and every view share: a view waits on it for its
        # verdicts, and ``error`` (set by the dispatch thread) is read under it (``check``).
        self.cond = threading.Condition()
        self._inbox: list[tuple[str, View, Any]] = []  # ("submit", view, (key, source)) or ("cancel", view, keys)
        self._views: dict[int, View] = {}
        self._ids = itertools.count()
        self.error: BaseException | None = None
        self._closing = False
        self._thread = threading.Thread(target=self._dispatch, name="kevo-shared-dispatch", daemon=True)
        self._thread.start()

    def view(self, spec: EvaluatorSpec, ready_timeout_s: float = 600.0) -> View:
        """A dispatcher for ``spec``'s candidates, its problem prepared on one actor (raises what
        the evaluator raises for a problem it refuses)."""
        view = View(self, next(self._ids), spec, self._prepare_one(spec, ready_timeout_s))
        with self.cond:
            self._views[view.id] = view
        return view

    def close(self) -> None:
        """Stop dispatching; views still in use raise ``PoolClosed``. The Ray dispatcher stays its owner's."""
        with self.cond:
            self._closing = True
            self.error = self.error or PoolClosed("the sweep's pool of evaluators was closed")
            self.cond.notify_all()
        self._thread.join(timeout=30)

    def post(self, kind: str, view: View, what: Any) -> None:
        """Called with the condition held."""
        self.check()
        self._inbox.append((kind, view, what))
        self.cond.notify_all()

    def forget(self, view_id: int) -> None:
        """Drop view ``view_id`` (closed): verdicts for its keys are no longer delivered. Call under ``cond``."""
        self._views.pop(view_id, None)

    def check(self) -> None:
        """Raise what stopped the dispatch thread, if anything did. Call under ``cond``."""
        if self.error is not None:
            raise self.error

    def _prepare_one(self, spec: EvaluatorSpec, timeout_s: float) -> dict[str, Any]:
        """Where ``spec`` is evaluated, from the first actor that prepares it (the others build its
        evaluators at their first candidate of it)."""
        ray = import_ray()
        deadline = time.monotonic() + timeout_s
        while True:
            for actor in self.dispatcher.actors():
                try:
                    info = get_answer(ray, actor.prepare.remote(spec), max(0.0, deadline - time.monotonic()),
                                      f"{timeout_s:.0f} s")
                except actor_errors(ray):
                    continue  # lost meanwhile: the dispatcher notices it and replaces it
                return {k: v for k, v in info.items() if k != "pid"}
            with self.cond:
                self.check()
                if time.monotonic() > deadline:
                    raise PoolClosed(f"no evaluator actor was alive to prepare {spec.reference} "
                                     f"within {timeout_s:.0f} s")
                self.cond.wait(1.0)

    def _dispatch(self) -> None:
        """The one thread that calls the Ray dispatcher: hand out, wait a little, route results."""
        dispatcher = self.dispatcher
        try:
            while True:
                with self.cond:
                    if self._closing:
                        return
                    if not self._inbox and not dispatcher.in_flight:
                        self.cond.wait(POLL_S)
                    inbox, self._inbox = self._inbox, []
                for kind, view, what in inbox:
                    if kind == "submit":
                        key, source = what
                        dispatcher.submit((view.id, key), source, spec=view.spec)
                    else:
                        dispatcher.cancel({(view.id, key) for key in what})
                if dispatcher.in_flight:
                    dispatcher.wait(POLL_S)
                results = []
                while dispatcher.ready():
                    results.append(dispatcher.next_outcome())  # a refused problem's error goes to its view
                if results:
                    with self.cond:
                        for (view_id, key), result in results:
                            view = self._views.get(view_id)
                            if view is not None and key in view.keys:
                                view.verdicts.append((key, result))
                        self.cond.notify_all()
        except BaseException as exc:  # the runs that wait on this thread get the error, not a hang
            log.error("the sweep's shared dispatcher failed", exc_info=exc)
            with self.cond:
                self.error = exc
                self.cond.notify_all()


class View(Dispatcher):
    """One run's side of a ``SharedDispatcher``: its problem's candidates, under its own keys."""

    def __init__(self, shared: SharedDispatcher, view_id: int, spec: EvaluatorSpec, info: dict[str, Any]) -> None:
        self.shared, self.id, self.spec, self.info = shared, view_id, spec, info
        self.keys: set[Any] = set()  # submitted, result not returned yet
        self.verdicts: collections.deque[tuple[Any, EvalResult | BaseException]] = collections.deque()

    def submit(self, key: Any, source: Job) -> None:
        with self.shared.cond:
            self.keys.add(key)
            self.shared.post("submit", self, (key, source))

    def next_result(self) -> tuple[Any, EvalResult]:
        with self.shared.cond:
            while not self.verdicts:
                self.shared.check()
                if not self.keys:
                    raise LookupError("no candidate is in flight")
                self.shared.cond.wait()
            key, result = self.verdicts.popleft()
            self.keys.discard(key)
            if isinstance(result, BaseException):  # the evaluator refused this run's problem: this run's error
                raise result
            return key, result

    def wait(self, timeout_s: float) -> bool:
        with self.shared.cond:
            self.shared.cond.wait_for(lambda: self.verdicts or not self.keys or self.shared.error, timeout_s)
            self.shared.check()
            return bool(self.verdicts)

    def ready(self) -> int:
        with self.shared.cond:
            self.shared.check()
            return len(self.verdicts)

    @property
    def in_flight(self) -> int:
        return len(self.keys)

    @property
    def capacity(self) -> int:
        """The whole pool's: a run keeps as many candidates in flight as there are slots, so that
        slots another run leaves idle (while it breeds, or ends) take this one's work."""
        return self.shared.dispatcher.capacity

    def cancel(self) -> list[Any]:
        with self.shared.cond:
            keys, self.keys = sorted(self.keys), set()
            self.verdicts.clear()
            if keys and self.shared.error is None:
                self.shared.post("cancel", self, keys)
            return keys

    def profile_later(self, source: str, runtime_ms: float | None) -> Any:
        actors = self.shared.dispatcher.actors()
        method = getattr(actors[0], "profile", None) if actors else None  # a stand-in actor may not profile
        return None if method is None else method.remote(self.spec, source, runtime_ms)

    def profile_result(self, handle: Any) -> tuple[bool, dict[str, Any] | None]:
        return self.shared.dispatcher.profile_result(handle)

    def profile(self, source: str, runtime_ms: float | None) -> dict[str, Any] | None:
        handle = self.profile_later(source, runtime_ms)
        if handle is not None:
            import_ray().wait([handle])
        return self.profile_result(handle)[1]

    def close(self) -> None:
        """Give up what is still in flight (a run that raised) and leave the pool."""
        self.cancel()
        with self.shared.cond:
            self.shared.forget(self.id)
