"""Parents' profile records kept with the run: one row per profiled source.

A parent is profiled once (by source hash) and its record steers every
generation after; a resumed run reads them back instead of profiling again.
One row each, written as it lands, so a long run's profiles cost one insert
apiece, not a rewrite of all of them.
"""

from __future__ import annotations

import json
import time
from typing import Any

from population_store.database import Database
from population_store.rows import to_json

#: Where a store of schema version 2 or older kept the records: one state entry.
LEGACY_STATE_KEY = "profiles"


class Profiles:
    """The ``profiles`` table of one store. ``RunStore`` documents ``put_profile`` and ``profiles``."""

    def __init__(self, db: Database):
        self._db = db

    def put(self, source_hash: str, record: dict) -> None:
        record_json = to_json(record, f"profile of {source_hash}")
        with self._db.write() as conn:
            # The first record of a source stays: a source is profiled once.
            conn.execute(
                "INSERT INTO profiles (source_hash, record, created_at) VALUES (?, ?, ?)"
                " ON CONFLICT (source_hash) DO NOTHING",
                (source_hash, record_json, time.time()),
            )

    def all(self) -> dict[str, dict[str, Any]]:
        conn = self._db.conn
        if self._db.schema_version < 3:  # an old store opened read-only, not migrated
            row = conn.execute("SELECT value FROM state WHERE key = ?", (LEGACY_STATE_KEY,)).fetchone()
            return {} if row is None else json.loads(row[0])
        rows = conn.execute("SELECT source_hash, record FROM profiles ORDER BY created_at, source_hash")
        return {source_hash: json.loads(record) for source_hash, record in rows}
