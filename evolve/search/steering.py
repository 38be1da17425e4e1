"""How parents steer variation: their profiles, and the operator selector that reads them.

Before a generation is varied, every parent not profiled yet is sent to be
profiled once (``Dispatcher.profile_later``, by source hash; a pool of GPUs
profiles in the background, so the loop never waits), and each record is kept
in the run's store as soon as it is in, so a resumed run sees the same
profiles. A
parent's bottleneck class then biases the operator and the LLM focus of its
children (``operators.selector.OperatorSelector``); when a child's result
lands, the selector learns whether that choice paid off: the child was
accepted and is faster than the kernel it set out to improve by more than
their timing noise (``operators.selector.improved``). An LLM request that
gave no kernel is a try of its LLM operator that did not pay off (never of
the parametric mutation that may take its place). The model of each LLM
request is drawn from what each model's children achieved per dollar
(``operators.selector.ModelChooser``). What was learnt, and the children
whose outcome is still to come, go into the loop's checkpoint.

With ``operators.bias: false`` the draws follow the config's weights alone
(and LLM focuses are drawn uniformly): the selector still counts outcomes, for
the report, but they steer nothing.

Each record says what taking it cost (``ProfileRecord.cost``) and the shape
it was taken at; ``profiling_cost`` sums them for the report.
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import random
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from evolve.config import OperatorName, OperatorsConfig
from evolve.dispatch.base import Dispatcher
from evolve.search.population import Candidate
from operators import MUTATION
from operators.selector import FOCUSES, ModelChooser, OperatorSelector, improved
from platforms.profiling.classes import UNKNOWN
from population_store import RunStore

log = logging.getLogger(__name__)

#: Event recorded once per reason why parents get the analytic roofline instead of a hardware profile.
FALLBACK_EVENT = "profiler_fallback"


class ParentProfiles:
    """Profile records of the run's parents, each source profiled once, kept in the store.

    ``max_device_share`` (``profiler.max_device_share``) caps the device time
    the profiled programs hold, as a share of the wall time since this process
    began the search: a parent is sent to be profiled only while the device
    seconds of the profiles landed, and of those in flight at their mean, stay
    within it (before any has landed, one at a time). A parent held back is
    ``unknown`` meanwhile, and is sent once there is room, if it is still a
    parent then.
    """

    def __init__(self, store: RunStore, dispatcher: Dispatcher, needed: bool = True,
                 max_device_share: float | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self.store, self.dispatcher, self.needed = store, dispatcher, needed
        self._records: dict[str, dict[str, Any]] = store.profiles()
        self._told = {e["data"].get("reason") for e in store.events(FALLBACK_EVENT)}
        self._pending: dict[str, Any] = {}  # source hash -> handle of a profile under way
        self.share, self.clock = max_device_share, clock
        self.started = clock()
        self._device_s: list[float] = []  # of the profiles landed in this process

    def take(self, parents: Iterable[Candidate]) -> None:
        """Have the ``parents`` without a profile profiled, and store the records that are in.

        A pool profiles in the background: a parent whose profile is not in
        yet counts as ``unknown`` for this generation, and the loop does not
        wait for it.
        """
        if not self.needed:
            return
        for parent in {p.source_hash: p for p in parents}.values():
            if parent.source_hash not in self._records and parent.source_hash not in self._pending:
                if not self._room():
                    break
                self._pending[parent.source_hash] = self.dispatcher.profile_later(parent.source, parent.runtime_ms)
        for source_hash, handle in list(self._pending.items()):
            done, record = self.dispatcher.profile_result(handle)
            if not done:
                continue
            del self._pending[source_hash]
            if record is None:  # this dispatcher cannot profile, or lost the profile: try again next time
                continue
            self._device_s.append(float((record.get("cost") or {}).get("device_s") or 0.0))
            self._records[source_hash] = record
            self.store.put_profile(source_hash, record)
            self._tell(record)

    def _room(self) -> bool:
        """Whether one more profile fits in ``max_device_share`` of the device's time so far."""
        if self.share is None:
            return True
        if not self._device_s:
            return not self._pending  # the first one's cost is not known yet: one at a time
        each = sum(self._device_s) / len(self._device_s)
        return sum(self._device_s) + each * (len(self._pending) + 1) <= self.share * (self.clock() - self.started)

    def record(self, parent: Candidate) -> dict[str, Any] | None:
        """``parent``'s profile record (``ProfileRecord.to_dict()``), or None when it has none."""
        return self._records.get(parent.source_hash)

    def bottleneck(self, parent: Candidate) -> str:
        """``parent``'s bottleneck class; ``unknown`` without a profile."""
        record = self.record(parent)
        return (record or {}).get("bottleneck") or UNKNOWN

    def _tell(self, record: dict[str, Any]) -> None:
        """Say once, and record in the run, why a parent got the roofline instead of a hardware profile."""
        reason = record.get("reason") or ""
        if reason and reason not in self._told:
            self._told.add(reason)
            log.info("parents are profiled with the analytic roofline: %s", reason)
            self.store.record_event(FALLBACK_EVENT, {"reason": reason, "tool": record.get("tool", "")})


@dataclasses.dataclass(frozen=True)
class Outcome:
    """How a child was made: what its result teaches when it lands (and, for an LLM child, how to repair it)."""

    bottleneck: str  # the class of the kernel it set out to improve
    operator: str  # the operator credited with it (a repair: the operator of the attempt it repairs)
    focus: str | None = None
    parent_ms: float | None = None  # the time to beat
    parent_spread: float | None = None
    model: str | None = None  # the model that wrote it; None for a parametric child
    target: int | None = None  # the kernel it set out to improve (an LLM child's first parent)
    turn: int = 0  # 0 for a first attempt, n for the n-th repair

    @classmethod
    def from_list(cls, values: list) -> "Outcome":
        """An outcome as the checkpoint holds it (a list; a run from before models and repairs holds 4 values)."""
        return cls(*values)


class Steering:
    """Draws operators, LLM focuses and models for a parent's bottleneck class, and learns from outcomes.

    Every draw comes from ``rng``, the loop's generator, so a checkpointed
    random state reproduces them.
    """

    def __init__(self, operators: OperatorsConfig, rng: random.Random, selector_state: dict | None = None,
                 outcomes: dict[str, list] | None = None, models: Mapping[str, float] | None = None) -> None:
        self.weights = {op.value: float(operators.weights.get(op, 0.0)) for op in OperatorName}
        self.bias = operators.bias
        self.rng = rng
        if selector_state:
            self.selector = OperatorSelector.from_state(selector_state, self.weights, rng)
        else:
            self.selector = OperatorSelector(self.weights, rng)
        learnt = (selector_state or {}).get("models")
        self.models = ModelChooser(models, rng, learnt) if models else None  # None: no LLM
        # child id -> how it was made: what is learnt when its result lands
        self.outcomes: dict[int, Outcome] = {
            int(key): Outcome.from_list(value) for key, value in (outcomes or {}).items()}

    def choose(self, bottleneck: str, llm: bool) -> str:
        """An operator for a parent of class ``bottleneck``; LLM operators only when ``llm``.

        When every weighted operator needs the LLM and it cannot be used
        (its budget is spent), the choice is parametric mutation.
        """
        arms = [arm for arm, w in self.weights.items() if w > 0 and (llm or not OperatorName(arm).needs_llm)]
        if not arms:
            return MUTATION
        if not self.bias:
            return self.rng.choices(arms, [self.weights[arm] for arm in arms])[0]
        return self.selector.choose(bottleneck, among=arms)

    def choose_focus(self, bottleneck: str) -> str:
        """What an LLM operator on a parent of class ``bottleneck`` is asked to work on."""
        if not self.bias:
            return self.rng.choice(FOCUSES)
        return self.selector.choose_focus(bottleneck)

    def choose_model(self) -> str:
        """The model an LLM request goes to (see ``ModelChooser``)."""
        assert self.models is not None, "no models were given"
        return self.models.choose()

    def price(self, usage: Mapping[str, tuple[int, float]]) -> None:
        """Each model's paid requests and their cost (USD), from the run's accounting."""
        if self.models is not None:
            self.models.price(usage)

    def expect(self, child_id: int, outcome: Outcome) -> None:
        """Remember how child ``child_id`` was made, to learn from its result when it lands."""
        if outcome.operator in self.weights:  # seeds teach nothing
            self.outcomes[child_id] = outcome

    def missed(self, outcome: Outcome) -> None:
        """An LLM request that gave no kernel: a try of its operator, focus and model that did not pay off."""
        if outcome.operator in self.weights:
            self.selector.update(outcome.bottleneck, outcome.operator, False, focus=_focus(outcome))
        if outcome.model and self.models is not None:
            self.models.update(outcome.model, False)

    def learn(self, landed: Iterable[Candidate]) -> None:
        """Tell the selector, for each child in ``landed``, whether it improved on its parent beyond timing noise."""
        for child in landed:
            outcome = self.outcomes.pop(child.id, None)
            if outcome is None:
                continue
            spread = (child.result or {}).get("runtime_spread")
            better = child.accepted and improved(child.runtime_ms, spread, outcome.parent_ms, outcome.parent_spread)
            self.selector.update(outcome.bottleneck, outcome.operator, better, focus=_focus(outcome))
            if outcome.model and self.models is not None:
                self.models.update(outcome.model, better)

    def state(self) -> tuple[dict[str, Any], dict[str, list]]:
        """(what was learnt, the outcomes still to come), JSON-safe, for the checkpoint."""
        learnt = self.selector.state()
        if self.models is not None:
            learnt["models"] = self.models.state()
        return learnt, {str(k): list(dataclasses.astuple(v)) for k, v in sorted(self.outcomes.items())}


def _focus(outcome: Outcome) -> str | None:
    """The outcome's focus if the selector draws it (a repair asked with focus "general" teaches no focus)."""
    return outcome.focus if outcome.focus in FOCUSES else None


def selector_table(state: dict[str, Any] | None) -> list[dict[str, Any]]:
    """What paid off under which bottleneck class, from a checkpointed selector state (the report's table)."""
    if not state:
        return []
    selector = OperatorSelector.from_state(state, {op.value: 1.0 for op in OperatorName}, random.Random(0))
    return [{"bottleneck": row.bottleneck, "kind": row.kind, "arm": row.arm, "tries": row.tries,
             "improvements": row.improvements, "rate": row.rate} for row in selector.table()]


def profiling_cost(profiles: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """What profiling the run's parents cost, from their records (the store's ``profiles()``).

    ``profiles``: how many; ``by_tool``: how many each tool took (``roofline``:
    no tool, no device); ``seconds`` and ``device_s``: summed wall time of the
    profiles and, of it, the time the profiled programs held the device
    (others' timings waited); ``tool_runs``; ``shapes``: the reduced shapes
    profiled at (``ProfileRecord.scale``); ``unrecorded``: records of a tool
    without a cost (taken by a kevo that did not record it).
    """
    records = list(profiles.values())
    costs = [record.get("cost") or {} for record in records]
    return {
        "profiles": len(records),
        "by_tool": dict(collections.Counter(record.get("tool") or "?" for record in records)),
        "seconds": sum(cost.get("seconds", 0.0) for cost in costs),
        "device_s": sum(cost.get("device_s", 0.0) for cost in costs),
        "tool_runs": int(sum(cost.get("tool_runs", 0) for cost in costs)),
        "shapes": sorted({record["scale"].partition(":")[0] for record in records if record.get("scale")}),
        "unrecorded": sum(1 for record, cost in zip(records, costs) if not cost and record.get("tool") != "roofline"),
    }


def profiling_line(cost: Mapping[str, Any] | None) -> str | None:
    """The report's line for ``profiling_cost`` (None when no parent was profiled).

    >>> profiling_line({"profiles": 3, "by_tool": {"ncu": 2, "roofline": 1}, "seconds": 21.04, "device_s": 6.5,
    ...                 "tool_runs": 4, "shapes": ["batch_size=160 of 4096"], "unrecorded": 0})
    'profiling  3 parents (ncu 2, roofline 1): 21.0 s, the device held 6.5 s; at batch_size=160 of 4096'
    """
    if not cost or not cost.get("profiles"):
        return None
    tools = ", ".join(f"{tool} {n}" for tool, n in cost["by_tool"].items())
    line = (f"profiling  {cost['profiles']} parents ({tools}): {cost['seconds']:.1f} s, "
            f"the device held {cost['device_s']:.1f} s")
    if cost["shapes"]:
        more = len(cost["shapes"]) - 1
        line += f"; at {cost['shapes'][0]}" + (f" and {more} other reduced shapes" if more else "")
    if cost.get("unrecorded"):
        line += f" ({cost['unrecorded']} taken without a recorded cost)"
    return line
