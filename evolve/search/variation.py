"""Variation: new, never-seen candidates from selected parents.

Each child's operator is drawn by the steering (``evolve.search.steering``: the
config's weights, biased by the parent's bottleneck class). A parametric
child is made at once; a crossover that cannot make a child (parents of
different structures, or too alike) falls back to mutating the first parent,
and a child whose normalised source was seen before in the run is drawn
again, a few times, so no source is evaluated twice. LLM children are asked
for in one batch per generation (``LlmProposer.propose``, concurrent); a
request that yields no new kernel is recorded as an ``llm_proposal_failed``
event and its place goes to a parametric mutation of the same parent, so a
generation keeps its size.

Given the random state and the replies in the run's cache, variation makes
the same children again: LLM requests are numbered by a run-wide counter
(their ``sample``), so a replayed generation asks the same questions and
gets the stored answers.
"""

from __future__ import annotations

import dataclasses
import logging
import random
from collections.abc import Iterable, Mapping, Sequence
from typing import Protocol

from evolve.config import OperatorName, OperatorsConfig
from evolve.search.population import Candidate
from evolve.search.steering import ParentProfiles, Steering
from operators import (
    LLM_CROSSOVER,
    LLM_MUTATION,
    LLM_SEED,
    MUTATION,
    Focus,
    ParentInfo,
    Proposal,
    Request,
    SpaceError,
    crossover,
    mutate,
    params_of,
    resolve_space,
    seed_requests,
)
from platforms.profiling.classes import UNKNOWN
from population_store import RunStore, source_hash

log = logging.getLogger(__name__)

#: Draws per child before its place in the generation is given up.
ATTEMPTS = 20
SEED_OPERATOR = "seed"
#: The event a request that gave no new kernel leaves in the run.
FAILED_EVENT = "llm_proposal_failed"


@dataclasses.dataclass(frozen=True)
class Child:
    """A candidate made but not stored yet, and what the steering learns from when its result lands."""

    source: str
    source_hash: str
    params: dict[str, int]
    operator: str
    parents: list[int]
    focus: str | None = None  # what an LLM operator was asked to work on
    bottleneck: str = UNKNOWN  # the first parent's class when the child was made
    parent_ms: float | None = None  # the first parent's runtime


class Proposes(Protocol):
    """What the LLM operators need: an ``operators.LlmProposer``, or a test's fake."""

    @property
    def exhausted(self) -> bool: ...

    def propose(self, requests: Sequence[Request]) -> list[Proposal]: ...


class LlmOperators:
    """The run's LLM: its proposer, the request counter, and whether its budget is spent.

    ``samples`` and ``exhausted`` are part of the loop's checkpoint: a resumed
    run numbers its requests on from there and chooses LLM operators exactly
    when the run it continues did.
    """

    def __init__(self, proposer: Proposes, store: RunStore, samples: int = 0, exhausted: bool = False) -> None:
        self.proposer, self.store = proposer, store
        self.samples, self.exhausted = samples, exhausted
        # a generation replayed after a resume asks again (from the cache): say each failure once
        self._told = {e["data"].get("sample") for e in store.events(FAILED_EVENT)}

    def number(self) -> int:
        """The next request's sample number."""
        self.samples += 1
        return self.samples - 1

    def propose(self, requests: Sequence[Request]) -> list[Proposal]:
        proposals = self.proposer.propose(requests) if requests else []
        self.exhausted = self.exhausted or self.proposer.exhausted
        return proposals

    def failed(self, proposal: Proposal, request: Request, reason: str | None = None) -> None:
        """Record in the run that ``request`` gave no new kernel (once per request)."""
        if request.sample in self._told:
            return
        self._told.add(request.sample)
        self.store.record_event(FAILED_EVENT, {
            "reason": reason or proposal.reason, "operator": proposal.operator, "parents": list(proposal.parents),
            "model": proposal.model, "focus": proposal.focus.value, "sample": request.sample})


def seed_children(sources: list[str]) -> list[Child]:
    """The seed kernels as children of no one."""
    return [Child(s, source_hash(s), params_of(s), SEED_OPERATOR, []) for s in sources]


def llm_seed_children(llm: LlmOperators, count: int) -> tuple[list[Child], list[str]]:
    """First kernels the LLM writes from the reference alone, and why the requests that gave none failed."""
    requests = seed_requests(count, first_sample=llm.samples)
    llm.samples += count
    children, failures = [], []
    for request, proposal in zip(requests, llm.propose(requests)):
        if proposal.source is None:
            llm.failed(proposal, request)
            failures.append(proposal.reason)
        else:
            children.append(Child(proposal.source, source_hash(proposal.source), params_of(proposal.source),
                                  LLM_SEED, [], focus=proposal.focus.value))
    return children, failures


def seed_space(sources: list[str], declared: Mapping[str, list[int]]) -> dict[str, tuple[int, ...]]:
    """The run's space, resolved once from seeds an LLM wrote; the first seed's space holds where they share a tunable.

    Seed files must have every tunable ``operators.space`` names
    (``evolve.session.search_space``); an LLM names its kernels as it likes,
    so names no seed has are ignored, and said so.
    """
    space: dict[str, tuple[int, ...]] = {}
    for source in sources:
        try:
            for name, values in resolve_space(source, declared).items():
                space.setdefault(name, values)
        except SpaceError as exc:
            log.warning("an LLM-written seed declares an unusable KEVO_SPACE (%s); its tunables are not searched "
                        "parametrically", exc)
    unused = sorted(set(declared) - set(space))
    if unused:
        log.warning("operators.space names %s, which no accepted LLM-written seed has; ignored", ", ".join(unused))
    return space


@dataclasses.dataclass
class _Asked:
    """A place in the generation waiting for an LLM reply."""

    request: Request
    parent: Candidate  # the first parent: the fallback mutates it
    bottleneck: str


class Breeder:
    """Makes each generation's children (see the module docstring).

    >>> breeder = Breeder(rng, config.operators, space, Steering(config.operators, rng))  # doctest: +SKIP
    >>> children = breeder.vary([parents], [count], seen)[0]  # doctest: +SKIP
    """

    def __init__(self, rng: random.Random, operators: OperatorsConfig, space: Mapping[str, tuple[int, ...]],
                 steering: Steering, profiles: ParentProfiles | None = None,
                 llm: LlmOperators | None = None) -> None:
        self.rng, self.operators, self.space = rng, operators, space
        self.steering, self.profiles, self.llm = steering, profiles, llm

    def vary(self, parents: Sequence[Sequence[Candidate]], counts: Sequence[int],
             seen: set[str]) -> list[list[Child]]:
        """Per island, up to ``counts[i]`` children whose hashes are not in ``seen``, from pairs of ``parents[i]``.

        ``parents[i]`` holds two per child. The hashes of the children are
        added to ``seen``. Fewer children come back when the space around the
        parents holds no unseen candidate.
        """
        if self.profiles is not None:
            self.profiles.take(p for island in parents for p in island)
        planned = [self._plan(island, count, seen) for island, count in zip(parents, counts)]
        asked = [item for island in planned for item in island if isinstance(item, _Asked)]
        replies = dict(zip(map(id, asked), self.llm.propose([a.request for a in asked]))) if asked else {}
        children = []
        for island in planned:
            made = [self._answer(item, replies[id(item)], seen) if isinstance(item, _Asked) else item
                    for item in island]
            children.append([child for child in made if child is not None])
        return children

    def expect(self, stored: Iterable[tuple[Candidate, Child]]) -> None:
        """Have the steering learn from each stored child's result when it lands."""
        for candidate, child in stored:
            self.steering.expect(candidate.id, child.bottleneck, child.operator, child.focus, child.parent_ms)

    def _plan(self, parents: Sequence[Candidate], count: int, seen: set[str]) -> list[Child | _Asked]:
        """Parametric children, made now, and the LLM requests, in the order of their places."""
        planned: list[Child | _Asked] = []
        llm = self.llm is not None and not self.llm.exhausted
        for a, b in zip(parents[0:2 * count:2], parents[1:2 * count:2]):
            bottleneck = self.profiles.bottleneck(a) if self.profiles is not None else UNKNOWN
            for _ in range(ATTEMPTS):
                operator = self.steering.choose(bottleneck, llm)
                if OperatorName(operator).needs_llm:
                    planned.append(self._ask(operator, a, b, bottleneck))
                    break
                child = self._parametric(operator, a, b, bottleneck, seen)
                if child is not None:
                    planned.append(child)
                    break
        return planned

    def _parametric(self, operator: str, a: Candidate, b: Candidate, bottleneck: str,
                    seen: set[str]) -> Child | None:
        """A parametric child of ``a`` (and ``b``) not in ``seen`` (then added), or None."""
        made, parents = None, [a.id, b.id]
        try:
            if operator == OperatorName.PARAMETRIC_CROSSOVER:
                made = crossover(a.source, b.source, self.rng, self.space)
            if made is None:
                made, parents = mutate(a.source, self.rng, self.space, self.operators.max_changes), [a.id]
        except SpaceError:  # a parent written by an LLM declares a KEVO_SPACE of names it lacks
            return None
        if made is None or source_hash(made.source) in seen:
            return None
        child = Child(made.source, source_hash(made.source), made.params, made.operator, parents,
                      bottleneck=bottleneck, parent_ms=a.runtime_ms)
        seen.add(child.source_hash)
        return child

    def _ask(self, operator: str, a: Candidate, b: Candidate, bottleneck: str) -> _Asked:
        """The request for an LLM child; a crossover of a kernel with itself is asked as a mutation."""
        assert self.llm is not None
        focus = Focus(self.steering.choose_focus(bottleneck))
        parents = (self._info(a),)
        if operator == LLM_CROSSOVER and a.source_hash != b.source_hash:
            parents += (self._info(b),)
        else:
            operator = LLM_MUTATION
        return _Asked(Request(operator, parents, focus, self.llm.number()), a, bottleneck)

    def _info(self, parent: Candidate) -> ParentInfo:
        record = self.profiles.record(parent) if self.profiles is not None else None
        if record is None:
            return ParentInfo(parent.id, parent.source, parent.result)
        return ParentInfo(parent.id, parent.source, parent.result, record.get("summary") or None,
                          record.get("bottleneck"))

    def _answer(self, asked: _Asked, proposal: Proposal, seen: set[str]) -> Child | None:
        """The LLM child, or, when the reply gave no new kernel, a parametric mutation in its place."""
        assert self.llm is not None
        if proposal.source is not None and source_hash(proposal.source) not in seen:
            child = Child(proposal.source, source_hash(proposal.source), params_of(proposal.source),
                          proposal.operator, list(proposal.parents), proposal.focus.value, asked.bottleneck,
                          asked.parent.runtime_ms)
            seen.add(child.source_hash)
            return child
        reason = None if proposal.source is None else "the proposed kernel was evaluated before in this run"
        self.llm.failed(proposal, asked.request, reason)
        for _ in range(ATTEMPTS):
            child = self._parametric(MUTATION, asked.parent, asked.parent, asked.bottleneck, seen)
            if child is not None:
                return child
        return None


def vary(parents: list[Candidate], count: int, rng: random.Random, operators: OperatorsConfig,
         space: Mapping[str, tuple[int, ...]], seen: set[str]) -> list[Child]:
    """Up to ``count`` parametric children of pairs of ``parents`` (``2 * count``) not in ``seen``.

    One island's variation without profiles or an LLM (see ``Breeder.vary``).
    """
    return Breeder(rng, operators, space, Steering(operators, rng)).vary([parents], [count], seen)[0]
