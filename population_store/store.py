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

import os
from pathlib import Path

from population_store.database import Database
from population_store.individual import Individual, source_hash
from population_store.llm_responses import LlmResponses, LlmUsage
from population_store.population import Population
from population_store.profiles import Profiles
from population_store.rows import to_json
from population_store.run_state import RunState
from population_store.schema import DEFAULT_BUSY_TIMEOUT_S, PENDING

# Individual and source_hash are part of this module's API too.
__all__ = ["STORE_FILE", "Individual", "RunStore", "source_hash"]

#: A run directory's store file; every other module takes the name from here.
STORE_FILE = "run.sqlite"

class RunStore:
    """A run's SQLite file (``RUN_DIR/STORE_FILE``, ``run.sqlite``): one writer, many readers.

    Use one ``RunStore`` per process (and thread); open readers in other
    processes with ``RunStore.open(path, readonly=True)``. Its parts keep their own
    tables (``Population``, ``RunState``, ``Profiles``, ``LlmResponses``) and write through ``Database.write``.
    """

    def __init__(self, db: Database):
        """Use ``RunStore.create`` or ``RunStore.open``."""
        self._db = db
        self.path = db.path
        self.readonly = db.readonly
        self.schema_version = db.schema_version  # below SCHEMA_VERSION: a reader of an older store
        self._population = Population(db)
        self._run = RunState(db)
        self._profiles = Profiles(db)
        self._llm = LlmResponses(db)

    @classmethod
    def create(cls, path: str | os.PathLike, config: dict,
               busy_timeout_s: float = DEFAULT_BUSY_TIMEOUT_S) -> "RunStore":
        """Create a new store at ``path`` holding the run's resolved ``config``.

        Raises ``FileExistsError`` if ``path`` exists: a run is never
        overwritten (resume it with ``RunStore.open``).
        """
        if not isinstance(config, dict):
            raise TypeError(f"config must be a dict, not {type(config).__name__}")
        return cls(Database.create(Path(path), to_json(config, "the run config"), busy_timeout_s))

    @classmethod
    def open(cls, path: str | os.PathLike, readonly: bool = False,
             busy_timeout_s: float = DEFAULT_BUSY_TIMEOUT_S) -> "RunStore":
        """Open an existing store; ``readonly`` for a reader beside a live writer.

        Raises ``FileNotFoundError`` if there is no file, ``StoreError`` if it is
        not a run store and ``SchemaVersionError`` if a newer kevo wrote it. A
        store of an older schema is migrated when opened for writing; a reader
        reads it as it is (it has no LLM replies).
        """
        return cls(Database.open(Path(path), readonly, busy_timeout_s))

    def close(self) -> None:
        """Close the connection; every write was committed already."""
        self._db.conn.close()

    def __enter__(self) -> "RunStore":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def config(self) -> dict:
        """The resolved config the run was created with, or as ``set_config`` last changed it."""
        return self._run.config()

    def set_config(self, config: dict, event: tuple[str, dict]) -> None:
        """Replace the resolved config: a deliberate change (a raised budget), never a silent one, so
        ``event`` (kind, data) says what changed and is recorded in the same transaction."""
        self._run.set_config(config, event)

    def put_state(self, key: str, value: dict) -> None:
        """Store (or replace) the resume state under ``key``, as JSON."""
        self._run.put_state(key, value)

    def get_state(self, key: str) -> dict | None:
        """The state stored under ``key`` (tuples come back as lists), or ``None``."""
        return self._run.get_state(key)

    def record_event(self, kind: str, data: dict) -> None:
        """Record something the run should show later, e.g. a degraded mode."""
        self._run.record_event(kind, data)

    def events(self, kind: str | None = None) -> list[dict]:
        """Events in order, as ``{"id", "kind", "data", "created_at"}`` dicts."""
        return self._run.events(kind)

    def add_individual(self, ind: Individual) -> int:
        """Store ``ind`` with its parents, in one transaction; return its new id.

        ``ind.status`` is normally ``None`` or ``"pending"`` (no result yet, see
        ``set_result``); an individual that already has a result may be stored
        with it. Every parent must already be in the store.
        """
        return self._population.add(ind)

    def set_result(self, ind_id: int, result: dict, status: str, runtime_ms: float | None) -> None:
        """Store the evaluation record of a pending individual.

        ``status`` and ``runtime_ms`` must agree with ``result`` where it holds
        them; an ``accepted`` result needs a runtime. Raises ``KeyError`` for an
        unknown id and ``StoreError`` if the individual already has a result.
        """
        self._population.set_result(ind_id, result, status, runtime_ms)

    def get(self, ind_id: int) -> Individual:
        """The individual with id ``ind_id``; ``KeyError`` if there is none."""
        return self._population.get(ind_id)

    def individuals(self, status: str | None = None) -> list[Individual]:
        """All individuals in insertion order, or those with ``status``."""
        return self._population.all(status)

    def pending(self) -> list[Individual]:
        """Individuals added without a result yet: in flight when a run died."""
        return self._population.all(PENDING)

    def has_source_hash(self, source_hash: str) -> Individual | None:
        """The first individual stored with ``source_hash``, or ``None``."""
        return self._population.first_with_hash(source_hash)

    def best(self, n: int = 1) -> list[Individual]:
        """Up to ``n`` accepted individuals, fastest first (ties: oldest first)."""
        return self._population.best(n)

    def count(self, status: str | None = None) -> int:
        """How many individuals there are, or how many have ``status``."""
        return self._population.count(status)

    def status_counts(self) -> dict[str, int]:
        """``{status: count}`` over all individuals, ``"pending"`` included."""
        return self._population.status_counts()

    def lineage(self, ind_id: int) -> list[Individual]:
        """Every ancestor of ``ind_id`` (through all parents), oldest first.

        The individual itself is not included; a seed has an empty lineage.
        """
        return self._population.lineage(ind_id)

    def put_profile(self, source_hash: str, record: dict) -> None:
        """Keep the profile record of the source with ``source_hash`` (the first one stays)."""
        self._profiles.put(source_hash, record)

    def profiles(self) -> dict[str, dict]:
        """Every profile record of the run, by source hash, oldest first."""
        return self._profiles.all()

    def get_llm_response(self, key: str) -> str | None:
        """The LLM reply stored under cache ``key``, or ``None``."""
        return self._llm.get(key)

    def put_llm_response(self, key: str, model: str, response: str, usage: dict) -> None:
        """Store a paid LLM reply under cache ``key`` with its ``usage``.

        ``usage`` holds ``prompt_tokens`` and ``completion_tokens`` (ints),
        ``cost_usd`` and optionally ``finish_reason``.
        """
        self._llm.put(key, model, response, usage)

    def llm_usage(self) -> LlmUsage:
        """Paid LLM requests, tokens and cost of the run, in all and by model."""
        return self._llm.usage()
