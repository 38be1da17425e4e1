"""Every defence has a kernel that attacks it (tests/attacks/).

Each attack file says in its header which problem it targets, what it tries,
and the verdict the evaluator must reach. The honest kernels beside them must
be accepted: a defence that refuses honest work is no defence.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.conftest import SMALL_SHAPES

from fitness import CutoffError, EvalSettings, Status
from platforms import TimingSettings

ATTACKS = Path(__file__).parent / "attacks"
# A hang must cost little test time; honest steps take a few seconds here.
HANG_TIMEOUT_S = 15


def header(path: Path) -> dict[str, str]:
    fields = {}
    for line in path.read_text().splitlines():
        match = re.match(r"#\s*(attack|problem|expected|defence|shapes|max_abs_diff|platform|timed_runs):\s*(.*)", line)
        if match:
            fields[match.group(1)] = match.group(2).strip()
        elif line.strip() and not line.startswith("#"):
            break
    return fields


def attack_files() -> list[Path]:
    return sorted(p for p in ATTACKS.glob("*.py") if header(p).get("expected"))


def parse_shapes(text: str) -> dict[str, int]:
    return {k.strip(): int(v) for k, v in (item.split("=") for item in text.split(",") if item.strip())}


@pytest.mark.parametrize("path", attack_files(), ids=lambda p: p.stem)
def test_attack_gets_its_verdict(evaluators, device_kind, path):
    info = header(path)
    if info.get("platform", "").startswith("gpu") and device_kind == "cpu":
        pytest.skip("the attack only triggers on a GPU")
    if info.get("platform", "").startswith("cpu") and device_kind != "cpu":
        pytest.skip("the defence is the CPU interpreter's (see the attack's header)")
    expected = {s.strip() for s in info["expected"].split("|")}
    problem = info["problem"]
    shapes = parse_shapes(info["shapes"]) if "shapes" in info else SMALL_SHAPES[problem]
    kwargs = {}
    if "max_abs_diff" in info:
        kwargs["max_abs_diff"] = float(info["max_abs_diff"])
    if "timeout" in expected:
        kwargs["settings"] = EvalSettings(timeout_s=HANG_TIMEOUT_S)
    if "timed_runs" in info:
        runs = int(info["timed_runs"])
        kwargs["settings"] = EvalSettings(timing=TimingSettings(warmup_ms=0, window_ms=0, min_runs=runs, max_runs=runs))
    if "unusable_cutoff" in expected:
        with pytest.raises(CutoffError, match=r"max \|ref\|"):
            evaluators.get(problem, platform=device_kind, shapes=shapes, **kwargs)
        return
    result = evaluators.get(problem, platform=device_kind, shapes=shapes, **kwargs).evaluate(path.read_text())
    assert result.status.value in expected, f"{info.get('attack')}: got {result.status.value}: {result.reason}"
    if result.status is not Status.ACCEPTED:
        assert result.reason, "a refusal says why"


def test_a_candidate_exception_that_refuses_to_print_is_still_described():
    from fitness.refusal import describe as _describe

    class Hostile(Exception):
        def __str__(self):
            raise RuntimeError("no")

    assert _describe(Hostile()) == "Hostile"


def test_the_catalogue_in_the_docs_lists_every_attack_with_its_verdicts():
    doc = (Path(__file__).parents[1] / "docs" / "EVALUATION.md").read_text()
    rows = {}
    for match in re.finditer(r"^\| `([\w]+\.py)` \| .* \| ([^|]+) \|$", doc, re.MULTILINE):
        rows[match.group(1)] = {v.strip().strip("`") for v in match.group(2).split(" or ")}
    for path in attack_files():
        expected = {s.strip() for s in header(path)["expected"].split("|")}
        assert rows.get(path.name) == expected, f"docs/EVALUATION.md's row for {path.name}"


def test_a_changed_triton_hook_is_refused_by_the_worker_itself(device_kind):
    """The compile-hook attack with the static screen off: the worker's own check refuses it."""
    from fitness import Evaluator
    from tests.conftest import PROBLEMS

    source = (ATTACKS / "compile_hook_knob_elementwise.py").read_text()
    with Evaluator(PROBLEMS / "elementwise" / "reference.py", platform=device_kind,
                   shapes=SMALL_SHAPES["elementwise"], settings=EvalSettings(screen=False)) as evaluator:
        result = evaluator.evaluate(source)
    assert result.status is Status.FORBIDDEN, result.reason
    assert "Triton's compile or launch hooks" in result.reason


def test_a_patched_device_trace_is_refused_by_the_worker_itself(device_kind):
    """The device-trace attack with the static screen off: the audit hook refuses its read of
    ``__code__``; without that line, and with runs() alone replaced, the tamper watch on
    DeviceTimeline (the timer reads each run's span and busy time from its runs()) refuses it."""
    from fitness import Evaluator
    from tests.conftest import PROBLEMS

    source = (ATTACKS / "patch_timeline_runs_elementwise.py").read_text()
    for line in ("    timeline.runs.__code__ = fast_runs.__code__\n", "    timeline.spans = fast_spans\n"):
        assert line in source
        source = source.replace(line, "")  # runs() alone replaced: what the timer reads
    with Evaluator(PROBLEMS / "elementwise" / "reference.py", platform=device_kind,
                   shapes=SMALL_SHAPES["elementwise"], settings=EvalSettings(screen=False)) as evaluator:
        result = evaluator.evaluate(source)
    assert result.status is Status.FORBIDDEN, result.reason
    assert "DeviceTimeline.runs" in result.reason, result.reason
