"""What the prompts say: platform guidance, parents' results, focuses, and the templates shipped with kevo."""

from __future__ import annotations

import importlib.resources

import pytest

from operators.llm import LLM_CROSSOVER, LLM_SEED, Focus, ParentInfo, ProblemContext, Request, build_messages
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
    needed = {"system.md", "mutation.md", "crossover.md", "seed.md", "answer_edits.md", "answer_file.md"}
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
