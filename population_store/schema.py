"""The SQLite file behind a run: its tables, its version, and how it is opened.

One file per run. Every connection runs in WAL mode (one writer and any number
of readers in other processes at once), with a busy timeout, foreign keys on
and ``synchronous=FULL``, so a commit that returned has reached the disk.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

# Bump on any change to the tables below, and add the step from the previous
# version to _MIGRATIONS; a file with a newer version is refused.
SCHEMA_VERSION = 3
STORE_FORMAT = "kevo-run-store"
DEFAULT_BUSY_TIMEOUT_S = 30.0

# Status of an individual that was added but has no result yet.
PENDING = "pending"
# The one status that carries a fitness (runtime_ms).
ACCEPTED = "accepted"

# Version 2: LLM replies by cache key, and what they cost. A reply asked for
# twice under one key (which kevo avoids) keeps the first text and counts both.
_LLM_RESPONSES = """
CREATE TABLE llm_responses (
    key               TEXT    PRIMARY KEY,          -- sha256 of model, messages, sample, settings
    model             TEXT    NOT NULL,
    response          TEXT    NOT NULL,
    requests          INTEGER NOT NULL DEFAULT 1 CHECK (requests >= 1),
    prompt_tokens     INTEGER NOT NULL CHECK (prompt_tokens >= 0),
    completion_tokens INTEGER NOT NULL CHECK (completion_tokens >= 0),
    cost_usd          REAL    NOT NULL CHECK (cost_usd >= 0),
    finish_reason     TEXT,
    created_at        REAL    NOT NULL
);
CREATE INDEX llm_responses_model ON llm_responses (model);
"""

# Version 3: the parents' profile records, one row per profiled source
# (version 2 kept them all in one state entry, rewritten whenever one landed).
_PROFILES = """
CREATE TABLE profiles (
    source_hash TEXT PRIMARY KEY,
    record      TEXT NOT NULL,                      -- JSON object, ProfileRecord.to_dict()
    created_at  REAL NOT NULL
);
"""
_PROFILES_FROM_STATE = _PROFILES + """
INSERT INTO profiles (source_hash, record, created_at)
    SELECT entry.key, entry.value, state.updated_at
    FROM state, json_each(state.value) AS entry
    WHERE state.key = 'profiles' AND entry.type = 'object';
DELETE FROM state WHERE key = 'profiles';
"""

# The statements that take a store from version N to N + 1.
_MIGRATIONS = {1: _LLM_RESPONSES, 2: _PROFILES_FROM_STATE}

_TABLES = f"""
CREATE TABLE meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
CREATE TABLE individuals (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,  -- ids are never reused
    source_hash TEXT    NOT NULL,
    source      TEXT    NOT NULL,
    generation  INTEGER NOT NULL CHECK (generation >= 0),
    island      INTEGER NOT NULL CHECK (island >= 0),
    operator    TEXT    NOT NULL,
    params      TEXT    NOT NULL,                   -- JSON object
    status      TEXT    NOT NULL DEFAULT '{PENDING}',
    runtime_ms  REAL,
    result      TEXT,                               -- JSON object, the full record
    created_at  REAL    NOT NULL,
    finished_at REAL,
    CHECK ((status = '{PENDING}') = (result IS NULL)),
    CHECK ((status = '{PENDING}') = (finished_at IS NULL))
);
CREATE INDEX individuals_source_hash ON individuals (source_hash);
CREATE INDEX individuals_status_runtime ON individuals (status, runtime_ms);
CREATE TABLE parents (
    individual_id INTEGER NOT NULL REFERENCES individuals (id),
    parent_id     INTEGER NOT NULL REFERENCES individuals (id),
    position      INTEGER NOT NULL,
    PRIMARY KEY (individual_id, position)
);
CREATE INDEX parents_parent_id ON parents (parent_id);
CREATE TABLE state (
    key        TEXT PRIMARY KEY,
    value      TEXT NOT NULL,                       -- JSON object
    updated_at REAL NOT NULL
);
CREATE TABLE events (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    kind       TEXT NOT NULL,
    data       TEXT NOT NULL,                       -- JSON object
    created_at REAL NOT NULL
);
CREATE INDEX events_kind ON events (kind);
""" + _LLM_RESPONSES + _PROFILES


class StoreError(Exception):
    """The run store cannot be used as asked (not a store, read-only, ...)."""


class SchemaVersionError(StoreError):
    """The file was written by a newer kevo whose schema this one does not know."""


def connect(path: Path, *, readonly: bool, busy_timeout_s: float) -> sqlite3.Connection:
    """Open ``path`` with the settings every run-store connection needs.

    Autocommit mode (``isolation_level=None``): each statement outside an
    explicit ``BEGIN`` commits at once, and a reader sees every commit.
    """
    if readonly:
        # A read-only URI: this process can never write, even by mistake,
        # while the writer in another process keeps going.
        target, uri = f"{path.absolute().as_uri()}?mode=ro", True
    else:
        target, uri = str(path), False
    try:
        conn = sqlite3.connect(
            target, uri=uri, timeout=busy_timeout_s, isolation_level=None
        )
    except sqlite3.OperationalError as exc:
        raise StoreError(f"cannot open run store {path}: {exc}") from exc
    try:
        conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_s * 1000)}")
        if readonly:
            conn.execute("PRAGMA query_only = ON")
        else:
            conn.execute("PRAGMA foreign_keys = ON")
            conn.execute("PRAGMA synchronous = FULL")
            mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
            if mode.lower() != "wal":
                raise StoreError(
                    f"run store {path}: SQLite refused WAL mode (got {mode!r}); "
                    "put the run directory on a local filesystem"
                )
    except sqlite3.DatabaseError as exc:
        conn.close()
        raise StoreError(f"{path} is not a kevo run store ({exc})") from exc
    except BaseException:
        conn.close()
        raise
    return conn


def create_tables(conn: sqlite3.Connection, meta: dict[str, str]) -> None:
    """Create every table in an empty database and write ``meta``, atomically."""
    rows = {"format": STORE_FORMAT, "schema_version": str(SCHEMA_VERSION), **meta}
    conn.execute("BEGIN IMMEDIATE")
    try:
        _execute_all(conn, _TABLES)
        conn.executemany("INSERT INTO meta (key, value) VALUES (?, ?)", rows.items())
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise


def migrate(conn: sqlite3.Connection, path: Path) -> int:
    """Bring a store written by an older kevo up to ``SCHEMA_VERSION``, atomically.

    Returns the version the file had. The version is read again under the
    write lock, so two processes opening one old store migrate it once.
    """
    conn.execute("BEGIN IMMEDIATE")
    try:
        version = check_schema(conn, path)
        for step in range(version, SCHEMA_VERSION):
            _execute_all(conn, _MIGRATIONS[step])
        if version < SCHEMA_VERSION:
            conn.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(SCHEMA_VERSION),))
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    return version


def _execute_all(conn: sqlite3.Connection, script: str) -> None:
    # executescript() would commit on its own; run the statements one by one.
    for statement in script.split(";"):
        if statement.strip():
            conn.execute(statement)


def check_schema(conn: sqlite3.Connection, path: Path) -> int:
    """The schema version of the run store in ``conn``; raise unless this code can read it."""
    try:
        rows = dict(
            conn.execute(
                "SELECT key, value FROM meta WHERE key IN ('format', 'schema_version')"
            ).fetchall()
        )
    except sqlite3.DatabaseError as exc:
        raise StoreError(f"{path} is not a kevo run store ({exc})") from exc
    if rows.get("format") != STORE_FORMAT or "schema_version" not in rows:
        raise StoreError(f"{path} is not a kevo run store (no format marker in meta)")
    try:
        version = int(rows["schema_version"])
    except ValueError:
        raise StoreError(
            f"{path}: unreadable schema_version {rows['schema_version']!r}"
        ) from None
    if version > SCHEMA_VERSION:
        raise SchemaVersionError(
            f"{path} has schema version {version}, but this kevo reads only up to "
            f"version {SCHEMA_VERSION}: it was written by a newer kevo; upgrade kevo "
            "to open it"
        )
    if version < SCHEMA_VERSION and any(v not in _MIGRATIONS for v in range(version, SCHEMA_VERSION)):
        raise SchemaVersionError(
            f"{path} has schema version {version}, older than {SCHEMA_VERSION}, "
            "and no migration from it exists"
        )
    return version
