"""Parents' profile records in the run store: one row each, kept across resume and migration."""

from __future__ import annotations

import json
import sqlite3

from population_store import SCHEMA_VERSION, RunStore

RECORD = {"tool": "ncu", "bottleneck": "memory_bound", "metrics": {"dram_pct": {"value": 91.0}}}


def test_a_profile_is_one_row_and_the_first_record_stays(tmp_path):
    path = tmp_path / "run.sqlite"
    with RunStore.create(path, {}) as store:
        store.put_profile("aaa", RECORD)
        store.put_profile("bbb", {**RECORD, "bottleneck": "compute_bound"})
        store.put_profile("aaa", {**RECORD, "bottleneck": "latency_bound"})  # a source is profiled once
    with RunStore.open(path, readonly=True) as reader:
        profiles = reader.profiles()
    assert list(profiles) == ["aaa", "bbb"]
    assert profiles["aaa"] == RECORD and profiles["bbb"]["bottleneck"] == "compute_bound"


def make_version_2_store(path, records):
    """A store as kevo with schema version 2 wrote it: profiles in one state entry."""
    RunStore.create(path, {}).close()
    conn = sqlite3.connect(path)
    with conn:
        conn.execute("DROP TABLE profiles")
        conn.execute("INSERT INTO state (key, value, updated_at) VALUES ('profiles', ?, 1.0)", (json.dumps(records),))
        conn.execute("UPDATE meta SET value = '2' WHERE key = 'schema_version'")
    conn.close()


def test_a_version_2_store_is_read_as_it_is_and_its_profiles_move_to_rows(tmp_path):
    path = tmp_path / "run.sqlite"
    records = {"aaa": RECORD, "bbb": {**RECORD, "bottleneck": "compute_bound"}}
    make_version_2_store(path, records)
    with RunStore.open(path, readonly=True) as reader:  # kevo report on an old run
        assert reader.schema_version == 2 and reader.profiles() == records
    with RunStore.open(path) as store:  # kevo resume
        assert store.schema_version == SCHEMA_VERSION
        assert store.profiles() == records
        assert store.get_state("profiles") is None  # moved, not copied
        store.put_profile("ccc", RECORD)
    with RunStore.open(path) as again:
        assert set(again.profiles()) == {"aaa", "bbb", "ccc"}
