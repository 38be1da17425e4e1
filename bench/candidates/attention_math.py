"""Scaled dot-product attention as its math: the query and key each scaled by D^-1/4, a float32
matmul, a softmax and a matmul (what an attention kernel that does not fuse computes). A candidate
for ``bench/probe_rounding.py`` against 97_ScaledDotProductAttention's fused reference."""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        s = q.shape[-1] ** -0.25
        return torch.softmax((q * s) @ (k * s).transpose(-1, -2), dim=-1) @ v
