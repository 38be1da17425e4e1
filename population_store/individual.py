"""What the store keeps of one candidate, and the hash that finds duplicates."""

from __future__ import annotations

import ast
import dataclasses
import enum
import functools
import hashlib
import math
from typing import Any

from population_store.schema import ACCEPTED, PENDING


@dataclasses.dataclass
class Individual:
    """One candidate kernel of a run. ``id`` is given by the store.

    ``status`` is ``"pending"`` (or ``None`` before it is stored) until a result
    arrives; ``result`` is then the full evaluation record.
    """

    id: int | None
    source: str
    source_hash: str
    generation: int
    island: int
    operator: str
    parents: list[int]
    params: dict
    status: str | None = None
    runtime_ms: float | None = None
    result: dict | None = None
    created_at: float = 0.0
    finished_at: float | None = None


@functools.lru_cache(maxsize=8192)
def source_hash(source: str) -> str:
    """SHA-256 of ``source`` with comments and layout normalised away.

    The source is parsed and unparsed, so two candidates that differ only in
    comments, blank lines or spacing hash the same; text that does not parse is
    hashed stripped. ``ast.unparse`` may format some constructs differently in
    another Python version, which can only cost a missed duplicate.

    >>> source_hash("x = 1  # one") == source_hash("x=1")
    True
    """
    try:
        normalised = ast.unparse(ast.parse(source))
    except (SyntaxError, ValueError, RecursionError):
        # ValueError: null bytes; RecursionError: absurdly deep nesting.
        normalised = source.strip()
    return hashlib.sha256(normalised.encode("utf-8")).hexdigest()


def status_text(status: Any) -> str:
    """The status as plain text; a ``str`` enum (``fitness``' Status) gives its value."""
    if isinstance(status, enum.Enum):
        status = status.value
    if not isinstance(status, str) or not status:
        raise ValueError(f"status must be a non-empty string, not {status!r}")
    return status


def check_individual(ind: Individual) -> None:
    """Refuse an individual that is malformed or whose hash would mislead dedup."""
    if ind.id is not None:
        raise ValueError(f"individual already has id {ind.id}; the store assigns ids")
    if not isinstance(ind.source, str):
        raise TypeError("source must be a str")
    if ind.source_hash != source_hash(ind.source):
        raise ValueError(
            "source_hash does not match the source; compute it with "
            "population_store.source_hash(source)"
        )
    for name in ("generation", "island"):
        value = getattr(ind, name)
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise ValueError(f"{name} must be an int >= 0, not {value!r}")
    if not isinstance(ind.operator, str) or not ind.operator:
        raise ValueError(f"operator must be a non-empty string, not {ind.operator!r}")
    if not all(isinstance(p, int) and not isinstance(p, bool) for p in ind.parents):
        raise ValueError(f"parents must be individual ids (ints), not {ind.parents!r}")
    if not isinstance(ind.params, dict):
        raise TypeError(f"params must be a dict, not {type(ind.params).__name__}")


def check_result(result: Any, status: str, runtime_ms: float | None) -> None:
    """Refuse a result record that contradicts its status or runtime."""
    if status == PENDING:
        raise ValueError(f"{PENDING!r} is not a result status")
    if not isinstance(result, dict):
        raise TypeError(f"result must be a dict, not {type(result).__name__}")
    if runtime_ms is not None and (
        isinstance(runtime_ms, bool) or not isinstance(runtime_ms, (int, float))
        or not math.isfinite(runtime_ms) or runtime_ms < 0
    ):
        raise ValueError(f"runtime_ms must be a finite number >= 0, not {runtime_ms!r}")
    if status == ACCEPTED and runtime_ms is None:
        raise ValueError("an accepted result needs its runtime_ms")
    if "status" in result and status_text(result["status"]) != status:
        raise ValueError(
            f"status {status!r} contradicts the result's status {result['status']!r}"
        )
    if "runtime_ms" in result and result["runtime_ms"] != runtime_ms:
        raise ValueError(
            f"runtime_ms {runtime_ms!r} contradicts the result's {result['runtime_ms']!r}"
        )
