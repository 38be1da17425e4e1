"""Dense fp32 matrix product: C = A @ B, A (M, K), B (K, N).

Precision: fp32 inputs, fp32 output, and the reference is true fp32 (PyTorch's
default torch.backends.cuda.matmul.allow_tf32 = False). Triton's tl.dot on
fp32 operands defaults to TF32 (10-bit mantissa), whose error here is ~1e-2
typical and ~0.1 at worst, so TF32 does NOT pass the cutoff below; a kernel
must use input_precision="ieee" (the seed does) or an fp32-accurate scheme
such as "tf32x3". Compute-bound: 2 * 4096^3 = 137 GFLOP at the default shape,
a few ms of fp32 (non-tensor-core) work on an H200.
"""

import torch
import torch.nn as nn

M = 4096
K = 4096
N = 4096

# Cutoff on max |out - ref|. A, B ~ N(0, 1), so each output is a sum of K
# products of unit variance: scale sqrt(K) = 64, mean |out| ~ 51, max ~ 330 at
# the default shape. fp32 accumulation-order differences grow with K: a plain
# sequential fp32 accumulation (the worst reasonable order) differs from an
# exact sum by up to ~1e-3 at K = 4096 (measured on 1M outputs; ~7e-8 * K
# over the full output), blocked/tree orders by less. TF32 inputs give errors
# of median ~1.3e-2 and max ~9e-2 at K = 4096 (60% of elements above 1e-2).
# 1e-2 is therefore ~10x above fp32 accumulation noise, rejects TF32, fp16 and
# bf16 (worse still), and is ~5000x below the typical output, so zeros, a
# constant, or a product that drops a K-tile (error ~sqrt(tile) ~ 5) all fail.
MAX_ABS_DIFF = 1e-2


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A, B):
        return A @ B


def get_inputs():
    A = torch.randn(M, K)
    B = torch.randn(K, N)
    return [A, B]


def get_init_inputs():
    return []
