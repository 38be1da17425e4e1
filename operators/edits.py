"""Code out of an LLM's reply: a whole file, or SEARCH/REPLACE edits applied to a base.

Models answer in many shapes: a fenced block among prose, several fenced
blocks (a shell command, then the file), bare code with no fence, or edit
blocks in the aider format: a ``<<<<<<< SEARCH`` line, lines copied from the
parent, a ``=======`` line, the lines that replace them, and a
``>>>>>>> REPLACE`` line (``operators/prompts/answer_edits.md`` shows it).

``extract_code`` turns any of them into a source, or into a reason a user can
read ("edit 2 did not apply: its SEARCH text is not in the parent"). Nothing
here judges the code: that is the screen's and the evaluator's job.
"""

from __future__ import annotations

import ast
import dataclasses
import re

#: How a source was read from a reply.
WHOLE_FILE = "whole_file"
EDITS = "edits"

_SEARCH = re.compile(r"^\s*<{5,9}\s*SEARCH\b.*$")
_DIVIDER = re.compile(r"^\s*={5,9}\s*$")
_REPLACE = re.compile(r"^\s*>{5,9}\s*REPLACE\b.*$")
_FENCE = re.compile(r"^\s*(`{3,}|~{3,})\s*([\w+.#-]*)[^\n]*$")
_PYTHON_TAGS = {"", "python", "py", "python3", "triton"}
# Where bare code most likely starts when prose comes before it.
_CODE_START = re.compile(r"^(import |from \w|@triton|class |def |[A-Za-z_]\w* = )")


class EditError(ValueError):
    """An edit cannot be applied; the message names the edit and why."""


@dataclasses.dataclass(frozen=True)
class Edit:
    """Replace ``search`` (one place in the base) with ``replace``."""

    search: str
    replace: str


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
    """
    if any(_SEARCH.match(line) for line in reply.splitlines()):
        if base is None:
            return Extracted(None, EDITS, "the reply gave SEARCH/REPLACE edits where a whole file was asked for")
        try:
            edits = parse_edits(reply)
            return Extracted(apply_edits(base, edits), EDITS)
        except EditError as exc:
            return Extracted(None, EDITS, str(exc))
    code = _fenced_code(reply)
    if code is None:
        code = _bare_code(reply)
    if code is None:
        return Extracted(None, None, "the reply held no code")
    return Extracted(_with_newline(code), WHOLE_FILE)


def parse_edits(reply: str) -> list[Edit]:
    """Every SEARCH/REPLACE block of ``reply``, in order; ``EditError`` if one is malformed."""
    edits: list[Edit] = []
    lines = reply.splitlines()
    i = 0
    while i < len(lines):
        if not _SEARCH.match(lines[i]):
            i += 1
            continue
        number = len(edits) + 1
        divider = _find(lines, i + 1, _DIVIDER)
        if divider is None:
            raise EditError(f"edit {number} is malformed: its SEARCH part has no ======= line after it")
        end = _find(lines, divider + 1, _REPLACE)
        if end is None:
            raise EditError(f"edit {number} is malformed: it has no >>>>>>> REPLACE line (was the reply cut off?)")
        if any(_SEARCH.match(line) for line in lines[i + 1:end]):
            raise EditError(f"edit {number} is malformed: a new SEARCH starts before its REPLACE line")
        edits.append(Edit(_block(lines[i + 1:divider]), _block(lines[divider + 1:end])))
        i = end + 1
    return edits


def apply_edits(source: str, edits: list[Edit]) -> str:
    """``source`` with each edit applied in turn; ``EditError`` names the first that does not apply.

    The SEARCH text must occur exactly once. When it does not occur as written,
    lines are compared without trailing spaces, then without their common
    indentation (the replacement is re-indented to match): models often
    drop or change whitespace when quoting code.
    """
    for number, edit in enumerate(edits, 1):
        if not edit.search.strip():
            raise EditError(f"edit {number} did not apply: its SEARCH part is empty")
        try:
            source = _apply_one(source, edit)
        except EditError as exc:
            raise EditError(f"edit {number} did not apply: {exc}") from None
    return source


def _apply_one(source: str, edit: Edit) -> str:
    count = source.count(edit.search)
    if count == 1:
        return source.replace(edit.search, edit.replace, 1)
    if count > 1:
        raise EditError(f"its SEARCH text occurs {count} times in the parent; it must name one place")
    lines = source.splitlines(keepends=True)
    search = edit.search.splitlines()
    replace = edit.replace.splitlines()
    for same, reindent in ((_same_rstrip, False), (_same_strip, True)):
        found = [i for i in range(len(lines) - len(search) + 1)
                 if all(same(lines[i + k], search[k]) for k in range(len(search)))]
        if len(found) > 1:
            raise EditError(f"its SEARCH text occurs {len(found)} times in the parent; it must name one place")
        if found:
            start = found[0]
            if reindent:
                replace = _reindent(replace, search, lines[start:start + len(search)])
            new = "".join(line + "\n" for line in replace)
            return "".join(lines[:start]) + new + "".join(lines[start + len(search):])
    raise EditError("its SEARCH text is not in the parent")


def _same_rstrip(line: str, search: str) -> bool:
    return line.rstrip() == search.rstrip()


def _same_strip(line: str, search: str) -> bool:
    return line.strip() == search.strip()


def _reindent(replace: list[str], search: list[str], matched: list[str]) -> list[str]:
    """Shift ``replace`` by the indentation the matched lines have and the SEARCH lines lack."""
    def indent(text: str) -> int:
        return len(text) - len(text.lstrip())

    pairs = [(s, m) for s, m in zip(search, matched) if s.strip()]
    if not pairs:
        return replace
    delta = indent(pairs[0][1]) - indent(pairs[0][0])
    if delta >= 0:
        return [" " * delta + line if line.strip() else line for line in replace]
    return [line[min(-delta, indent(line)):] for line in replace]


def _find(lines: list[str], start: int, pattern: re.Pattern[str]) -> int | None:
    return next((i for i in range(start, len(lines)) if pattern.match(lines[i])), None)


def _block(lines: list[str]) -> str:
    """The lines of one SEARCH or REPLACE part, without the fence a model may wrap them in."""
    if lines and _FENCE.match(lines[0]):
        lines = lines[1:]
    if lines and _FENCE.match(lines[-1]):
        lines = lines[:-1]
    return "".join(line + "\n" for line in lines)


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
        fence, tag = opening.group(1), opening.group(2).lower()
        close = next((j for j in range(i + 1, len(lines))
                      if lines[j].strip() == fence[0] * len(lines[j].strip())
                      and len(lines[j].strip()) >= len(fence)), len(lines))  # unclosed: a cut-off reply
        blocks.append((tag, "\n".join(lines[i + 1:close])))
        i = close + 1
    python = [code for tag, code in blocks if tag in _PYTHON_TAGS and code.strip()]
    if not python:
        return None
    defining = [code for code in python if "class ModelNew" in code]
    return defining[-1] if defining else max(python, key=len)


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
    except SyntaxError:
        return False
    return True


def _with_newline(code: str) -> str:
    return code.strip("\n") + "\n"
