"""LLM-driven mutation, crossover and first kernels, through litellm (imported only when used).

``LlmProposer(settings, cache, context).propose(requests) -> proposals``; see
``operators.llm.proposer``. Without a model (``llm.model: offline``) none of
this runs: log ``OFFLINE_MESSAGE`` once and use the parametric operators.
"""

from operators.llm.prompt import build_messages, describe_result
from operators.llm.proposer import BUDGET_EXHAUSTED, LlmProposer, cache_key
from operators.llm.redact import redact
from operators.llm.request import (
    KINDS,
    LLM_CROSSOVER,
    LLM_MUTATION,
    LLM_SEED,
    OFFLINE,
    OFFLINE_MESSAGE,
    Focus,
    LlmSettings,
    LlmSetupError,
    ParentInfo,
    Price,
    ProblemContext,
    Proposal,
    Request,
    ResponseCache,
    Usage,
    seed_requests,
)

__all__ = [
    "BUDGET_EXHAUSTED",
    "KINDS",
    "LLM_CROSSOVER",
    "LLM_MUTATION",
    "LLM_SEED",
    "OFFLINE",
    "OFFLINE_MESSAGE",
    "Focus",
    "LlmProposer",
    "LlmSettings",
    "LlmSetupError",
    "ParentInfo",
    "Price",
    "ProblemContext",
    "Proposal",
    "Request",
    "ResponseCache",
    "Usage",
    "build_messages",
    "cache_key",
    "describe_result",
    "redact",
    "seed_requests",
]
