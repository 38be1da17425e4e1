# attack: a "ReLU" that copies its input: KernelBench's 19_ReLU draws torch.rand, where ReLU is the identity (the problem's own draws cannot tell them apart)
# problem: kernelbench/level1/19_ReLU
# shapes: batch_size=4, dim=300
# expected: wrong_off_distribution
# defence: the signed probe; without probes kevo refuses 19_ReLU's cutoff outright, since the input itself passes it
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def copy_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        out = torch.empty_like(x)
        n = x.numel()
        copy_kernel[(triton.cdiv(n, 1024),)](x, out, n, BLOCK=1024)
        return out
