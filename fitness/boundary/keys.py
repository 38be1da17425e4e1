"""Which environment variables hold a secret (a provider's API key, a token, a password).

No process that loads a candidate holds one: ``fitness.boundary.sandbox`` starts every
worker without them, and ``evolve.dispatch.connect`` starts a local Ray instance (whose
actors are the evaluators) without them; the LLM client keeps them in the driver.

>>> sorted(without_secrets({"PATH": "/bin", "OPENAI_API_KEY": "sk-x", "HF_TOKEN": "t", "GH_HOST": "h"}))
['PATH']
"""

from __future__ import annotations

import re
from collections.abc import Mapping

_SECRET_NAME = re.compile(
    r"(KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|AUTH|COOKIE|SESSION|PRIVATE|SIGNATURE)",
    re.IGNORECASE,
)
_SECRET_PREFIXES = (
    "OPENAI_", "ANTHROPIC_", "AZURE_", "AWS_", "GOOGLE_", "GEMINI_", "VERTEX", "COHERE_",
    "MISTRAL_", "GROQ_", "TOGETHER", "HF_", "HUGGING", "LITELLM_", "DEEPSEEK_", "XAI_",
    "OPENROUTER_", "FIREWORKS_", "REPLICATE_", "WANDB_", "GITHUB_", "GH_", "SSH_", "GPG_",
)


def is_secret(name: str) -> bool:
    """Whether an environment variable's ``name`` says it holds a secret, or belongs to a provider."""
    return bool(_SECRET_NAME.search(name)) or name.upper().startswith(_SECRET_PREFIXES)


def without_secrets(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` without the variables ``is_secret`` names."""
    return {name: value for name, value in env.items() if not is_secret(name)}
