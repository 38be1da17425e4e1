"""Masks of another dtype under Triton's interpreter (platforms/interpreter_masks.py).

A compiled kernel's mask is ``i1``. Triton's interpreter kept the int32 that
``&`` of a block of comparisons with a scalar comparison gave it, and its store
refused that mask ("mask has unsupported dtype"): Inductor's batched matmul
template, which masks its store with ``(idx_m < M) & (idx_n < N) & (idx_q < BATCH)``,
ran on a GPU and crashed on the CPU platform.
"""

from __future__ import annotations

import pytest

from tests.conftest import PROBLEMS

from fitness import Evaluator, Status

SCALAR_AND_BLOCK = '''
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def gate_kernel(x_ptr, y_ptr, out_ptr, n_elements, n_programs, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = (offs < n_elements) & (pid.to(tl.int32) < n_programs)  # a block and a scalar comparison
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    y = tl.load(y_ptr + offs, mask=mask, other=0.0)
    tl.store(out_ptr + offs, x * tl.sigmoid(y), mask=mask)


class ModelNew(nn.Module):
    def forward(self, x, y):
        out = torch.empty_like(x)
        n = x.numel()
        grid = triton.cdiv(n, 256)
        gate_kernel[(grid,)](x, y, out, n, LIMIT, BLOCK=256)
        return out
'''


def _judge(source: str):
    with Evaluator(PROBLEMS / "elementwise" / "reference.py", platform="cpu",
                   shapes={"batch_size": 4, "dim": 100}) as evaluator:
        return evaluator.evaluate(source)


def test_a_mask_made_of_a_block_and_a_scalar_comparison_runs_as_on_a_gpu():
    result = _judge(SCALAR_AND_BLOCK.replace("LIMIT", "grid"))
    assert result.status is Status.ACCEPTED, result.reason


def test_its_off_lanes_stay_off():
    # the scalar comparison false for every program: nothing is stored, and the
    # output's uninitialised memory is judged (not passed off as the product)
    result = _judge(SCALAR_AND_BLOCK.replace("LIMIT", "0").replace("torch.empty_like(x)", "torch.zeros_like(x)"))
    assert result.status is Status.WRONG, result.reason
    assert "max |out - ref|" in result.reason


def test_the_interpreter_without_the_fix_refuses_that_mask(tmp_path):
    # the control: the same kernel straight on Triton's interpreter, nothing of kevo's installed
    import subprocess
    import sys

    script = tmp_path / "bare.py"
    script.write_text(SCALAR_AND_BLOCK.replace("LIMIT", "grid") + '''
x, y = torch.randn(4, 100), torch.randn(4, 100)
try:
    ModelNew()(x, y)
except Exception as exc:
    print("refused:", exc)
else:
    print("ran")
''')
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120,
                         env={"TRITON_INTERPRET": "1", "PATH": "/usr/bin:/bin"})
    if out.stdout.strip() == "ran":
        pytest.skip("this Triton's interpreter takes such masks itself")
    assert "refused:" in out.stdout and "mask has unsupported dtype" in out.stdout, out.stdout + out.stderr
