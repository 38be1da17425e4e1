# attack: hangs in __init__ and swallows KeyboardInterrupt / any BaseException raised into it, so SIGINT (or a Python-level timeout exception) cannot stop it
# problem: softmax
# expected: timeout
# defence: the time limit must end the worker from outside with SIGKILL (after SIGTERM at most), never rely on an exception raised inside it
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def softmax_kernel(x_ptr, out_ptr, n_cols, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    v = tl.load(x_ptr + row * stride + cols, mask=mask, other=float("-inf"))
    e = tl.exp(v - tl.max(v, axis=0))
    tl.store(out_ptr + row * stride + cols, e / tl.sum(e, axis=0), mask=mask)


def stubborn_wait():
    while True:
        try:
            while True:
                pass
        except BaseException:
            continue


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        stubborn_wait()

    def forward(self, x):
        x = x.contiguous()
        out = torch.empty_like(x)
        n_rows, n_cols = x.shape
        softmax_kernel[(n_rows,)](x, out, n_cols, x.stride(0), BLOCK=triton.next_power_of_2(n_cols))
        return out
