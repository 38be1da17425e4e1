"""The run beside its individuals: its config, its resume state and its events.

``RunStore`` documents each method under its own name (``config``,
``put_state``, ``record_event``, ...).
"""

from __future__ import annotations

import json
import time

from population_store.database import Database
from population_store.rows import to_json

_INSERT_EVENT = "INSERT INTO events (kind, data, created_at) VALUES (?, ?, ?)"


class RunState:
    """The ``meta`` table's config, and the ``state`` and ``events`` tables, of one store."""

    def __init__(self, db: Database):
        self._db = db

    def config(self) -> dict:
        row = self._db.conn.execute("SELECT value FROM meta WHERE key = 'config'").fetchone()
        return json.loads(row[0])

    def set_config(self, config: dict, event: tuple[str, dict]) -> None:
        config_json = to_json(config, "the run config")
        kind, data = event
        data_json = to_json(data, f"event {kind!r}")
        with self._db.write() as conn:
            conn.execute("UPDATE meta SET value = ? WHERE key = 'config'", (config_json,))
            conn.execute(_INSERT_EVENT, (kind, data_json, time.time()))

    def put_state(self, key: str, value: dict) -> None:
        if not isinstance(value, dict):
            raise TypeError(f"state {key!r} must be a dict, not {type(value).__name__}")
        value_json = to_json(value, f"state {key!r}")
        with self._db.write() as conn:
            conn.execute(
                "INSERT INTO state (key, value, updated_at) VALUES (?, ?, ?)"
                " ON CONFLICT (key) DO UPDATE SET value = excluded.value,"
                " updated_at = excluded.updated_at",
                (key, value_json, time.time()),
            )

    def get_state(self, key: str) -> dict | None:
        row = self._db.conn.execute("SELECT value FROM state WHERE key = ?", (key,)).fetchone()
        return None if row is None else json.loads(row[0])

    def record_event(self, kind: str, data: dict) -> None:
        data_json = to_json(data, f"event {kind!r}")
        with self._db.write() as conn:
            conn.execute(_INSERT_EVENT, (kind, data_json, time.time()))

    def events(self, kind: str | None = None) -> list[dict]:
        query = "SELECT id, kind, data, created_at FROM events"
        args: tuple = ()
        if kind is not None:
            query, args = query + " WHERE kind = ?", (kind,)
        rows = self._db.conn.execute(query + " ORDER BY id", args).fetchall()
        return [
            {"id": id_, "kind": kind_, "data": json.loads(data), "created_at": created}
            for id_, kind_, data, created in rows
        ]
