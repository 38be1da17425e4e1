"""Prompts: the templates in ``operators/prompts/`` filled in for one request.

Templates use ``string.Template`` (``${name}``), so the braces of the code
they carry need no escaping. Every value a prompt shows is rendered here and
nowhere else, so the cache key (a hash of the messages) changes exactly when
what the model is told changes.
"""

from __future__ import annotations

import functools
import importlib.resources
import math
import re
import string
from collections.abc import Mapping
from typing import Any

from operators.llm.request import (
    LLM_CROSSOVER,
    LLM_MUTATION,
    LLM_SEED,
    NO_KERNEL,
    Attempt,
    Findings,
    ParentInfo,
    ProblemContext,
    Repair,
    Request,
)
from platforms.profiling.classes import CLASS_LABELS

_TEMPLATES = {LLM_MUTATION: "mutation.md", LLM_CROSSOVER: "crossover.md", LLM_SEED: "seed.md"}
#: A kernel of the findings longer than this is shown by its time alone: the prompt stays bounded.
SOURCE_LIMIT = 12_000
#: What a repair shows of a reply that gave no kernel.
REPLY_LIMIT = 4_000
# The problem's own cutoff, and the comment lines right above it: the prompt states the run's cutoff once.
_OWN_CUTOFF = re.compile(r"(?m)(^#[^\n]*\n)*^MAX_ABS_DIFF\s*(:[^=\n]*)?=[^\n]*\n?")
# A verdict's reason may give away the held-out shapes a kernel is checked on, which are secret
# (drawn anew for each evaluation): by name ("at held-out shapes batch_size=5, dim=77"), or by the sizes
# a check met there ("a 1296-byte tensor", "index (3, 76)"). A prompt shows neither; line numbers stay.
_HELD_OUT = re.compile(r"held-out shapes? [^:;]*")
_SIZES = re.compile(r"\(\s*\d+(\s*,\s*\d+)*\s*,?\s*\)|\[\s*\d+(\s*,\s*\d+)*\s*\]")
_KNOBS = re.compile(r"\b(\w+)\s*=\s*\d+\b")
_INTEGERS = re.compile(r"(?<![\w.+\-])(?<!line )\d{2,}(?![\w.])")


@functools.cache
def template(name: str) -> string.Template:
    """The prompt template ``operators/prompts/NAME``, shipped with the package."""
    text = importlib.resources.files("operators").joinpath("prompts", name).read_text(encoding="utf-8")
    return string.Template(text)


def build_messages(request: Request, context: ProblemContext) -> list[dict[str, str]]:
    """The chat messages (system, then user) that ask for ``request``."""
    findings = request.findings
    values = {
        "reference": _without_own_cutoff(context.reference_source).strip("\n"),
        "shapes": _shapes(context.shapes),
        "dtype": _dtype(findings.dtype),
        "cutoff": f"{context.cutoff:g}",
        "guidance": context.guidance.strip(),
        "focus": template(f"focus_{request.focus.value}.md").template.strip(),
        "answer_format": _answer_format(request),
        "findings": _findings(findings),
        "attempts": _attempts(findings.attempts),
    }
    name = _TEMPLATES[request.kind]
    if request.repair is not None:
        name = "repair.md"
        improve = f"\n## The kernel to improve\n{render_parent(request.parents[0])}\n" if request.parents else ""
        values.update(improve=improve, attempt=_attempt(request.repair), turn=str(request.repair.turn),
                      turns=str(request.repair.turns),
                      aim="a faster version of the kernel to improve" if request.parents else "this problem")
    elif request.kind == LLM_MUTATION:
        values["parent"] = render_parent(request.parents[0])
    elif request.kind == LLM_CROSSOVER:
        values["parent_a"] = render_parent(request.parents[0])
        values["parent_b"] = render_parent(request.parents[1])
    user = template(name).substitute(values)
    return [
        {"role": "system", "content": template("system.md").template.strip()},
        {"role": "user", "content": user.strip() + "\n"},
    ]


def render_parent(parent: ParentInfo) -> str:
    """A parent's source, its evaluation and its profile, as the prompt shows them."""
    parts = [_code(parent.source), "", f"Evaluation: {describe_result(parent.result)}"]
    if parent.bottleneck:
        parts.append(f"Profiler's bottleneck class: {CLASS_LABELS.get(parent.bottleneck, parent.bottleneck)}")
    if parent.profile:
        parts += ["Profiler's summary:", "```", parent.profile.strip(), "```"]
    return "\n".join(parts)


def scrub(reason: str, sizes: bool = True) -> str:
    """A verdict's reason as a model may see it: no held-out shape, and (``sizes``) no size that could give one away.

    Integers of two digits or more and tuples of integers go; floats (a max
    |out - ref|) and line numbers stay. Without ``sizes`` (a reply that gave
    no kernel: its reason is about the text of the reply) only the shapes go.

    >>> scrub("fresh inputs at held-out shapes batch_size=5, dim=77: output 0 has shape (5, 77), max 0.52 > 1e-05")
    'fresh inputs at held-out shapes (not shown): output 0 has shape (...), max 0.52 > 1e-05'
    >>> scrub("line 12: a kernel's load out of bounds: 76 of 144 lanes, past the end of a 1296-byte tensor")
    "line 12: a kernel's load out of bounds: ... of ... lanes, past the end of a ...-byte tensor"
    """
    reason = _HELD_OUT.sub("held-out shapes (not shown)", reason)
    if not sizes:
        return reason
    return _INTEGERS.sub("...", _KNOBS.sub(r"\1=...", _SIZES.sub("(...)", reason)))


def describe_result(result: Mapping[str, Any] | None) -> str:
    """One line from an evaluation record: status, times, speed-up and error, or the reason it failed.

    >>> describe_result({"status": "accepted", "runtime_ms": 0.5, "reference_ms": 1.0, "max_abs_diff": 1e-7})
    'accepted; runtime 0.5 ms; reference 1 ms; speed-up 2.00x over PyTorch; max |out - ref| 1e-07'
    """
    if not result:
        return "not evaluated yet"
    status = str(result.get("status", "unknown"))
    parts = [status]
    runtime, reference = result.get("runtime_ms"), result.get("reference_ms")
    if _number(runtime):
        spread = result.get("runtime_spread")
        parts.append(f"runtime {runtime:.4g} ms" + (f" (spread {spread:.0%})" if _number(spread) else ""))
    if _number(reference):
        parts.append(f"reference {reference:.4g} ms")
    if _number(runtime) and _number(reference) and runtime > 0:
        parts.append(f"speed-up {reference / runtime:.2f}x over PyTorch")
    if _number(result.get("max_abs_diff")):
        parts.append(f"max |out - ref| {result['max_abs_diff']:.3g}")
    if result.get("reason"):
        parts.append(f"reason: {_one_line(scrub(str(result['reason'])))}")
    return "; ".join(parts)


def _without_own_cutoff(reference: str) -> str:
    """The reference without its ``MAX_ABS_DIFF`` (and the comment above it): the run's cutoff may differ."""
    return _OWN_CUTOFF.sub("", reference)


def _dtype(dtype: str | None) -> str:
    if dtype is None:
        return ""
    return (f"\nThis run casts the floating inputs and weights to {dtype}: write the kernel for {dtype} "
            f"tensors (the reference's own dtypes above are not the ones it gets).\n")


def _answer_format(request: Request) -> str:
    if request.repair is not None and request.repair.source is not None:
        target = "your last attempt"
    elif request.kind == LLM_SEED:
        return template("answer_file.md").template.strip()
    else:
        target = "kernel A" if request.kind == LLM_CROSSOVER else "the kernel to improve"
    return template("answer_edits.md").substitute(target=target).strip()


def _findings(findings: Findings) -> str:
    """The run's best kernel (and the floor, when known) and a few others, as a section; "" when none is known."""
    parts = []
    if findings.best is not None:
        parts.append(f"The fastest kernel so far: {describe_result(findings.best.result)}\n\n"
                     f"{_code(findings.best.source)}")
    elif findings.parent_is_best:
        parts.append("The kernel to improve below is the fastest so far.")
    if _number(findings.floor_ms):
        parts.append(f"The speed-of-light floor of this problem on this device is {findings.floor_ms:.4g} ms "
                     "(its compulsory memory traffic and arithmetic at the device's peak rates): no kernel runs "
                     "faster, and the closer to it the better.")
    if findings.others:
        parts.append("Other kernels of this run, fast or unlike the rest, for ideas:")
        parts += [f"Kernel {other.id}: {describe_result(other.result)}\n{_code(other.source)}"
                  for other in findings.others]
    if not parts:
        return ""
    return "\n## What the run has found so far\n\n" + "\n\n".join(parts) + "\n"


def _attempts(attempts: tuple[Attempt, ...]) -> str:
    if not attempts:
        return ""
    lines = ["", "Its latest children in this run, and what became of them:"]
    for attempt in attempts:
        line = f"- kernel {attempt.id} ({attempt.operator}): {attempt.status}"
        if _number(attempt.runtime_ms):
            line += f", {attempt.runtime_ms:.4g} ms"
        if attempt.against_parent:
            line += f" ({attempt.against_parent})"
        if attempt.reason:
            line += f"; {_one_line(scrub(attempt.reason), 200)}"
        if attempt.explanation:
            line += f"; its idea: {_one_line(attempt.explanation, 200)}"
        lines.append(line)
    return "\n".join(lines) + "\n"


def _attempt(repair: Repair) -> str:
    """The failed attempt of a repair and its verdict."""
    reason = _one_line(scrub(repair.reason, sizes=repair.status != NO_KERNEL), 1500)
    if repair.status != NO_KERNEL:
        return "\n".join([_code(repair.source or ""), "", f"Verdict: {repair.status}; reason: {reason}"])
    parts = [f"Your answer gave no kernel to evaluate: {reason}."]
    reply = repair.reply.strip()
    if reply:
        cut = " (cut short here)" if len(reply) > REPLY_LIMIT else ""
        parts += ["", f"Your answer was{cut}:", "", "~~~~~~", reply[:REPLY_LIMIT], "~~~~~~"]
    if repair.source is not None:
        parts += ["", "Your last code, which edits in your next answer apply to:", "", _code(repair.source)]
    return "\n".join(parts)


def _code(source: str) -> str:
    if len(source) > SOURCE_LIMIT:
        return f"(its source, {len(source)} characters long, is not shown)"
    return f"```python\n{source.strip(chr(10))}\n```"


def _shapes(shapes: Mapping[str, int]) -> str:
    if not shapes:
        return ""
    listed = ", ".join(f"{name} = {value}" for name, value in sorted(shapes.items()))
    return f"\nShape knobs of this run: {listed}. Held-out shapes differ: never hard-code a size.\n"


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _one_line(text: str, limit: int = 500) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit] + " ..."
