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
import string
from collections.abc import Mapping
from typing import Any

from operators.llm.request import LLM_CROSSOVER, LLM_MUTATION, LLM_SEED, ParentInfo, ProblemContext, Request
from platforms.profiling.classes import CLASS_LABELS

_TEMPLATES = {LLM_MUTATION: "mutation.md", LLM_CROSSOVER: "crossover.md", LLM_SEED: "seed.md"}


@functools.cache
def template(name: str) -> string.Template:
    """The prompt template ``operators/prompts/NAME``, shipped with the package."""
    text = importlib.resources.files("operators").joinpath("prompts", name).read_text(encoding="utf-8")
    return string.Template(text)


def build_messages(request: Request, context: ProblemContext) -> list[dict[str, str]]:
    """The chat messages (system, then user) that ask for ``request``."""
    values = {
        "reference": context.reference_source.strip("\n"),
        "shapes": _shapes(context.shapes),
        "cutoff": f"{context.cutoff:g}",
        "guidance": context.guidance.strip(),
        "focus": template(f"focus_{request.focus.value}.md").template.strip(),
        "answer_format": template("answer_file.md" if request.kind == LLM_SEED else "answer_edits.md")
        .template.strip(),
    }
    if request.kind == LLM_MUTATION:
        values["parent"] = render_parent(request.parents[0])
    elif request.kind == LLM_CROSSOVER:
        values["parent_a"] = render_parent(request.parents[0])
        values["parent_b"] = render_parent(request.parents[1])
    user = template(_TEMPLATES[request.kind]).substitute(values)
    return [
        {"role": "system", "content": template("system.md").template.strip()},
        {"role": "user", "content": user.strip() + "\n"},
    ]


def render_parent(parent: ParentInfo) -> str:
    """A parent's source, its evaluation and its profile, as the prompt shows them."""
    parts = [f"```python\n{parent.source.strip(chr(10))}\n```", "", f"Evaluation: {describe_result(parent.result)}"]
    if parent.bottleneck:
        parts.append(f"Profiler's bottleneck class: {CLASS_LABELS.get(parent.bottleneck, parent.bottleneck)}")
    if parent.profile:
        parts += ["Profiler's summary:", "```", parent.profile.strip(), "```"]
    return "\n".join(parts)


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
        parts.append(f"reason: {_one_line(str(result['reason']))}")
    return "; ".join(parts)


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
