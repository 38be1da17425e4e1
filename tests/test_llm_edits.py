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
    twice = BASE + "\n\ndef h(x):\n    y = x + 1\n    return y\n"
    with pytest.raises(EditError, match=r"edit 1 did not apply: its SEARCH text occurs 2 times in the parent "
                                        r"\(at lines 2 and 11\); it must name one place: quote more lines"):
        apply_edits(twice, [Edit("    y = x + 1\n    return y\n", "    return x + 1\n")])
    with pytest.raises(EditError, match="occurs 2 times"):  # only when indentation is ignored
        apply_edits("  a = 1\n    a = 1\n", [Edit("a = 1 \n", "b = 2\n")])


def test_a_search_matches_whole_lines_never_part_of_a_line():
    with pytest.raises(EditError, match="edit 1 did not apply: its SEARCH text is not in the parent"):
        apply_edits(BASE, [Edit("(x):\n", "(z):\n")])  # in both def lines, but no whole line
    base = "def f():\n    max = 1\n    return max\n"
    with pytest.raises(EditError, match="its SEARCH text is not in the parent"):
        apply_edits(base, [Edit("x = 1\n", "x = 2\n")])
    assert apply_edits(base, [Edit("max = 1\n", "max = 2\n")]) == base.replace("max = 1", "max = 2")


def test_a_one_line_search_that_lost_its_indentation_keeps_the_code_where_it_was():
    base = "def f(x):\n    out = x * 2\n    return out\n"
    got = apply_edits(base, [Edit("return out\n", "out = out + 1\nreturn out\n")])
    assert got == "def f(x):\n    out = x * 2\n    out = out + 1\n    return out\n"
    # and one indented too deep comes back out, with the block's own nesting kept
    got = apply_edits(base, [Edit("        return out\n", "        if x is None:\n            return None\n"
                                                          "        return out\n")])
    assert got == "def f(x):\n    out = x * 2\n    if x is None:\n        return None\n    return out\n"
    assert compile(got, "<edit>", "exec")


def test_an_exact_match_wins_over_a_match_with_other_indentation():
    base = "x = 1\n\n\ndef f():\n    x = 1\n    return x\n"
    assert apply_edits(base, [Edit("x = 1\n", "x = 3\n")]).startswith("x = 3\n\n\ndef f():\n    x = 1\n")
    assert apply_edits(base, [Edit("    x = 1\n", "    x = 3\n")]).endswith("    x = 3\n    return x\n")


def test_indentation_must_shift_the_same_for_every_line():
    base = "def f(x):\n    y = x + 1\n    return y\n"
    with pytest.raises(EditError, match="not in the parent"):  # the lines match one by one, not as a block
        apply_edits(base, [Edit("y = x + 1\n    return y\n", "pass\n")])
    with pytest.raises(EditError, match="not in the parent"):  # a blank SEARCH line matches a blank line only
        apply_edits(base, [Edit("y = x + 1\n\nreturn y\n", "pass\n")])
    tabs = "def f(x):\n\ty = x + 1\n\treturn y\n"
    assert apply_edits(tabs, [Edit("return y\n", "return y + 1\n")]) == tabs.replace("y\n", "y + 1\n")


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


# -- inline reasoning (<think>) --------------------------------------------------------

DRAFT = "<think>\nFirst try:\n```python\nclass ModelNew:\n    a = 0\n```\nor an edit:\n<<<<<<< SEARCH\n" \
        "    return x * 2\n=======\n    return x * 3\n>>>>>>> REPLACE\nNo, better a whole file.\n</think>\n"


def test_a_think_block_is_not_the_answer_even_when_it_drafts_code_and_edits():
    got = extract_code(DRAFT + "Here:\n```python\nclass ModelNew:\n    a = 1\n```\n", BASE)
    assert (got.form, got.source) == (WHOLE_FILE, "class ModelNew:\n    a = 1\n")
    got = extract_code(DRAFT + "<<<<<<< SEARCH\n    return x * 2\n=======\n    return x * 4\n>>>>>>> REPLACE\n",
                       BASE)
    assert (got.form, got.source) == (EDITS, BASE.replace("x * 2", "x * 4"))


def test_reasoning_whose_opening_tag_was_in_the_chat_template_is_dropped():
    reply = "The kernel reads y twice; an edit?\n<<<<<<< SEARCH\n    a = 0\n=======\n    a = 1\n" \
            ">>>>>>> REPLACE\n</think>\n\n```python\nclass ModelNew:\n    a = 1\n```"
    assert extract_code(reply, None).source == "class ModelNew:\n    a = 1\n"


def test_a_reply_cut_off_while_reasoning_says_so():
    got = extract_code("<think>\nLet me write the kernel:\n```python\nclass ModelNew:\n    a = 0\n", None)
    assert (got.source, got.reason) == (None, "the reply held only reasoning (a <think> block), no answer")
    assert extract_code("<THINKING>plan</THINKING>", None).reason == got.reason
    # an answer followed by reasoning that never ends keeps the answer
    assert extract_code("```python\nclass ModelNew:\n    a = 1\n```\n<think>\nmore", None).source == \
        "class ModelNew:\n    a = 1\n"


# -- markup that occurs inside the code --------------------------------------------------

DOC_BASE = '"""Fused gate\n=======\n\nOne kernel.\n"""\nimport torch\n\nBLOCK = 1024\n'


def test_a_divider_line_quoted_from_the_code_does_not_split_the_search_part():
    reply = "<<<<<<< SEARCH\n\"\"\"Fused gate\n=======\n\nOne kernel.\n=======\n\"\"\"Fused gate\n=======\n\n" \
            "One fused kernel.\n>>>>>>> REPLACE\n"
    (edit,) = parse_edits(reply)
    assert edit.search == '"""Fused gate\n' and len(edit.other_readings) == 2
    got = extract_code(reply, DOC_BASE)
    assert got.reason == "" and got.source == DOC_BASE.replace("One kernel.", "One fused kernel.")


def test_a_divider_line_in_the_replace_part_stays_in_the_code():
    reply = "<<<<<<< SEARCH\nBLOCK = 1024\n=======\n# Tuning\n=======\nBLOCK = 2048\n>>>>>>> REPLACE\n"
    got = extract_code(reply, DOC_BASE)
    assert got.source == DOC_BASE.replace("BLOCK = 1024\n", "# Tuning\n=======\nBLOCK = 2048\n")


def test_fences_inside_edit_parts_are_code_unless_they_wrap_the_part():
    base = 'def f():\n    """Run it:\n    ```\n    f()\n    ```\n    """\n    return 1\n'
    reply = "```python\n<<<<<<< SEARCH\n    ```\n    \"\"\"\n    return 1\n=======\n    ```\n    \"\"\"\n" \
            "    return 2\n>>>>>>> REPLACE\n```\n"
    assert extract_code(reply, base).source == base.replace("return 1", "return 2")


WITH_DOC_FENCES = '''import torch


class ModelNew(torch.nn.Module):
    """Use it like this:

    ```
    out = ModelNew()(x)
    ```
    """

    def forward(self, x):
        return x
'''


def test_a_fence_in_an_indented_docstring_does_not_close_the_block():
    got = extract_code(f"The kernel:\n```python\n{WITH_DOC_FENCES}```\nThat is all.\n", None)
    assert got.source == WITH_DOC_FENCES


def test_a_fence_at_the_left_margin_inside_a_string_does_not_close_a_python_block():
    code = '"""Usage:\n```\nkevo verify ref.py new.py\n```\n"""\n' + WITH_DOC_FENCES
    got = extract_code(f"```python\n{code}```\n\nRun it with:\n```\nkevo verify\n```\n", None)
    assert got.source == code


def test_a_longer_fence_holds_shorter_ones_and_a_fence_in_a_list_item_is_dedented():
    code = 'x = """\n```python\ny = 1\n```\n"""\nclass ModelNew:\n    pass\n'
    assert extract_code(f"````python\n{code}````\n", None).source == code
    indented = "".join("   " + line + "\n" for line in WITH_DOC_FENCES.splitlines())
    assert extract_code(f"1. The file:\n   ```python\n{indented}   ```\n2. Run it.\n", None).source == WITH_DOC_FENCES


def test_a_broken_block_still_closes_at_its_own_fence():
    reply = "```python\nclass ModelNew:\n    def forward(self, x:\n```\nThen:\n```\nkevo verify\n```\n"
    assert extract_code(reply, None).source == "class ModelNew:\n    def forward(self, x:\n"
