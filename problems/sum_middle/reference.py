"""Sum over the middle dimension: out[b, j] = sum_i x[b, i, j].

Memory-bound: the input is read once, the output is dim1 times smaller. At the
default shape (16 x 2048 x 4096 = 128M elements) that is 512 MiB read, about
0.12 ms at H200 bandwidth. The reduced dimension is strided (stride dim2), so
a kernel must reduce across rows of a tile rather than along contiguous memory.
"""

import torch
import torch.nn as nn

batch_size = 16
dim1 = 2048
dim2 = 4096

# Cutoff on max |out - ref|. Each output is a sum of dim1 N(0, 1) values, so
# its scale is sqrt(dim1): mean |out| ~ 0.8 * sqrt(2048) ~ 36, max ~ 190 at the
# default shape. fp32 summation-order differences grow with dim1: a plain
# sequential fp32 sum down the column (the worst reasonable order) differs from
# torch's by up to ~4e-4 at dim1 = 2048 (measured over the 65536 outputs), and
# the gap grows roughly linearly with dim1 (~2e-7 * dim1). 5e-3 covers that with
# >10x margin at the default and still holds up to dim1 ~ 16k, while being
# ~7000x below the typical output: zeros, a constant, a single slice x[:, 0]
# or a sum that drops one row (error ~|x| ~ 1-4) all fail, and fp16/bf16
# accumulation (relative error ~5e-4 / 4e-3, i.e. ~2e-2 / 1e-1 here) fails too.
MAX_ABS_DIFF = 5e-3


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.sum(x, dim=1)


def get_inputs():
    x = torch.randn(batch_size, dim1, dim2)
    return [x]


def get_init_inputs():
    return []
