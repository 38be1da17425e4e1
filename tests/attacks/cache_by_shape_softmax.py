# attack: caches the first output per input shape (dict keyed by shape) and returns it for every later call of that shape
# problem: softmax
# expected: wrong
# defence: checks at every call with different inputs of the same shape (several fixed seeds + fresh secret seeds)
import torch
import torch.nn as nn
import triton
import triton.language as tl


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
        self.by_shape = {}

    def forward(self, x):
        key = (tuple(x.shape), str(x.dtype), str(x.device))
        out = torch.empty_like(x, memory_format=torch.contiguous_format)
        n = out.numel()
        if key in self.by_shape:
            # the only Triton work: copying the stale answer into a fresh buffer
            copy_kernel[(triton.cdiv(n, 1024),)](self.by_shape[key], out, n, BLOCK=1024)
            return out
        x = x.contiguous()
        n_rows, n_cols = x.shape
        softmax_kernel[(n_rows,)](x, out, n_cols, x.stride(0), BLOCK=triton.next_power_of_2(n_cols))
        self.by_shape[key] = out.clone()
        return out
