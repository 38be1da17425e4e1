# attack: row softmax as exp(x) / sum(exp(x)), without subtracting the row's max first: exact for the problem's N(0, 1) draws, inf / inf = NaN once a value passes 88
# problem: softmax
# expected: wrong_off_distribution
# defence: the scaled probe (random signs at a scale drawn in secret from [100, 400)): exp overflows float32 there
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def naive_softmax_kernel(x_ptr, out_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    mask = offs < n_cols
    x = tl.load(x_ptr + row * n_cols + offs, mask=mask, other=-float("inf"))
    e = tl.exp(x)
    tl.store(out_ptr + row * n_cols + offs, e / tl.sum(e, axis=0), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        out = torch.empty_like(x)
        rows, cols = x.shape
        naive_softmax_kernel[(rows,)](x, out, cols, BLOCK=triton.next_power_of_2(cols))
        return out
