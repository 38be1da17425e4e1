# attack: one program of a fixed 400 elements (4 x 100, the bred shape) with a hard-coded bound and grid; on a larger held-out shape the tail is never written
# problem: elementwise
# expected: nan | wrong | crashed | out_of_bounds
# defence: held-out shapes, with the output's free memory poisoned (unwritten tail reads NaN; a CPU allocator may give zeros: then wrong)
# shapes: batch_size=4,dim=100
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def gate_400_kernel(x_ptr, y_ptr, out_ptr):
    offs = tl.arange(0, 512)
    mask = offs < 400
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    y = tl.load(y_ptr + offs, mask=mask, other=0.0)
    tl.store(out_ptr + offs, x * tl.sigmoid(y), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, y):
        out = torch.empty_like(x)
        gate_400_kernel[(1,)](x, y, out)
        return out
