"""LLM mutation, crossover and seeding through litellm's real HTTP path, against a local replay server.

Every request goes to ``tests/llm_replay_server.py`` on 127.0.0.1; a connection
anywhere else fails the test. Each recorded reply (whole file, fenced code,
edits, edits that do not apply, prose, code that does not parse, a wrong
kernel) and each failure (timeout, rate limit, rejected key) must end as a
clear result, and a resumed run must not pay for a reply twice.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
import logging
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fitness import screen
from operators.llm import (
    BUDGET_EXHAUSTED,
    LLM_CROSSOVER,
    LLM_MUTATION,
    LLM_SEED,
    Focus,
    LlmProposer,
    LlmSettings,
    LlmSetupError,
    ParentInfo,
    Price,
    ProblemContext,
    ReasoningEffort,
    Request,
    cache_key,
    redact,
    seed_requests,
)
from operators.llm import client
from platforms.guidance import guidance
from population_store import RunStore
from tests.conftest import TEST_API_KEY as KEY
from tests.llm_replay_server import Reply, ReplayServer

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = (ROOT / "problems" / "elementwise" / "reference.py").read_text()
SEED = (ROOT / "problems" / "elementwise" / "seed.py").read_text()
MODEL = "openai/gpt-4o-mini"  # a model litellm has a price for; served here by the replay server
RESULT = {"status": "accepted", "runtime_ms": 0.5, "runtime_spread": 0.02, "reference_ms": 0.6,
          "max_abs_diff": 2.4e-7, "reason": ""}


pytestmark = pytest.mark.usefixtures("offline_llm")


@pytest.fixture
def server():
    with ReplayServer() as replay:
        yield replay


def settings(server: ReplayServer, **changes) -> LlmSettings:
    values = dict(models={MODEL: 1.0}, api_base=server.base_url, timeout_s=5.0, retries=2, backoff_s=0.01,
                  concurrency=4)
    return LlmSettings(**{**values, **changes})


def context(**changes) -> ProblemContext:
    values = dict(reference_source=REFERENCE, cutoff=1e-5, guidance=guidance("rocm"), screen=screen,
                  shapes={"batch_size": 4, "dim": 100})
    return ProblemContext(**{**values, **changes})


def parent(case: str, id_: int = 1, **changes) -> ParentInfo:
    """The elementwise seed, marked so that the replay server answers with the recorded reply ``case``."""
    return ParentInfo(id_, SEED + f"# replay-case: {case}\n", RESULT, **changes)


def mutation(case: str, sample: int = 0, focus: Focus = Focus.GENERAL) -> Request:
    return Request(LLM_MUTATION, (parent(case, sample + 1),), focus, sample)


def test_every_kind_of_reply_ends_as_a_clear_result(server):
    cases = ["fenced", "whole_file", "edits", "edits_bad", "prose", "syntax_error", "wrong_kernel",
             "forbidden", "truncated", "limited"]
    for case in cases[:-1]:
        server.add_case(case, Reply.fixture(case))
    server.add_case("limited", Reply.rate_limited(), Reply.rate_limited(), Reply.rate_limited())
    with LlmProposer(settings(server, concurrency=10), None, context()) as proposer:
        proposals = proposer.propose([mutation(c, i) for i, c in enumerate(cases)])
    outcome = {c: (p.form, p.source is not None, p.reason) for c, p in zip(cases, proposals)}
    assert outcome == {
        "fenced": ("whole_file", True, ""),
        "whole_file": ("whole_file", True, ""),
        "edits": ("edits", True, ""),
        "edits_bad": ("edits", False, "edit 2 did not apply: its SEARCH text is not in the parent"),
        "prose": (None, False, "the reply held no code"),
        "syntax_error": ("whole_file", False, "refused by the screen: compile_error: does not parse: "
                                              "line 9: '(' was never closed"),
        "wrong_kernel": ("whole_file", True, ""),  # right for the screen; the evaluator finds it wrong
        "forbidden": ("whole_file", False, "refused by the screen: forbidden: line 1: imports os, which "
                                           "candidates may not use (and 1 more)"),
        "truncated": ("whole_file", False, "refused by the screen: compile_error: does not parse: line 23: "
                                           "'(' was never closed (the reply was cut off at llm.max_tokens "
                                           "= 8192)"),
        "limited": (None, False, "rate limited after 2 retries"),
    }
    assert [p.parents for p in proposals] == [(i + 1,) for i in range(len(cases))]
    assert all(p.operator == LLM_MUTATION and p.model == MODEL for p in proposals)
    fenced, limited = proposals[0], proposals[-1]
    assert (fenced.usage.prompt_tokens, fenced.usage.completion_tokens) == (2412, 538)
    assert fenced.usage.cost_usd == pytest.approx((2412 * 0.15 + 538 * 0.6) / 1e6)  # litellm's gpt-4o-mini price
    assert limited.usage.cost_usd == 0 and limited.usage.prompt_tokens == 0
    assert len(server.requests_for("limited")) == 3  # the first try and two retries
    assert "x * tl.sigmoid(y)" in proposals[2].source and "BLOCK_SIZE=4096" in proposals[2].source


def test_a_request_that_times_out_is_a_result_and_the_next_one_runs(server):
    server.add_case("slow", Reply.fixture("fenced", delay_s=3.0))
    server.add_case("later", Reply.fixture("whole_file"))
    with LlmProposer(settings(server, timeout_s=1.0), None, context()) as proposer:
        (late,) = proposer.propose([mutation("slow")])
        (after,) = proposer.propose([mutation("later", 1)])
    assert (late.source, late.reason, late.usage.cost_usd) == (None, "request timed out after 1 s", 0.0)
    assert after.source is not None and after.reason == ""
    assert len(server.requests_for("slow")) == 1  # a timeout is not retried


def test_a_rate_limit_that_clears_is_retried_to_a_reply(server):
    server.add_case("clears", Reply.rate_limited(), Reply.fixture("whole_file"))
    with LlmProposer(settings(server), None, context()) as proposer:
        (proposal,) = proposer.propose([mutation("clears")])
    assert proposal.source is not None and proposal.reason == ""
    assert len(server.requests_for("clears")) == 2


def test_the_prompt_carries_problem_cutoff_platform_parent_profile_and_focus(server):
    server.add_case("look", Reply.fixture("fenced"))
    profiled = parent("look", profile="dram throughput 91% of peak; achieved occupancy 48%",
                      bottleneck="memory_bound")
    with LlmProposer(settings(server, temperature=0.3, max_tokens=2048), None, context()) as proposer:
        proposer.propose([Request(LLM_MUTATION, (profiled,), Focus.MEMORY, 0)])
    (body,) = server.requests
    system, user = (m["content"] for m in body["messages"])
    assert body["model"] == "gpt-4o-mini" and body["temperature"] == 0.3 and body["max_tokens"] == 2048
    assert "class ModelNew(torch.nn.Module)" in system and "It imports only `torch`" in system
    # the reference, less its own MAX_ABS_DIFF (and the comment above it): one cutoff, the run's, stated once
    own_cutoff = REFERENCE.index("# Cutoff on max |out - ref|")
    assert REFERENCE[:own_cutoff].strip() in user and "class Model(nn.Module)" in user and SEED.strip() in user
    assert "MAX_ABS_DIFF" not in user and user.count("max |out - ref| <= 1e-05") == 1
    assert "batch_size = 4, dim = 100" in user
    assert "A wavefront is 64 threads" in user and "device='cuda'" in user  # the ROCm guidance
    assert "accepted; runtime 0.5 ms (spread 2%); reference 0.6 ms; speed-up 1.20x" in user
    assert "Profiler's bottleneck class: memory-bound" in user and "dram throughput 91% of peak" in user
    assert "Focus: memory traffic." in user
    assert "<<<<<<< SEARCH" in user and "```python" in user


def test_a_crossover_shows_both_parents_and_edits_apply_to_the_first(server):
    server.add_case("cross", Reply.fixture("edits"))
    other = ParentInfo(2, SEED.replace("BLOCK_SIZE=1024", "BLOCK_SIZE=2048"), {"status": "wrong",
                       "max_abs_diff": 3.45, "reason": "max |out - ref| = 3.45 > cutoff 1e-05"})
    with LlmProposer(settings(server), None, context()) as proposer:
        (proposal,) = proposer.propose([Request(LLM_CROSSOVER, (parent("cross", 1), other), Focus.GENERAL, 0)])
    user = server.requests[0]["messages"][1]["content"]
    assert "### Kernel A" in user and "### Kernel B" in user and "BLOCK_SIZE=2048" in user
    assert "wrong; max |out - ref| 3.45; reason: max |out - ref| = 3.45 > cutoff 1e-05" in user
    assert proposal.operator == LLM_CROSSOVER and proposal.parents == (1, 2) and proposal.form == "edits"
    assert proposal.source.endswith("# replay-case: cross\n")  # built on kernel A's text


def test_a_resumed_run_pays_for_no_reply_twice(server, tmp_path):
    server.add_case("fenced", Reply.fixture("fenced"), sticky=True)
    server.add_case("edits", Reply.fixture("edits"), sticky=True)
    server.add_case("prose", Reply.fixture("prose"), sticky=True)
    requests = [mutation("fenced", 0), mutation("edits", 1), mutation("prose", 2)]
    path = tmp_path / "run.sqlite"
    with RunStore.create(path, {}) as store, LlmProposer(settings(server), store, context()) as proposer:
        first = proposer.propose(requests)
        spent = proposer.spent_usd
    assert len(server.requests) == 3 and spent > 0

    with RunStore.open(path) as store:  # kevo resume
        assert store.llm_usage().requests == 3 and store.llm_usage().cost_usd == pytest.approx(spent)
        with LlmProposer(settings(server), store, context(), spent_usd=store.llm_usage().cost_usd) as proposer:
            again = proposer.propose(requests)
            assert len(server.requests) == 3  # nothing new was asked
            assert [(p.source, p.reason, p.form) for p in again] == [(p.source, p.reason, p.form) for p in first]
            assert all(p.usage.cached and p.usage.cost_usd == 0 for p in again)
            (fresh,) = proposer.propose([mutation("fenced", 3)])  # a new sample of the same prompt
            assert len(server.requests) == 4 and not fresh.usage.cached
        assert store.llm_usage().requests == 4


def test_the_same_request_twice_in_a_batch_is_asked_once(server, tmp_path):
    server.add_case("twice", Reply.fixture("whole_file"), sticky=True)
    with RunStore.create(tmp_path / "run.sqlite", {}) as store:
        with LlmProposer(settings(server), store, context()) as proposer:
            one, two = proposer.propose([mutation("twice", 5), mutation("twice", 5)])
        assert len(server.requests) == 1 and one.source == two.source is not None
        assert (one.usage.cached, two.usage.cached) == (False, True)
        assert store.llm_usage().requests == 1


def test_the_cache_key_changes_with_model_sample_and_messages():
    base = LlmSettings({MODEL: 1.0})
    messages = [{"role": "user", "content": "hi"}]
    key = cache_key(MODEL, messages, 0, base)
    assert key == cache_key(MODEL, [dict(m) for m in messages], 0, LlmSettings({MODEL: 1.0}))
    others = {cache_key("openai/gpt-4o", messages, 0, base), cache_key(MODEL, messages, 1, base),
              cache_key(MODEL, [{"role": "user", "content": "hi!"}], 0, base),
              cache_key(MODEL, messages, 0, LlmSettings({MODEL: 1.0}, temperature=0.1))}
    assert key not in others and len(others) == 4


def test_cache_keys_of_runs_from_before_reasoning_effort_still_match():
    messages = [{"role": "user", "content": "hi"}]
    before = {"version": 1, "model": MODEL, "messages": messages, "sample": 3, "temperature": 0.8,
              "max_tokens": 8192}  # what a stored run's settings gave
    old = hashlib.sha256(json.dumps(before, sort_keys=True).encode()).hexdigest()
    assert cache_key(MODEL, messages, 3, LlmSettings({MODEL: 1.0}, max_tokens=8192)) == old
    thinking = LlmSettings({MODEL: 1.0}, max_tokens=8192, reasoning_effort=ReasoningEffort.HIGH)
    assert cache_key(MODEL, messages, 3, thinking) != old


def replying(content: str, finish_reason: str = "stop") -> Reply:
    """The recorded fenced reply, with other content."""
    body = copy.deepcopy(Reply.fixture("fenced").body)
    body["choices"][0]["message"]["content"] = content
    body["choices"][0]["finish_reason"] = finish_reason
    return Reply(body)


def test_the_inline_reasoning_of_a_local_model_is_not_taken_for_its_answer(server):
    answer = Reply.fixture("fenced").body["choices"][0]["message"]["content"]
    draft = "<think>\nMaybe just:\n```python\nclass ModelNew:\n    pass\n```\nNo, fuse the gate.\n</think>\n"
    server.add_case("think", replying(draft + answer))
    server.add_case("fenced", Reply.fixture("fenced"))
    server.add_case("cut", replying("<think>\nThe kernel reads y twice, so", finish_reason="length"))
    with LlmProposer(settings(server), None, context()) as proposer:
        thought, plain, cut = proposer.propose([mutation("think", 0), mutation("fenced", 1), mutation("cut", 2)])
    assert thought.source == plain.source.replace("case: fenced", "case: think") and thought.reason == ""
    assert (cut.source, cut.reason) == (None, "the reply held only reasoning (a <think> block), no answer "
                                              "(the reply was cut off at llm.max_tokens = 8192)")


def test_reasoning_effort_and_the_reply_length_reach_the_provider(server, caplog):
    server.add_case("ask", Reply.fixture("fenced"), sticky=True)
    asks = [("openai/o4-mini", "high"), ("hosted_vllm/Qwen/Qwen3-32B", "low"), (MODEL, None)]
    for sample, (model, effort) in enumerate(asks):
        with LlmProposer(settings(server, models={model: 1.0}, reasoning_effort=effort), None, context()) as proposer:
            (proposal,) = proposer.propose([mutation("ask", sample)])
        assert proposal.source is not None
    o4, qwen, plain = server.requests
    # o4-mini: litellm's table knows it reasons, and it takes no temperature
    assert (o4["reasoning_effort"], o4["max_completion_tokens"], "temperature" in o4) == ("high", 32768, False)
    # a local model reasons when asked to, and keeps its temperature
    assert (qwen["reasoning_effort"], qwen["max_tokens"], qwen["temperature"]) == ("low", 32768, 0.8)
    assert "reasoning_effort" not in plain and plain["max_tokens"] == 8192

    with caplog.at_level(logging.WARNING, logger="operators.llm.client"):
        with LlmProposer(settings(server, reasoning_effort="medium"), None, context()) as proposer:
            proposer.propose([mutation("ask", 9)])
    assert "reasoning_effort" not in server.requests[-1]
    assert any("llm.reasoning_effort is medium, but litellm knows openai/gpt-4o-mini as a model that takes no "
               "reasoning effort: it is not sent" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("model, effort, longest", [
    ("openai/gpt-4o", None, 8192),
    ("openai/o3", None, 32768),  # litellm knows it reasons
    ("anthropic/claude-opus-4-1", None, 32000),  # ... and that it writes at most 32000 tokens
    ("ollama_chat/qwen3:32b", None, 8192),  # a local model litellm cannot tell: set llm.max_tokens
    ("ollama_chat/qwen3:32b", "high", 32768),
    ("openai/o3", "none", 32768),
])
def test_the_longest_reply_follows_the_kind_of_model_unless_set(model, effort, longest):
    assert client.max_tokens_for(model, LlmSettings({model: 1.0}, reasoning_effort=effort)) == longest
    assert client.max_tokens_for(model, LlmSettings({model: 1.0}, max_tokens=1000, reasoning_effort=effort)) == 1000


def test_claude_asked_to_think_is_sent_no_temperature():
    messages = [{"role": "user", "content": "hi"}]
    model = "anthropic/claude-sonnet-4-5"
    thinking = client._request_kwargs(model, messages, LlmSettings({model: 1.0}, reasoning_effort="medium"))
    assert thinking["reasoning_effort"] == "medium" and "temperature" not in thinking
    plain = client._request_kwargs(model, messages, LlmSettings({model: 1.0}))
    assert "reasoning_effort" not in plain and plain["temperature"] == 0.8


def test_the_budget_stops_requests_cleanly_and_holds_on_resume(server, tmp_path, caplog):
    server.add_case("paid", Reply.fixture("whole_file"), sticky=True)
    budget = settings(server, concurrency=1, max_cost_usd=0.001)  # about two replies' worth
    path = tmp_path / "run.sqlite"
    with RunStore.create(path, {}) as store, LlmProposer(budget, store, context()) as proposer:
        with caplog.at_level(logging.WARNING, logger="operators.llm.proposer"):
            proposals = proposer.propose([mutation("paid", i) for i in range(4)])
        assert [p.source is not None for p in proposals] == [True, True, False, False]
        assert [p.reason for p in proposals[2:]] == [BUDGET_EXHAUSTED] * 2
        assert proposer.exhausted and len(server.requests) == 2
        assert sum("LLM budget reached" in r.getMessage() for r in caplog.records) == 1
        assert proposer.propose([mutation("paid", 9)])[0].reason == BUDGET_EXHAUSTED
        assert len(server.requests) == 2

    with RunStore.open(path) as store:
        with LlmProposer(budget, store, context(), spent_usd=store.llm_usage().cost_usd) as proposer:
            assert proposer.exhausted
            cached, new = proposer.propose([mutation("paid", 0), mutation("paid", 10)])
        assert cached.source is not None and cached.usage.cached  # what was paid for is still free
        assert new.reason == BUDGET_EXHAUSTED and len(server.requests) == 2


def test_a_model_without_a_price_counts_zero_and_says_so_once_unless_priced(server, caplog):
    server.add_case("unpriced", Reply.fixture("unpriced"), sticky=True)
    local = settings(server, models={"openai/test-model": 1.0}, max_cost_usd=1.0)
    with caplog.at_level(logging.WARNING, logger="operators.llm.proposer"):
        with LlmProposer(local, None, context()) as proposer:
            proposals = proposer.propose([mutation("unpriced", i) for i in range(2)])
    assert [p.usage.cost_usd for p in proposals] == [0.0, 0.0] and proposals[0].source is not None
    assert sum("no price for openai/test-model" in r.getMessage() for r in caplog.records) == 1

    priced = settings(server, models={"openai/test-model": 1.0}, prices={"openai/test-model": Price(1.0, 10.0)})
    with LlmProposer(priced, None, context()) as proposer:
        (proposal,) = proposer.propose([mutation("unpriced", 7)])
    assert proposal.usage.cost_usd == pytest.approx((2398 * 1.0 + 402 * 10.0) / 1e6)


def test_requests_run_concurrently_within_the_limit(server):
    server.add_case("slowish", Reply.fixture("whole_file", delay_s=0.2), sticky=True)
    with LlmProposer(settings(server, concurrency=2), None, context()) as proposer:
        proposer.propose([mutation("slowish", i) for i in range(6)])
    assert server.max_in_flight == 2
    server.max_in_flight = 0
    with LlmProposer(settings(server, concurrency=6), None, context()) as proposer:
        proposer.propose([mutation("slowish", i) for i in range(10, 16)])
    assert server.max_in_flight >= 3


def test_models_are_drawn_by_weight_and_drawn_again_the_same_on_resume(server):
    server.add_case("any", Reply.fixture("whole_file"), sticky=True)
    weighted = settings(server, models={MODEL: 3.0, "openai/test-model": 1.0}, concurrency=16)
    requests = [mutation("any", i) for i in range(40)]
    with LlmProposer(weighted, None, context()) as proposer:
        first = [p.model for p in proposer.propose(requests)]
    with LlmProposer(weighted, None, context()) as proposer:
        assert [p.model for p in proposer.propose(requests)] == first
    share = first.count(MODEL) / len(first)
    assert 0.55 < share < 0.95 and "openai/test-model" in first
    assert {r["model"] for r in server.requests} == {"gpt-4o-mini", "test-model"}


def test_a_request_started_returns_at_once_and_its_proposal_is_taken_when_it_lands(server, tmp_path):
    server.add_case("later", Reply.fixture("fenced", delay_s=0.5), sticky=True)
    with RunStore.create(tmp_path / "run.sqlite", {}) as store:
        with LlmProposer(settings(server), store, context()) as proposer:
            began = time.monotonic()
            tickets = [proposer.start(mutation("later", i)) for i in range(3)]
            assert time.monotonic() - began < 0.4 and not any(t.done for t in tickets)  # nothing waited for
            assert proposer.wait(tickets, timeout=0.01) == []
            done = proposer.wait(tickets)  # for the first to land
            assert done and all(t.done for t in done)
            proposals = [proposer.finish(t) for t in tickets]
            assert all(p.source is not None and p.explanation for p in proposals)
            assert proposer.finish(tickets[0]) is proposals[0]
            again = proposer.start(mutation("later", 0))  # answered from the cache, at once
            assert again.done and proposer.finish(again).usage.cached
        assert store.llm_usage().requests == 3


def test_replies_that_landed_and_were_not_taken_are_kept_when_the_proposer_closes(server, tmp_path):
    server.add_case("kept", Reply.fixture("whole_file"), sticky=True)
    server.add_case("lost", Reply.fixture("whole_file", delay_s=3.0), sticky=True)
    with RunStore.create(tmp_path / "run.sqlite", {}) as store:
        with LlmProposer(settings(server), store, context()) as proposer:
            landed = proposer.start(mutation("kept", 0))
            proposer.start(mutation("lost", 1))
            proposer.wait([landed])
        # the run stopped here: the reply in hand is stored, the one still on the way is given up
        assert store.llm_usage().requests == 1 and store.get_llm_response(landed.key) is not None


def test_a_request_goes_to_the_model_it_names(server):
    server.add_case("named", Reply.fixture("whole_file"), sticky=True)
    both = settings(server, models={MODEL: 100.0, "openai/test-model": 1.0})
    with LlmProposer(both, None, context()) as proposer:
        named = [dataclasses.replace(mutation("named", i), model="openai/test-model") for i in range(4)]
        assert {p.model for p in proposer.propose(named)} == {"openai/test-model"}
        with pytest.raises(ValueError, match="not one of"):
            proposer.start(dataclasses.replace(mutation("named", 9), model="openai/unknown"))
    assert {r["model"] for r in server.requests} == {"test-model"}


def test_a_rejected_key_stops_with_a_clear_error_that_never_shows_the_key(server, caplog):
    server.add_case("badkey", Reply.fixture("invalid_key", status=401))
    with caplog.at_level(logging.DEBUG):
        with LlmProposer(settings(server), None, context()) as proposer:
            with pytest.raises(LlmSetupError) as caught:
                proposer.propose([mutation("badkey")])
    message = str(caught.value)
    assert message.startswith("llm model 'openai/gpt-4o-mini': Incorrect API key provided: [redacted]")
    assert KEY not in message and all(KEY not in r.getMessage() for r in caplog.records)


def test_a_missing_key_or_an_unknown_provider_is_refused_before_any_request(server, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY")
    with pytest.raises(LlmSetupError, match="needs OPENAI_API_KEY in the environment"):
        LlmProposer(settings(server), None, context())
    with pytest.raises(LlmSetupError, match="api_key_env is KEVO_TEST_NO_SUCH_KEY, but that environment"):
        LlmProposer(settings(server, api_key_env="KEVO_TEST_NO_SUCH_KEY"), None, context())
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    with pytest.raises(LlmSetupError, match="cannot tell its provider; write it as provider/model"):
        LlmProposer(settings(server, models={"no-such-model-xyz": 1.0}), None, context())
    monkeypatch.delenv("OLLAMA_API_BASE", raising=False)
    with pytest.raises(LlmSetupError, match="'ollama_chat/qwen2.5-coder' needs a server address: set llm.api_base"):
        LlmProposer(settings(server, models={"ollama_chat/qwen2.5-coder": 1.0}, api_base=None), None, context())
    LlmProposer(settings(server, models={"ollama_chat/qwen2.5-coder": 1.0}), None, context()).close()
    assert server.requests == []


def test_a_key_from_api_key_env_reaches_the_server_and_nothing_else(server, monkeypatch, tmp_path, caplog):
    secret = "kevo-local-secret-4242"
    monkeypatch.setenv("KEVO_TEST_LOCAL_API_KEY", secret)
    server.add_case("auth", Reply.fixture("fenced"))
    path = tmp_path / "run.sqlite"
    with caplog.at_level(logging.DEBUG):
        with RunStore.create(path, {}) as store:
            with LlmProposer(settings(server, api_key_env="KEVO_TEST_LOCAL_API_KEY"), store, context()) as proposer:
                (proposal,) = proposer.propose([mutation("auth")])
    assert server.headers[0]["authorization"] == f"Bearer {secret}"
    assert secret not in proposal.source
    assert all(secret.encode() not in p.read_bytes() for p in tmp_path.iterdir())
    assert all(secret not in r.getMessage() for r in caplog.records)


def test_llm_seeds_from_the_reference_keep_only_what_the_evaluator_accepts(server, evaluators):
    # No marker can tell seed prompts apart, so the replies come from a queue, in whatever order.
    server.enqueue(Reply.fixture("seed_good"), Reply.fixture("seed_wrong"), Reply.fixture("prose"))
    with LlmProposer(settings(server), None, context(guidance=guidance("cpu"))) as proposer:
        proposals = proposer.propose(seed_requests(3))
    assert all(p.operator == LLM_SEED and p.parents == () for p in proposals)
    assert "<<<<<<< SEARCH" not in server.requests[0]["messages"][1]["content"]  # a seed is a whole file
    assert sorted(p.reason for p in proposals) == ["", "", "the reply held no code"]
    evaluator = evaluators.get("elementwise")
    statuses = sorted(evaluator.evaluate(p.source).status.value for p in proposals if p.source is not None)
    assert statuses == ["accepted", "wrong"]


def test_importing_kevo_does_not_import_litellm():
    code = ("import sys, operators, operators.llm, evolve.config, population_store; "
            "sys.exit('litellm' in sys.modules or 'openai' in sys.modules)")
    assert subprocess.run([sys.executable, "-c", code], cwd=ROOT).returncode == 0


def test_redact_removes_secret_values_of_the_environment_and_key_shaped_strings(monkeypatch):
    monkeypatch.setenv("SOME_SERVICE_TOKEN", "tok-very-secret-value")
    text = redact(f"failed for tok-very-secret-value with {KEY}, sk-ant-api03-abcdefghijk and Bearer abc.def.ghi123")
    assert text == "failed for [redacted] with [redacted], [redacted] and [redacted]"
    ordinary = "max |out - ref| = 3.45 > cutoff 1e-05 at key 'k'"
    assert redact(ordinary) == ordinary
