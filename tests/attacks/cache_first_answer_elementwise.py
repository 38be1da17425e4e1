# attack: computes (correctly) once, keeps the output in self, and returns that first answer on every later call (plus a token launch)
# problem: elementwise
# expected: wrong
# defence: checks at every call with different inputs (fixed seeds + fresh secret seeds + held-out shapes), including timed calls
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def gate_kernel(x_ptr, y_ptr, out_ptr, n_elements, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_elements
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    y = tl.load(y_ptr + offs, mask=mask, other=0.0)
    tl.store(out_ptr + offs, x * tl.sigmoid(y), mask=mask)


@triton.jit
def token_kernel(scratch_ptr):
    tl.store(scratch_ptr, 0.0)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.first = None

    def forward(self, x, y):
        if self.first is None:
            x = x.contiguous()
            y = y.contiguous()
            out = torch.empty_like(x)
            n = x.numel()
            gate_kernel[(triton.cdiv(n, 1024),)](x, y, out, n, BLOCK=1024)
            self.first = out.clone()
            return out
        scratch = torch.empty(1, device=x.device, dtype=torch.float32)
        token_kernel[(1,)](scratch)
        # hand back a fresh copy each time, so a caller that poisons the previous output does not see NaN
        return self.first.clone()
