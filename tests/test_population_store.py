"""The run store on real SQLite files: round trips, crashes, concurrent readers."""

from __future__ import annotations

import enum
import json
import math
import os
import queue
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from population_store import (
    PENDING,
    SCHEMA_VERSION,
    Individual,
    RunStore,
    SchemaVersionError,
    StoreError,
    source_hash,
)

REPO_ROOT = Path(__file__).resolve().parents[1]
TEST_LIMIT_S = 120
CHILD_LIMIT_S = 60

# A writer process: creates the store, then adds individuals in a loop; every
# seventh one is left pending (in flight). Each line it prints names an id
# whose write has been committed.
WRITER = """
import sys
sys.path.insert(0, sys.argv[1])
from population_store import Individual, RunStore, source_hash

store = RunStore.create(sys.argv[2], {"search": {"seed": 0}})
limit = int(sys.argv[3])  # 0: until killed
print("created", flush=True)
ids = []
i = 0
while limit == 0 or i < limit:
    src = f"def kernel():\\n    return {i}\\n"
    ind = Individual(None, src, source_hash(src), generation=i // 10, island=i % 2,
                     operator="mutate", parents=ids[-2:], params={"i": i})
    ind_id = store.add_individual(ind)
    if i % 7 == 6:
        print(f"pending {ind_id}", flush=True)
    else:
        runtime = 1.0 + i
        store.set_result(ind_id, {"status": "accepted", "runtime_ms": runtime, "i": i},
                         "accepted", runtime)
        store.put_state("loop", {"i": i})
        print(f"done {ind_id}", flush=True)
    ids.append(ind_id)
    i += 1
store.close()
print("finished", flush=True)
"""


class Status(str, enum.Enum):
    """Stands in for fitness' Status enum (the store must not import fitness)."""

    ACCEPTED = "accepted"
    WRONG = "wrong"


@pytest.fixture(autouse=True)
def _time_limit():
    """Fail, rather than hang, any test that runs past TEST_LIMIT_S."""

    def expired(signum, frame):
        raise TimeoutError(f"test ran past its {TEST_LIMIT_S} s limit")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.alarm(TEST_LIMIT_S)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)


class Child:
    """A Python subprocess whose stdout lines arrive on a queue, with timeouts."""

    def __init__(self, script: str, *args: str, stderr_path: Path):
        self._stderr_path = stderr_path
        with open(stderr_path, "w") as stderr:
            self.proc = subprocess.Popen(
                [sys.executable, "-c", script, str(REPO_ROOT), *args],
                cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=stderr, text=True,
            )
        self._lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        for line in self.proc.stdout:
            self._lines.put(line.strip())
        self._lines.put(None)  # end of output

    def next_line(self, timeout: float = CHILD_LIMIT_S) -> str | None:
        """The next line, or None once the child's stdout has closed."""
        try:
            return self._lines.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(
                f"child silent for {timeout} s; stderr:\n{self.stderr()}"
            ) from None

    def stderr(self) -> str:
        return self._stderr_path.read_text()

    def stop(self) -> None:
        """Kill the child if it still runs and reap it."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=CHILD_LIMIT_S)


@pytest.fixture
def spawn(tmp_path):
    children: list[Child] = []

    def start(script: str, *args: str) -> Child:
        child = Child(script, *args, stderr_path=tmp_path / f"child{len(children)}.err")
        children.append(child)
        return child

    yield start
    for child in children:
        child.stop()


def make(source: str, parents=(), generation=0, island=0, operator="seed", **params):
    return Individual(
        id=None, source=source, source_hash=source_hash(source),
        generation=generation, island=island, operator=operator,
        parents=list(parents), params=dict(params),
    )


def accept(store: RunStore, ind_id: int, runtime_ms: float) -> None:
    store.set_result(
        ind_id, {"status": "accepted", "runtime_ms": runtime_ms}, "accepted", runtime_ms
    )


@pytest.fixture
def store(tmp_path):
    with RunStore.create(tmp_path / "run.sqlite", {"search": {"seed": 0}}) as opened:
        yield opened


# -- round trips -------------------------------------------------------------


def test_config_and_individuals_round_trip_through_reopen(tmp_path):
    path = tmp_path / "run" / "run.sqlite"
    config = {"problem": {"shapes": {"batch_size": 16}}, "fitness": {"max_abs_diff": 1e-6}}
    before = time.time()
    with RunStore.create(path, config) as store:
        seed_id = store.add_individual(make("def k():\n    return 1\n", block=128))
        child_id = store.add_individual(
            make("def k():\n    return 2\n", parents=[seed_id], generation=1, island=3,
                 operator="llm_mutate", tiles={"m": [64, 32]})
        )
        record = {"status": "wrong", "max_abs_diff": math.inf, "reason": "off by one"}
        store.set_result(child_id, record, "wrong", None)

    with RunStore.open(path) as store:
        assert store.config() == config
        seed, child = store.individuals()
        assert (seed.id, seed.status, seed.result, seed.finished_at) == (
            seed_id, PENDING, None, None)
        assert seed.params == {"block": 128}
        assert before <= seed.created_at <= time.time()
        assert child.source == "def k():\n    return 2\n"
        assert child.source_hash == source_hash(child.source)
        assert (child.generation, child.island, child.operator) == (1, 3, "llm_mutate")
        assert child.parents == [seed_id]
        assert child.params == {"tiles": {"m": [64, 32]}}
        assert child.status == "wrong" and child.runtime_ms is None
        assert child.result == record  # inf survives the JSON round trip
        assert child.finished_at >= child.created_at
        assert store.get(child_id) == child


def test_add_individual_with_a_result_already(store):
    ind = make("x = 1")
    ind.status, ind.runtime_ms, ind.result = Status.ACCEPTED, 0.5, {"runtime_ms": 0.5}
    ind_id = store.add_individual(ind)
    got = store.get(ind_id)
    assert (got.status, got.runtime_ms, got.result) == ("accepted", 0.5, {"runtime_ms": 0.5})
    assert got.finished_at is not None
    assert store.pending() == []


def test_best_status_counts_and_pending(store):
    ids = [store.add_individual(make(f"x = {i}")) for i in range(6)]
    accept(store, ids[0], 3.0)
    accept(store, ids[1], 1.0)
    accept(store, ids[2], 2.0)
    accept(store, ids[5], 1.0)  # ties with ids[1]: the older one ranks first
    store.set_result(ids[3], {"status": "wrong"}, Status.WRONG, None)

    assert [ind.id for ind in store.best(3)] == [ids[1], ids[5], ids[2]]
    assert [ind.id for ind in store.best()] == [ids[1]]
    assert store.status_counts() == {"accepted": 4, "wrong": 1, "pending": 1}
    assert store.count() == 6
    assert store.count("accepted") == 4 and store.count(Status.WRONG) == 1
    assert [ind.id for ind in store.pending()] == [ids[4]]
    assert [ind.id for ind in store.individuals("wrong")] == [ids[3]]


def test_lineage_follows_every_parent_oldest_first(store):
    a = store.add_individual(make("a = 1"))
    b = store.add_individual(make("b = 1"))
    c = store.add_individual(make("c = 1", parents=[a], generation=1))
    unrelated = store.add_individual(make("u = 1", parents=[b], generation=1))
    d = store.add_individual(make("d = 1", parents=[c, b], generation=2, operator="crossover"))
    e = store.add_individual(make("e = 1", parents=[d, d], generation=3))

    assert [ind.id for ind in store.lineage(e)] == [a, b, c, d]
    assert store.get(d).parents == [c, b]
    assert store.get(e).parents == [d, d]
    assert unrelated not in [ind.id for ind in store.lineage(e)]
    assert store.lineage(a) == []
    with pytest.raises(KeyError):
        store.lineage(999)


def test_state_and_events_round_trip(tmp_path):
    path = tmp_path / "run.sqlite"
    with RunStore.create(path, {}) as store:
        assert store.get_state("random") is None
        store.put_state("random", {"state": [3, [1, 2, 3], None]})
        store.put_state("operators", {"llm_mutate": {"tried": 1}})
        store.put_state("operators", {"llm_mutate": {"tried": 2, "won": 1}})
        store.record_event("degraded", {"what": "profiler", "reason": "ncu not found"})
        store.record_event("resumed", {"pending": 2})
        store.record_event("degraded", {"what": "llm", "reason": "offline"})
    with RunStore.open(path, readonly=True) as store:
        assert store.get_state("random") == {"state": [3, [1, 2, 3], None]}
        assert store.get_state("operators") == {"llm_mutate": {"tried": 2, "won": 1}}
        degraded = store.events("degraded")
        assert [e["data"]["what"] for e in degraded] == ["profiler", "llm"]
        assert [e["kind"] for e in store.events()] == ["degraded", "resumed", "degraded"]
        assert all(e["created_at"] > 0 for e in store.events())


# -- deduplication -----------------------------------------------------------


def test_source_hash_ignores_comments_and_layout():
    plain = "def kernel(x):\n    return x + 1\n"
    noisy = "# a kernel\n\n\ndef kernel( x ):   # adds one\n    return (x+1)\n\n"
    assert source_hash(plain) == source_hash(noisy)
    assert source_hash(plain) != source_hash("def kernel(x):\n    return x + 2\n")
    # Text that does not parse is compared stripped.
    assert source_hash("def broken(:\n") == source_hash("\n  def broken(:  \n\n")
    assert source_hash("def broken(:") != source_hash("def broken(:;")


def test_has_source_hash_finds_the_first_equivalent_individual(store):
    first = store.add_individual(make("y = 2  # first"))
    store.add_individual(make("y=2"))
    found = store.has_source_hash(source_hash("y  =  2"))
    assert found is not None and found.id == first
    assert store.has_source_hash(source_hash("y = 3")) is None


# -- refusals ----------------------------------------------------------------


def test_add_individual_is_atomic_and_checks_its_parents(store):
    seed = store.add_individual(make("s = 1"))
    with pytest.raises(ValueError, match=r"parents not in the store: \[41, 42\]"):
        store.add_individual(make("t = 1", parents=[seed, 42, 41]))
    assert store.count() == 1
    with pytest.raises(ValueError, match="source_hash does not match"):
        store.add_individual(Individual(None, "t = 1", "abc", 0, 0, "seed", [], {}))
    with pytest.raises(TypeError, match="cannot be stored as JSON"):
        store.add_individual(make("t = 1", blob=object()))
    assert store.count() == 1


def test_set_result_refuses_contradictions_and_overwrites(store):
    ind_id = store.add_individual(make("z = 1"))
    with pytest.raises(KeyError):
        accept(store, 999, 1.0)
    with pytest.raises(ValueError, match="not a result status"):
        store.set_result(ind_id, {}, PENDING, None)
    with pytest.raises(ValueError, match="needs its runtime_ms"):
        store.set_result(ind_id, {}, "accepted", None)
    with pytest.raises(ValueError, match="contradicts"):
        store.set_result(ind_id, {"status": "wrong"}, "accepted", 1.0)
    with pytest.raises(ValueError, match="finite"):
        store.set_result(ind_id, {}, "accepted", math.nan)
    assert store.get(ind_id).status == PENDING
    accept(store, ind_id, 1.0)
    with pytest.raises(StoreError, match="already has a result"):
        accept(store, ind_id, 0.5)
    assert store.get(ind_id).runtime_ms == 1.0


def test_creating_over_an_existing_file_fails_and_keeps_it(tmp_path):
    path = tmp_path / "run.sqlite"
    RunStore.create(path, {"first": True}).close()
    with pytest.raises(FileExistsError, match="already exists"):
        RunStore.create(path, {"second": True})
    with RunStore.open(path) as store:
        assert store.config() == {"first": True}

    other = tmp_path / "notes.txt"
    other.write_text("keep me")
    with pytest.raises(FileExistsError):
        RunStore.create(other, {})
    assert other.read_text() == "keep me"


def test_a_store_appears_only_once_complete_and_leaves_no_draft(tmp_path, monkeypatch):
    import population_store.database as store_module

    path = tmp_path / "run.sqlite"
    original = store_module.create_tables

    def create_tables(conn, meta):
        assert not path.exists()  # a reader polling for the file finds nothing yet
        original(conn, meta)

    monkeypatch.setattr(store_module, "create_tables", create_tables)
    with RunStore.create(path, {"a": 1}) as store:
        assert store.config() == {"a": 1}
    with RunStore.open(path, readonly=True) as reader:
        assert reader.config() == {"a": 1}
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith("run.sqlite")) == []

    def failing(conn, meta):
        raise OSError("disk full")

    monkeypatch.setattr(store_module, "create_tables", failing)
    with pytest.raises(OSError, match="disk full"):
        RunStore.create(tmp_path / "other.sqlite", {})
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith("run.sqlite")) == []


def test_newer_schema_version_is_refused_clearly(tmp_path):
    path = tmp_path / "run.sqlite"
    RunStore.create(path, {}).close()
    with sqlite3.connect(path) as conn:
        conn.execute(
            "UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(SCHEMA_VERSION + 1),)
        )
    conn.close()
    for readonly in (False, True):
        with pytest.raises(SchemaVersionError) as caught:
            RunStore.open(path, readonly=readonly)
        message = str(caught.value)
        assert f"schema version {SCHEMA_VERSION + 1}" in message
        assert str(path) in message and "upgrade kevo" in message


def test_open_refuses_what_is_not_a_run_store(tmp_path):
    missing = tmp_path / "missing.sqlite"
    with pytest.raises(FileNotFoundError, match="no run store"):
        RunStore.open(missing)
    assert not missing.exists()

    garbage = tmp_path / "garbage.sqlite"
    garbage.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(StoreError, match="not a kevo run store"):
        RunStore.open(garbage)

    foreign = tmp_path / "foreign.sqlite"
    with sqlite3.connect(foreign) as conn:
        conn.execute("CREATE TABLE t (x)")
    conn.close()
    for readonly in (False, True):
        with pytest.raises(StoreError, match="not a kevo run store"):
            RunStore.open(foreign, readonly=readonly)


def test_readonly_store_reads_but_refuses_writes(tmp_path):
    path = tmp_path / "run.sqlite"
    with RunStore.create(path, {"a": 1}) as writer:
        ind_id = writer.add_individual(make("w = 1"))
        with RunStore.open(path, readonly=True) as reader:
            assert reader.get(ind_id).source == "w = 1"
            with pytest.raises(StoreError, match="read-only"):
                accept(reader, ind_id, 1.0)
            with pytest.raises(StoreError, match="read-only"):
                reader.put_state("k", {})
        assert writer.get(ind_id).status == PENDING


def test_file_settings_and_indices(store):
    conn = sqlite3.connect(store.path)
    try:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        meta = dict(conn.execute("SELECT key, value FROM meta"))
        assert meta["schema_version"] == str(SCHEMA_VERSION)
        assert json.loads(meta["config"]) == {"search": {"seed": 0}}
        assert float(meta["created_at"]) > 0
        indices = {row[0] for row in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL")}
        assert {"individuals_source_hash", "individuals_status_runtime",
                "parents_parent_id", "events_kind"} <= indices
    finally:
        conn.close()
    assert store._db.conn.execute("PRAGMA foreign_keys").fetchone()[0] == 1


# -- crashes and concurrency -------------------------------------------------


def integrity(path: Path) -> tuple[str, list]:
    conn = sqlite3.connect(path)
    try:
        return (conn.execute("PRAGMA integrity_check").fetchone()[0],
                conn.execute("PRAGMA foreign_key_check").fetchall())
    finally:
        conn.close()


@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs SIGKILL")
def test_sigkill_loses_nothing_committed(tmp_path, spawn):
    path = tmp_path / "run.sqlite"
    child = spawn(WRITER, str(path), "0")
    assert child.next_line() == "created", child.stderr()
    done: list[int] = []
    reported_pending: list[int] = []

    def take(line: str) -> None:
        kind, ind_id = line.split()
        (done if kind == "done" else reported_pending).append(int(ind_id))

    while len(done) < 20:
        line = child.next_line()
        assert line is not None, f"writer exited early:\n{child.stderr()}"
        take(line)
    os.kill(child.proc.pid, signal.SIGKILL)
    assert child.proc.wait(timeout=CHILD_LIMIT_S) == -signal.SIGKILL
    while (line := child.next_line()) is not None:  # committed before the kill
        take(line)

    assert integrity(path) == ("ok", [])
    with RunStore.open(path) as store:
        for ind_id in done:
            ind = store.get(ind_id)
            assert ind.status == "accepted"
            assert ind.result == {"status": "accepted", "runtime_ms": ind.runtime_ms,
                                  "i": ind.params["i"]}
        assert store.get_state("loop")["i"] >= store.get(done[-1]).params["i"]
        pending_ids = [ind.id for ind in store.pending()]
        assert set(reported_pending) <= set(pending_ids)
        # At most the one individual in flight at the kill is pending unreported.
        assert len(set(pending_ids) - set(reported_pending)) <= 1
        last = max(ind.id for ind in store.individuals())

        # The run goes on where it stopped.
        new_id = store.add_individual(make("def resumed():\n    pass\n", parents=[done[-1]]))
        accept(store, new_id, 0.25)
        assert new_id > last
        assert store.best()[0].id == new_id
    assert integrity(path) == ("ok", [])
    with RunStore.open(path, readonly=True) as store:
        assert store.get(new_id).status == "accepted"
        assert store.lineage(new_id)[-1].id == done[-1]


def test_reader_process_sees_a_growing_store_while_a_writer_writes(tmp_path, spawn):
    path = tmp_path / "run.sqlite"
    total = 300
    child = spawn(WRITER, str(path), str(total))
    assert child.next_line() == "created", child.stderr()
    # No busy wait at all: in WAL a reader never waits for the writer, so any
    # "database is locked" fails this test at once.
    counts = []
    with RunStore.open(path, readonly=True, busy_timeout_s=0) as reader:
        while child.proc.poll() is None:
            counts.append(reader.count())
            reader.best(3)
            reader.status_counts()
        assert child.proc.wait(timeout=CHILD_LIMIT_S) == 0, child.stderr()
        counts.append(reader.count())
    assert counts == sorted(counts)
    assert counts[-1] == total
    assert len(set(counts)) >= 3, "the reader never saw the writer's progress"
