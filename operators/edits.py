"""Code out of an LLM's reply: a whole file, or SEARCH/REPLACE edits applied to a base.

Models answer in many shapes: a fenced block among prose, several fenced
blocks (a shell command, then the file), bare code with no fence, or edit
blocks in the aider format: a ``<<<<<<< SEARCH`` line, lines copied from the
parent, a ``=======`` line, the lines that replace them, and a
``>>>>>>> REPLACE`` line (``operators/prompts/answer_edits.md`` shows it).
Local reasoning models (served by vLLM or Ollama) may also write their
reasoning inline, in a ``<think>`` block before the answer: it is dropped
first, so that draft code in it is never taken for the answer.

``extract_code`` turns any of them into a source, or into a reason a user can
read ("edit 2 did not apply: its SEARCH text is not in the parent"). Nothing
here judges the code: that is the screen's and the evaluator's job.

The code a reply carries may itself hold lines that look like the answer's
markup (a ``=======`` underline or a ````` fence in a docstring), so the
markup is read with the code in mind: an edit whose block has several
``=======`` lines is split where its SEARCH part is found in the parent, and a
fence closes a Python block only where the code before it parses, when it can.
"""

from __future__ import annotations

import ast
import dataclasses
import re

#: How a source was read from a reply.
WHOLE_FILE = "whole_file"
EDITS = "edits"

ONLY_REASONING = "the reply held only reasoning (a <think> block), no answer"

_SEARCH = re.compile(r"^\s*<{5,9}\s*SEARCH\b.*$")
_DIVIDER = re.compile(r"^\s*={5,9}\s*$")
_REPLACE = re.compile(r"^\s*>{5,9}\s*REPLACE\b.*$")
_FENCE = re.compile(r"^(?P<indent>\s*)(?P<fence>`{3,}|~{3,})\s*(?P<tag>[\w+.#-]*)[^\n]*$")
_PYTHON_TAGS = {"", "python", "py", "python3", "triton"}
# Where bare code most likely starts when prose comes before it.
_CODE_START = re.compile(r"^(import |from \w|@triton|class |def |[A-Za-z_]\w* = )")
# Inline reasoning: DeepSeek-R1, QwQ, Qwen3 and others write <think>; some prompts get <thinking>.
_THINK_BLOCK = re.compile(r"<(think|thinking)>.*?</\1\s*>", re.IGNORECASE | re.DOTALL)
_THINK_CLOSE = re.compile(r"</(think|thinking)\s*>", re.IGNORECASE)
_THINK_OPEN = re.compile(r"<(think|thinking)>", re.IGNORECASE)
_THINK_OPEN_LINE = re.compile(r"^[ \t]*<(think|thinking)>", re.IGNORECASE | re.MULTILINE)


class EditError(ValueError):
    """An edit cannot be applied; the message names the edit and why."""


@dataclasses.dataclass(frozen=True)
class Edit:
    """Replace the lines ``search`` (one place in the base) with the lines ``replace``.

    ``other_readings`` are other (search, replace) splits of the same block,
    when more than one of its lines could be its ``=======`` line (the code
    quotes one, e.g. in a docstring); ``apply_edits`` picks the one whose
    SEARCH part the base holds.
    """

    search: str
    replace: str
    other_readings: tuple[tuple[str, str], ...] = ()


@dataclasses.dataclass(frozen=True)
class Extracted:
    """The source a reply yields (``form`` says how), or why it yields none."""

    source: str | None
    form: str | None = None  # WHOLE_FILE or EDITS
    reason: str = ""


def extract_code(reply: str, base: str | None) -> Extracted:
    """The candidate source in ``reply``; edit blocks are applied to ``base``.

    ``base`` is None where the prompt asked for a whole file (an LLM seed).

    >>> extract_code("Sure!\\n```python\\nx = 1\\n```\\nDone.", None).source
    'x = 1\\n'
    >>> extract_code("<think>Maybe ```python\\nx = 0\\n```?</think>\\n```python\\nx = 1\\n```", None).source
    'x = 1\\n'
    """
    answer = strip_reasoning(reply)
    if not answer.strip() and reply.strip():
        return Extracted(None, None, ONLY_REASONING)
    if any(_SEARCH.match(line) for line in answer.splitlines()):
        if base is None:
            return Extracted(None, EDITS, "the reply gave SEARCH/REPLACE edits where a whole file was asked for")
        try:
            edits = parse_edits(answer)
            return Extracted(apply_edits(base, edits), EDITS)
        except EditError as exc:
            return Extracted(None, EDITS, str(exc))
    code = _fenced_code(answer)
    if code is None:
        code = _bare_code(answer)
    if code is None:
        return Extracted(None, None, "the reply held no code")
    return Extracted(_with_newline(code), WHOLE_FILE)


def strip_reasoning(reply: str) -> str:
    """``reply`` without the reasoning a model wrote inline: its ``<think>...</think>`` blocks.

    Also dropped: reasoning whose opening tag was part of the chat template
    (the reply starts inside the block and only closes it), and a block that
    opens at a line start and never closes (the reply was cut off while the
    model was still reasoning).

    >>> strip_reasoning("<think>\\nA plan.\\n</think>\\nThe answer.")
    '\\nThe answer.'
    >>> strip_reasoning("A plan.</think>The answer.")
    'The answer.'
    >>> strip_reasoning("<think>\\nA plan that never")
    ''
    """
    close, opening = _THINK_CLOSE.search(reply), _THINK_OPEN.search(reply)
    if close is not None and (opening is None or close.start() < opening.start()):
        reply = reply[close.end():]
    reply = _THINK_BLOCK.sub("", reply)
    unterminated = _THINK_OPEN_LINE.search(reply)
    return reply[:unterminated.start()] if unterminated else reply


def parse_edits(reply: str) -> list[Edit]:
    """Every SEARCH/REPLACE block of ``reply``, in order; ``EditError`` if one is malformed.

    A block runs from its SEARCH line to the first REPLACE line after it. Its
    ``=======`` line is the first one; when the block has several, the later
    splits are kept as ``Edit.other_readings`` for ``apply_edits`` to choose from.
    """
    edits: list[Edit] = []
    lines = reply.splitlines()
    i = 0
    while i < len(lines):
        if not _SEARCH.match(lines[i]):
            i += 1
            continue
        number = len(edits) + 1
        end = _find(lines, i + 1, _REPLACE)
        next_search = _find(lines, i + 1, _SEARCH)
        stop = min(j for j in (end, next_search, len(lines)) if j is not None)
        dividers = [j for j in range(i + 1, stop) if _DIVIDER.match(lines[j])]
        if not dividers:
            raise EditError(f"edit {number} is malformed: its SEARCH part has no ======= line after it")
        if next_search is not None and (end is None or next_search < end):
            raise EditError(f"edit {number} is malformed: a new SEARCH starts before its REPLACE line")
        if end is None:
            raise EditError(f"edit {number} is malformed: it has no >>>>>>> REPLACE line (was the reply cut off?)")
        (search, replace), *others = [(_block(lines[i + 1:d]), _block(lines[d + 1:end])) for d in dividers]
        edits.append(Edit(search, replace, tuple(others)))
        i = end + 1
    return edits


def apply_edits(source: str, edits: list[Edit]) -> str:
    """``source`` with each edit applied in turn; ``EditError`` names the first that does not apply.

    A SEARCH part names whole lines of the source, in one place only: a match
    inside a line never counts. Lines are compared without trailing spaces;
    when the SEARCH lines are nowhere as written, they may stand in the
    source indented by a constant amount more or less (models often drop or
    change indentation when quoting code), and the REPLACE lines are shifted
    by that amount. Found in more than one place, at either step, the edit is
    refused rather than applied to the first.

    >>> apply_edits("def f():\\n    return 1\\n", [Edit("return 1\\n", "return 2\\n")])
    'def f():\\n    return 2\\n'
    """
    for number, edit in enumerate(edits, 1):
        try:
            source = _apply_one(source, edit)
        except EditError as exc:
            raise EditError(f"edit {number} did not apply: {exc}") from None
    return source


def _apply_one(source: str, edit: Edit) -> str:
    readings = [r for r in ((edit.search, edit.replace), *edit.other_readings) if r[0].strip()]
    if not readings:
        raise EditError("its SEARCH part is empty")
    lines = source.splitlines(keepends=True)
    # A shorter reading is a longer one cut at a ======= line of the quoted code:
    # the longest SEARCH part the source holds is the block as the model meant it.
    for search, replace in sorted(readings, key=lambda r: len(r[0]), reverse=True):
        wanted = search.splitlines()
        found = _locate(lines, wanted)
        if found is None:
            continue
        start, shift = found
        new = _shifted(replace.splitlines(), shift, lines[start:start + len(wanted)], wanted)
        return "".join(lines[:start]) + "".join(line + "\n" for line in new) + "".join(lines[start + len(wanted):])
    raise EditError("its SEARCH text is not in the parent")


def _locate(lines: list[str], search: list[str]) -> tuple[int, int] | None:
    """Where ``search`` stands in ``lines``: (first line, indentation shift); ``EditError`` if in several places."""
    starts = range(len(lines) - len(search) + 1)
    places = [(i, 0) for i in starts
              if all(lines[i + k].rstrip() == line.rstrip() for k, line in enumerate(search))]
    if not places:
        shifts = ((i, _shift(lines[i:i + len(search)], search)) for i in starts)
        places = [(i, shift) for i, shift in shifts if shift is not None]
    if len(places) > 1:
        where = ", ".join(str(i + 1) for i, _ in places[:-1]) + f" and {places[-1][0] + 1}"
        raise EditError(f"its SEARCH text occurs {len(places)} times in the parent (at lines {where}); "
                        "it must name one place: quote more lines around it")
    return places[0] if places else None


def _shift(matched: list[str], search: list[str]) -> int | None:
    """How much deeper ``matched`` is indented than ``search``, the same for every line; None if they differ."""
    shifts = set()
    for have, want in zip(matched, search):
        if not want.strip():
            if have.strip():
                return None
            continue
        if have.strip() != want.strip():
            return None
        shifts.add(_indent(have) - _indent(want))
    return shifts.pop() if len(shifts) == 1 else None


def _shifted(replace: list[str], shift: int, matched: list[str], search: list[str]) -> list[str]:
    """``replace`` indented ``shift`` columns deeper (or shallower), as the matched lines are to the SEARCH lines."""
    if shift > 0:
        deeper = next(have for have, want in zip(matched, search) if want.strip())
        prefix = deeper[:_indent(deeper)][-shift:]  # the matched lines' own whitespace (spaces or tabs)
        return [prefix + line if line.strip() else line for line in replace]
    if shift < 0:
        return [line[min(-shift, _indent(line)):] for line in replace]
    return replace


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def _find(lines: list[str], start: int, pattern: re.Pattern[str]) -> int | None:
    return next((i for i in range(start, len(lines)) if pattern.match(lines[i])), None)


def _block(lines: list[str]) -> str:
    """The lines of one SEARCH or REPLACE part, without the fence a model may wrap them in."""
    if lines and _FENCE.match(lines[0]):
        lines = lines[1:]
    if lines and _bare_fence(lines[-1]):
        lines = lines[:-1]
    return "".join(line + "\n" for line in lines)


def _bare_fence(line: str) -> bool:
    found = _FENCE.match(line)
    return found is not None and line.strip() == found.group("fence")


def _fenced_code(reply: str) -> str | None:
    """The fenced block that is the candidate: the last that defines ModelNew, else the longest Python one."""
    blocks: list[tuple[str, str]] = []  # (language tag, code)
    lines = reply.splitlines()
    i = 0
    while i < len(lines):
        opening = _FENCE.match(lines[i])
        if not opening:
            i += 1
            continue
        tag = opening.group("tag").lower()
        body, close = _fence_body(lines, i, python=tag in _PYTHON_TAGS)
        blocks.append((tag, body))
        i = close + 1
    python = [code for tag, code in blocks if tag in _PYTHON_TAGS and code.strip()]
    if not python:
        return None
    defining = [code for code in python if "class ModelNew" in code]
    return defining[-1] if defining else max(python, key=len)


def _fence_body(lines: list[str], start: int, python: bool) -> tuple[str, int]:
    """The code of the block that opens at ``lines[start]``, and the index of its closing line.

    A closing line is a bare fence of the opening's character, at least as
    long, indented no deeper than the opening (or 3 spaces, as Markdown
    allows): a fence quoted in an indented docstring never closes the block.
    A Python block closes at the first such line where the code before it
    parses, when one does: a bare fence at the left margin inside code can
    only be in a string. A block that never closes (a cut-off reply) runs to
    the end.
    """
    opening = _FENCE.match(lines[start])
    assert opening is not None
    fence, indent = opening.group("fence"), len(opening.group("indent"))
    closes = [j for j in range(start + 1, len(lines))
              if _bare_fence(lines[j]) and lines[j].strip()[0] == fence[0]
              and len(lines[j].strip()) >= len(fence) and _indent(lines[j]) <= max(indent, 3)]

    def body(close: int) -> str:
        return "\n".join(line[min(indent, _indent(line)):] for line in lines[start + 1:close])

    if not closes:
        return body(len(lines)), len(lines)
    if python and len(closes) > 1:
        close = next((j for j in closes if _parses(body(j))), closes[0])
    else:
        close = closes[0]
    return body(close), close


def _bare_code(reply: str) -> str | None:
    """Code with no fence: the whole reply, or what follows the prose before it, when it parses."""
    lines = reply.strip().splitlines()
    start = next((i for i, line in enumerate(lines) if _CODE_START.match(line)), None)
    if start is None:
        return None
    end = len(lines)
    # Prose after the code is not indented; drop such lines until the rest parses.
    while end > start:
        code = "\n".join(lines[start:end])
        if _parses(code):
            return code if "class ModelNew" in code or "@triton.jit" in code else None
        if lines[end - 1][:1].isspace():
            break
        end -= 1
    # Code that does not parse is still code: the screen will say where it breaks.
    code = "\n".join(lines[start:])
    return code if "class ModelNew" in code else None


def _parses(code: str) -> bool:
    try:
        ast.parse(code)
    except (SyntaxError, ValueError):  # ValueError: a null byte
        return False
    return True


def _with_newline(code: str) -> str:
    return code.strip("\n") + "\n"
