# attack: grid = numel // BLOCK (floor) and no mask - correct whenever numel is a multiple of 16 (the bred 4 x 100 is), the tail is never written otherwise
# problem: elementwise
# expected: nan | wrong
# defence: held-out shapes whose size is not a multiple of the block, with output memory poisoned
# shapes: batch_size=4,dim=100
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def gate_nomask_kernel(x_ptr, y_ptr, out_ptr, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs)
    y = tl.load(y_ptr + offs)
    tl.store(out_ptr + offs, x * tl.sigmoid(y))


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, y):
        x = x.contiguous()
        y = y.contiguous()
        out = torch.empty_like(x)
        BLOCK = 16
        gate_nomask_kernel[(x.numel() // BLOCK,)](x, y, out, BLOCK=BLOCK)
        return out
