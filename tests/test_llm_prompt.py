"""What the prompts say: platform guidance, parents' results, focuses, and the templates shipped with kevo."""

from __future__ import annotations

import importlib.resources
import json

import pytest

from operators.llm import (
    LLM_CROSSOVER,
    LLM_MUTATION,
    LLM_SEED,
    NO_KERNEL,
    Attempt,
    Findings,
    Focus,
    ParentInfo,
    ProblemContext,
    Repair,
    Request,
    build_messages,
)
from operators.llm.prompt import describe_result
from platforms.guidance import guidance

CONTEXT = ProblemContext("class Model: ...", 1e-4, "GUIDANCE TEXT", screen=lambda source: None)


@pytest.mark.parametrize("platform, facts", [
    ("cuda", ["A warp is 32 threads", "Shared memory", "Tensor cores", "tl.dot"]),
    ("rocm", ["A wavefront is 64 threads", "multiples of 64", "device='cuda'", "LDS", "MFMA"]),
    ("cpu", ["interpreter", "TRITON_INTERPRET=1", "CPU figures"]),
])
def test_each_platform_gives_its_own_guidance(platform, facts):
    text = guidance(platform)
    assert all(fact in text for fact in facts), [f for f in facts if f not in text]


def test_guidance_for_an_unresolved_or_unknown_platform_is_an_error():
    for name in ("auto", "hip"):
        message = f"no LLM guidance for platform '{name}'; known platforms: cuda, rocm, cpu"
        with pytest.raises(ValueError, match=message):
            guidance(name)


def test_every_template_ships_as_package_data():
    names = {p.name for p in importlib.resources.files("operators").joinpath("prompts").iterdir()}
    needed = {"system.md", "mutation.md", "crossover.md", "seed.md", "repair.md", "answer_edits.md", "answer_file.md"}
    assert needed | {f"focus_{f.value}.md" for f in Focus} <= names


@pytest.mark.parametrize("focus", list(Focus))
def test_every_focus_reaches_the_prompt(focus):
    request = Request(LLM_SEED, (), focus, 0)
    user = build_messages(request, CONTEXT)[1]["content"]
    focus_text = importlib.resources.files("operators").joinpath("prompts", f"focus_{focus.value}.md").read_text()
    assert focus_text.strip() in user and "GUIDANCE TEXT" in user and "1e-04" not in user and "0.0001" in user
    assert "${" not in user  # every placeholder filled


def test_a_failed_parent_shows_its_status_and_reason_on_one_line():
    text = describe_result({"status": "runtime_error", "reason": "Traceback:\n  line 3\nIndexError: out of range",
                            "runtime_ms": None, "max_abs_diff": float("nan")})
    assert text == "runtime_error; reason: Traceback: line 3 IndexError: out of range"
    assert describe_result(None) == "not evaluated yet"
    assert len(describe_result({"status": "wrong", "reason": "x" * 5000})) < 600


def test_a_crossover_prompt_names_both_parents_in_order():
    a, b = ParentInfo(1, "SOURCE_OF_A\n"), ParentInfo(2, "SOURCE_OF_B\n", {"status": "accepted", "runtime_ms": 2.0})
    user = build_messages(Request(LLM_CROSSOVER, (a, b)), CONTEXT)[1]["content"]
    order = [user.index(text) for text in ("### Kernel A", "SOURCE_OF_A", "### Kernel B", "SOURCE_OF_B")]
    assert order == sorted(order)
    assert "Evaluation: not evaluated yet" in user and "Evaluation: accepted; runtime 2 ms" in user


@pytest.mark.parametrize("kind, parents", [("llm_mutation", ()), (LLM_CROSSOVER, (ParentInfo(1, "x"),)),
                                           ("llm_magic", ())])
def test_a_request_with_the_wrong_parents_or_kind_is_a_bug_that_raises(kind, parents):
    with pytest.raises(ValueError, match="request"):
        Request(kind, parents)


# --- what a prompt shows of the run --------------------------------------------------------

BEST = ParentInfo(7, "BEST_SOURCE\n", {"status": "accepted", "runtime_ms": 0.25, "reference_ms": 1.0})
OTHER = ParentInfo(9, "OTHER_SOURCE\n", {"status": "accepted", "runtime_ms": 0.4, "reference_ms": 1.0})
PARENT = ParentInfo(3, "PARENT_SOURCE\n", {"status": "accepted", "runtime_ms": 0.5, "reference_ms": 1.0})
TRIED = (Attempt(11, "llm_mutation", "wrong", None, "fresh inputs at held-out shapes batch_size=5, dim=77: "
                 "output 0: max |out - ref| 0.5 at (4, 76)", "Wider loads."),
         Attempt(12, "parametric_mutation", "accepted", 0.6),
         Attempt(13, "llm_mutation", "accepted", 0.495,
                 against_parent="no faster than its parent (0.5 ms) beyond the timing noise: not an improvement"))


def test_a_mutation_prompt_shows_the_best_kernel_the_floor_others_and_the_parents_children():
    findings = Findings(best=BEST, others=(OTHER,), attempts=TRIED, dtype="bfloat16", floor_ms=0.125)
    user = build_messages(Request(LLM_MUTATION, (PARENT,), findings=findings), CONTEXT)[1]["content"]
    order = [user.index(t) for t in ("## What the run has found so far", "BEST_SOURCE", "speed-of-light floor",
                                     "OTHER_SOURCE", "## The kernel to improve", "PARENT_SOURCE",
                                     "Its latest children", "## Your task")]
    assert order == sorted(order)
    assert "The fastest kernel so far: accepted; runtime 0.25 ms; reference 1 ms; speed-up 4.00x" in user
    assert "floor of this problem on this device is 0.125 ms" in user and "Kernel 9: accepted; runtime 0.4 ms" in user
    assert "- kernel 11 (llm_mutation): wrong; fresh inputs at held-out shapes (not shown): output 0: max |out " \
           "- ref| 0.5 at (...); its idea: Wider loads." in user
    assert "- kernel 12 (parametric_mutation): accepted, 0.6 ms" in user
    assert ("- kernel 13 (llm_mutation): accepted, 0.495 ms (no faster than its parent (0.5 ms) beyond the "
            "timing noise: not an improvement)") in user
    assert "dim=77" not in user and "casts the floating inputs and weights to bfloat16" in user
    assert "${" not in user


def test_a_prompt_says_nothing_of_what_is_not_known():
    user = build_messages(Request(LLM_MUTATION, (PARENT,), findings=Findings(parent_is_best=True)),
                          CONTEXT)[1]["content"]
    assert "The kernel to improve below is the fastest so far." in user
    assert "floor" not in user and "Its latest children" not in user and "casts" not in user
    bare = build_messages(Request(LLM_MUTATION, (PARENT,)), CONTEXT)[1]["content"]
    assert "## What the run has found so far" not in bare


def test_a_kernel_too_long_for_the_prompt_is_shown_by_its_result_alone():
    huge = ParentInfo(8, "x = 1\n" * 5000, {"status": "accepted", "runtime_ms": 0.3})
    user = build_messages(Request(LLM_MUTATION, (PARENT,), findings=Findings(best=huge)), CONTEXT)[1]["content"]
    assert "characters long, is not shown" in user and len(user) < 20_000


def test_a_repair_prompt_shows_the_attempt_its_verdict_and_where_edits_apply():
    failed = Repair(1, 2, "wrong", "fixed inputs: output 0: max |out - ref| 0.3 at index (3, 99) > 1e-05",
                    "ATTEMPT_SOURCE\n")
    user = build_messages(Request(LLM_MUTATION, (PARENT,), repair=failed), CONTEXT)[1]["content"]
    order = [user.index(t) for t in ("## The kernel to improve", "PARENT_SOURCE", "## Your last attempt",
                                     "ATTEMPT_SOURCE", "Verdict: wrong; reason: fixed inputs", "## Your task")]
    assert order == sorted(order)
    assert "at index (...) > 1e-05" in user and "repair turn 1 of at most 2" in user
    assert "SEARCH/REPLACE edits to your last attempt" in user
    assert Request(LLM_MUTATION, (PARENT,), repair=failed).base == "ATTEMPT_SOURCE\n"

    no_code = Repair(2, 2, NO_KERNEL, "edit 1 did not apply: its SEARCH text is not in the parent (lines 12 "
                     "and 40)", None, "I changed it.\n<<<<<<< SEARCH\nold\n=======\nnew\n>>>>>>> REPLACE")
    user = build_messages(Request(LLM_MUTATION, (PARENT,), repair=no_code), CONTEXT)[1]["content"]
    assert "Your answer gave no kernel to evaluate: edit 1 did not apply" in user and "lines 12 and 40" in user
    assert "I changed it." in user and "SEARCH/REPLACE edits to the kernel to improve" in user
    assert Request(LLM_MUTATION, (PARENT,), repair=no_code).base == "PARENT_SOURCE\n"


def test_a_request_survives_the_checkpoint_as_json():
    findings = Findings(best=BEST, others=(OTHER,), attempts=TRIED, dtype="float16", floor_ms=0.1)
    request = Request(LLM_MUTATION, (PARENT,), Focus.MEMORY, 5, "openai/gpt-4o", findings,
                      Repair(1, 2, "wrong", "why", "SRC\n"))
    again = Request.from_dict(json.loads(json.dumps(request.to_dict())))
    assert again == request and build_messages(again, CONTEXT) == build_messages(request, CONTEXT)


def test_a_repair_of_a_crossover_is_a_bug_that_raises():
    with pytest.raises(ValueError, match="repair"):
        Request(LLM_CROSSOVER, (PARENT, OTHER), repair=Repair(1, 1, "wrong", "why"))
