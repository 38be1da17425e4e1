"""The run store's LLM reply cache and cost accounting, and the migration of older stores to it."""

from __future__ import annotations

import sqlite3

import pytest

from population_store import SCHEMA_VERSION, Individual, LlmUsage, RunStore, StoreError, source_hash


def usage(prompt: int, completion: int, cost: float, finish: str | None = "stop") -> dict:
    return {"prompt_tokens": prompt, "completion_tokens": completion, "cost_usd": cost, "finish_reason": finish}


def test_replies_are_found_by_key_and_survive_reopening(tmp_path):
    path = tmp_path / "run.sqlite"
    with RunStore.create(path, {}) as store:
        assert store.get_llm_response("k1") is None
        store.put_llm_response("k1", "openai/gpt-4o-mini", "reply one", usage(1000, 200, 0.01))
        store.put_llm_response("k2", "anthropic/claude-sonnet-4-5", "reply two", usage(3000, 500, 0.05, None))
        assert store.get_llm_response("k1") == "reply one"
    with RunStore.open(path, readonly=True) as reader:
        assert reader.get_llm_response("k2") == "reply two"
        assert reader.get_llm_response("k3") is None


def test_usage_adds_up_in_all_and_by_model(tmp_path):
    with RunStore.create(tmp_path / "run.sqlite", {}) as store:
        assert store.llm_usage() == LlmUsage()
        store.put_llm_response("a", "m1", "x", usage(100, 10, 0.25))
        store.put_llm_response("b", "m1", "y", usage(200, 20, 0.5))
        store.put_llm_response("c", "m2", "z", usage(1, 2, 0.0))
        total = store.llm_usage()
    assert (total.requests, total.prompt_tokens, total.completion_tokens) == (3, 301, 32)
    assert total.cost_usd == pytest.approx(0.75)
    assert total.by_model["m1"] == LlmUsage(2, 300, 30, 0.75)
    assert total.by_model["m2"] == LlmUsage(1, 1, 2, 0.0)
    assert total.to_dict()["by_model"]["m1"] == {"requests": 2, "prompt_tokens": 300,
                                                 "completion_tokens": 30, "cost_usd": 0.75}


def test_a_second_reply_under_one_key_keeps_the_first_text_and_counts_its_cost(tmp_path):
    with RunStore.create(tmp_path / "run.sqlite", {}) as store:
        store.put_llm_response("k", "m", "first", usage(10, 1, 0.1))
        store.put_llm_response("k", "m", "second", usage(10, 1, 0.1))
        assert store.get_llm_response("k") == "first"
        assert (store.llm_usage().requests, store.llm_usage().cost_usd) == (2, pytest.approx(0.2))


@pytest.mark.parametrize("bad, message", [
    ({"prompt_tokens": -1, "completion_tokens": 0, "cost_usd": 0.0}, "prompt_tokens"),
    ({"prompt_tokens": 1.5, "completion_tokens": 0, "cost_usd": 0.0}, "prompt_tokens"),
    ({"prompt_tokens": 1, "completion_tokens": 0, "cost_usd": float("nan")}, "cost_usd"),
    ({"prompt_tokens": 1, "completion_tokens": 0, "cost_usd": -0.5}, "cost_usd"),
])
def test_bad_usage_is_refused_and_nothing_is_stored(tmp_path, bad, message):
    with RunStore.create(tmp_path / "run.sqlite", {}) as store:
        with pytest.raises(ValueError, match=message):
            store.put_llm_response("k", "m", "text", bad)
        assert store.get_llm_response("k") is None


def test_a_reader_cannot_store_replies(tmp_path):
    path = tmp_path / "run.sqlite"
    RunStore.create(path, {}).close()
    with RunStore.open(path, readonly=True) as reader:
        with pytest.raises(StoreError, match="read-only"):
            reader.put_llm_response("k", "m", "text", usage(1, 1, 0.0))


def make_version_1_store(path):
    """A store as kevo with schema version 1 wrote it: no llm_responses (nor profiles) table."""
    with RunStore.create(path, {"search": {"seed": 3}}) as store:
        store.add_individual(Individual(None, "x = 1", source_hash("x = 1"), generation=0, island=0,
                                        operator="seed", parents=[], params={}))
    conn = sqlite3.connect(path)
    with conn:
        conn.execute("DROP TABLE llm_responses")
        conn.execute("DROP TABLE profiles")
        conn.execute("UPDATE meta SET value = '1' WHERE key = 'schema_version'")
    conn.close()


def test_an_older_store_is_read_as_it_is_and_migrated_when_opened_for_writing(tmp_path):
    path = tmp_path / "run.sqlite"
    make_version_1_store(path)
    with RunStore.open(path, readonly=True) as reader:  # e.g. kevo report on an old run
        assert reader.schema_version == 1 and reader.count() == 1
        assert reader.llm_usage() == LlmUsage() and reader.get_llm_response("k") is None
    with RunStore.open(path) as store:  # e.g. kevo resume
        assert store.schema_version == SCHEMA_VERSION
        assert store.config() == {"search": {"seed": 3}} and store.individuals()[0].source == "x = 1"
        store.put_llm_response("k", "m", "text", usage(5, 5, 0.5))
    conn = sqlite3.connect(path)
    version = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()[0]
    indices = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'index'")}
    conn.close()
    assert version == str(SCHEMA_VERSION) and "llm_responses_model" in indices
    with RunStore.open(path) as again:  # a second open finds nothing left to migrate
        assert again.get_llm_response("k") == "text" and again.llm_usage().cost_usd == 0.5
