"""Softsign (x / (1 + |x|)) of KernelBench's 30_Softsign, as one plain Triton kernel: a seed for a search."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def softsign_kernel(x_ptr, y_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    # 64-bit offsets: KernelBench's own shapes (and larger held-out ones) pass 2**31 elements.
    offsets = tl.program_id(0).to(tl.int64) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask, other=0.0)
    y = x / (1.0 + tl.abs(x))
    tl.store(y_ptr + offsets, y, mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        n_elements = x.numel()
        grid = lambda meta: (triton.cdiv(n_elements, meta["BLOCK_SIZE"]),)
        softsign_kernel[grid](x, y, n_elements, BLOCK_SIZE=1024, num_warps=4)
        return y
