# attack: loads masked, the store not: the last block writes past the end of the output. Every element the caller sees is right; the bytes after the output (malloc's bookkeeping on a CPU, a neighbour tensor on a GPU) are overwritten, and a later candidate in the same worker pays for it
# problem: elementwise
# expected: out_of_bounds
# platform: cpu - the interpreter's accesses are checked (platforms/interpreter_bounds.py); a GPU has no such check in kevo yet and may accept this kernel
# defence: every address a load, store or atomic touches must lie inside a tensor argument of the launch; the store is refused before it happens
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def gate_tail_kernel(x_ptr, y_ptr, out_ptr, n_elements, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_elements
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    y = tl.load(y_ptr + offs, mask=mask, other=0.0)
    tl.store(out_ptr + offs, x * tl.sigmoid(y))


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, y):
        out = torch.empty_like(x)
        n = x.numel()
        gate_tail_kernel[(triton.cdiv(n, 256),)](x, y, out, n, BLOCK=256)
        return out
