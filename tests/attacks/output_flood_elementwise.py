# attack: writes 64 MiB to stdout at import and 1 MiB at every call (an honest kernel otherwise): a parent that reads the worker's pipes only after it exits deadlocks (pipe full -> timeout), one that buffers everything can run out of memory, and the flood may swamp kevo's own output
# problem: elementwise
# expected: accepted
# defence: the parent drains the worker's stdout/stderr continuously (or sends them to files) and keeps only a bounded tail; nothing of it reaches kevo verify's stdout
import torch
import torch.nn as nn
import triton
import triton.language as tl

LINE = "FLOOD " * 170 + "\n"  # ~1 KiB
print(LINE * (64 * 1024), end="", flush=True)


@triton.jit
def gate_kernel(x_ptr, y_ptr, out_ptr, n_elements, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_elements
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    y = tl.load(y_ptr + offs, mask=mask, other=0.0)
    tl.store(out_ptr + offs, x * tl.sigmoid(y), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, y):
        print(LINE * 1024, end="", flush=True)
        x = x.contiguous()
        y = y.contiguous()
        out = torch.empty_like(x)
        n = x.numel()
        gate_kernel[(triton.cdiv(n, 1024),)](x, y, out, n, BLOCK=1024)
        return out
