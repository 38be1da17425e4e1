# attack: an unmasked Triton load 2**40 elements past the input - kills the process with SIGSEGV under the CPU interpreter (an illegal memory access on a GPU) - legal under the screen
# problem: elementwise
# expected: crashed | runtime_error | out_of_bounds
# defence: the worker is a separate process; under the CPU interpreter it dies of SIGSEGV (seen: rc -11) -> crashed, and the parent carries on. On a GPU (seen on an H200) it raises torch.AcceleratorError "illegal memory access" -> runtime_error (or crashed), and the poisoned CUDA context must not be reused: a fresh worker for the next candidate
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def wild_gate_kernel(x_ptr, y_ptr, out_ptr, n_elements, far, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_elements
    x = tl.load(x_ptr + offs + far)  # far = 2**40 elements: unmapped memory, no mask
    y = tl.load(y_ptr + offs, mask=mask, other=0.0)
    tl.store(out_ptr + offs, x * tl.sigmoid(y), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, y):
        out = torch.empty_like(x)
        n = x.numel()
        wild_gate_kernel[(triton.cdiv(n, 1024),)](x, y, out, n, 1 << 40, BLOCK=1024)
        return out
