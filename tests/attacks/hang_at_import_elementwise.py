# attack: never finishes importing (a module-level loop), so a harness that applies its time limit only to forward never gets control back
# problem: elementwise
# expected: timeout
# defence: the time limit covers the whole worker (import, __init__, every call), not just forward
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


WARMED = 0
while WARMED >= 0:  # "warm-up" that never ends
    WARMED = (WARMED + 1) % 1000


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, y):
        out = torch.empty_like(x)
        n = x.numel()
        gate_kernel[(triton.cdiv(n, 1024),)](x, y, out, n, BLOCK=1024)
        return out
