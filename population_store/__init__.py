"""The run store: one SQLite file per run holding every individual and result.

Depends on nothing else in kevo; results arrive as plain dicts.
"""

from population_store.individual import Individual, source_hash
from population_store.llm_responses import LlmUsage
from population_store.schema import (
    ACCEPTED,
    PENDING,
    SCHEMA_VERSION,
    SchemaVersionError,
    StoreError,
)
from population_store.store import STORE_FILE, RunStore

__all__ = [
    "ACCEPTED",
    "PENDING",
    "SCHEMA_VERSION",
    "STORE_FILE",
    "Individual",
    "LlmUsage",
    "RunStore",
    "SchemaVersionError",
    "StoreError",
    "source_hash",
]
