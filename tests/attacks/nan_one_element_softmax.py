# attack: correct softmax except a single NaN in row 0, column 0; max-of-diff checks see NaN and (NaN > tol) is False
# problem: softmax
# expected: nan
# defence: NaN-safe comparison per element (not just a max that NaN silently poisons)
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def softmax_one_nan_kernel(x_ptr, out_ptr, n_cols, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    v = tl.load(x_ptr + row * stride + cols, mask=mask, other=float("-inf"))
    e = tl.exp(v - tl.max(v, axis=0))
    out = e / tl.sum(e, axis=0)
    poison = (cols == 0) & (row == 0)
    out = tl.where(poison, out * float("nan"), out)
    tl.store(out_ptr + row * stride + cols, out, mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        x = x.contiguous()
        out = torch.empty_like(x)
        n_rows, n_cols = x.shape
        BLOCK = triton.next_power_of_2(n_cols)
        softmax_one_nan_kernel[(n_rows,)](x, out, n_cols, x.stride(0), BLOCK=BLOCK)
        return out
