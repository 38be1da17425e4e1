"""The run's individuals: each added with its parents, its result set once, and the queries over them.

``RunStore`` documents each method under its own name (``add_individual``,
``set_result``, ``best``, ...).
"""

from __future__ import annotations

import time

from population_store.database import Database
from population_store.individual import Individual, check_individual, check_result, status_text
from population_store.rows import existing_ids, select, to_json
from population_store.schema import ACCEPTED, PENDING, StoreError


class Population:
    """The ``individuals`` and ``parents`` tables of one store."""

    def __init__(self, db: Database):
        self._db = db

    def add(self, ind: Individual) -> int:
        check_individual(ind)
        status = status_text(ind.status) if ind.status is not None else PENDING
        if status == PENDING:
            if ind.result is not None or ind.runtime_ms is not None:
                raise ValueError("a pending individual has no result or runtime_ms")
            finished_at = None
        else:
            check_result(ind.result, status, ind.runtime_ms)
            finished_at = ind.finished_at or time.time()
        params_json = to_json(ind.params, "params")
        result_json = None if ind.result is None else to_json(ind.result, "the result")
        with self._db.write() as conn:
            missing = set(ind.parents) - existing_ids(conn, ind.parents)
            if missing:
                raise ValueError(f"parents not in the store: {sorted(missing)}")
            cursor = conn.execute(
                "INSERT INTO individuals (source, source_hash, generation, island,"
                " operator, params, status, runtime_ms, result, created_at,"
                " finished_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (ind.source, ind.source_hash, ind.generation, ind.island,
                 ind.operator, params_json, status, ind.runtime_ms, result_json,
                 ind.created_at or time.time(), finished_at),
            )
            ind_id = cursor.lastrowid
            conn.executemany(
                "INSERT INTO parents (individual_id, parent_id, position) VALUES (?, ?, ?)",
                [(ind_id, parent, pos) for pos, parent in enumerate(ind.parents)],
            )
        return ind_id

    def set_result(self, ind_id: int, result: dict, status: str, runtime_ms: float | None) -> None:
        status = status_text(status)
        check_result(result, status, runtime_ms)
        result_json = to_json(result, f"the result of individual {ind_id}")
        with self._db.write() as conn:
            cursor = conn.execute(
                "UPDATE individuals SET status = ?, runtime_ms = ?, result = ?,"
                " finished_at = ? WHERE id = ? AND status = ?",
                (status, runtime_ms, result_json, time.time(), ind_id, PENDING),
            )
            if cursor.rowcount == 0:
                row = conn.execute(
                    "SELECT status FROM individuals WHERE id = ?", (ind_id,)
                ).fetchone()
                if row is None:
                    raise KeyError(f"no individual {ind_id} in {self._db.path}")
                raise StoreError(
                    f"individual {ind_id} already has a result (status {row[0]!r}); "
                    "a stored verdict is never overwritten"
                )

    def get(self, ind_id: int) -> Individual:
        found = select(self._db.conn, "WHERE id = ?", (ind_id,))
        if not found:
            raise KeyError(f"no individual {ind_id} in {self._db.path}")
        return found[0]

    def all(self, status: str | None = None) -> list[Individual]:
        if status is None:
            return select(self._db.conn, "ORDER BY id")
        return select(self._db.conn, "WHERE status = ? ORDER BY id", (status_text(status),))

    def first_with_hash(self, source_hash: str) -> Individual | None:
        found = select(self._db.conn, "WHERE source_hash = ? ORDER BY id LIMIT 1", (source_hash,))
        return found[0] if found else None

    def best(self, n: int) -> list[Individual]:
        return select(self._db.conn,
            "WHERE status = ? AND runtime_ms IS NOT NULL"
            " ORDER BY runtime_ms, id LIMIT ?", (ACCEPTED, n),
        )

    def count(self, status: str | None = None) -> int:
        if status is None:
            return self._db.conn.execute("SELECT COUNT(*) FROM individuals").fetchone()[0]
        return self._db.conn.execute(
            "SELECT COUNT(*) FROM individuals WHERE status = ?", (status_text(status),)
        ).fetchone()[0]

    def status_counts(self) -> dict[str, int]:
        rows = self._db.conn.execute(
            "SELECT status, COUNT(*) FROM individuals GROUP BY status ORDER BY status"
        )
        return dict(rows.fetchall())

    def lineage(self, ind_id: int) -> list[Individual]:
        self.get(ind_id)  # KeyError for an unknown id rather than []
        return select(self._db.conn,
            "WHERE id IN (WITH RECURSIVE ancestor(id) AS ("
            " SELECT parent_id FROM parents WHERE individual_id = ?"
            " UNION SELECT p.parent_id FROM parents p"
            " JOIN ancestor a ON p.individual_id = a.id)"
            " SELECT id FROM ancestor) ORDER BY id", (ind_id,),
        )
