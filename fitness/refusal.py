"""A candidate's known failures: the refusal that ends a worker step, and how an exception is told.

A candidate's exception is described by type and the first line of its
message, read defensively: an exception that refuses to print, or whose
type name is not a string, cannot break the harness.
"""

from __future__ import annotations

from fitness.result import Status


class Refusal(Exception):
    """A known failure of the candidate: ends the step with ``status`` (``fatal``: the
    worker cannot go on)."""

    def __init__(self, status: Status, reason: str, fatal: bool = False) -> None:
        if not isinstance(status, Status):
            raise TypeError(f"a refusal's status is a Status, not {status!r}")
        super().__init__(reason)
        self.status, self.reason, self.fatal = status, reason, fatal


class HarnessFault(Exception):
    """A bug of kevo found in the middle of a step (the evaluator's answer made no sense).

    Not the candidate's failure, though it may surface inside candidate code (a
    compile's loan): the worker's handlers let it through as they do a ``Refusal``,
    and the step ends as an internal error (``fitness.boundary.protocol.Failed``).
    """


def _compile_errors() -> tuple[type, ...]:
    from triton.compiler.errors import CompilationError

    return (CompilationError,)


def forbidden_reason(violations: list[str]) -> str:
    ops = ", ".join(f"aten.{v}" for v in dict.fromkeys(violations))
    return f"PyTorch did the work ({ops}); forward may only allocate, view and copy"


def _safe_text(exc: BaseException) -> str:
    """``str(exc)``, or ``""`` when the candidate's exception refuses to print."""
    try:
        text = str(exc)
        return text if isinstance(text, str) else ""
    except BaseException:
        return ""


def _safe_name(exc: BaseException) -> str:
    try:
        name = type(exc).__name__
        return name if isinstance(name, str) else "exception"
    except BaseException:
        return "exception"


def describe(exc: BaseException) -> str:
    """Type and first line (300 characters at most) of a candidate's exception."""
    lines = _safe_text(exc).strip().splitlines()
    first = next((line for line in lines if line.strip()), "")
    return f"{_safe_name(exc)}: {first[:300]}" if first else _safe_name(exc)


def out_of_memory(exc: BaseException) -> bool:
    """True when ``exc`` says an allocation failed (device or host)."""
    if isinstance(exc, MemoryError):
        return True
    text = _safe_text(exc)
    return _safe_name(exc) == "OutOfMemoryError" or "out of memory" in text.lower() or "can't allocate memory" in text


def classify(exc: BaseException, where: str, platform) -> Refusal:
    """The refusal for an exception the candidate raised at ``where``: out of
    memory, a lost device context (fatal: the worker goes), a compile error,
    or else a runtime error."""
    name = _safe_name(exc)
    if out_of_memory(exc):
        return Refusal(Status.OUT_OF_MEMORY, f"{where}: {describe(exc)}")
    if platform.context_lost(exc):
        return Refusal(Status.CRASHED, f"{where}: {describe(exc)} (device context lost)", fatal=True)
    if name in ("CompilationError", "CompileTimeAssertionFailure") or isinstance(exc, _compile_errors()):
        return Refusal(Status.COMPILE_ERROR, f"{where}: {describe(exc)}")
    return Refusal(Status.RUNTIME_ERROR, f"{where}: {describe(exc)}")
