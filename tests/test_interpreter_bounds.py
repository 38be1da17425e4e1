"""The CPU interpreter's bounds checks (platforms/interpreter_bounds.py).

Under Triton's interpreter an unmasked store past an output overwrote the
worker's heap: the kernel's own answer was right, and the next candidate in
the same worker died of ``corrupted double-linked list``. Every access must
now lie inside a tensor argument of the running launch.
"""

from __future__ import annotations

import pytest

from tests.conftest import PROBLEMS

from fitness import EvalSettings, Evaluator, Status

ATTACKS = PROBLEMS.parent / "tests" / "attacks"
HONEST = (ATTACKS / "honest_elementwise.py").read_text()
TAIL_STORE = (ATTACKS / "oob_store_unmasked_tail_elementwise.py").read_text()


def _gate(load_x: str, store: str, launch_block: int = 256) -> str:
    """An x * sigmoid(y) kernel with the given x load and store lines."""
    return f'''
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def gate_kernel(x_ptr, y_ptr, out_ptr, n_elements, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_elements
    x = {load_x}
    y = tl.load(y_ptr + offs, mask=mask, other=0.0)
    {store}


class ModelNew(nn.Module):
    def forward(self, x, y):
        out = torch.empty_like(x)
        n = x.numel()
        gate_kernel[(triton.cdiv(n, {launch_block}),)](x, y, out, n, BLOCK={launch_block})
        return out
'''


def test_a_stray_store_is_refused_and_the_worker_stays_sound(evaluators):
    evaluator = evaluators.get("elementwise")
    for _ in range(3):
        stray = evaluator.evaluate(TAIL_STORE)
        assert stray.status is Status.OUT_OF_BOUNDS, stray.reason
        assert "store out of bounds" in stray.reason and "past the end" in stray.reason
        honest = evaluator.evaluate(HONEST)
        assert honest.status is Status.ACCEPTED, honest.reason


@pytest.mark.parametrize("load_x, store, status", [
    # masked-off lanes may point anywhere: they are not accesses
    ("tl.load(x_ptr + offs + (~mask).to(tl.int64) * (1 << 40), mask=mask, other=0.0)",
     "tl.store(out_ptr + offs, x * tl.sigmoid(y), mask=mask)", Status.ACCEPTED),
    # one element before the start of x
    ("tl.load(x_ptr + offs - 1, mask=mask, other=0.0)",
     "tl.store(out_ptr + offs, x * tl.sigmoid(y), mask=mask)", Status.OUT_OF_BOUNDS),
    # a load that reaches into another tensor's memory through x's pointer
    ("tl.load(x_ptr + offs + n_elements * 64, mask=mask, other=0.0)",
     "tl.store(out_ptr + offs, x * tl.sigmoid(y), mask=mask)", Status.OUT_OF_BOUNDS),
])
def test_masked_in_lanes_are_checked_masked_off_lanes_are_not(evaluators, load_x, store, status):
    result = evaluators.get("elementwise").evaluate(_gate(load_x, store))
    assert result.status is status, result.reason


def test_a_kernel_that_unhooks_the_checks_is_caught_past_the_screen():
    source = (ATTACKS / "oob_unhook_bounds_check_elementwise.py").read_text()
    with Evaluator(PROBLEMS / "elementwise" / "reference.py", platform="cpu",
                   shapes={"batch_size": 4, "dim": 100}, settings=EvalSettings(screen=False)) as evaluator:
        result = evaluator.evaluate(source)
        assert result.status is Status.FORBIDDEN, result.reason
        assert "replaced triton interpreter _interpreter" in result.reason
        assert evaluator.evaluate(HONEST).status is Status.ACCEPTED


TENSOR_DESCRIPTORS = """
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def gate_kernel(x_ptr, y_ptr, out_ptr, n_rows, n_cols, BR: tl.constexpr, BC: tl.constexpr):
    pid_r = tl.program_id(0)
    pid_c = tl.program_id(1)
    xd = tl.make_tensor_descriptor(x_ptr, [n_rows, n_cols], [n_cols, 1], [BR, BC])
    yd = tl.make_tensor_descriptor(y_ptr, [n_rows, n_cols], [n_cols, 1], [BR, BC])
    od = tl.make_tensor_descriptor(out_ptr, [n_rows, n_cols], [n_cols, 1], [BR, BC])
    first = tl.load(x_ptr)  # a scalar pointer
    x = xd.load([pid_r * BR, pid_c * BC])
    y = yd.load([pid_r * BR, pid_c * BC])
    od.store([pid_r * BR, pid_c * BC], x * tl.sigmoid(y) + first * 0.0)


class ModelNew(nn.Module):
    def forward(self, x, y):
        out = torch.empty_like(x)
        r, c = x.shape
        gate_kernel[(triton.cdiv(r, 4), triton.cdiv(c, 64))](x, y, out, r, c, BR=4, BC=64)
        return out
"""


def test_tensor_descriptors_pass_the_checks_where_their_blocks_overhang():
    # 5 x 96 in 4 x 64 blocks: the descriptors clip the overhang, nothing is touched outside.
    # (No held-out shapes: a descriptor needs 16-byte aligned rows, which odd sizes are not.)
    with Evaluator(PROBLEMS / "elementwise" / "reference.py", platform="cpu",
                   shapes={"batch_size": 5, "dim": 96}, held_out=[]) as evaluator:
        result = evaluator.evaluate(TENSOR_DESCRIPTORS)
    assert result.status is Status.ACCEPTED, result.reason


@pytest.mark.parametrize("tamper, named", [
    ("interp._interpreter.__class__.store = interp._interpreter.__class__.load", "interpreter checks .store"),
    ("interp._interpreter._bounds = None", "interpreter checks ._bounds"),
])
def test_rewiring_the_checks_past_the_screen_is_caught(tamper, named):
    source = HONEST.replace("import triton.language as tl\n",
                            "import triton.language as tl\nimport triton.runtime.interpreter as interp\n")
    source = source.replace("    def forward(self, x, y):\n", f"    def forward(self, x, y):\n        {tamper}\n")
    assert tamper in source
    with Evaluator(PROBLEMS / "elementwise" / "reference.py", platform="cpu",
                   shapes={"batch_size": 4, "dim": 100}, settings=EvalSettings(screen=False)) as evaluator:
        result = evaluator.evaluate(source)
    assert result.status is Status.FORBIDDEN, result.reason
    assert named in result.reason
