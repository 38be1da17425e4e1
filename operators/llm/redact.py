"""Keeping API keys out of logs, the run store and reasons.

Keys come from the environment only. A provider's error message can quote
the key it was sent ("Incorrect API key provided: sk-..."), so every error
text that becomes a reason or a log line goes through ``redact`` first.
"""

from __future__ import annotations

import logging
import os
import re

REDACTED = "[redacted]"
# Variables whose values are secrets: OPENAI_API_KEY, HF_TOKEN, AWS_SECRET_ACCESS_KEY, ...
_SECRET_NAME = re.compile(r"(KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL)", re.IGNORECASE)
# Key-shaped strings, whatever variable they came from.
_KEY_SHAPES = re.compile(
    r"(sk-[A-Za-z0-9_\-]{8,}"            # OpenAI, Anthropic (sk-ant-...), DeepSeek, OpenRouter
    r"|AIza[0-9A-Za-z_\-]{20,}"           # Google
    r"|gsk_[A-Za-z0-9]{16,}"              # Groq
    r"|xai-[A-Za-z0-9]{16,}"              # xAI
    r"|hf_[A-Za-z0-9]{16,}"               # Hugging Face
    r"|(?i:bearer)\s+[A-Za-z0-9._\-]{8,})"
)
_MIN_SECRET_LENGTH = 8  # shorter values would blank out ordinary words


def secret_values() -> list[str]:
    """The values of the environment variables whose names say they hold secrets, longest first."""
    values = {v for k, v in os.environ.items() if _SECRET_NAME.search(k) and len(v) >= _MIN_SECRET_LENGTH}
    return sorted(values, key=len, reverse=True)


def redact(text: str) -> str:
    """``text`` with every secret value of the environment and every key-shaped string replaced.

    >>> redact("Incorrect API key provided: sk-abc123def456ghi")
    'Incorrect API key provided: [redacted]'
    """
    for value in secret_values():
        text = text.replace(value, REDACTED)
    return _KEY_SHAPES.sub(REDACTED, text)


class RedactingFilter(logging.Filter):
    """A logging filter that redacts a record's message (installed on litellm's loggers)."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        clean = redact(message)
        if clean != message:
            record.msg, record.args = clean, None
        return True
