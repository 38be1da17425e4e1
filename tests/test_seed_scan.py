"""A scan split along its row (Inductor's ``split_scan`` kernels), as a seed (issue 28).

Where a scan's rows are few for the device, Inductor splits each row across
programs that hand their partial sums on through a look-back workspace
(``triton_helpers.exclusive_scan_decoupled_lookback``), launched over a
``SplitScanGrid``. The conversion refused that grid, so 89_cumsum to
93_masked_cumsum got no seed wherever Inductor split (on this CPU at every
batch tried). The recording is real Inductor output on the CPU
(``tests/fixtures/seed_variants/record.py``, 89_cumsum at batch_size=2, rows
of 32768).
"""

from __future__ import annotations

import ast

from tests.test_seed_variants import converted, evaluator_name, recording

from fitness.boundary.screen import screen

CUMSUM = "89_cumsum"
KERNEL = "triton_spl_fused_cumsum_0"


def test_a_split_scan_becomes_a_seed_launched_a_block_of_a_row_a_program():
    source = converted(CUMSUM, "default")
    call = next(n for n in ast.parse(source).body if isinstance(n, ast.FunctionDef) and n.name == "_inductor_call")
    text = ast.unparse(call)
    # blocks of a row along x, rows along y (Inductor's SplitScanGrid), the workspace zeroed first
    assert f"{KERNEL}[triton.cdiv(s27, {KERNEL}_R0_BLOCK), s77]" in text
    assert "workspace_0.zero_()" in text
    assert "def helper_exclusive_scan_decoupled_lookback" in source
    verdict = screen(source)
    assert verdict.ok, verdict.reason


def test_its_blocks_stay_at_least_the_smallest_its_workspace_was_sized_for():
    source = converted(CUMSUM, "default")
    offered = [c["kwargs"]["R0_BLOCK"] for c in recording(CUMSUM, "default")["kernels"][KERNEL]["configs"]]
    space = next(n.value for n in ast.parse(source).body if isinstance(n, ast.Assign)
                 and getattr(n.targets[0], "id", "") == "KEVO_SPACE")
    blocks = ast.literal_eval(space)[f"_inductor_call.{KERNEL}_R0_BLOCK"]
    assert min(blocks) >= min(offered) and max(blocks) > min(blocks)


def test_the_split_scan_seed_is_accepted_by_the_judge(evaluators):
    entry = recording(CUMSUM, "default")
    result = evaluators.get(evaluator_name(CUMSUM), shapes=entry["shapes"]).evaluate(converted(CUMSUM, "default"))
    assert result.status.value == "accepted", result.reason
