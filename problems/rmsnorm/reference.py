"""RMSNorm over the last dimension with a learnable weight:
out = x * rsqrt(mean(x^2, -1) + eps) * weight.

Memory-bound: one fp32 read (two if the row is re-read) and one fp32 write per
element. At the default shape (8192 x 8192 = 64M elements) that is 512 MiB of
traffic, about 0.15 ms at H200 bandwidth.
"""

import torch
import torch.nn as nn

batch_size = 8192
dim = 8192
eps = 1e-6

# Cutoff on max |out - ref|. x ~ N(0, 1), so x * rsqrt(mean(x^2)) is ~N(0, 1);
# the weight is N(0, 1) too (not ones, so a kernel that ignores or misindexes
# it is caught). Outputs: mean |out| ~ 0.64, max |out| ~ 15-20 at the default
# shape. A correct fp32 kernel differs only through the order of the sum of
# squares and the rsqrt approximation: a relative error of a few 1e-7 on the
# scale, i.e. ~5e-6 absolute on the largest outputs. 1e-4 leaves ~20x margin
# and is ~6000x below the typical output: all zeros, a constant, the input x,
# or a missing weight miss by O(1), and fp16/bf16 arithmetic (relative error
# ~5e-4 / 4e-3, i.e. > 1e-2 absolute on the large outputs) fails too.
MAX_ABS_DIFF = 1e-4


class Model(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(dim))
        self.eps = eps

    def forward(self, x):
        rms_inv = torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + self.eps)
        return x * rms_inv * self.weight


def get_inputs():
    x = torch.randn(batch_size, dim)
    return [x]


def get_init_inputs():
    return [dim, eps]
