"""Keeping API keys out of logs, the run store and reasons.

Keys come from the environment only. A provider's error message can quote
the key it was sent ("Incorrect API key provided: sk-..."), so every error
text that becomes a reason goes through ``redact`` first, and so does every
log record of the process once ``install_redaction`` has run (the LLM client
runs it before it imports litellm).

Log records are cleaned where they are made, not where they are handled: a
filter on a logger misses the records of its child loggers
(``openai._base_client``, ``httpx._client``, ``litellm.llms...``), which
propagate straight to the handlers above; and a filter on a handler misses
handlers added later. ``install_redaction`` wraps the log record factory,
which every logger calls for every record it emits, and also filters the
root logger's handlers, for records built without the factory and for the
``extra={...}`` fields that a logger sets after the factory has run.
"""

from __future__ import annotations

import logging
import os
import re
import threading
from typing import Any

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
_INSTALL_LOCK = threading.Lock()


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


def redact_record(record: logging.LogRecord) -> logging.LogRecord:
    """``record`` with its message (formatted with its args), its traceback and its extra fields redacted, in place."""
    try:
        message = record.getMessage()
    except (TypeError, ValueError):
        message = None  # args that do not fit the message: logging reports it when a handler formats it
    if message is not None and redact(message) != message:
        record.msg, record.args = redact(message), None
    if record.exc_info and record.exc_info[1] is not None:
        text = _FORMATTER.formatException(record.exc_info)
        if redact(text) != text:
            # Formatters print exc_text instead of formatting the exception again; without
            # exc_info, no later filter or formatter can format it again, key and all.
            record.exc_text, record.exc_info = redact(text), None
    for name, value in list(vars(record).items()):
        if name not in _STANDARD_FIELDS and isinstance(value, str) and redact(value) != value:
            setattr(record, name, redact(value))  # extra={...} fields, which a format string may print
    return record


_FORMATTER = logging.Formatter()
_STANDARD_FIELDS = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime"}


class RedactingFilter(logging.Filter):
    """A filter that redacts each record it sees; on a handler, it sees every record that handler emits."""

    def filter(self, record: logging.LogRecord) -> bool:
        redact_record(record)
        return True


class _RedactingFactory:
    """A log record factory that redacts every record the factory it wraps makes."""

    def __init__(self, wrapped: Any):
        self.wrapped = wrapped

    def __call__(self, *args: Any, **kwargs: Any) -> logging.LogRecord:
        return redact_record(self.wrapped(*args, **kwargs))


def install_redaction() -> None:
    """Redact every log record of this process from now on; calling it again changes nothing.

    Example::

        install_redaction()
        logging.getLogger("openai._base_client").warning("key %s", os.environ["OPENAI_API_KEY"])
        # every handler prints: key [redacted]
    """
    with _INSTALL_LOCK:
        if not isinstance(logging.getLogRecordFactory(), _RedactingFactory):
            logging.setLogRecordFactory(_RedactingFactory(logging.getLogRecordFactory()))
        for handler in logging.getLogger().handlers:
            if not any(isinstance(f, RedactingFilter) for f in handler.filters):
                handler.addFilter(RedactingFilter())
