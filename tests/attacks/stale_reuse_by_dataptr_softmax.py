# attack: remembers the address of each input it has seen; when the same input comes back (a timing loop) it writes nothing and returns torch.empty, whose memory is usually the freed previous output that already holds the answer
# problem: softmax
# expected: nan | wrong | accepted
# platform: gpu (its trigger, an input clone at a recycled address, depends on the caching allocator)
# note: seen on an H200 - a naive loop (same input, output dropped each time) got the right answer 5/5 times through the caching allocator; with NaN poisoning between calls only the first call was right
# defence: fresh input clones per call (seen on the CPU with kevo: clones never came back at a known address, so it never skipped work and was rightly accepted as the honest kernel it then is); where an address does repeat: NaN poisoning of output buffers and free memory -> nan, different data at a reused address -> wrong. stale_reuse_device_fingerprint_softmax.py is the variant that fresh clones do not stop
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def softmax_rows_kernel(x_ptr, out_ptr, n_rows, n_cols, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = (cols < n_cols) & (row < n_rows)
    v = tl.load(x_ptr + row * stride + cols, mask=mask, other=float("-inf"))
    e = tl.exp(v - tl.max(v, axis=0))
    tl.store(out_ptr + row * stride + cols, e / tl.sum(e, axis=0), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.seen = set()

    def forward(self, x):
        x = x.contiguous()
        out = torch.empty_like(x)
        n_rows, n_cols = x.shape
        key = (x.data_ptr(), n_rows, n_cols)
        # a repeat: launch with n_rows=0, so every store is masked off
        rows_to_do = 0 if key in self.seen else n_rows
        self.seen.add(key)
        softmax_rows_kernel[(max(rows_to_do, 1),)](x, out, rows_to_do, n_cols, x.stride(0),
                                                   BLOCK=triton.next_power_of_2(n_cols))
        return out
