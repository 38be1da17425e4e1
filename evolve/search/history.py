"""What the run has found so far, as the LLM's prompts show it beside a parent.

The fastest kernel, a few more fast ones and one unlike them (bounded: at
most ``TOP + DIVERSE`` besides the best, and ``prompt.SOURCE_LIMIT``
characters per kernel), and the parent's latest children with what became
of them. Only results taken by a finished generation count (``note`` at the
close of each), and a resumed run rebuilds the same view from its
checkpoint (``from_store``): a generation replayed after a resume asks the
same questions, whose replies are in the run's cache.
"""

from __future__ import annotations

from collections.abc import Iterable

from evolve.search.population import Candidate
from operators.llm import Attempt, Findings, ParentInfo
from platforms.timing import faster_beyond_noise
from population_store import RunStore

#: The fastest kernels shown besides the best, and those chosen for being unlike them.
TOP = 2
DIVERSE = 1
#: The parent's latest children shown.
ATTEMPTS = 4
# The params keys the LLM's children keep their model and explanation under (reserved: no tunable starts with _).
MODEL_KEY = "_model"
EXPLANATION_KEY = "_explanation"


class History:
    """The judged kernels of the run and who made each, as of the last finished generation."""

    def __init__(self, dtype: str | None = None) -> None:
        self.dtype = dtype
        self._made: dict[int, tuple[int | None, str]] = {}  # id -> (first parent, operator)
        self._judged: dict[int, Candidate] = {}
        self._lines: dict[int, frozenset[str]] = {}

    @classmethod
    def from_store(cls, store: RunStore, last_id: int, in_flight: Iterable[int], dtype: str | None) -> "History":
        """The view the loop had at its checkpoint: rows up to ``last_id`` judged by then."""
        history, pending = cls(dtype), set(in_flight)
        for row in store.individuals():
            history.made(row.id, row.parents, row.operator)
            if row.id <= last_id and row.result is not None and row.id not in pending:
                history._judged[row.id] = Candidate.from_individual(row)
        return history

    def made(self, child_id: int, parents: list[int], operator: str) -> None:
        """Remember who made ``child_id``, for its parent's list of children."""
        self._made[child_id] = (parents[0] if parents else None, operator)

    def note(self, landed: Iterable[Candidate]) -> None:
        """Take the results a finished generation took."""
        for candidate in landed:
            self._judged[candidate.id] = candidate

    def get(self, candidate_id: int) -> Candidate | None:
        """A judged kernel of the run, or None."""
        return self._judged.get(candidate_id)

    def findings(self, parent: Candidate) -> Findings:
        """What a prompt about ``parent`` shows of the run."""
        accepted = sorted((c for c in self._judged.values() if c.accepted), key=lambda c: (c.runtime_ms, c.id))
        best = accepted[0] if accepted else None
        parent_is_best = best is not None and best.source_hash == parent.source_hash
        shown = {parent.source_hash} | ({best.source_hash} if best is not None else set())
        others: list[Candidate] = []
        for candidate in accepted:
            if len(others) < TOP and candidate.source_hash not in shown:
                others.append(candidate)
                shown.add(candidate.source_hash)
        rest = [c for c in accepted if c.source_hash not in shown]
        near = [parent, *([best] if best is not None else []), *others]
        for _ in range(DIVERSE):
            if rest:
                unlike = max(rest, key=lambda c: (min(self._distance(c, n) for n in near), -c.runtime_ms))
                others.append(unlike)
                rest.remove(unlike)
                near.append(unlike)
        return Findings(best=None if best is None or parent_is_best else _info(best), parent_is_best=parent_is_best,
                        others=tuple(_info(c) for c in others),
                        attempts=self._attempts(parent.id), dtype=self.dtype, floor_ms=self._floor(best))

    def _attempts(self, parent_id: int) -> tuple[Attempt, ...]:
        children = sorted(i for i, (first, _) in self._made.items() if first == parent_id and i in self._judged)
        attempts = []
        for child_id in children[-ATTEMPTS:]:
            child, result = self._judged[child_id], self._judged[child_id].result or {}
            attempts.append(Attempt(child_id, self._made[child_id][1], str(result.get("status", "")),
                                    child.runtime_ms, "" if child.accepted else str(result.get("reason") or ""),
                                    str(child.params.get(EXPLANATION_KEY) or ""),
                                    against_parent(child, self._judged.get(parent_id))))
        return tuple(attempts)

    def _floor(self, best: Candidate | None) -> float | None:
        """The speed-of-light floor a verdict carries (``floor_ms``), the best kernel's first; None when none does."""
        for candidate in [best, *self._judged.values()]:
            floor = (candidate.result or {}).get("floor_ms") if candidate is not None else None
            if isinstance(floor, (int, float)) and not isinstance(floor, bool) and floor > 0:
                return float(floor)
        return None

    def _distance(self, a: Candidate, b: Candidate) -> float:
        """1 - Jaccard similarity of the two sources' sets of stripped lines."""
        lines_a, lines_b = self._line_set(a), self._line_set(b)
        union = lines_a | lines_b
        return 1.0 - len(lines_a & lines_b) / len(union) if union else 0.0

    def _line_set(self, candidate: Candidate) -> frozenset[str]:
        if candidate.id not in self._lines:
            self._lines[candidate.id] = frozenset(line.strip() for line in candidate.source.splitlines()
                                                  if line.strip())
        return self._lines[candidate.id]


def _info(candidate: Candidate) -> ParentInfo:
    """A kernel as the findings show it: its source and its record."""
    return ParentInfo(candidate.id, candidate.source, candidate.result)


def against_parent(child: Candidate, parent: Candidate | None) -> str:
    """An accepted child against its accepted parent, as the search judges "faster"
    (``platforms.timing.faster_beyond_noise``, each with its verdict's spread); "" otherwise.

    >>> def c(ms, spread):
    ...     candidate = Candidate(1, "", "h", {}, 0, 0)
    ...     candidate.record({"status": "accepted", "runtime_ms": ms, "runtime_spread": spread})
    ...     return candidate
    >>> against_parent(c(0.90, 0.01), c(1.0, 0.01))
    'faster than its parent (1 ms) beyond the timing noise'
    >>> against_parent(c(0.995, 0.02), c(1.0, 0.02))
    'no faster than its parent (1 ms) beyond the timing noise: not an improvement'
    """
    if parent is None or not child.accepted or not parent.accepted:
        return ""
    ms, spread = child.runtime_ms, (child.result or {}).get("runtime_spread")
    parent_ms, parent_spread = parent.runtime_ms, (parent.result or {}).get("runtime_spread")
    if faster_beyond_noise(ms, spread, parent_ms, parent_spread):
        return f"faster than its parent ({parent_ms:.4g} ms) beyond the timing noise"
    if faster_beyond_noise(parent_ms, parent_spread, ms, spread):
        return f"slower than its parent ({parent_ms:.4g} ms) beyond the timing noise"
    return f"no faster than its parent ({parent_ms:.4g} ms) beyond the timing noise: not an improvement"

