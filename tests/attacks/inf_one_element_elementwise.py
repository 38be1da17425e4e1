# attack: correct output except one +inf (last element); inf - ref = inf and some comparisons (isclose with equal_nan, clamp) mishandle it
# problem: elementwise
# expected: nan
# defence: finiteness check (non-finite output where the reference is finite is status nan)
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def gate_with_inf_kernel(x_ptr, y_ptr, out_ptr, n_elements, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_elements
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    y = tl.load(y_ptr + offs, mask=mask, other=0.0)
    out = x * tl.sigmoid(y)
    out = tl.where(offs == n_elements - 1, float("inf"), out)
    tl.store(out_ptr + offs, out, mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, y):
        x = x.contiguous()
        y = y.contiguous()
        out = torch.empty_like(x)
        n = x.numel()
        gate_with_inf_kernel[(triton.cdiv(n, 1024),)](x, y, out, n, BLOCK=1024)
        return out
