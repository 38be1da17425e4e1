"""The one place that talks to litellm: a chat completion with a timeout and bounded retries.

litellm is imported on first use, never at import of ``operators``: a run
without an LLM never loads it. Before the import, every log record of the
process is set to be cleaned of keys (``redact.install_redaction``) and
litellm is told to use its bundled price table (no download at import);
after it, to send nothing anywhere but the provider: no telemetry, no
callbacks, no debug banners.

Failures a request can meet are results (``Reply.reason``): a timeout, a
rate limit that outlasts the retries, a provider error, a refused prompt.
Failures that would hit every request alike (no key, a key the provider
rejects, a model it does not know) raise ``LlmSetupError``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
import os
import random
import re
from types import ModuleType
from typing import Any

from operators.llm.redact import install_redaction, redact
from operators.llm.request import (
    DEFAULT_MAX_TOKENS,
    REASONING_MAX_TOKENS,
    LlmSettings,
    LlmSetupError,
    ReasoningEffort,
)

log = logging.getLogger(__name__)

# Added to the request's own timeout before kevo stops waiting on its own.
_TIMEOUT_MARGIN_S = 5.0
_MAX_BACKOFF_S = 60.0
# litellm's "litellm.RateLimitError: RateLimitError: OpenAIException - " before the provider's message.
_PREFIXES = re.compile(r"^((litellm\.)?\w+(Error|Timeout):\s*|\w+Exception\s*-\s*)+")


@dataclasses.dataclass(frozen=True)
class Reply:
    """A model's answer (``text``) and its usage, or the reason there is none."""

    text: str | None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    cost_known: bool = True
    finish_reason: str | None = None
    reason: str = ""


def load_litellm() -> ModuleType:
    """litellm, imported once and set to reach nothing but the model's provider; every log record redacted."""
    install_redaction()  # at every call: cheap, and it stays installed whatever reset the factory
    return _import_litellm()


@functools.cache
def _import_litellm() -> ModuleType:
    os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"  # the bundled price table: no download at import
    import litellm

    litellm.telemetry = False
    litellm.suppress_debug_info = True
    litellm.set_verbose = False
    for name in ("callbacks", "success_callback", "failure_callback", "input_callback",
                 "_async_success_callback", "_async_failure_callback"):
        getattr(litellm, name).clear()
    for name in ("LiteLLM", "LiteLLM Router", "LiteLLM Proxy"):
        logging.getLogger(name).setLevel(logging.WARNING)  # litellm logs every request at INFO
    return litellm


def max_tokens_for(model: str, settings: LlmSettings) -> int:
    """The longest reply asked of ``model``: ``settings.max_tokens``, else the default for its kind.

    A reasoning model (one litellm knows as such, or any model asked for a
    reasoning effort) gets ``REASONING_MAX_TOKENS``, at most its own output
    limit, since its reasoning counts toward the reply; others get
    ``DEFAULT_MAX_TOKENS``.
    """
    if settings.max_tokens is not None:
        return settings.max_tokens
    known, limit = _reasoning_model(model)
    if not known and settings.reasoning_effort in (None, ReasoningEffort.NONE):
        return DEFAULT_MAX_TOKENS
    return min(REASONING_MAX_TOKENS, limit) if limit else REASONING_MAX_TOKENS


@functools.cache
def _reasoning_model(model: str) -> tuple[bool, int | None]:
    """Whether litellm's table knows ``model`` as a reasoning model, and its output limit if so."""
    litellm = load_litellm()
    if not litellm.supports_reasoning(model=model):
        return False, None
    # supports_reasoning is true only for a model in the table, so get_model_info finds it
    return True, litellm.get_model_info(model).get("max_output_tokens")


def check_setup(settings: LlmSettings) -> None:
    """Raise ``LlmSetupError`` when a model has no known provider or no key in the environment.

    Also says, once per model, how long a reasoning model's replies may be,
    and warns of a ``reasoning_effort`` that litellm will not send to it.
    """
    litellm = load_litellm()
    if settings.api_key_env is not None and not os.environ.get(settings.api_key_env):
        raise LlmSetupError(f"llm.api_key_env is {settings.api_key_env}, but that environment variable is not set")
    for model in settings.models:
        try:
            litellm.get_llm_provider(model=model)
        except litellm.BadRequestError:
            raise LlmSetupError(
                f"llm model {model!r}: litellm cannot tell its provider; write it as provider/model, "
                f"e.g. openai/gpt-4o, anthropic/claude-sonnet-4-5, ollama_chat/qwen2.5-coder") from None
        _check_reasoning(litellm, model, settings)
        if settings.api_key_env is not None:
            continue
        found = litellm.validate_environment(model=model, api_base=settings.api_base)
        missing = [k for k in found["missing_keys"] if not (settings.api_base and k.endswith("_API_BASE"))]
        if missing and all(k.endswith("_API_BASE") for k in missing):
            raise LlmSetupError(f"llm model {model!r} needs a server address: set llm.api_base "
                                f"(or {' and '.join(missing)} in the environment)")
        if missing:
            raise LlmSetupError(
                f"llm model {model!r} needs {' and '.join(missing)} in the environment "
                f"(a local server that takes no key accepts any value)")


def _check_reasoning(litellm: ModuleType, model: str, settings: LlmSettings) -> None:
    """Say once what a reasoning setting does for ``model``: how long its replies may be, or that it is not sent."""
    effort = settings.reasoning_effort
    if effort is not None:
        name, provider, _, _ = litellm.get_llm_provider(model=model)
        if "reasoning_effort" not in (litellm.get_supported_openai_params(model=name, custom_llm_provider=provider)
                                      or []):
            log.warning("llm.reasoning_effort is %s, but litellm knows %s as a model that takes no reasoning "
                        "effort: it is not sent to that model", effort.value, model)
    longest = max_tokens_for(model, settings)
    if settings.max_tokens is None and longest != DEFAULT_MAX_TOKENS:
        log.info("llm: %s reasons before it answers; its replies may be %d tokens long (llm.max_tokens)",
                 model, longest)


async def complete(model: str, messages: list[dict[str, str]], settings: LlmSettings) -> Reply:
    """One chat completion; rate limits and provider errors are retried ``settings.retries`` times."""
    litellm = load_litellm()
    kwargs = _request_kwargs(model, messages, settings)
    retryable = (litellm.RateLimitError, litellm.InternalServerError, litellm.ServiceUnavailableError,
                 litellm.BadGatewayError, litellm.APIConnectionError, litellm.APIError)
    for attempt in range(settings.retries + 1):
        try:
            response = await asyncio.wait_for(litellm.acompletion(**kwargs),
                                              settings.timeout_s + _TIMEOUT_MARGIN_S)
            return _reply(response, model, settings)
        except (litellm.Timeout, asyncio.TimeoutError):
            # Not retried: the next attempt would most likely wait as long again.
            return Reply(None, reason=f"request timed out after {settings.timeout_s:g} s")
        except (litellm.AuthenticationError, litellm.PermissionDeniedError, litellm.NotFoundError) as exc:
            raise LlmSetupError(f"llm model {model!r}: {_describe(exc)}") from None
        except litellm.ContextWindowExceededError:
            return Reply(None, reason=f"the prompt is longer than {model}'s context window")
        except (litellm.BadRequestError, litellm.UnprocessableEntityError) as exc:
            return Reply(None, reason=f"the provider refused the request: {_describe(exc)}")
        except retryable as exc:
            if attempt == settings.retries:
                if isinstance(exc, litellm.RateLimitError):
                    return Reply(None, reason=f"rate limited after {settings.retries} retries")
                return Reply(None, reason=f"the provider failed after {settings.retries} retries: {_describe(exc)}")
            delay = min(settings.backoff_s * 2**attempt, _MAX_BACKOFF_S) * random.uniform(0.75, 1.25)
            log.info("%s: %s; retrying in %.1f s", model, _describe(exc), delay)
            await asyncio.sleep(delay)
    raise AssertionError("unreachable: the last attempt returns")


def _request_kwargs(model: str, messages: list[dict[str, str]], settings: LlmSettings) -> dict[str, Any]:
    kwargs: dict[str, Any] = {
        "model": model,
        "messages": messages,
        "temperature": settings.temperature,
        "max_tokens": max_tokens_for(model, settings),
        "timeout": settings.timeout_s,
        "max_retries": 0,  # retries are ours, so that they are bounded and counted
        "drop_params": True,  # models that take no temperature (reasoning models) still run
    }
    effort = settings.reasoning_effort
    if effort is not None:
        kwargs["reasoning_effort"] = effort.value
        if effort is not ReasoningEffort.NONE and "claude" in model.lower():
            # Claude thinks only at its default temperature, and refuses a request that sets one
            del kwargs["temperature"]
    if settings.api_base:
        kwargs["api_base"] = settings.api_base
    if settings.api_key_env:
        kwargs["api_key"] = os.environ[settings.api_key_env]
    return kwargs


def _reply(response: Any, model: str, settings: LlmSettings) -> Reply:
    choice = response.choices[0] if response.choices else None  # none: e.g. a provider's content filter
    usage = getattr(response, "usage", None)
    prompt_tokens = int(getattr(usage, "prompt_tokens", 0) or 0)
    completion_tokens = int(getattr(usage, "completion_tokens", 0) or 0)
    price = settings.prices.get(model)
    if price is not None:
        cost, known = (prompt_tokens * price.input + completion_tokens * price.output) / 1e6, True
    else:
        cost = (getattr(response, "_hidden_params", None) or {}).get("response_cost")
        known = cost is not None
    return Reply(text=(choice.message.content if choice else None) or "", prompt_tokens=prompt_tokens,
                 completion_tokens=completion_tokens, cost_usd=float(cost or 0.0), cost_known=known,
                 finish_reason=getattr(choice, "finish_reason", None))


def _describe(exc: BaseException) -> str:
    """An exception as one redacted line, without litellm's prefixes."""
    text = _PREFIXES.sub("", " ".join(str(exc).split()))
    return redact(text)[:300] or type(exc).__name__
