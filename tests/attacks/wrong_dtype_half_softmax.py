# attack: returns float16 (half the bytes to write, so faster on a memory-bound op); within a loose tolerance the values look right, and allclose/subtraction promote the dtype silently
# problem: softmax
# expected: wrong
# defence: exact dtype check (and the cutoff on what remains)
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def softmax_half_kernel(x_ptr, out_ptr, n_cols, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    v = tl.load(x_ptr + row * stride + cols, mask=mask, other=float("-inf"))
    e = tl.exp(v - tl.max(v, axis=0))
    tl.store(out_ptr + row * stride + cols, (e / tl.sum(e, axis=0)).to(tl.float16), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        x = x.contiguous()
        out = torch.empty(x.shape, device=x.device, dtype=torch.float16)
        n_rows, n_cols = x.shape
        softmax_half_kernel[(n_rows,)](x, out, n_cols, x.stride(0), BLOCK=triton.next_power_of_2(n_cols))
        return out
