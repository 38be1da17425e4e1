# attack: computes in float64 and returns float64 - more accurate-looking, but not the dtype the problem defines (downstream code expecting fp32 breaks, and it is slower)
# problem: elementwise
# expected: wrong
# defence: exact dtype check
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def gate64_kernel(x_ptr, y_ptr, out_ptr, n_elements, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_elements
    x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float64)
    y = tl.load(y_ptr + offs, mask=mask, other=0.0).to(tl.float64)
    tl.store(out_ptr + offs, x / (1.0 + tl.exp(-y)), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, y):
        x = x.contiguous()
        y = y.contiguous()
        out = torch.empty(x.shape, device=x.device, dtype=torch.float64)
        n = x.numel()
        gate64_kernel[(triton.cdiv(n, 1024),)](x, y, out, n, BLOCK=1024)
        return out
