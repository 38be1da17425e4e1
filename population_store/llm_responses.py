"""LLM replies kept with the run: a cache by key, and what they cost.

A resumed run asks its LLM the same questions again; finding the reply here
means it pays for none of them twice. The same rows are the run's token and
cost accounting (``llm_usage``), which ``kevo report`` shows and the LLM
budget starts from on resume.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Mapping
from typing import Any

from population_store.database import Database

_COUNTERS = "SUM(requests), SUM(prompt_tokens), SUM(completion_tokens), SUM(cost_usd)"


@dataclasses.dataclass(frozen=True)
class LlmUsage:
    """Paid LLM requests and their tokens and cost, in all and by model (replies from the cache are free)."""

    requests: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    by_model: dict[str, "LlmUsage"] = dataclasses.field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form, for ``kevo report --json``."""
        data = dataclasses.asdict(self)
        data["by_model"] = {model: {k: v for k, v in usage.to_dict().items() if k != "by_model"}
                            for model, usage in self.by_model.items()}
        return data


class LlmResponses:
    """The ``llm_responses`` table of one store (none before schema version 2).

    ``RunStore`` documents ``get_llm_response``, ``put_llm_response`` and ``llm_usage``.
    """

    def __init__(self, db: Database):
        self._db = db

    def get(self, key: str) -> str | None:
        if self._db.schema_version < 2:
            return None
        row = self._db.conn.execute("SELECT response FROM llm_responses WHERE key = ?", (key,)).fetchone()
        return None if row is None else row[0]

    def put(self, key: str, model: str, response: str, usage: Mapping[str, Any]) -> None:
        """Insert the reply under ``key``; a second reply under one key adds its cost and keeps the first text."""
        with self._db.write() as conn:
            prompt_tokens = _count(usage, "prompt_tokens")
            completion_tokens = _count(usage, "completion_tokens")
            cost = usage.get("cost_usd", 0.0)
            if isinstance(cost, bool) or not isinstance(cost, (int, float)) or not math.isfinite(cost) or cost < 0:
                raise ValueError(f"usage['cost_usd'] must be a finite number >= 0, got {cost!r}")
            finish_reason = usage.get("finish_reason")
            conn.execute(
                "INSERT INTO llm_responses (key, model, response, prompt_tokens, completion_tokens,"
                " cost_usd, finish_reason, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
                " ON CONFLICT (key) DO UPDATE SET requests = requests + 1,"
                " prompt_tokens = prompt_tokens + excluded.prompt_tokens,"
                " completion_tokens = completion_tokens + excluded.completion_tokens,"
                " cost_usd = cost_usd + excluded.cost_usd",
                (key, model, response, prompt_tokens, completion_tokens, float(cost),
                 None if finish_reason is None else str(finish_reason), time.time()),
            )

    def usage(self) -> LlmUsage:
        if self._db.schema_version < 2:
            return LlmUsage()
        by_model = {
            model: LlmUsage(requests, prompt, completion, cost)
            for model, requests, prompt, completion, cost in self._db.conn.execute(
                f"SELECT model, {_COUNTERS} FROM llm_responses GROUP BY model ORDER BY model")
        }
        return LlmUsage(
            requests=sum(u.requests for u in by_model.values()),
            prompt_tokens=sum(u.prompt_tokens for u in by_model.values()),
            completion_tokens=sum(u.completion_tokens for u in by_model.values()),
            cost_usd=sum(u.cost_usd for u in by_model.values()),
            by_model=by_model,
        )


def _count(usage: Mapping[str, Any], name: str) -> int:
    value = usage.get(name, 0)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"usage[{name!r}] must be an integer >= 0, got {value!r}")
    return value
