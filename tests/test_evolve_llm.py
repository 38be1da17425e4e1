"""The LLM operators inside the search: children, failures, resume, budget, and first kernels.

Every request goes through litellm's real HTTP path to a stand-in LLM on
127.0.0.1 (``tests/llm_replay_server.py``) whose answer is a function of the
prompt: the same question gets the same kernel, so a run can be compared with
a resumed one row by row. A connection anywhere else fails the test.
"""

from __future__ import annotations

import contextlib
import json
import re
import sqlite3

import pytest

from evolve.config import config_from_dict
from evolve.dispatch.base import InProcessDispatcher
from evolve.search.loop import STATE_KEY, Search, SearchError, run_search
from evolve.report import build_report
from evolve.session import (
    SETUP_KEY,
    RunError,
    make_evaluator,
    make_proposer,
    resume_run,
    search_space,
    start_run,
)
from evolve.search.variation import FAILED_EVENT
from operators import BUDGET_EXHAUSTED, LLM_CROSSOVER, LLM_MUTATION, LLM_SEED, MUTATION
from population_store import RunStore
from tests.conftest import PROBLEMS, SMALL_SHAPES, offline
from tests.llm_replay_server import FIXTURES, Reply, ReplayServer
from tests.test_evolve import Crash, CrashingDispatcher, FakeEvaluator

MODEL = "openai/gpt-4o-mini"  # litellm has its price; served here by the stand-in
REFERENCE = PROBLEMS / "elementwise" / "reference.py"
SEED = PROBLEMS / "elementwise" / "seed.py"
WHERE = {"cutoff": 1e-5, "platform": "cpu"}

# What the stand-in LLM writes: the gated product with tl.sigmoid, at the sizes it picks.
KERNEL = '''\
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def gated_mul_kernel(x_ptr, y_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(0)
    offsets = pid.to(tl.int64) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask, other=0.0)
    y = tl.load(y_ptr + offsets, mask=mask, other=0.0)
    tl.store(out_ptr + offsets, {expression}, mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, y):
        out = torch.empty_like(x)
        n_elements = x.numel()
        grid = lambda meta: (triton.cdiv(n_elements, meta["BLOCK_SIZE"]),)
        gated_mul_kernel[grid](x, y, out, n_elements, BLOCK_SIZE={block}, num_warps={warps})
        return out
'''
PROSE = "I would fuse the two loads and raise the block size; that should help."
# Focus (the first word of its paragraph) -> what the stand-in changes: (block factor, warps factor).
CHANGES = {"memory": (2, 1), "arithmetic": (1, 2), "tiling": (0.5, 1), "occupancy": (1, 0.5), "launch": (4, 1),
           "whatever": (2, 2)}


def written(block: int, warps: int, expression: str = "x * tl.sigmoid(y)") -> str:
    return "Here is the kernel.\n\n```python\n" + KERNEL.format(block=block, warps=warps,
                                                               expression=expression) + "```\n"


class StandInLlm(ReplayServer):
    """An OpenAI-compatible server whose reply depends on the prompt alone.

    A mutation or crossover gets the parent kernel rewritten with sizes that
    follow from the parent's and the focus; the seed file itself gets prose
    (no code) when ``prose_for_seed``. A request for a first kernel gets a
    correct kernel (focus general), a wrong one (memory), or prose.
    """

    def __init__(self, prose_for_seed: bool = False) -> None:
        super().__init__()
        self.prose_for_seed = prose_for_seed

    def _next(self, body, headers):
        self.record(body, headers)
        return reply(self.answer(body["messages"][-1]["content"]))

    def answer(self, prompt: str) -> str:
        focus = re.search(r"^Focus: (\w+)", prompt, re.MULTILINE).group(1)
        if "Write a first, correct Triton implementation" in prompt:
            return {"whatever": written(256, 2), "memory": written(256, 2, "x * y")}.get(focus, PROSE)
        parent = re.split(r"## The kernel to improve|### Kernel A", prompt, maxsplit=1)[1]
        block = int(re.search(r"BLOCK_SIZE=(\d+)", parent).group(1))
        warps = int(re.search(r"num_warps=(\d+)", parent).group(1))
        if self.prose_for_seed and "tl.exp(-y)" in parent and (block, warps) == (1024, 4):  # the seed file
            return PROSE
        grow_block, grow_warps = CHANGES[focus]
        return written(min(8192, max(64, int(block * grow_block))), min(8, max(1, int(warps * grow_warps))))


def reply(content: str) -> Reply:
    body = json.loads((FIXTURES / "whole_file.json").read_text(encoding="utf-8"))
    body["choices"][0]["message"]["content"] = content
    body["usage"] = {"prompt_tokens": 2000, "completion_tokens": 400, "total_tokens": 2400}
    return Reply(body)


#: What one reply costs at litellm's gpt-4o-mini price (USD 0.15 / 0.60 per million tokens).
REPLY_USD = (2000 * 0.15 + 400 * 0.6) / 1e6


pytestmark = pytest.mark.usefixtures("offline_llm")


def config(server: ReplayServer, weights: dict, seeds: bool = True, llm: dict | None = None, **search):
    data = {"problem": {"reference": str(REFERENCE), "seeds": [str(SEED)] if seeds else [],
                        "shapes": SMALL_SHAPES["elementwise"]},
            "search": {"population_size": 4, "max_evaluations": 13, "seed": 5, **search},
            "operators": {"weights": weights},
            "llm": {"model": MODEL, "api_base": server.base_url, "timeout_s": 10, "retries": 0, "repair_turns": 0,
                    **(llm or {})},
            "platform": "cpu"}
    return config_from_dict(data, origin="test")


def write_config(tmp_path, cfg) -> str:
    path = tmp_path / "run.yaml"
    path.write_text(json.dumps(cfg.to_dict()))  # JSON is YAML
    return path


def drive(path, cfg, evaluator, crash_after: int | None = None) -> str:
    """Start or resume the run at ``path`` with a fake evaluator and the config's LLM."""
    store = RunStore.open(path) if path.exists() else RunStore.create(path, cfg.to_dict())
    dispatcher = InProcessDispatcher(evaluator) if crash_after is None else CrashingDispatcher(evaluator, crash_after)
    seeds = [SEED.read_text()]
    with store, make_proposer(cfg, store, WHERE) as proposer:
        return run_search(Search(store, dispatcher, cfg, seeds, search_space(cfg, seeds), proposer=proposer))


def rows(path):
    with RunStore.open(path, readonly=True) as store:
        return ([(i.id, i.source_hash, i.parents, i.generation, i.operator, i.status, i.runtime_ms)
                 for i in store.individuals()], store.get_state(STATE_KEY), store.events(FAILED_EVENT))


def paid_keys(path) -> tuple[int, int]:
    """(distinct reply keys, paid requests) in the run's reply cache."""
    with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as conn:
        return conn.execute("SELECT COUNT(*), SUM(requests) FROM llm_responses").fetchone()


def test_llm_children_are_evaluated_and_a_failed_proposal_is_an_event(tmp_path):
    with StandInLlm(prose_for_seed=True) as server:
        cfg = config(server, {"llm_mutation": 1.0})
        reason = start_run(write_config(tmp_path, cfg), tmp_path / "run")
        requests = server.requests
    assert reason == "max_evaluations reached (13)"  # every generation kept its size
    with RunStore.open(tmp_path / "run" / "run.sqlite", readonly=True) as store:
        individuals = store.individuals()
        failed = store.events(FAILED_EVENT)
        report = build_report(store, tmp_path / "run")
    by_id = {i.id: i for i in individuals}
    llm_children = [i for i in individuals if i.operator == LLM_MUTATION]
    assert llm_children and all(i.status == "accepted" for i in llm_children)  # the stand-in's kernels are right
    assert all(len(i.parents) == 1 and by_id[i.parents[0]].generation < i.generation for i in llm_children)
    assert all("tl.sigmoid(y)" in i.source for i in llm_children)
    # Generation 1 breeds from the seed alone, whose requests get prose: each became an event
    # and its place went to a parametric mutation of the seed.
    first = [i for i in individuals if i.generation == 1]
    assert len(first) == 4 and {i.operator for i in first} == {MUTATION}
    assert [e["data"]["reason"] for e in failed[:4]] == ["the reply held no code"] * 4
    assert all(e["data"]["operator"] == LLM_MUTATION and e["data"]["parents"] == [1] for e in failed[:4])
    # The prompt carried the parent's record and its (roofline) profile.
    prompt = requests[0]["messages"][-1]["content"]
    assert "Profiler's bottleneck class: unclassified" in prompt and "no hardware profiler on the cpu" in prompt
    assert "Evaluation: accepted; runtime" in prompt
    usage = report["llm_usage"]
    assert usage["requests"] == len(requests) and usage["cost_usd"] == pytest.approx(len(requests) * REPLY_USD)
    assert usage["by_model"][MODEL]["requests"] == len(requests)
    assert report["llm_failed_proposals"] == len(failed)
    arms = {(r["kind"], r["arm"]) for r in report["operators_by_class"]}
    assert ("operator", LLM_MUTATION) in arms and ("operator", MUTATION) in arms
    assert any(kind == "focus" for kind, _ in arms)


WEIGHTS = {"parametric_mutation": 0.5, "parametric_crossover": 0.3, "llm_mutation": 1.0, "llm_crossover": 0.5}


@pytest.fixture(scope="module")
def whole_llm_run(tmp_path_factory):
    path = tmp_path_factory.mktemp("llm_whole") / "run.sqlite"
    with offline(), StandInLlm() as server:
        reason = drive(path, config(server, WEIGHTS, max_evaluations=30, seed=1), FakeEvaluator())
        asked = len(server.requests)
    return reason, rows(path), asked


@pytest.mark.parametrize("crash_after", [6, 15])
def test_a_killed_run_resumes_exactly_and_asks_the_llm_again_only_what_was_in_flight(tmp_path, whole_llm_run,
                                                                                    crash_after):
    reason, (whole, whole_state, _), asked = whole_llm_run
    assert reason == "max_evaluations reached (30)"
    assert {r[4] for r in whole} >= {LLM_MUTATION, LLM_CROSSOVER, MUTATION}
    path = tmp_path / "run.sqlite"
    evaluator = FakeEvaluator()
    with StandInLlm() as server:
        cfg = config(server, WEIGHTS, max_evaluations=30, seed=1)
        with pytest.raises(Crash):
            drive(path, cfg, evaluator, crash_after=crash_after)
        before = len(server.requests)
        stored, paid = paid_keys(path)
        # every reply that landed was stored; only the requests still in flight when the run died were lost
        assert stored == paid and before - cfg.llm.concurrency <= stored <= before
        assert drive(path, cfg, evaluator) == reason
        after = len(server.requests)
    resumed, state, _ = rows(path)
    assert resumed == whole  # the same children (LLM ones too), lineage and verdicts
    assert state["selector"] == whole_state["selector"] and state["llm_samples"] == whole_state["llm_samples"]
    # the replayed questions were the same (same keys) and answered from the cache, but for those in flight
    assert after - asked == before - stored
    assert paid_keys(path) == (asked, asked)  # no stored reply was paid for twice
    assert len(evaluator.evaluated) == len(set(evaluator.evaluated)) == 30


def test_the_budget_stops_llm_proposals_and_the_search_goes_on(tmp_path, caplog):
    path = tmp_path / "run.sqlite"
    with StandInLlm() as server:
        # about two replies' worth; one request at a time, so exactly two are paid
        cfg = config(server, {"llm_mutation": 1.0}, llm={"max_cost_usd": 1.5 * REPLY_USD, "concurrency": 1},
                     max_evaluations=21)
        assert drive(path, cfg, FakeEvaluator()) == "max_evaluations reached (21)"
        assert len(server.requests) == 2
        stored, state, failed = rows(path)
        assert state["llm_exhausted"] is True
        assert [e["data"]["reason"] for e in failed].count(BUDGET_EXHAUSTED) == 2  # the rest of generation 1
        assert all(r[4] == MUTATION for r in stored if r[3] >= 2)  # later generations: parametric only
        assert 1 <= sum(r[4] == LLM_MUTATION for r in stored) <= 2

        cfg = config(server, {"llm_mutation": 1.0}, llm={"max_cost_usd": 1.5 * REPLY_USD, "concurrency": 1},
                     max_evaluations=29)  # the same run given more evaluations: still no request
        assert drive(path, cfg, FakeEvaluator()) == "max_evaluations reached (29)"
        assert len(server.requests) == 2
    with RunStore.open(path, readonly=True) as store:
        assert store.llm_usage().cost_usd == pytest.approx(2 * REPLY_USD)


def dispatchers(evaluator_of, results: int | None = None):
    """A dispatcher factory (``start_run(dispatchers=...)``) for ``evaluator_of(config)``; it dies after ``results``."""
    @contextlib.contextmanager
    def factory(cfg):
        with contextlib.closing(evaluator_of(cfg)) as evaluator:
            dispatcher = InProcessDispatcher(evaluator) if results is None else CrashingDispatcher(evaluator, results)
            yield dispatcher, {**WHERE, "device_name": "cpu"}
    return factory


class Fake(FakeEvaluator):
    def close(self) -> None:
        pass


def test_llm_seeds_start_a_problem_without_seed_files_and_resume(tmp_path):
    with StandInLlm() as server:
        cfg = config(server, {"parametric_mutation": 1.0}, seeds=False, llm={"initial_seeds": 3})
        with pytest.raises(Crash):
            start_run(write_config(tmp_path, cfg), tmp_path / "run", dispatchers=dispatchers(make_evaluator, 5))
        assert len(server.requests) == 3  # general, memory and tiling: a good kernel, a wrong one, prose
        assert resume_run(tmp_path / "run") == "max_evaluations reached (13)"
        assert len(server.requests) == 3  # the resume asked for no first kernel again
    with RunStore.open(tmp_path / "run" / "run.sqlite", readonly=True) as store:
        individuals = store.individuals()
        setup = store.get_state(SETUP_KEY)
        failed = store.events(FAILED_EVENT)
    seeds = [i for i in individuals if i.generation == 0]
    assert [(i.operator, i.status) for i in seeds] == [(LLM_SEED, "accepted"), (LLM_SEED, "wrong")]
    assert [e["data"]["reason"] for e in failed] == ["the reply held no code"]
    # the space was resolved from the accepted first kernel, and the search bred from it
    assert setup["seeds"] == [] and 256 in setup["space"]["gated_mul_kernel.BLOCK_SIZE"]
    assert all(i.operator == MUTATION and i.parents for i in individuals if i.generation > 0)
    assert {i.parents[0] for i in individuals if i.generation == 1} == {seeds[0].id}


def test_no_accepted_llm_seed_is_a_clear_error(tmp_path):
    with StandInLlm() as server:
        cfg = config(server, {"parametric_mutation": 1.0}, seeds=False, llm={"initial_seeds": 2})
        server.answer = lambda prompt: PROSE if "Focus: whatever" in prompt else written(256, 2, "x * y")
        with pytest.raises(SearchError) as caught:
            start_run(write_config(tmp_path, cfg), tmp_path / "run")
    assert re.fullmatch(r"none of the first kernels the LLM was asked for is accepted, so there is nothing to "
                        r"evolve \(seed 1: wrong: .*; a reply gave no kernel: the reply held no code\)", str(caught.value))


def test_an_llm_that_cannot_be_used_is_one_clear_error(tmp_path, monkeypatch):
    with StandInLlm() as server:
        cfg = config(server, {"llm_mutation": 1.0})
        monkeypatch.delenv("OPENAI_API_KEY")
        with pytest.raises(RunError, match=r"^llm model 'openai/gpt-4o-mini' needs OPENAI_API_KEY in the "
                                           r"environment .*\(llm section of the config\)$"):
            start_run(write_config(tmp_path, cfg), tmp_path / "run")
        assert not (tmp_path / "run").exists()  # refused before anything was made

        monkeypatch.setenv("OPENAI_API_KEY", "sk-rejected")
        server._next = lambda body, headers: (server.record(body, headers), Reply.fixture("invalid_key", status=401))[1]
        with pytest.raises(RunError) as caught:
            start_run(write_config(tmp_path, cfg), tmp_path / "run", dispatchers=dispatchers(lambda c: Fake()))
        message = str(caught.value)
        assert message.startswith("llm model 'openai/gpt-4o-mini': Incorrect API key provided")
        assert message.endswith(f"fix it and continue with 'kevo resume {tmp_path / 'run'}'")
        assert "\n" not in message and 1 <= len(server.requests) <= 4  # one generation's batch at most


def test_naming_a_model_is_enough_to_ask_it(tmp_path):
    """docs/LLM.md's provider examples set llm.model (and a budget) and no operators.weights."""
    with StandInLlm() as server:
        data = {"problem": {"reference": str(REFERENCE), "seeds": [str(SEED)], "shapes": SMALL_SHAPES["elementwise"]},
                "search": {"population_size": 4, "max_evaluations": 9, "seed": 5},
                "llm": {"model": MODEL, "api_base": server.base_url, "max_cost_usd": 1.0, "timeout_s": 10,
                        "retries": 0},
                "platform": "cpu"}
        cfg = config_from_dict(data, origin="test")
        assert cfg.operators.weights[LLM_MUTATION] > cfg.operators.weights[MUTATION]  # what the user pays for
        path = tmp_path / "run.sqlite"
        drive(path, cfg, FakeEvaluator())
        asked = len(server.requests)
    operators = {r[4] for r in rows(path)[0]}
    assert asked > 0 and operators & {LLM_MUTATION, LLM_CROSSOVER}
    # weights of the user's own still win, and offline stays parametric
    explicit = config_from_dict({**data, "operators": {"weights": {"parametric_mutation": 1.0}}}, origin="test")
    assert set(explicit.operators.weights) == {MUTATION}
    offline_cfg = config_from_dict({**data, "llm": {"model": "offline"}}, origin="test")
    assert not any(op.needs_llm for op in offline_cfg.operators.weights)
