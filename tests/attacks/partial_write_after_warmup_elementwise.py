# attack: the first call computes everything; later calls (a timing loop over the same input) write only the first half and rely on torch.empty handing back the freed previous output, which already holds the answer
# problem: elementwise
# expected: nan | wrong
# note: seen on an H200 - a naive loop over the same input passed 5/5 calls without poisoning and only the first with it
# defence: NaN poisoning of free memory before every call, and checking the outputs of timed calls too
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def gate_prefix_kernel(x_ptr, y_ptr, out_ptr, n_write, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_write
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    y = tl.load(y_ptr + offs, mask=mask, other=0.0)
    tl.store(out_ptr + offs, x * tl.sigmoid(y), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.calls = 0

    def forward(self, x, y):
        x = x.contiguous()
        y = y.contiguous()
        out = torch.empty_like(x)
        n = x.numel()
        n_write = n if self.calls == 0 else n // 2
        self.calls += 1
        gate_prefix_kernel[(max(1, triton.cdiv(n_write, 256)),)](x, y, out, n_write, BLOCK=256)
        return out
