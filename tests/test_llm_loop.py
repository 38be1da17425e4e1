"""The LLM inside the search loop: repair turns, what a prompt shows of the run, requests that overlap
evaluation, and the credit each child brings its operator and its model.

Requests go through litellm's real HTTP path to stand-in models on 127.0.0.1
(``tests/llm_replay_server.py``); a connection anywhere else fails the test.
"""

from __future__ import annotations

import dataclasses
import json
import random
import re
import time

import pytest

from evolve.config import config_from_dict
from evolve.dispatch.base import InProcessDispatcher
from evolve.dispatch.pool import make_evaluator
from evolve.search.history import EXPLANATION_KEY, MODEL_KEY
from evolve.search.loop import STATE_KEY, Search, run_search
from evolve.search.variation import FAILED_EVENT, LLM_REPAIR
from evolve.session import make_proposer, search_space, start_run
from operators import LLM_MUTATION, MUTATION
from operators.selector import ModelChooser, improved
from population_store import RunStore
from tests.llm_replay_server import Reply, ReplayServer
from tests.test_evolve import FakeEvaluator
from tests.test_evolve_llm import (
    KERNEL,
    MODEL,
    REPLY_USD,
    SEED,
    WHERE,
    StandInLlm,
    config,
    dispatchers,
    reply,
    write_config,
    written,
)


pytestmark = pytest.mark.usefixtures("offline_llm")


def run(path, cfg, evaluator, dispatcher_cls=InProcessDispatcher) -> str:
    store = RunStore.create(path, cfg.to_dict())
    seeds = [SEED.read_text()]
    with store, make_proposer(cfg, store, WHERE) as proposer:
        return run_search(Search(store, dispatcher_cls(evaluator), cfg, seeds, search_space(cfg, seeds),
                                 proposer=proposer))


def prompts(server: ReplayServer) -> list[str]:
    return [body["messages"][-1]["content"] for body in server.requests]


# --- repair turns ----------------------------------------------------------------------

# A kernel that hard-codes the element count of the shapes it was shown: right there, wrong at any other.
BROKEN = KERNEL.format(block=256, warps=2, expression="x * tl.sigmoid(y)").replace(
    "n_elements = x.numel()", "n_elements = 400")
IDEA = "Hard-coding the element count saves a call per launch."
FIX = """The element count was hard-coded, so other shapes read past the end; it comes from the input again.

<<<<<<< SEARCH
        n_elements = 400
=======
        n_elements = x.numel()
>>>>>>> REPLACE
"""


class Fixer(ReplayServer):
    """A model that hard-codes a size, and fixes it when it is shown the verdict."""

    def _next(self, body, headers):
        self.record(body)
        prompt = body["messages"][-1]["content"]
        if "## Your last attempt, and what became of it" in prompt:
            return reply(FIX)
        return reply(f"{IDEA}\n\n```python\n{BROKEN}```\n")


def test_a_model_that_fixes_its_kernel_when_shown_the_failure_ends_with_the_fix_accepted(tmp_path):
    with Fixer() as server:
        cfg = config(server, {"llm_mutation": 1.0}, population_size=1, migrants=0, max_evaluations=3,
                     llm={"repair_turns": 2, "concurrency": 1})
        start_run(write_config(tmp_path, cfg), tmp_path / "run", dispatchers=dispatchers(make_evaluator))
        asked = prompts(server)
    with RunStore.open(tmp_path / "run" / "run.sqlite", readonly=True) as store:
        seed, attempt, fix = store.individuals()
        usage = store.llm_usage()
    assert (attempt.operator, attempt.parents) == (LLM_MUTATION, [seed.id]) and attempt.status != "accepted"
    assert "n_elements = 400" in attempt.source
    # the fix is a child of the failed attempt, its edit applied to the attempt, and it is accepted
    assert (fix.operator, fix.parents, fix.status) == (LLM_REPAIR, [attempt.id], "accepted")
    assert fix.source == attempt.source.replace("n_elements = 400", "n_elements = x.numel()")
    # each child records its model and what the model said of its idea
    assert attempt.params[MODEL_KEY] == fix.params[MODEL_KEY] == MODEL
    assert attempt.params[EXPLANATION_KEY] == IDEA and fix.params[EXPLANATION_KEY].startswith("The element count")
    # the model saw the verdict's status and reason, with the attempt, and no size of the held-out shapes
    assert len(asked) == 2 and "## Your last attempt" not in asked[0]
    repair = asked[1]
    assert f"Verdict: {attempt.status}; reason: " in repair and "n_elements = 400" in repair
    assert "repair turn 1 of at most 2" in repair and "SEARCH/REPLACE edits to your last attempt" in repair
    verdict = repair.split("Verdict: ", 1)[1].splitlines()[0]
    assert not re.search(r"(?<![\w.\-])\d{2,}(?![\w.])", verdict), verdict  # sizes scrubbed
    assert usage.requests == 2 and usage.cost_usd == pytest.approx(2 * REPLY_USD)  # a repair is paid like any


def test_a_reply_without_a_kernel_goes_back_to_its_model_and_then_leaves_a_mutation(tmp_path):
    """Prose, then an edit that does not apply, then prose: two repairs, then a parametric mutation in its place."""
    answers = iter([("prose", "I would unroll the loop."),
                    ("edit", "<<<<<<< SEARCH\nnot in the kernel\n=======\nx = 1\n>>>>>>> REPLACE\n"),
                    ("prose", "Sorry.")])

    class Stubborn(ReplayServer):
        def _next(self, body, headers):
            self.record(body)
            return reply(next(answers)[1])

    with Stubborn() as server:
        cfg = config(server, {"llm_mutation": 1.0}, population_size=1, migrants=0, max_evaluations=2,
                     llm={"repair_turns": 2, "concurrency": 1})
        run(tmp_path / "run.sqlite", cfg, FakeEvaluator())
        asked = prompts(server)
    with RunStore.open(tmp_path / "run.sqlite", readonly=True) as store:
        rows = store.individuals()
        failed = [e["data"] for e in store.events(FAILED_EVENT)]
        state = store.get_state(STATE_KEY)
    assert [r.operator for r in rows] == ["seed", MUTATION]  # the place went to a mutation in the end
    assert [(f["repair"], f["reason"][:24]) for f in failed] == [
        (0, "the reply held no code"), (1, "edit 1 did not apply: it"), (2, "the reply held no code")]
    assert "Your answer gave no kernel to evaluate: the reply held no code." in asked[1]
    assert "I would unroll the loop." in asked[1] and "repair turn 1 of at most 2" in asked[1]
    assert "edit 1 did not apply" in asked[2] and "not in the kernel" in asked[2]
    # three requests, three tries of the LLM operator that did not pay off; the mutation is parametric's
    stats = state["selector"]["stats"]["operator"]["unknown"]
    assert stats[LLM_MUTATION] == [3, 0] and stats[MUTATION][0] == 1


# --- context ---------------------------------------------------------------------------


def test_a_prompt_shows_the_run_so_far_the_parents_children_the_dtype_and_one_cutoff(tmp_path):
    with StandInLlm() as server:
        cfg = config(server, {"llm_mutation": 1.0, "parametric_mutation": 1.0}, max_evaluations=17, seed=2)
        data = cfg.to_dict()
        data["problem"]["dtype"] = "float16"
        cfg = config_from_dict(data, origin="test")
        run(tmp_path / "run.sqlite", cfg, FakeEvaluator())
        asked = prompts(server)
    later = [p for p in asked if "Its latest children in this run" in p]
    assert later, "no prompt showed a parent's children"
    for prompt in asked:
        assert "MAX_ABS_DIFF" not in prompt and prompt.count("max |out - ref| <=") == 1
        assert "casts the floating inputs and weights to float16" in prompt
        assert "speed-of-light floor" not in prompt  # no verdict carries a floor here: nothing is said
    assert any("## What the run has found so far" in p and ("The fastest kernel so far: accepted; runtime" in p
                                                            or "is the fastest so far" in p) for p in asked)
    children = re.findall(r"^- kernel (\d+) \((\w+)\): (\w+)", later[-1], re.MULTILINE)
    assert children and all(op in (LLM_MUTATION, MUTATION) for _, op, _ in children)


# --- no waiting ------------------------------------------------------------------------


class Slow(FakeEvaluator):
    """Takes ``seconds`` per evaluation and counts the time it spends evaluating."""

    def __init__(self, seconds: float) -> None:
        super().__init__()
        self.seconds, self.spans = seconds, []

    def evaluate(self, source):
        started = time.monotonic()
        time.sleep(self.seconds)
        result = super().evaluate(source)
        self.spans.append((started, time.monotonic()))
        return result


class Delayed(StandInLlm):
    """The stand-in model, answering after ``delay_s``; a different block size for each request."""

    def __init__(self, delay_s: float) -> None:
        super().__init__()
        self.delay_s = delay_s

    def _next(self, body, headers):
        n = self.record(body)
        blocks, warps = [16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192], [1, 2, 4, 8]
        content = written(blocks[n % len(blocks)], warps[(n // len(blocks)) % len(warps)],
                          "x * tl.sigmoid(y)" if (n // 40) % 2 == 0 else "x / (1.0 + tl.exp(-y))")
        return Reply(reply(content).body, delay_s=self.delay_s)


def busy_share(spans: list[tuple[float, float]]) -> float:
    """Time children were being evaluated, over the wall time from the first child's start to the last one's end.

    The seed's evaluation, and the first round trip to the model before there is any child to evaluate, are
    the run starting; the LLM loop's busy share in docs/RESULTS.md was measured the same way.
    """
    children = spans[1:]
    return sum(end - start for start, end in children) / (children[-1][1] - children[0][0])


def test_llm_requests_overlap_evaluation_and_keep_the_evaluator_busy(tmp_path):
    evaluator = Slow(0.2)
    with Delayed(delay_s=1.0) as server:
        cfg = config(server, {"llm_mutation": 1.0}, max_evaluations=41, llm={"concurrency": 8})
        assert run(tmp_path / "run.sqlite", cfg, evaluator) == "max_evaluations reached (41)"
        in_flight = server.max_in_flight
    share = busy_share(evaluator.spans)
    # a generation waiting for its whole batch would idle 1 s per 4 evaluations of 0.2 s: under 50% busy
    assert share >= 0.8, f"evaluator busy {share:.0%} of the run"
    assert in_flight >= 4  # requests were in flight together, while kernels were evaluated


# --- credit ----------------------------------------------------------------------------


def test_each_llm_child_records_its_model_and_models_are_drawn_by_what_they_achieve_per_dollar(tmp_path):
    cheap, dear = "openai/gpt-4o-mini", "openai/gpt-4o"

    prices = {cheap: {"input": 0.15, "output": 0.6}, dear: {"input": 2.5, "output": 10.0}}  # USD per million
    with StandInLlm() as server:
        cfg = config(server, {"llm_mutation": 1.0}, max_evaluations=21,
                     llm={"model": "offline", "models": {cheap: 1.0, dear: 1.0}, "prices": prices})
        run(tmp_path / "run.sqlite", cfg, FakeEvaluator())
        sent = [body["model"] for body in server.requests]
    with RunStore.open(tmp_path / "run.sqlite", readonly=True) as store:
        llm_children = [i for i in store.individuals() if i.operator == LLM_MUTATION]
        state = store.get_state(STATE_KEY)
        usage = store.llm_usage().by_model
    assert llm_children and all(i.params[MODEL_KEY] in (cheap, dear) for i in llm_children)
    assert {m.split("/")[-1] for m in sent} == {"gpt-4o-mini", "gpt-4o"}
    learnt = state["selector"]["models"]
    assert sum(t for t, _ in learnt["stats"].values()) == len(sent)  # every request judged, for its model
    assert learnt["costs"][dear] > learnt["costs"][cheap] > 0  # USD per request, from the run's accounting
    assert {m: u.requests for m, u in usage.items()} == {m: sent.count(m.split("/")[-1]) for m in usage}


def test_the_model_chooser_favours_improvements_per_dollar():
    chooser = ModelChooser({"a": 1.0, "b": 1.0}, random.Random(0))
    for _ in range(20):
        chooser.update("a", True)
        chooser.update("b", True)
    chooser.price({"a": (20, 0.2), "b": (20, 2.0)})  # b costs ten times as much per request
    draws = [chooser.choose() for _ in range(2000)]
    assert draws.count("a") > 0.85 * len(draws)
    chooser.price({"a": (20, 0.2), "b": (20, 0.2)})  # the same price: the same share, near enough
    draws = [chooser.choose() for _ in range(2000)]
    assert 0.4 < draws.count("a") / len(draws) < 0.6
    for _ in range(40):
        chooser.update("b", False)  # b stops improving: a draws ahead at the same price
    assert [chooser.choose() for _ in range(2000)].count("a") > 1400
    again = ModelChooser({"a": 1.0, "b": 1.0}, random.Random(0), json.loads(json.dumps(chooser.state())))
    assert again.state() == chooser.state()
    rng = random.Random(3)
    alone = ModelChooser({"a": 1.0}, rng)
    state = rng.getstate()
    assert alone.choose() == "a" and rng.getstate() == state  # one model: no draw from the run's generator


@pytest.mark.parametrize("child, spread, parent, parent_spread, better", [
    (0.9, None, 1.0, None, True),      # no spreads: any faster time
    (0.97, 0.04, 1.0, 0.04, False),    # within the noise
    (0.9, 0.04, 1.0, 0.04, True),      # beyond it
    (1.0, 0.0, 1.0, 0.0, False),
    (None, None, 1.0, None, False),    # not timed
])
def test_an_improvement_counts_only_beyond_the_timing_noise(child, spread, parent, parent_spread, better):
    assert improved(child, spread, parent, parent_spread) is better


def test_a_failed_proposal_is_a_try_of_the_llm_operator_not_of_the_mutation_in_its_place(tmp_path):
    with StandInLlm(prose_for_seed=True) as server:
        cfg = config(server, {"llm_mutation": 1.0}, max_evaluations=9)
        run(tmp_path / "run.sqlite", cfg, FakeEvaluator())
    with RunStore.open(tmp_path / "run.sqlite", readonly=True) as store:
        rows = store.individuals()
        failed = store.events(FAILED_EVENT)
        stats = store.get_state(STATE_KEY)["selector"]["stats"]["operator"]["unknown"]
    mutations = sum(r.operator == MUTATION for r in rows)
    llm_children = sum(r.operator == LLM_MUTATION for r in rows if r.status != "pending")
    assert failed and mutations >= len(failed)
    assert stats[LLM_MUTATION][0] == len(failed) + llm_children
    assert stats[MUTATION][0] == mutations


def test_the_findings_hold_the_best_a_few_fast_and_one_unlike_them_and_the_parents_latest_children():
    from evolve.search.history import ATTEMPTS, TOP, History
    from evolve.search.population import Candidate
    from population_store import source_hash

    def kernel(id_, lines, runtime=None, status="accepted", **result):
        source = "\n".join(lines) + "\n"
        candidate = Candidate(id_, source, source_hash(source), {EXPLANATION_KEY: f"idea {id_}"}, 1, 0)
        candidate.record({"status": status, "runtime_ms": runtime, "reason": "" if runtime else "why", **result})
        return candidate

    common = [f"line_{i} = {i}" for i in range(20)]
    history = History(dtype="bfloat16")
    parent = kernel(1, common + ["p = 1"], 2.0)
    fast = [kernel(i, common + [f"v = {i}"], 1.0 + i / 10) for i in range(2, 7)]
    unlike = kernel(7, ["entirely = 'different'"], 1.9)
    children = [kernel(i, common + [f"c = {i}"], None, "wrong") for i in range(8, 8 + ATTEMPTS + 2)]
    for c in [parent, *fast, unlike, *children]:
        history.made(c.id, [] if c.id <= 7 else [parent.id], "seed" if c.id <= 7 else LLM_MUTATION)
    history.note([parent, *fast, unlike, *children[:-1]])  # the last child's result is not in yet
    findings = history.findings(parent)
    assert findings.best.id == 2 and not findings.parent_is_best and findings.dtype == "bfloat16"
    assert TOP == 2 and [o.id for o in findings.others] == [3, 4, 7]  # the next fastest, then the unlike one
    assert [a.id for a in findings.attempts] == [c.id for c in children[:-1]][-ATTEMPTS:]
    assert findings.attempts[0].explanation.startswith("idea") and findings.attempts[0].reason == "why"
    assert findings.floor_ms is None
    history.note([kernel(20, ["floored = 1"], 3.0, floor_ms=0.5)])
    assert history.findings(fast[0]).parent_is_best and history.findings(parent).floor_ms == 0.5
    # accepted children say how they fared against the parent, by the search's rule for faster
    timed = [kernel(30, common + ["t = 30"], 1.5, runtime_spread=0.02),  # 25% faster: beyond the noise
             kernel(31, common + ["t = 31"], 1.99, runtime_spread=0.02),  # within the spreads
             kernel(32, common + ["t = 32"], 2.6, runtime_spread=0.02)]  # slower
    for c in timed:
        history.made(c.id, [parent.id], LLM_MUTATION)
    history.note(timed)
    said = {a.id: a.against_parent for a in history.findings(parent).attempts}
    assert said[30] == "faster than its parent (2 ms) beyond the timing noise"
    assert said[31].startswith("no faster than its parent (2 ms) beyond the timing noise")
    assert said[32] == "slower than its parent (2 ms) beyond the timing noise"
    assert all(a.against_parent == "" for a in history.findings(parent).attempts if a.status == "wrong")


def test_a_crossover_that_gave_no_kernel_goes_back_as_a_mutation_of_its_first_parent():
    from evolve.config import OperatorsConfig
    from evolve.search.asking import Ask
    from evolve.search.steering import Steering
    from evolve.search.variation import Breeder
    from operators import LLM_CROSSOVER, Focus, ParentInfo, Proposal, Request

    class Asked:
        exhausted, samples = False, 10

        def __init__(self):
            self.added, self.failures = [], []

        def number(self):
            self.samples += 1
            return self.samples - 1

        def add(self, ask):
            self.added.append(ask)

        def failed(self, proposal, request, reason=None):
            self.failures.append(request.sample)

    rng, llm = random.Random(0), Asked()
    steering = Steering(OperatorsConfig(), rng, models={MODEL: 1.0})
    breeder = Breeder(rng, OperatorsConfig(), {}, steering, llm=llm, repair_turns=1)
    result = {"status": "accepted", "runtime_ms": 1.0}
    a, b = ParentInfo(1, SEED.read_text(), result), ParentInfo(2, SEED.read_text() + "# b\n", result)
    ask = Ask(Request(LLM_CROSSOVER, (a, b), Focus.MEMORY, 3, MODEL), 4, 0, [1, 2], "unknown", 1, LLM_CROSSOVER, 1.0)
    prose = Proposal(None, LLM_CROSSOVER, MODEL, (1, 2), Focus.MEMORY, "the reply held no code", repairable=True,
                     reply="I would fuse them.")
    assert breeder.answer(ask, prose, set()) is None and llm.failures == [3]
    (repair,) = llm.added
    assert (repair.request.kind, repair.request.parents, repair.request.model) == (LLM_MUTATION, (a,), MODEL)
    assert (repair.parents, repair.turn, repair.credit, repair.request.sample) == ([1, 2], 1, LLM_CROSSOVER, 10)
    assert repair.request.repair.reply == "I would fuse them." and repair.request.repair.source is None
    # the last turn spent: the place goes to a mutation of the first parent
    child = breeder.answer(repair, dataclasses.replace(prose, operator=LLM_MUTATION), set())
    assert child is not None and child.operator == MUTATION and child.parents == [1] and len(llm.added) == 1
    assert steering.state()[0]["stats"]["operator"]["unknown"][LLM_CROSSOVER] == [2, 0]
