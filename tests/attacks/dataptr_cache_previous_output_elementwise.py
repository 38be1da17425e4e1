# attack: keys a module-level cache on its inputs' addresses (data_ptr): when an input of a call lies where one of the last call's lay, it launches its kernel with nothing to do and returns the last output, as if the same inputs had come back - the caching allocator hands a freed block out again, so fresh inputs tend to land at the last ones' addresses
# problem: elementwise
# expected: accepted
# defence: inputs at a fresh address every call, timed runs included (fitness.worker.timed_step.apart: a draw that lands on the last draw's addresses is held while the inputs are drawn again elsewhere), so the cache never hits and the kernel does honest work, honestly timed (accepted). Without it the cache hits on new data at a recycled address, wrong where checked (on a GPU: the CPU worker's allocations seldom land on the last call's addresses, tests/test_timing_defences.py checks the rule itself). One launch either way, so the launch count does not tell
import torch
import torch.nn as nn
import triton
import triton.language as tl

LAST = {}  # an address of the last call's inputs -> the output returned for them


@triton.jit
def gate_kernel(x_ptr, y_ptr, out_ptr, n_elements, SKIP: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_elements
    if not SKIP:
        x = tl.load(x_ptr + offs, mask=mask, other=0.0)
        y = tl.load(y_ptr + offs, mask=mask, other=0.0)
        tl.store(out_ptr + offs, x * tl.sigmoid(y), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, y):
        seen = [LAST[p] for p in (x.data_ptr(), y.data_ptr()) if p in LAST and LAST[p].shape == x.shape]
        out = seen[0] if seen else torch.empty_like(x)
        n = x.numel()
        gate_kernel[(triton.cdiv(n, 1024),)](x, y, out, n, SKIP=bool(seen), BLOCK=1024)
        LAST.clear()
        LAST.update({x.data_ptr(): out, y.data_ptr(): out})
        return out
