# attack: BLOCK = next_power_of_2(dim) with unmasked loads - right only when dim is a power of two (bred at dim=128); otherwise each row's max/sum also take in the start of the next row
# problem: softmax
# expected: wrong | nan | out_of_bounds
# defence: held-out shapes with a dim that is not a power of two (nan is possible if the out-of-row read past the tensor hits poisoned memory); the CPU interpreter refuses the last row's read past the tensor: out_of_bounds
# shapes: batch_size=4,dim=128
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def softmax_nomask_kernel(x_ptr, out_ptr, n_cols, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    v = tl.load(x_ptr + row * stride + cols)  # no mask: reads past the row (and, for the last row, past the tensor)
    e = tl.exp(v - tl.max(v, axis=0))
    tl.store(out_ptr + row * stride + cols, e / tl.sum(e, axis=0), mask=cols < n_cols)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        x = x.contiguous()
        out = torch.empty_like(x)
        n_rows, n_cols = x.shape
        softmax_nomask_kernel[(n_rows,)](x, out, n_cols, x.stride(0), BLOCK=triton.next_power_of_2(n_cols))
        return out
