"""What the LLM operators are asked for, what they answer, and the settings they run with.

Plain data only, so that the search loop can build requests and read
proposals without importing litellm.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable, Mapping
from typing import Any, Protocol

#: ``llm.model`` when no LLM is configured.
OFFLINE = "offline"
#: What a run says, once, when it runs without an LLM.
OFFLINE_MESSAGE = "llm.model is offline: only parametric operators run"

# Operator names, as stored with each individual.
LLM_MUTATION = "llm_mutation"
LLM_CROSSOVER = "llm_crossover"
LLM_SEED = "llm_seed"
KINDS = (LLM_MUTATION, LLM_CROSSOVER, LLM_SEED)
_PARENTS_PER_KIND = {LLM_MUTATION: 1, LLM_CROSSOVER: 2, LLM_SEED: 0}


class Focus(str, enum.Enum):
    """What a proposal should work on; each has a paragraph in ``operators/prompts/focus_*.md``.

    The values are the selector's focuses (``operators.selector.FOCUSES``), plus ``general``.
    """

    GENERAL = "general"  # whatever holds the kernel back most
    MEMORY = "memory"  # traffic to global memory: coalescing, vector loads, fewer passes
    COMPUTE = "compute"  # matrix units, cheaper instructions
    TILING = "tiling"  # block shapes, grid, data reuse per program
    OCCUPANCY = "occupancy"  # warps, stages, registers, latency hiding
    LAUNCH = "launch"  # launch overhead: one kernel instead of several launches or passes


class ReasoningEffort(str, enum.Enum):
    """How long a reasoning model thinks before it answers (litellm's ``reasoning_effort``).

    litellm turns it into each provider's own setting: OpenAI's and vLLM's
    ``reasoning_effort``, Anthropic's and Gemini's thinking budget.
    """

    NONE = "none"
    MINIMAL = "minimal"
    LOW = "low"
    MEDIUM = "medium"
    HIGH = "high"
    XHIGH = "xhigh"


#: The longest reply when ``max_tokens`` is not set: the reasoning of a model
#: that thinks before it answers counts toward its reply, so it gets more room
#: (capped at the model's own output limit when litellm knows it).
DEFAULT_MAX_TOKENS = 8192
REASONING_MAX_TOKENS = 32768


class LlmSetupError(RuntimeError):
    """The LLM cannot be used at all (no API key, a rejected key, an unknown model): stop and fix the config."""


@dataclasses.dataclass(frozen=True)
class ParentInfo:
    """A parent as the prompt shows it: its source and what its evaluation said."""

    id: int
    source: str
    result: Mapping[str, Any] | None = None  # the evaluation record (EvalResult.to_dict())
    profile: str | None = None  # the profiler's summary, as text
    bottleneck: str | None = None  # the profiler's bottleneck class, e.g. "memory-bound"


@dataclasses.dataclass(frozen=True)
class Attempt:
    """An earlier child of a parent, and what became of it (a prompt's "earlier attempts")."""

    id: int
    operator: str
    status: str
    runtime_ms: float | None = None
    reason: str = ""  # the verdict's reason, for a kernel that was not accepted
    explanation: str = ""  # what the model said it tried, for an LLM child
    against_parent: str = ""  # an accepted child against its parent, by the search's rule for faster


@dataclasses.dataclass(frozen=True)
class Findings:
    """What the run has found so far, as a prompt shows it beside the parent.

    All optional: a prompt says nothing of what is not known (no floor
    before the speed-of-light work measures one, no best before a result).
    """

    best: ParentInfo | None = None  # the fastest accepted kernel, when it is not the parent itself
    parent_is_best: bool = False
    others: tuple[ParentInfo, ...] = ()  # a few more fast kernels, and one unlike them
    attempts: tuple[Attempt, ...] = ()  # the parent's recent children, oldest first
    dtype: str | None = None  # problem.dtype: the floating dtype the run casts inputs and weights to
    floor_ms: float | None = None  # the speed-of-light floor of the problem on this device


@dataclasses.dataclass(frozen=True)
class Repair:
    """A failed attempt going back to the model that wrote it, with what kevo's verdict said.

    ``source`` is the model's last code, which edits in the answer apply to:
    the failed kernel, or the code the screen refused. It is None when the
    reply gave no code (an edit that did not apply, prose only) on a first
    attempt: edits then apply to the kernel to improve. ``reply`` is the
    model's answer when it gave no kernel.
    """

    turn: int  # 1 for the first repair of an attempt
    turns: int  # the most repair turns an attempt gets (llm.repair_turns)
    status: str  # the verdict's status, or NO_KERNEL
    reason: str  # kevo's reason, never the inputs or the held-out shapes (the prompt scrubs those)
    source: str | None = None
    reply: str = ""


#: ``Repair.status`` of a reply that gave no kernel to evaluate.
NO_KERNEL = "no_kernel"


@dataclasses.dataclass(frozen=True)
class Request:
    """One proposal to make.

    ``sample`` tells apart requests whose prompts are equal (the same parent
    asked twice): it is part of the cache key, so a resumed run that asks
    again with the same sample gets the stored reply, and a new sample gets a
    new one. Give each request of a run its own, reproducible number.
    ``model`` names the model to ask (one of the settings' models); None
    draws one by weight from the request itself. A ``repair`` (of a mutation,
    or of a first kernel) sends a failed attempt back with its verdict.
    """

    kind: str  # LLM_MUTATION, LLM_CROSSOVER or LLM_SEED
    parents: tuple[ParentInfo, ...] = ()  # one for a mutation, two for a crossover, none for a seed
    focus: Focus = Focus.GENERAL
    sample: int = 0
    model: str | None = None
    findings: Findings = Findings()
    repair: Repair | None = None

    def __post_init__(self) -> None:
        if self.kind not in _PARENTS_PER_KIND:
            raise ValueError(f"unknown LLM request kind {self.kind!r}; known kinds: {', '.join(KINDS)}")
        if len(self.parents) != _PARENTS_PER_KIND[self.kind]:
            raise ValueError(f"a {self.kind} request takes {_PARENTS_PER_KIND[self.kind]} parents, "
                             f"got {len(self.parents)}")
        if self.repair is not None and self.kind not in (LLM_MUTATION, LLM_SEED):
            raise ValueError(f"a repair request is an {LLM_MUTATION} or an {LLM_SEED}, not an {self.kind}")
        object.__setattr__(self, "parents", tuple(self.parents))
        object.__setattr__(self, "focus", Focus(self.focus))

    @property
    def base(self) -> str | None:
        """The source that edits in the answer apply to: the failed attempt of a repair, else the first parent."""
        if self.repair is not None and self.repair.source is not None:
            return self.repair.source
        return self.parents[0].source if self.parents else None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (a request waiting for its reply is part of the search's checkpoint)."""
        data = dataclasses.asdict(self)
        data["focus"] = self.focus.value
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Request":
        """The request ``to_dict`` wrote."""
        findings = dict(data.get("findings") or {})
        findings["best"] = ParentInfo(**findings["best"]) if findings.get("best") else None
        findings["others"] = tuple(ParentInfo(**p) for p in findings.get("others", ()))
        findings["attempts"] = tuple(Attempt(**a) for a in findings.get("attempts", ()))
        repair = data.get("repair")
        return cls(data["kind"], tuple(ParentInfo(**p) for p in data["parents"]), Focus(data["focus"]),
                   data["sample"], data.get("model"), Findings(**findings),
                   Repair(**repair) if repair else None)


@dataclasses.dataclass(frozen=True)
class Usage:
    """What one proposal cost; a reply from the cache costs nothing."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    cached: bool = False


@dataclasses.dataclass(frozen=True)
class Proposal:
    """The answer to one request: a screened source, or the reason there is none."""

    source: str | None
    operator: str  # the request's kind
    model: str  # "" when no model was asked (the budget was spent)
    parents: tuple[int, ...]
    focus: Focus
    reason: str = ""  # why source is None, e.g. "edit 2 did not apply: its SEARCH text is not in the parent"
    form: str | None = None  # how the source was read: "whole_file" or "edits"
    usage: Usage = Usage()
    explanation: str = ""  # the model's few words on its idea, from the prose before its code
    # The reply came but gave no kernel, for a reason the model can fix (an edit that did not apply,
    # a refusal of the screen, prose only): worth a repair turn. Not so a timeout or the budget.
    repairable: bool = False
    draft: str | None = None  # the code the reply made when the screen refused it (a repair's base)
    reply: str = ""  # the answer (its reasoning dropped) when it gave no kernel, to show in a repair


class ResponseCache(Protocol):
    """Replies already paid for, by cache key (``RunStore`` is one).

    Called only from the thread that calls ``LlmProposer.propose``.
    """

    def get_llm_response(self, key: str) -> str | None: ...

    def put_llm_response(self, key: str, model: str, response: str, usage: Mapping[str, Any]) -> None: ...


#: Returns None (or a verdict with ``ok`` true) for a candidate it lets through,
#: else a refusal: a reason string, or a verdict with ``ok``, ``status`` and ``reason``
#: (``fitness.boundary.screen`` can be passed as it is).
Screen = Callable[[str], Any]


@dataclasses.dataclass(frozen=True)
class ProblemContext:
    """What every prompt of a run shares, and the screen every proposal goes through."""

    reference_source: str
    cutoff: float  # the max |out - ref| a kernel must stay within
    guidance: str  # platforms.guidance(platform_name)
    screen: Screen
    shapes: Mapping[str, int] = dataclasses.field(default_factory=dict)  # the shape knobs this run uses


@dataclasses.dataclass(frozen=True)
class Price:
    """A model's price in USD per million tokens, for models litellm has no price for.

    Also the type of the run config's ``llm.prices`` entries.
    """

    input: float  # USD per million prompt tokens
    output: float  # USD per million completion tokens


@dataclasses.dataclass(frozen=True)
class LlmSettings:
    """How the LLM is called. ``models`` maps each litellm model string to its weight."""

    models: Mapping[str, float]
    api_base: str | None = None  # e.g. http://localhost:8000/v1 for vLLM
    api_key_env: str | None = None  # the environment variable holding the key; None: litellm's default
    temperature: float = 0.8
    max_tokens: int | None = None  # None: DEFAULT_MAX_TOKENS, or REASONING_MAX_TOKENS for a reasoning model
    reasoning_effort: ReasoningEffort | None = None  # None: the model's own default; not sent
    timeout_s: float = 300.0  # per request
    retries: int = 3  # after a rate limit or a provider error, with exponential back-off
    backoff_s: float = 2.0  # the first back-off; it doubles at each retry
    concurrency: int = 4  # requests in flight at once
    max_cost_usd: float | None = None  # None: no limit
    prices: Mapping[str, Price] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.models or any(w < 0 for w in self.models.values()) or sum(self.models.values()) <= 0:
            raise ValueError("LlmSettings.models needs at least one model with a positive weight")
        if OFFLINE in self.models:
            raise ValueError(f"{OFFLINE!r} is not a model; build no LlmSettings for an offline run")
        if (self.concurrency < 1 or self.retries < 0 or self.timeout_s <= 0
                or (self.max_tokens is not None and self.max_tokens < 1)):
            raise ValueError("LlmSettings needs concurrency >= 1, retries >= 0, timeout_s > 0 and max_tokens >= 1")
        if self.reasoning_effort is not None:
            object.__setattr__(self, "reasoning_effort", ReasoningEffort(self.reasoning_effort))

    @classmethod
    def from_config(cls, llm: Any) -> "LlmSettings":
        """Settings from the run config's ``llm`` section (``evolve.config.LlmConfig``)."""
        models = dict(llm.models) if llm.models else {llm.model: 1.0}
        prices = dict(llm.prices)
        return cls(models=models, api_base=llm.api_base, api_key_env=llm.api_key_env,
                   temperature=llm.temperature, max_tokens=llm.max_tokens,
                   reasoning_effort=llm.reasoning_effort, timeout_s=llm.timeout_s,
                   retries=llm.retries, concurrency=llm.concurrency, max_cost_usd=llm.max_cost_usd,
                   prices=prices)


def seed_requests(count: int, first_sample: int = 0) -> list[Request]:
    """``count`` requests for first kernels written from the reference alone (a problem without seeds)."""
    focuses = [Focus.GENERAL, Focus.MEMORY, Focus.TILING, Focus.COMPUTE]
    return [Request(LLM_SEED, (), focuses[i % len(focuses)], first_sample + i) for i in range(count)]
