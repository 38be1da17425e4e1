"""Gated elementwise product: out = x * sigmoid(y).

Memory-bound: two fp32 reads and one fp32 write per element. At the default
shape (4096 x 16384 = 64M elements) that is 768 MiB of traffic, about 0.2 ms
at H200 bandwidth.
"""

import torch
import torch.nn as nn

batch_size = 4096
dim = 16384

# Cutoff on max |out - ref|. Inputs are fp32 N(0, 1), so outputs are
# x * sigmoid(y): mean |out| is about 0.4 and max |out| over 64M elements is
# about 5 (it is at most max |x|). A correct fp32 kernel differs from torch
# only through how sigmoid/exp is evaluated (hardware exp2 approximations,
# 1 / (1 + exp(-y)) vs. other forms): a few ulp of relative error, i.e. about
# 5e-7 * |x| <= ~3e-6 in absolute terms. 1e-5 leaves margin for that while
# sitting ~40000x below the typical output: all zeros, a constant, or the
# input x itself miss by O(1), and fp16/bf16 arithmetic (relative error
# ~5e-4 / 4e-3, i.e. ~2e-3 / 2e-2 absolute here) is rejected too.
MAX_ABS_DIFF = 1e-5


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, y):
        return x * torch.sigmoid(y)


def get_inputs():
    x = torch.randn(batch_size, dim)
    y = torch.randn(batch_size, dim)
    return [x, y]


def get_init_inputs():
    return []
