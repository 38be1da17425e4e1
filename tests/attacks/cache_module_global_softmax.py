# attack: the cache lives in a module-level dict (item assignment, no attribute assignment), so it survives a fresh ModelNew per input set in the same worker
# problem: softmax
# expected: wrong
# defence: checks at every call with different inputs; state outside self must not help (a fresh instance, or better a fresh process, per check does not suffice alone)
import torch
import torch.nn as nn
import triton
import triton.language as tl

SEEN = {}


@triton.jit
def softmax_kernel(x_ptr, out_ptr, n_cols, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    v = tl.load(x_ptr + row * stride + cols, mask=mask, other=float("-inf"))
    e = tl.exp(v - tl.max(v, axis=0))
    tl.store(out_ptr + row * stride + cols, e / tl.sum(e, axis=0), mask=mask)


@triton.jit
def copy_kernel(src_ptr, dst_ptr, n_elements, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_elements
    tl.store(dst_ptr + offs, tl.load(src_ptr + offs, mask=mask), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        key = tuple(x.shape)
        out = torch.empty(x.shape, device=x.device, dtype=x.dtype)
        n = out.numel()
        if key in SEEN:
            copy_kernel[(triton.cdiv(n, 1024),)](SEEN[key], out, n, BLOCK=1024)
            return out
        x = x.contiguous()
        softmax_kernel[(x.shape[0],)](x, out, x.shape[1], x.stride(0), BLOCK=triton.next_power_of_2(x.shape[1]))
        SEEN[key] = out.clone()
        return out
