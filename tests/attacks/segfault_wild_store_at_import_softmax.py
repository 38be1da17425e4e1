# attack: crashes the worker while it is still importing the candidate: a module-level launch stores 2**40 elements past a scratch buffer (SIGSEGV under the interpreter)
# problem: softmax
# expected: crashed | runtime_error | out_of_bounds
# defence: import happens inside the worker process, never in kevo's own process; CPU interpreter: SIGSEGV during import (seen) -> crashed; GPU: torch.AcceleratorError at import (seen on an H200) -> runtime_error or crashed, and a fresh worker afterwards
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def wild_store_kernel(p_ptr, far):
    offs = tl.arange(0, 16).to(tl.int64) + far
    tl.store(p_ptr + offs, tl.zeros([16], tl.float32))


@triton.jit
def softmax_kernel(x_ptr, out_ptr, n_cols, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    v = tl.load(x_ptr + row * stride + cols, mask=mask, other=float("-inf"))
    e = tl.exp(v - tl.max(v, axis=0))
    tl.store(out_ptr + row * stride + cols, e / tl.sum(e, axis=0), mask=mask)


SCRATCH = torch.empty(16, device="cuda" if torch.cuda.is_available() else "cpu")
wild_store_kernel[(1,)](SCRATCH, 1 << 40)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        x = x.contiguous()
        out = torch.empty_like(x)
        n_rows, n_cols = x.shape
        softmax_kernel[(n_rows,)](x, out, n_cols, x.stride(0), BLOCK=triton.next_power_of_2(n_cols))
        return out
