"""Matrix-vector product: y = A @ x, A (M, K), x (K, 1), y (M, 1).

Memory-bound: A is read once (M * K fp32), x and y are small. At the default
shape (16384 x 8192 = 128M elements) that is 512 MiB read, about 0.12 ms at
H200 bandwidth.
"""

import torch
import torch.nn as nn

M = 16384
K = 8192

# Cutoff on max |out - ref|. A, x ~ N(0, 1), so each output is a sum of K
# products of unit variance: scale sqrt(K) ~ 90, mean |out| ~ 72, max ~ 380 at
# the default shape. fp32 accumulation-order differences grow with K: a plain
# sequential fp32 accumulation over K (the worst reasonable order) differs from
# torch's by up to ~1.3e-3 at K = 8192 (measured over the 16384 outputs);
# blocked orders (per-lane partial sums + a final tree) are several times
# closer. 1e-2 leaves ~8x margin over that, and is ~7000x below the typical
# output: zeros, a constant, or a sum that drops a K-block fail by O(1-10).
# TF32 (error median ~1.8e-2, max ~0.1 at K = 8192), fp16 and bf16 fail too.
MAX_ABS_DIFF = 1e-2


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A, x):
        return A @ x


def get_inputs():
    A = torch.randn(M, K)
    x = torch.randn(K, 1)
    return [A, x]


def get_init_inputs():
    return []
