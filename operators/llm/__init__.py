"""LLM-driven mutation, crossover and first kernels, through litellm (imported only when used).

``LlmProposer(settings, cache, context)``: ``start(request) -> ticket`` and
``finish(ticket) -> proposal`` (or ``propose(requests) -> proposals``); see
``operators.llm.proposer``. Without a model (``llm.model: offline``) none of
this runs: log ``OFFLINE_MESSAGE`` once and use the parametric operators.
"""

from operators.llm.prompt import build_messages, describe_result
from operators.llm.proposer import BUDGET_EXHAUSTED, LlmProposer, Ticket, cache_key, explanation
from operators.llm.redact import install_redaction, redact
from operators.llm.request import (
    DEFAULT_MAX_TOKENS,
    KINDS,
    LLM_CROSSOVER,
    LLM_MUTATION,
    LLM_SEED,
    NO_KERNEL,
    OFFLINE,
    OFFLINE_MESSAGE,
    REASONING_MAX_TOKENS,
    Attempt,
    Findings,
    Focus,
    LlmSettings,
    LlmSetupError,
    ParentInfo,
    Price,
    ProblemContext,
    Proposal,
    ReasoningEffort,
    Repair,
    Request,
    ResponseCache,
    Usage,
    seed_requests,
)

__all__ = [
    "BUDGET_EXHAUSTED",
    "DEFAULT_MAX_TOKENS",
    "KINDS",
    "LLM_CROSSOVER",
    "LLM_MUTATION",
    "LLM_SEED",
    "NO_KERNEL",
    "OFFLINE",
    "OFFLINE_MESSAGE",
    "REASONING_MAX_TOKENS",
    "Attempt",
    "Findings",
    "Focus",
    "LlmProposer",
    "LlmSettings",
    "LlmSetupError",
    "ParentInfo",
    "Price",
    "ProblemContext",
    "Proposal",
    "ReasoningEffort",
    "Repair",
    "Request",
    "ResponseCache",
    "Ticket",
    "Usage",
    "build_messages",
    "cache_key",
    "describe_result",
    "explanation",
    "install_redaction",
    "redact",
    "seed_requests",
]
