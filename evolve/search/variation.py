"""Variation: new, never-seen candidates from selected parents.

Each child's operator is drawn by the steering (``evolve.search.steering``: the
config's weights, biased by the parent's bottleneck class). A parametric
child is made at once; a crossover that cannot make a child (parents of
different structures, or too alike) falls back to mutating the first parent,
and a child whose normalised source was seen before in the run is drawn
again, a few times, so no source is evaluated twice.

An LLM child is asked for (``evolve.search.asking``: the request goes out
at once, within ``llm.concurrency``), and made when its reply lands
(``answer``), while the loop evaluates: the prompt shows the parent with
what the run has found so far (``evolve.search.history``) and the model is
drawn by what each model's children achieved per dollar. A reply that
gives no kernel, for a reason the model can fix (an edit that did not
apply, a refusal of the screen, prose only), goes back to the same model
with the reason, and so does an LLM child whose verdict is not
``accepted`` (``judged``): up to ``llm.repair_turns`` times, each fix a
child of its own (``llm_repair``) whose parent is the failed attempt. A
reply that gives no new kernel and is not repaired is recorded as an
``llm_proposal_failed`` event, credited to the LLM operator as a try that
did not pay off, and its place goes to a parametric mutation of the
parent, so a generation keeps its size.

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

from evolve.config import OperatorName, OperatorsConfig
from evolve.search.asking import FAILED_EVENT, Ask, LlmOperators, Proposes
from evolve.search.history import EXPLANATION_KEY, MODEL_KEY, History
from evolve.search.population import Candidate
from evolve.search.steering import Outcome, ParentProfiles, Steering
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
from operators.llm import NO_KERNEL, Findings, Repair
from platforms.profiling.classes import UNKNOWN
from population_store import source_hash

__all__ = ["FAILED_EVENT", "LLM_REPAIR", "Breeder", "Child", "LlmOperators", "Proposes", "llm_seed_children",
           "seed_children", "seed_space", "vary"]

log = logging.getLogger(__name__)

#: Draws per child before its place in the generation is given up.
ATTEMPTS = 20
SEED_OPERATOR = "seed"
#: The operator of a child that fixes a failed LLM attempt.
LLM_REPAIR = "llm_repair"


@dataclasses.dataclass(frozen=True)
class Child:
    """A candidate made but not stored yet, and what the steering learns from it when its result lands."""

    source: str
    source_hash: str
    params: dict
    operator: str
    parents: list[int]
    outcome: Outcome | None = None  # None for a seed: seeds teach nothing


def seed_children(sources: list[str]) -> list[Child]:
    """The seed kernels as children of no one."""
    return [Child(s, source_hash(s), params_of(s), SEED_OPERATOR, []) for s in sources]


def llm_seed_children(llm: LlmOperators, count: int, dtype: str | None = None) -> tuple[list[Child], list[str]]:
    """First kernels the LLM writes from the reference alone, and why the requests that gave none failed."""
    requests = [dataclasses.replace(r, findings=Findings(dtype=dtype))
                for r in seed_requests(count, first_sample=llm.samples)]
    llm.samples += count
    children, failures = [], []
    for request, proposal in zip(requests, llm.propose(requests)):
        if proposal.source is None:
            llm.failed(proposal, request)
            failures.append(proposal.reason)
        else:
            children.append(Child(proposal.source, source_hash(proposal.source), _llm_params(proposal),
                                  LLM_SEED, []))
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


class Breeder:
    """Makes each generation's children (see the module docstring).

    >>> breeder = Breeder(rng, config.operators, space, Steering(config.operators, rng))  # doctest: +SKIP
    >>> children = breeder.vary([parents], [count], seen)[0]  # doctest: +SKIP
    """

    def __init__(self, rng: random.Random, operators: OperatorsConfig, space: Mapping[str, tuple[int, ...]],
                 steering: Steering, profiles: ParentProfiles | None = None, llm: LlmOperators | None = None,
                 history: History | None = None, repair_turns: int = 0) -> None:
        self.rng, self.operators, self.space = rng, operators, space
        self.steering, self.profiles, self.llm = steering, profiles, llm
        self.history = history or History()
        self.repair_turns = repair_turns
        self.asked = 0  # the places the last ``vary`` asked the LLM for

    def vary(self, parents: Sequence[Sequence[Candidate]], counts: Sequence[int], seen: set[str],
             generation: int = 0) -> list[list[Child]]:
        """Per island, up to ``counts[i]`` children whose hashes are not in ``seen``, from pairs of ``parents[i]``.

        ``parents[i]`` holds two per child. Parametric children come back
        now, their hashes added to ``seen``; the places an LLM operator takes
        are asked for (``asked`` counts them), and their children come from
        ``answer`` as the replies land. Fewer children come back when the
        space around the parents holds no unseen candidate.
        """
        if self.profiles is not None:
            self.profiles.take(p for island in parents for p in island)
        self.asked = 0
        return [self._plan(island_parents, count, seen, generation, island)
                for island, (island_parents, count) in enumerate(zip(parents, counts))]

    def expect(self, stored: Iterable[tuple[Candidate, Child]]) -> None:
        """Have the steering learn from each stored child's result when it lands."""
        for candidate, child in stored:
            self.history.made(candidate.id, child.parents, child.operator)
            if child.outcome is not None:
                self.steering.expect(candidate.id, child.outcome)

    def answer(self, ask: Ask, proposal: Proposal, seen: set[str]) -> Child | None:
        """The child an LLM reply gives, not in ``seen`` (then added).

        A reply without a new kernel is recorded and credited to its LLM
        operator as a try that did not pay off. If the model can fix it and
        repair turns are left, it goes back to the model (None now; its fix
        comes as another reply); else its place goes to a parametric mutation
        of the kernel it was to improve (None when none is left unseen).
        """
        assert self.llm is not None
        outcome = Outcome(ask.bottleneck, ask.credit, ask.request.focus.value, ask.parent_ms, ask.parent_spread,
                          proposal.model or None, ask.target, ask.turn)
        if proposal.source is not None and source_hash(proposal.source) not in seen:
            child = Child(proposal.source, source_hash(proposal.source), _llm_params(proposal),
                          LLM_REPAIR if ask.turn else proposal.operator, list(ask.parents), outcome)
            seen.add(child.source_hash)
            return child
        reason = None if proposal.source is None else "the proposed kernel was evaluated before in this run"
        self.llm.failed(proposal, ask.request, reason)
        if proposal.model:  # a model was asked (not so once the budget is spent): its try did not pay off
            self.steering.missed(outcome)
        if proposal.repairable and ask.turn < self.repair_turns:
            last = ask.request.repair.source if ask.request.repair is not None else None
            repair = Repair(ask.turn + 1, self.repair_turns, NO_KERNEL, proposal.reason,
                            proposal.draft if proposal.draft is not None else last, proposal.reply)
            self._send_back(ask, repair, ask.generation, proposal.model, ask.parents)
            return None
        for _ in range(ATTEMPTS):
            target = _candidate(ask.request.parents[0])
            child = self._parametric(MUTATION, target, target, ask.bottleneck, seen)
            if child is not None:
                return child
        return None

    def judged(self, candidate: Candidate, generation: int) -> bool:
        """Send an LLM child whose verdict is not ``accepted`` back to its model, while repair turns last.

        True when a repair was asked for. The verdict's status and reason
        go back (the prompt scrubs held-out shapes from the reason), never
        an input.
        """
        outcome = self.steering.outcomes.get(candidate.id)
        result = candidate.result or {}
        if (self.llm is None or candidate.accepted or outcome is None or not outcome.model
                or outcome.turn >= self.repair_turns or result.get("harness_failure")):
            return False
        target = self.history.get(outcome.target) if outcome.target is not None else None
        if target is None:
            return False
        repair = Repair(outcome.turn + 1, self.repair_turns, str(result.get("status", "")),
                        str(result.get("reason") or ""), candidate.source)
        ask = Ask(Request(LLM_MUTATION, (self._info(target),), Focus(outcome.focus or Focus.GENERAL), 0),
                  generation, candidate.island, [target.id], outcome.bottleneck, target.id, outcome.operator,
                  outcome.parent_ms, outcome.parent_spread, outcome.turn)
        self._send_back(ask, repair, generation, outcome.model, [candidate.id])
        return True

    def _send_back(self, ask: Ask, repair: Repair, generation: int, model: str, parents: list[int]) -> None:
        """Ask ``model`` (the one that wrote the attempt) for a fix of it: a repair of ``ask``'s target."""
        assert self.llm is not None
        target = ask.request.parents[0]  # a crossover's attempt is repaired as a mutation of its first parent
        request = dataclasses.replace(ask.request, kind=LLM_MUTATION, parents=(target,), sample=self.llm.number(),
                                      model=model, repair=repair, findings=self._findings_for(target))
        self.llm.add(dataclasses.replace(ask, request=request, generation=generation, parents=list(parents),
                                         turn=repair.turn, ticket=None))

    def _plan(self, parents: Sequence[Candidate], count: int, seen: set[str], generation: int,
              island: int) -> list[Child]:
        """The parametric children, made now; the LLM's places are asked for, in the order of their places."""
        planned: list[Child] = []
        llm = self.llm is not None and not self.llm.exhausted
        for a, b in zip(parents[0:2 * count:2], parents[1:2 * count:2]):
            bottleneck = self.profiles.bottleneck(a) if self.profiles is not None else UNKNOWN
            for _ in range(ATTEMPTS):
                operator = self.steering.choose(bottleneck, llm)
                if OperatorName(operator).needs_llm:
                    self._ask(operator, a, b, bottleneck, generation, island)
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
        outcome = Outcome(bottleneck, made.operator, None, a.runtime_ms, _spread(a))
        child = Child(made.source, source_hash(made.source), made.params, made.operator, parents, outcome)
        seen.add(child.source_hash)
        return child

    def _ask(self, operator: str, a: Candidate, b: Candidate, bottleneck: str, generation: int,
             island: int) -> None:
        """Ask for an LLM child; a crossover of a kernel with itself is asked as a mutation."""
        assert self.llm is not None
        focus = Focus(self.steering.choose_focus(bottleneck))
        parents = (self._info(a),)
        if operator == LLM_CROSSOVER and a.source_hash != b.source_hash:
            parents += (self._info(b),)
        else:
            operator = LLM_MUTATION
        model = self.steering.choose_model()
        request = Request(operator, parents, focus, self.llm.number(), model, self._findings_for(parents[0], a))
        self.llm.add(Ask(request, generation, island, [p.id for p in parents], bottleneck, a.id, operator,
                         a.runtime_ms, _spread(a)))
        self.asked += 1

    def _findings_for(self, parent: ParentInfo, candidate: Candidate | None = None) -> Findings:
        return self.history.findings(candidate or _candidate(parent))

    def _info(self, parent: Candidate) -> ParentInfo:
        record = self.profiles.record(parent) if self.profiles is not None else None
        if record is None:
            return ParentInfo(parent.id, parent.source, parent.result)
        return ParentInfo(parent.id, parent.source, parent.result, record.get("summary") or None,
                          record.get("bottleneck"))


def vary(parents: list[Candidate], count: int, rng: random.Random, operators: OperatorsConfig,
         space: Mapping[str, tuple[int, ...]], seen: set[str]) -> list[Child]:
    """Up to ``count`` parametric children of pairs of ``parents`` (``2 * count``) not in ``seen``.

    One island's variation without profiles or an LLM (see ``Breeder.vary``).
    """
    return Breeder(rng, operators, space, Steering(operators, rng)).vary([parents], [count], seen)[0]


def _llm_params(proposal: Proposal) -> dict:
    """The tunables of an LLM child, and the model and explanation it came with (reserved keys)."""
    params = dict(params_of(proposal.source or ""))
    params[MODEL_KEY] = proposal.model
    if proposal.explanation:
        params[EXPLANATION_KEY] = proposal.explanation
    return params


def _spread(candidate: Candidate) -> float | None:
    return (candidate.result or {}).get("runtime_spread")


def _candidate(parent: ParentInfo) -> Candidate:
    """A request's parent as a candidate again (its source and result), for a mutation in a reply's place."""
    candidate = Candidate(parent.id, parent.source, source_hash(parent.source), {}, 0, 0)
    if parent.result:
        candidate.record(dict(parent.result))
    return candidate
