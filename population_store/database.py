"""A run store's open file: creating it, opening it, and the one way it is written.

Every part of ``RunStore`` (individuals, run state, profiles, LLM replies)
reads through ``Database.conn`` and writes inside ``Database.write()``, so each
write commits before it returns.
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import sqlite3
import time
from pathlib import Path
from typing import Iterator

from population_store.schema import (
    SCHEMA_VERSION,
    StoreError,
    check_schema,
    connect,
    create_tables,
    migrate,
)

logger = logging.getLogger(__name__)


class Database:
    """One connection to a run store: one writer, or a reader beside it."""

    def __init__(self, conn: sqlite3.Connection, path: Path, readonly: bool,
                 schema_version: int = SCHEMA_VERSION):
        self.conn = conn
        self.path = path
        self.readonly = readonly
        # Below SCHEMA_VERSION only for a reader of an older store it may not migrate.
        self.schema_version = schema_version

    @classmethod
    def create(cls, path: Path, config_json: str, busy_timeout_s: float) -> "Database":
        """A new store at ``path`` holding ``config_json``; ``FileExistsError`` if there is one."""
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
    def open(cls, path: Path, readonly: bool, busy_timeout_s: float) -> "Database":
        """The existing store at ``path``, migrated first if opened for writing."""
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

    @contextlib.contextmanager
    def write(self) -> Iterator[sqlite3.Connection]:
        """One transaction, committed before the caller's write returns.

        ``BEGIN IMMEDIATE`` (rather than ``with conn:``'s deferred start) takes
        the write lock first, so the busy timeout covers waiting for it and a
        read-then-write inside the transaction cannot fail half-way.
        """
        if self.readonly:
            raise StoreError(f"run store {self.path} was opened read-only")
        self.conn.execute("BEGIN IMMEDIATE")
        try:
            yield self.conn
            self.conn.execute("COMMIT")
        except BaseException:
            if self.conn.in_transaction:
                self.conn.execute("ROLLBACK")
            raise


def _exists(path: Path) -> FileExistsError:
    return FileExistsError(f"run store {path} already exists; resume that run or choose another run directory")
