# attack: launches a real kernel, then spins forever in Python inside forward
# problem: elementwise
# expected: timeout
# defence: wall-clock limit on the worker; the worker is killed and the evaluation ends with status timeout
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def gate_kernel(x_ptr, y_ptr, out_ptr, n_elements, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_elements
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    y = tl.load(y_ptr + offs, mask=mask, other=0.0)
    tl.store(out_ptr + offs, x * tl.sigmoid(y), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, y):
        out = torch.empty_like(x)
        n = x.numel()
        gate_kernel[(triton.cdiv(n, 1024),)](x, y, out, n, BLOCK=1024)
        while True:
            pass
        return out
