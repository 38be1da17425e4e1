"""Reading a candidate out of an LLM's reply: fences, prose, whole files and SEARCH/REPLACE edits."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from operators.edits import EDITS, WHOLE_FILE, Edit, EditError, apply_edits, extract_code, parse_edits

ROOT = Path(__file__).resolve().parents[1]
SEED = (ROOT / "problems" / "elementwise" / "seed.py").read_text()
FIXTURES = Path(__file__).resolve().parent / "fixtures" / "llm"

BASE = "def f(x):\n    y = x + 1\n    return y\n\n\ndef g(x):\n    return x * 2\n"


def recorded(name: str) -> str:
    return json.loads((FIXTURES / f"{name}.json").read_text())["choices"][0]["message"]["content"]


def test_a_fenced_file_among_prose_and_other_fences_is_the_candidate():
    got = extract_code(recorded("fenced"), SEED)
    assert got.form == WHOLE_FILE and got.reason == ""
    assert got.source.startswith("import torch\n") and "class ModelNew" in got.source
    assert "kevo verify" not in got.source and "should cut the runtime" not in got.source
    assert got.source.endswith("return out\n")


def test_a_bare_file_with_no_fence_is_the_candidate():
    reply = recorded("whole_file")
    assert "```" not in reply
    got = extract_code(reply, SEED)
    assert got.form == WHOLE_FILE and got.source == reply.strip("\n") + "\n"


def test_bare_code_after_and_before_prose_is_cut_out():
    reply = "Here you go:\n" + BASE + "class ModelNew:\n    pass\nHope this helps!\n"
    got = extract_code(reply, None)
    assert got.source == BASE + "class ModelNew:\n    pass\n"


def test_the_last_block_that_defines_modelnew_wins_over_other_python_blocks():
    reply = ("The old launch was:\n```python\nk[grid](x, BLOCK=1)\n```\nNew file:\n```py\nclass ModelNew:\n"
             "    a = 1\n```\nOr, better:\n~~~python\nclass ModelNew:\n    a = 2\n~~~\n")
    assert extract_code(reply, None).source == "class ModelNew:\n    a = 2\n"


def test_a_cut_off_fence_still_yields_its_code_for_the_screen_to_judge():
    got = extract_code("```python\nclass ModelNew:\n    def forward(self, x", None)
    assert got.form == WHOLE_FILE and got.source == "class ModelNew:\n    def forward(self, x\n"


@pytest.mark.parametrize("reply", [
    recorded("prose"),
    "",
    "```bash\npip install triton\n```",
    "Increase BLOCK_SIZE = 4096 and try again.",
])
def test_a_reply_without_python_code_says_so(reply):
    got = extract_code(reply, SEED)
    assert (got.source, got.reason) == (None, "the reply held no code")


def test_recorded_edits_apply_to_the_parent():
    got = extract_code(recorded("edits"), SEED)
    assert got.form == EDITS and got.reason == ""
    assert "x * tl.sigmoid(y)" in got.source and "tl.exp(-y)" not in got.source
    assert "BLOCK_SIZE=4096, num_warps=8" in got.source and "BLOCK_SIZE=1024" not in got.source
    assert got.source.count("\n") == SEED.count("\n") - 1  # two lines became one, nothing else moved


def test_an_edit_that_does_not_apply_is_named_with_why():
    got = extract_code(recorded("edits_bad"), SEED)
    assert got.source is None and got.form == EDITS
    assert got.reason == "edit 2 did not apply: its SEARCH text is not in the parent"


def test_edits_where_a_whole_file_was_asked_for_are_refused():
    got = extract_code(recorded("edits"), None)
    assert got.source is None and "whole file was asked for" in got.reason


def test_whitespace_drift_in_search_text_still_applies_and_keeps_indentation():
    # trailing spaces and an indentation the model lost
    edits = [Edit("y = x + 1   \nreturn y\n", "y = x + 2\nreturn y * 3\n")]
    assert apply_edits(BASE, edits) == BASE.replace("y = x + 1\n    return y\n", "y = x + 2\n    return y * 3\n")


def test_a_search_text_found_twice_is_refused():
    with pytest.raises(EditError, match=r"edit 1 did not apply: its SEARCH text occurs 2 times"):
        apply_edits(BASE, [Edit("(x):\n", "(z):\n")])
    with pytest.raises(EditError, match="occurs 2 times"):  # only when indentation is ignored
        apply_edits("  a = 1\n    a = 1\n", [Edit("a = 1 \n", "b = 2\n")])


def test_an_empty_search_is_refused():
    with pytest.raises(EditError, match="edit 1 did not apply: its SEARCH part is empty"):
        apply_edits(BASE, [Edit("\n", "x = 1\n")])


def test_edits_apply_in_order_so_a_later_one_sees_an_earlier_one():
    edits = [Edit("    y = x + 1\n", "    y = x + 5\n"), Edit("    y = x + 5\n    return y\n", "    return x + 5\n")]
    assert apply_edits(BASE, edits).startswith("def f(x):\n    return x + 5\n\n")


@pytest.mark.parametrize("reply, message", [
    ("<<<<<<< SEARCH\na\n>>>>>>> REPLACE\n", "edit 1 is malformed: its SEARCH part has no ======= line"),
    ("<<<<<<< SEARCH\na\n=======\nb\n", "edit 1 is malformed: it has no >>>>>>> REPLACE line"),
    ("<<<<<<< SEARCH\na\n=======\nb\n>>>>>>> REPLACE\n<<<<<<< SEARCH\nc\n=======\n<<<<<<< SEARCH\n",
     "edit 2 is malformed"),
])
def test_malformed_edit_blocks_are_named(reply, message):
    with pytest.raises(EditError, match=message):
        parse_edits(reply)
    assert extract_code(reply, BASE).reason.startswith(message.split(":")[0])


def test_edit_parts_wrapped_in_fences_lose_the_fences():
    reply = "<<<<<<< SEARCH\n```python\n    return x * 2\n=======\n    return x * 4\n```\n>>>>>>> REPLACE\n"
    assert parse_edits(reply) == [Edit("    return x * 2\n", "    return x * 4\n")]
    assert extract_code(reply, BASE).source == BASE.replace("x * 2", "x * 4")
