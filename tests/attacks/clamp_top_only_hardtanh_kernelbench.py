# attack: HardTanh with only its upper clamp (min(x, 1)): torch.rand never draws a value below -1, so the lower clamp never shows on the problem's own draws, nor on the signed probe in (-1, 1)
# problem: kernelbench/level1/32_HardTanh
# shapes: batch_size=4, dim=300
# expected: wrong_off_distribution
# defence: the scaled probe (random signs at a large scale) reaches below -1
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def half_hardtanh_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    tl.store(out_ptr + offs, tl.minimum(x, 1.0), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        out = torch.empty_like(x)
        n = x.numel()
        half_hardtanh_kernel[(triton.cdiv(n, 1024),)](x, out, n, BLOCK=1024)
        return out
