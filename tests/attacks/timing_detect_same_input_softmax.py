# attack: detects a timing loop by seeing the very same input tensor object again and then returns the previous output object with no kernel launched at all - right numbers, near-zero time
# problem: softmax
# expected: accepted
# defence: fresh input clones for every call, timed calls included (then the cache never hits and this is an honest kernel: accepted with an honest runtime, comparable to honest_softmax.py). If timed calls reuse input objects, the previous output must be poisoned (-> nan) or launches counted in timed calls (-> forbidden)
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


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.last = None  # (input object, its address, the output returned for it)

    def forward(self, x):
        if self.last is not None and self.last[0] is x and self.last[1] == x.data_ptr():
            return self.last[2]  # timing loop detected: skip all work
        xc = x.contiguous()
        out = torch.empty_like(xc)
        n_rows, n_cols = xc.shape
        softmax_kernel[(n_rows,)](xc, out, n_cols, xc.stride(0), BLOCK=triton.next_power_of_2(n_cols))
        self.last = (x, x.data_ptr(), out)
        return out
