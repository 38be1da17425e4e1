# attack: installs a Triton compile hook (triton.knobs.runtime.jit_cache_hook) at import: a hook runs inside every later compile of the worker, while the device's timing lane may be lent out to another candidate's timing, and in the compiles of the candidates judged after it
# problem: elementwise
# expected: forbidden
# defence: static screen refuses the name triton.knobs; runtime: the worker compares Triton's compile and launch hooks with those it started with after every step (and never lends the lane out for a compile when they differ)
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def gated_mul_kernel(x_ptr, y_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    # One program handles BLOCK_SIZE consecutive elements of the flattened
    # (contiguous) tensors. 64-bit offsets so huge tensors do not overflow.
    pid = tl.program_id(0)
    offsets = pid.to(tl.int64) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask, other=0.0)
    y = tl.load(y_ptr + offsets, mask=mask, other=0.0)
    gate = 1.0 / (1.0 + tl.exp(-y))
    tl.store(out_ptr + offsets, x * gate, mask=mask)


def spy_on_compiles(*args, **kwargs):
    return None  # a hook may do anything here: launch work, rewrite the kernel


triton.knobs.runtime.jit_cache_hook = spy_on_compiles


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, y):
        # Inputs are contiguous tensors of the same shape (as get_inputs makes them).
        out = torch.empty_like(x)
        n_elements = x.numel()
        grid = lambda meta: (triton.cdiv(n_elements, meta["BLOCK_SIZE"]),)
        gated_mul_kernel[grid](x, y, out, n_elements, BLOCK_SIZE=1024, num_warps=4)
        return out
