# attack: skips the output allocation: writes x * sigmoid(y) into x in place and returns x (values are right, the caller's input is destroyed)
# problem: elementwise
# expected: mutated_input
# defence: inputs cloned per call and compared bit-for-bit with a pristine copy after the call
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def gate_inplace_kernel(x_ptr, y_ptr, n_elements, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_elements
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    y = tl.load(y_ptr + offs, mask=mask, other=0.0)
    tl.store(x_ptr + offs, x * tl.sigmoid(y), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, y):
        n = x.numel()
        gate_inplace_kernel[(triton.cdiv(n, 1024),)](x, y, n, BLOCK=1024)
        return x
