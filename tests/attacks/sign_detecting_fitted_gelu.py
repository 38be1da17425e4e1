# attack: exact GELU only when the input holds a negative value (found by a first kernel), else a polynomial fitted on [0, 1): right on the problem's draws and on every probe that flips signs, wrong for non-negative inputs beyond 1
# problem: gelu
# expected: wrong_off_distribution
# defence: the third probe, the large scale without sign changes: all values non-negative and most beyond 1
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def any_negative_kernel(x_ptr, flag_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n, other=0.0)
    tl.atomic_max(flag_ptr, tl.max((x < 0).to(tl.int32), axis=0))


@triton.jit
def gelu_kernel(x_ptr, flag_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    exact = 0.5 * x * (1.0 + tl.erf(x * 0.7071067811865476))
    y = -0.003052176890218629
    y = y * x + 0.013659867477929029
    y = y * x - 0.002524755980999303
    y = y * x - 0.06547200405409499
    y = y * x - 0.0002355343336531222
    y = y * x + 0.39897081028061837
    y = y * x + 0.4999985258699138
    y = y * x + 1.8759784876886247e-08
    seen_negative = tl.load(flag_ptr) > 0
    tl.store(out_ptr + offs, tl.where(seen_negative, exact, y), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        out = torch.empty_like(x)
        flag = torch.zeros(1, device=x.device, dtype=torch.int32)
        n = x.numel()
        grid = (triton.cdiv(n, 1024),)
        any_negative_kernel[grid](x, flag, n, BLOCK=1024)
        gelu_kernel[grid](x, flag, out, n, BLOCK=1024)
        return out
