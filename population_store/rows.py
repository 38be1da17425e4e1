"""Reading individuals back from their rows: the columns, the parents, JSON in and out.

Plain functions over a connection, so that ``Population`` holds the transactions and
this module the shape of a row.
"""

from __future__ import annotations

import json
import sqlite3
from typing import Any

from population_store.individual import Individual

_COLUMNS = (
    "id, source, source_hash, generation, island, operator, params, status, "
    "runtime_ms, result, created_at, finished_at"
)
_CHUNK = 500  # ids per "IN (...)" query, well below SQLite's variable limit


def existing_ids(conn: sqlite3.Connection, ids: list[int]) -> set[int]:
    """Which of ``ids`` name an individual of the store."""
    found: set[int] = set()
    unique = sorted(set(ids))
    for start in range(0, len(unique), _CHUNK):
        chunk = unique[start:start + _CHUNK]
        marks = ", ".join("?" * len(chunk))
        found.update(row[0] for row in conn.execute(
            f"SELECT id FROM individuals WHERE id IN ({marks})", chunk))
    return found


def select(conn: sqlite3.Connection, clause: str, args: tuple = ()) -> list[Individual]:
    """Individuals of ``SELECT ... FROM individuals {clause}``, with parents."""
    rows = conn.execute(f"SELECT {_COLUMNS} FROM individuals {clause}", args).fetchall()
    # Parents are written with their child in one transaction and never
    # change, so reading them in a second statement is consistent.
    parents: dict[int, list[int]] = {row[0]: [] for row in rows}
    ids = list(parents)
    for start in range(0, len(ids), _CHUNK):
        chunk = ids[start:start + _CHUNK]
        marks = ", ".join("?" * len(chunk))
        for child, parent in conn.execute(
            f"SELECT individual_id, parent_id FROM parents"
            f" WHERE individual_id IN ({marks}) ORDER BY individual_id, position",
            chunk,
        ):
            parents[child].append(parent)
    return [_individual(row, parents[row[0]]) for row in rows]


def _individual(row: tuple, parents: list[int]) -> Individual:
    (id_, source, hash_, generation, island, operator, params, status,
     runtime_ms, result, created_at, finished_at) = row
    return Individual(
        id=id_, source=source, source_hash=hash_, generation=generation,
        island=island, operator=operator, parents=parents,
        params=json.loads(params), status=status, runtime_ms=runtime_ms,
        result=None if result is None else json.loads(result),
        created_at=created_at, finished_at=finished_at,
    )


def to_json(value: Any, what: str) -> str:
    """``value`` as JSON, or a ``TypeError`` that names ``what`` could not be stored."""
    try:
        return json.dumps(value)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{what} cannot be stored as JSON: {exc}") from exc
