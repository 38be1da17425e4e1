"""The run store: every individual of one run, its lineage and its result.

Each write commits before the call returns, so a run killed at any moment
keeps everything it was told had been stored, and ``kevo resume`` picks up from
there: ``pending()`` lists what was in flight.

Example::

    store = RunStore.create(run_dir / "run.sqlite", config)
    seed = Individual(None, src, source_hash(src), generation=0, island=0,
                      operator="seed", parents=[], params={})
    seed_id = store.add_individual(seed)
    store.set_result(seed_id, record, record["status"], record["runtime_ms"])
    store.best(1)  # -> [Individual(id=seed_id, status="accepted", ...)]
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import secrets
import sqlite3
import time
from pathlib import Path
from typing import Any, Iterator

from population_store.individual import (
    Individual,
    check_individual,
    check_result,
    source_hash,
    status_text,
)
from population_store import llm_responses, profiles
from population_store.llm_responses import LlmUsage
from population_store.rows import existing_ids, select, to_json
from population_store.schema import (
    ACCEPTED,
    DEFAULT_BUSY_TIMEOUT_S,
    PENDING,
    SCHEMA_VERSION,
    StoreError,
    check_schema,
    connect,
    create_tables,
    migrate,
)

# Individual and source_hash are part of this module's API too.
__all__ = ["STORE_FILE", "Individual", "RunStore", "source_hash"]

#: A run directory's store file; every other module takes the name from here.
STORE_FILE = "run.sqlite"

logger = logging.getLogger(__name__)

class RunStore:
    """A run's SQLite file (``RUN_DIR/STORE_FILE``, ``run.sqlite``): one writer, many readers.

    Use one ``RunStore`` per process (and thread); open readers in other
    processes with ``RunStore.open(path, readonly=True)``.
    """

    def __init__(self, conn: sqlite3.Connection, path: Path, readonly: bool,
                 schema_version: int = SCHEMA_VERSION):
        """Use ``RunStore.create`` or ``RunStore.open``."""
        self._conn = conn
        self.path = path
        self.readonly = readonly
        # Below SCHEMA_VERSION only for a reader of an older store it may not migrate.
        self.schema_version = schema_version

    # -- opening and closing -------------------------------------------------

    @classmethod
    def create(
        cls, path: str | os.PathLike, config: dict,
        busy_timeout_s: float = DEFAULT_BUSY_TIMEOUT_S,
    ) -> "RunStore":
        """Create a new store at ``path`` holding the run's resolved ``config``.

        Raises ``FileExistsError`` if ``path`` exists: a run is never
        overwritten (resume it with ``RunStore.open``).
        """
        path = Path(path)
        if not isinstance(config, dict):
            raise TypeError(f"config must be a dict, not {type(config).__name__}")
        config_json = to_json(config, "the run config")
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.exists():
            raise _exists(path)
        # Built beside its place and linked there once complete: a reader (kevo
        # report, a sweep's summary) never finds a store without its tables,
        # and the link claims the path atomically, so two runs cannot both
        # create it.
        draft = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.draft")
        try:
            conn = connect(draft, readonly=False, busy_timeout_s=busy_timeout_s)
            try:
                create_tables(conn, {"config": config_json, "created_at": repr(time.time())})
            finally:
                conn.close()  # the last connection: SQLite folds the WAL into the file
            try:
                os.link(draft, path)
            except FileExistsError:
                raise _exists(path) from None
        finally:
            for suffix in ("", "-wal", "-shm"):
                Path(f"{draft}{suffix}").unlink(missing_ok=True)
        conn = connect(path, readonly=False, busy_timeout_s=busy_timeout_s)
        logger.info("created run store %s", path)
        return cls(conn, path, readonly=False)

    @classmethod
    def open(
        cls, path: str | os.PathLike, readonly: bool = False,
        busy_timeout_s: float = DEFAULT_BUSY_TIMEOUT_S,
    ) -> "RunStore":
        """Open an existing store; ``readonly`` for a reader beside a live writer.

        Raises ``FileNotFoundError`` if there is no file, ``StoreError`` if it is
        not a run store and ``SchemaVersionError`` if a newer kevo wrote it. A
        store of an older schema is migrated when opened for writing; a reader
        reads it as it is (it has no LLM replies).
        """
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"no run store at {path}")
        conn = connect(path, readonly=readonly, busy_timeout_s=busy_timeout_s)
        try:
            version = check_schema(conn, path)
            if version < SCHEMA_VERSION and not readonly:
                old = migrate(conn, path)
                if old < SCHEMA_VERSION:
                    logger.info("migrated run store %s from schema version %d to %d", path, old, SCHEMA_VERSION)
                version = SCHEMA_VERSION
        except BaseException:
            conn.close()
            raise
        return cls(conn, path, readonly=readonly, schema_version=version)

    def close(self) -> None:
        """Close the connection; every write was committed already."""
        self._conn.close()

    def __enter__(self) -> "RunStore":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- the run --------------------------------------------------------------

    def config(self) -> dict:
        """The resolved config the run was created with, or as ``set_config`` last changed it."""
        row = self._conn.execute("SELECT value FROM meta WHERE key = 'config'").fetchone()
        return json.loads(row[0])

    def set_config(self, config: dict, event: tuple[str, dict]) -> None:
        """Replace the resolved config: a deliberate change (a raised budget), never a silent one, so
        ``event`` (kind, data) says what changed and is recorded in the same transaction."""
        config_json = to_json(config, "the run config")
        kind, data = event
        data_json = to_json(data, f"event {kind!r}")
        with self._write() as conn:
            conn.execute("UPDATE meta SET value = ? WHERE key = 'config'", (config_json,))
            conn.execute("INSERT INTO events (kind, data, created_at) VALUES (?, ?, ?)",
                         (kind, data_json, time.time()))

    # -- individuals ----------------------------------------------------------

    def add_individual(self, ind: Individual) -> int:
        """Store ``ind`` with its parents, in one transaction; return its new id.

        ``ind.status`` is normally ``None`` or ``"pending"`` (no result yet, see
        ``set_result``); an individual that already has a result may be stored
        with it. Every parent must already be in the store.
        """
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
        with self._write() as conn:
            missing = set(ind.parents) - existing_ids(self._conn, ind.parents)
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

    def set_result(
        self, ind_id: int, result: dict, status: str, runtime_ms: float | None
    ) -> None:
        """Store the evaluation record of a pending individual.

        ``status`` and ``runtime_ms`` must agree with ``result`` where it holds
        them; an ``accepted`` result needs a runtime. Raises ``KeyError`` for an
        unknown id and ``StoreError`` if the individual already has a result.
        """
        status = status_text(status)
        check_result(result, status, runtime_ms)
        result_json = to_json(result, f"the result of individual {ind_id}")
        with self._write() as conn:
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
                    raise KeyError(f"no individual {ind_id} in {self.path}")
                raise StoreError(
                    f"individual {ind_id} already has a result (status {row[0]!r}); "
                    "a stored verdict is never overwritten"
                )

    def get(self, ind_id: int) -> Individual:
        """The individual with id ``ind_id``; ``KeyError`` if there is none."""
        found = select(self._conn, "WHERE id = ?", (ind_id,))
        if not found:
            raise KeyError(f"no individual {ind_id} in {self.path}")
        return found[0]

    def individuals(self, status: str | None = None) -> list[Individual]:
        """All individuals in insertion order, or those with ``status``."""
        if status is None:
            return select(self._conn, "ORDER BY id")
        return select(self._conn, "WHERE status = ? ORDER BY id", (status_text(status),))

    def pending(self) -> list[Individual]:
        """Individuals added without a result yet: in flight when a run died."""
        return self.individuals(PENDING)

    def has_source_hash(self, source_hash: str) -> Individual | None:
        """The first individual stored with ``source_hash``, or ``None``."""
        found = select(self._conn, "WHERE source_hash = ? ORDER BY id LIMIT 1", (source_hash,))
        return found[0] if found else None

    def best(self, n: int = 1) -> list[Individual]:
        """Up to ``n`` accepted individuals, fastest first (ties: oldest first)."""
        return select(self._conn, 
            "WHERE status = ? AND runtime_ms IS NOT NULL"
            " ORDER BY runtime_ms, id LIMIT ?", (ACCEPTED, n),
        )

    def count(self, status: str | None = None) -> int:
        """How many individuals there are, or how many have ``status``."""
        if status is None:
            return self._conn.execute("SELECT COUNT(*) FROM individuals").fetchone()[0]
        return self._conn.execute(
            "SELECT COUNT(*) FROM individuals WHERE status = ?", (status_text(status),)
        ).fetchone()[0]

    def status_counts(self) -> dict[str, int]:
        """``{status: count}`` over all individuals, ``"pending"`` included."""
        rows = self._conn.execute(
            "SELECT status, COUNT(*) FROM individuals GROUP BY status ORDER BY status"
        )
        return dict(rows.fetchall())

    def lineage(self, ind_id: int) -> list[Individual]:
        """Every ancestor of ``ind_id`` (through all parents), oldest first.

        The individual itself is not included; a seed has an empty lineage.
        """
        self.get(ind_id)  # KeyError for an unknown id rather than []
        return select(self._conn, 
            "WHERE id IN (WITH RECURSIVE ancestor(id) AS ("
            " SELECT parent_id FROM parents WHERE individual_id = ?"
            " UNION SELECT p.parent_id FROM parents p"
            " JOIN ancestor a ON p.individual_id = a.id)"
            " SELECT id FROM ancestor) ORDER BY id", (ind_id,),
        )

    # -- resume state and events ----------------------------------------------

    def put_state(self, key: str, value: dict) -> None:
        """Store (or replace) the resume state under ``key``, as JSON."""
        if not isinstance(value, dict):
            raise TypeError(f"state {key!r} must be a dict, not {type(value).__name__}")
        value_json = to_json(value, f"state {key!r}")
        with self._write() as conn:
            conn.execute(
                "INSERT INTO state (key, value, updated_at) VALUES (?, ?, ?)"
                " ON CONFLICT (key) DO UPDATE SET value = excluded.value,"
                " updated_at = excluded.updated_at",
                (key, value_json, time.time()),
            )

    def get_state(self, key: str) -> dict | None:
        """The state stored under ``key`` (tuples come back as lists), or ``None``."""
        row = self._conn.execute("SELECT value FROM state WHERE key = ?", (key,)).fetchone()
        return None if row is None else json.loads(row[0])

    def record_event(self, kind: str, data: dict) -> None:
        """Record something the run should show later, e.g. a degraded mode."""
        data_json = to_json(data, f"event {kind!r}")
        with self._write() as conn:
            conn.execute(
                "INSERT INTO events (kind, data, created_at) VALUES (?, ?, ?)",
                (kind, data_json, time.time()),
            )

    def events(self, kind: str | None = None) -> list[dict]:
        """Events in order, as ``{"id", "kind", "data", "created_at"}`` dicts."""
        query = "SELECT id, kind, data, created_at FROM events"
        args: tuple = ()
        if kind is not None:
            query, args = query + " WHERE kind = ?", (kind,)
        rows = self._conn.execute(query + " ORDER BY id", args).fetchall()
        return [
            {"id": id_, "kind": kind_, "data": json.loads(data), "created_at": created}
            for id_, kind_, data, created in rows
        ]

    # -- parents' profiles -----------------------------------------------------

    def put_profile(self, source_hash: str, record: dict) -> None:
        """Keep the profile record of the source with ``source_hash`` (the first one stays)."""
        record_json = to_json(record, f"profile of {source_hash}")
        with self._write() as conn:
            profiles.put_profile(conn, source_hash, record_json)

    def profiles(self) -> dict[str, dict]:
        """Every profile record of the run, by source hash, oldest first."""
        return profiles.all_profiles(self._conn, self.schema_version)

    # -- LLM replies and their cost -------------------------------------------

    def get_llm_response(self, key: str) -> str | None:
        """The LLM reply stored under cache ``key``, or ``None``."""
        if self.schema_version < 2:
            return None
        return llm_responses.get_response(self._conn, key)

    def put_llm_response(self, key: str, model: str, response: str, usage: dict) -> None:
        """Store a paid LLM reply under cache ``key`` with its ``usage``.

        ``usage`` holds ``prompt_tokens`` and ``completion_tokens`` (ints),
        ``cost_usd`` and optionally ``finish_reason``.
        """
        with self._write() as conn:
            llm_responses.put_response(conn, key, model, response, usage)

    def llm_usage(self) -> LlmUsage:
        """Paid LLM requests, tokens and cost of the run, in all and by model."""
        if self.schema_version < 2:
            return LlmUsage()
        return llm_responses.usage(self._conn)

    # -- helpers ---------------------------------------------------------------

    @contextlib.contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """One transaction, committed before the caller's write returns.

        ``BEGIN IMMEDIATE`` (rather than ``with conn:``'s deferred start) takes
        the write lock first, so the busy timeout covers waiting for it and a
        read-then-write inside the transaction cannot fail half-way.
        """
        if self.readonly:
            raise StoreError(f"run store {self.path} was opened read-only")
        self._conn.execute("BEGIN IMMEDIATE")
        try:
            yield self._conn
            self._conn.execute("COMMIT")
        except BaseException:
            if self._conn.in_transaction:
                self._conn.execute("ROLLBACK")
            raise


def _exists(path: Path) -> FileExistsError:
    return FileExistsError(f"run store {path} already exists; resume that run or choose another run directory")
