"""A problem the evaluator refuses in one run of a sweep raises in that run alone
(evolve.dispatch.share): the shared dispatcher routes the refusal to its view, and the other
views go on. The Ray dispatcher is stood in for by one that answers at once (a real one raises
the refusal from ``next_result`` and hands it to a shared dispatcher through ``next_outcome``)."""

from __future__ import annotations

import collections

import pytest

from evolve.dispatch.actor import EvaluatorSpec
from evolve.dispatch.share import SharedDispatcher, View
from fitness import EvalResult, ProblemError, Status


class Answering:
    """Each submitted key's outcome at once: a ``ProblemError`` for the refused reference's."""

    capacity = 2

    def __init__(self, refused: str) -> None:
        self.refused, self.outcomes = refused, collections.deque()

    def submit(self, key, source, spec):
        refusal = ProblemError(f"{spec.reference}: only 3.6 GB is free")
        self.outcomes.append((key, refusal if spec.reference == self.refused else EvalResult(Status.ACCEPTED)))

    def cancel(self, keys):
        self.outcomes = collections.deque((k, o) for k, o in self.outcomes if k not in keys)

    @property
    def in_flight(self):
        return len(self.outcomes)

    def wait(self, timeout_s):
        return bool(self.outcomes)

    def ready(self):
        return len(self.outcomes)

    def next_outcome(self):
        return self.outcomes.popleft()


def test_a_refusal_raises_in_its_own_run_and_the_others_go_on():
    shared = SharedDispatcher(Answering("refused.py"))
    views = []
    for i, reference in enumerate(("refused.py", "fine.py")):
        view = View(shared, i, EvaluatorSpec(reference), {})
        with shared.cond:
            shared._views[view.id] = view
        views.append(view)
    refused, fine = views
    try:
        refused.submit(1, "source")
        fine.submit(1, "source")
        with pytest.raises(ProblemError, match="only 3.6 GB is free"):
            refused.next_result()
        assert fine.next_result() == (1, EvalResult(Status.ACCEPTED))
        assert shared.error is None
        fine.submit(2, "source")  # the pool still serves the others
        assert fine.next_result()[0] == 2
    finally:
        shared.close()
