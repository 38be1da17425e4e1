"""The run's sources seen so far, and the rows a generation cut short by a crash left behind.

A child is stored (``admit``) once: a generation replayed after a resume
makes the same children again, and finds their rows, results and all, by
source hash.
"""

from __future__ import annotations

import logging

from evolve.search.population import Candidate
from evolve.search.variation import Child
from population_store import Individual, RunStore

log = logging.getLogger(__name__)


class Ledger:
    """The run's sources seen so far, and rows a cut-short generation left behind."""

    def __init__(self, store: RunStore, last_id: int) -> None:
        self.store = store
        rows = store.individuals()
        self.seen = {r.source_hash for r in rows if r.id <= last_id}
        self._replay = {r.source_hash: r for r in rows if r.id > last_id}
        self.last_id = max((r.id for r in rows), default=0)

    def is_new(self, child: Child) -> bool:
        if child.source_hash in self.seen:
            log.warning("a seed repeats an earlier one (same normalised source); it is evaluated once")
            return False
        self.seen.add(child.source_hash)
        return True

    def admit(self, child: Child, generation: int, island: int) -> Candidate:
        """The stored candidate for ``child``: its row from a cut-short generation, or a new one."""
        row = self._replay.pop(child.source_hash, None)
        if row is None:
            row = Individual(None, child.source, child.source_hash, generation, island,
                             child.operator, child.parents, child.params)
            row.id = self.store.add_individual(row)
            self.last_id = row.id
        return Candidate.from_individual(row)

    def leftovers(self) -> list[Candidate]:
        """Rows of a cut-short generation that its replay did not make again (not expected)."""
        rows, self._replay = list(self._replay.values()), {}
        if rows:
            log.warning("resume: %d stored candidates were not made again by the replay; evaluating them",
                        len(rows))
            self.seen.update(r.source_hash for r in rows)
        return [Candidate.from_individual(r) for r in rows]
