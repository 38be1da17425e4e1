"""No log record of the process carries an API key once redaction is installed, whichever logger emits it."""

from __future__ import annotations

import io
import logging

import pytest

from operators.llm import install_redaction, redact
from operators.llm.redact import RedactingFilter

KEY = "sk-test-kevo-0123456789abcdef"  # key-shaped
LOCAL_SECRET = "local-secret-value-4242"  # not key-shaped: known only as an environment variable's value
# Loggers of the provider libraries that sit below the names a logger filter would be put on.
CHILDREN = ["litellm.some.child", "LiteLLM.proxy.child", "openai._base_client", "httpx._client", "httpcore.http11"]


@pytest.fixture(autouse=True)
def clean_logging(monkeypatch):
    """The test's own key in the environment; the process's logging as it was afterwards."""
    monkeypatch.setenv("KEVO_TEST_LOCAL_API_KEY", LOCAL_SECRET)
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    factory, root = logging.getLogRecordFactory(), logging.getLogger()
    filters = {h: list(h.filters) for h in root.handlers}
    yield
    logging.setLogRecordFactory(factory)
    for handler, kept in filters.items():
        handler.filters[:] = kept


@pytest.fixture
def output():
    """Everything the root logger prints, through a handler added after redaction was installed."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter("%(name)s %(levelname)s %(message)s"))
    root = logging.getLogger()
    level = root.level
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    yield stream
    root.removeHandler(handler)
    root.setLevel(level)


def _failing_request() -> None:
    raise RuntimeError(f"401 from the provider: Incorrect API key provided: {KEY} ({LOCAL_SECRET})")


@pytest.mark.parametrize("name", CHILDREN)
def test_a_child_logger_of_a_provider_library_cannot_log_a_key(name, output, request):
    install_redaction()
    logger = logging.getLogger(name)
    level = logger.level
    logger.setLevel(logging.DEBUG)  # whatever litellm set its loggers to
    request.addfinalizer(lambda: logger.setLevel(level))
    logger.warning("Authorization: Bearer %s", LOCAL_SECRET)  # the key through args
    logger.info("sending %(headers)s", {"headers": {"api-key": KEY}})  # a mapping as args
    logger.debug(f"retrying with {KEY}")  # the key in the message itself
    try:
        _failing_request()
    except RuntimeError:
        logger.exception("request failed")  # the key in the traceback
    printed = output.getvalue()
    assert KEY not in printed and LOCAL_SECRET not in printed
    assert f"{name} WARNING Authorization: Bearer [redacted]\n" in printed
    assert f"{name} INFO sending {{'" in printed  # litellm's own filter may redact more of it
    assert "Incorrect API key provided: [redacted] ([redacted])" in printed  # the traceback is still there
    assert f"{name} DEBUG retrying with [redacted]\n" in printed


def test_a_handler_of_the_library_itself_that_does_not_propagate_is_covered():
    install_redaction()
    stream = io.StringIO()
    logger = logging.getLogger("LiteLLM.kevo_test")
    logger.addHandler(logging.StreamHandler(stream))
    logger.propagate = False
    try:
        logger.error("key=%s", KEY)
    finally:
        logger.handlers.clear()
        logger.propagate = True
    assert stream.getvalue() == "key=[redacted]\n"


def test_a_record_built_without_the_factory_is_redacted_by_the_root_handlers():
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    root = logging.getLogger()
    root.addHandler(handler)  # there before installation, like the handler the CLI sets up
    try:
        install_redaction()
        # what a log server or a queue listener does with a record from another process
        record = logging.makeLogRecord({"name": "openai._base_client", "msg": "key %s", "args": (KEY,),
                                        "levelno": logging.ERROR, "levelname": "ERROR"})
        root.handle(record)
    finally:
        root.removeHandler(handler)
    assert stream.getvalue() == "key [redacted]\n"


def test_clean_records_keep_their_args_and_installing_twice_wraps_once(output):
    install_redaction()
    factory = logging.getLogRecordFactory()
    install_redaction()
    assert logging.getLogRecordFactory() is factory
    record = factory("kevo", logging.INFO, __file__, 1, "max |out - ref| = %.3g at key %r", (3.45, "k"), None)
    assert record.args == (3.45, "k") and record.getMessage() == "max |out - ref| = 3.45 at key 'k'"
    logging.getLogger("litellm.child").warning("twice: %s", KEY)
    assert output.getvalue() == "litellm.child WARNING twice: [redacted]\n"


def test_the_llm_client_installs_redaction_before_litellm_logs_anything():
    from operators.llm import client

    logging.setLogRecordFactory(logging.LogRecord)  # as if someone had reset it
    client.load_litellm()
    record = logging.getLogger("litellm.llms.custom").makeRecord(
        "litellm.llms.custom", logging.ERROR, __file__, 1, "key %s", (KEY,), None)
    assert record.getMessage() == "key [redacted]"


def test_a_filter_on_a_logger_alone_misses_its_children(output):
    # Why redaction is not a logger filter: the record of a child propagates straight to the handlers.
    logging.setLogRecordFactory(logging.LogRecord)  # no redaction installed (the fixture puts back what was)
    for handler in logging.getLogger().handlers:
        handler.filters[:] = [f for f in handler.filters if not isinstance(f, RedactingFilter)]
    parent = logging.getLogger("kevo_test_parent")
    parent.addFilter(RedactingFilter())
    try:
        logging.getLogger("kevo_test_parent.child").warning("key %s", KEY)
    finally:
        parent.filters.clear()
    assert KEY in output.getvalue()
    assert redact(output.getvalue()) == "kevo_test_parent.child WARNING key [redacted]\n"


def test_extra_fields_that_a_format_prints_are_redacted_by_the_root_handlers():
    # extra={...} fields are set after the record factory has run: the handlers' filter sees them
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter("%(message)s to %(url)s"))
    root = logging.getLogger()
    root.addHandler(handler)  # like the CLI's, set up before the LLM client installs redaction
    try:
        install_redaction()
        logging.getLogger("openai.kevo_test").error("posted", extra={"url": f"https://h.test/v1?key={LOCAL_SECRET}"})
    finally:
        root.removeHandler(handler)
    assert stream.getvalue() == "posted to https://h.test/v1?key=[redacted]\n"
