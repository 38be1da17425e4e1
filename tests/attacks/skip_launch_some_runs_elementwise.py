# attack: batch-and-skip: two launches (sigmoid, then the product) on most calls, but from the 11th call on, one call in 7 launches only a token kernel and returns the previous output - rare enough that the timed runs drawn for checking miss it most of the time on a GPU's window
# problem: elementwise
# expected: forbidden
# timed_runs: 14
# defence: launches counted per timed run (and per warm-up run after the first): every run of the window must launch as many Triton kernels, so the first skipped run is refused before its outputs are looked at, checked or not
import torch
import torch.nn as nn
import triton
import triton.language as tl

CALLS = [0]  # a module-level counter survives the model being rebuilt per shape


@triton.jit
def sigmoid_kernel(y_ptr, out_ptr, n_elements, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_elements
    tl.store(out_ptr + offs, tl.sigmoid(tl.load(y_ptr + offs, mask=mask, other=0.0)), mask=mask)


@triton.jit
def mul_kernel(x_ptr, s_ptr, out_ptr, n_elements, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_elements
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    s = tl.load(s_ptr + offs, mask=mask, other=0.0)
    tl.store(out_ptr + offs, x * s, mask=mask)


@triton.jit
def token_kernel(scratch_ptr):
    tl.store(scratch_ptr, 0.0)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.last = None

    def forward(self, x, y):
        CALLS[0] += 1
        if self.last is not None and CALLS[0] > 10 and CALLS[0] % 7 == 0:
            token_kernel[(1,)](torch.empty(1, device=x.device))
            return self.last  # skipped: the work of this run was "batched" into an earlier one
        x, y = x.contiguous(), y.contiguous()
        s = torch.empty_like(y)
        out = torch.empty_like(x)
        n = x.numel()
        grid = (triton.cdiv(n, 1024),)
        sigmoid_kernel[grid](y, s, n, BLOCK=1024)
        mul_kernel[grid](x, s, out, n, BLOCK=1024)
        self.last = out
        return out
