# attack: honest for the first 3 calls (what a checker that validates once or a few times sees), then returns zeros from a cheap kernel - fast and wrong during warm-up and timing
# problem: elementwise
# expected: wrong
# defence: every call is checked, the timed ones too (kevo makes more than 3 forward calls: fixed seeds, fresh seeds, held-out shapes, timing)
import torch
import torch.nn as nn
import triton
import triton.language as tl

HONEST_CALLS = 3


@triton.jit
def gate_kernel(x_ptr, y_ptr, out_ptr, n_elements, HONEST: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_elements
    if HONEST:
        x = tl.load(x_ptr + offs, mask=mask, other=0.0)
        y = tl.load(y_ptr + offs, mask=mask, other=0.0)
        out = x * tl.sigmoid(y)
    else:
        out = tl.zeros([BLOCK], tl.float32)
    tl.store(out_ptr + offs, out, mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.calls = 0

    def forward(self, x, y):
        self.calls += 1
        x = x.contiguous()
        y = y.contiguous()
        out = torch.empty_like(x)
        n = x.numel()
        gate_kernel[(triton.cdiv(n, 1024),)](x, y, out, n, HONEST=self.calls <= HONEST_CALLS, BLOCK=1024)
        return out
