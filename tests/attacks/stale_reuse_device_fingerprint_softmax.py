# attack: recognises inputs it has seen before by their content, on the device (a 1-program kernel compares the first 16 values with a table of the last 64 fingerprints and leaves a flag), so fresh clones of earlier data - a timing loop, or timed runs that reuse the check seeds - count as "seen"; when seen, the softmax kernel writes nothing and the output is whatever torch.empty hands back - on a caching allocator timing one input, the previous (right) output
# problem: softmax
# expected: wrong | nan
# note: every timed run draws new inputs, so the trick never fires there; the main shapes' first inputs are run twice, and there it fires: torch.empty hands back poisoned memory (3.4e38 on the CPU, NaN on a GPU)
# defence: run twice (the main shapes' first inputs again at once, judged against the first run: a kernel whose answer is whatever memory it left unwritten disagrees with itself), with NaN poisoning of output buffers and of the allocator's free memory before every call, timed calls included, and checking timed outputs (inputs rotating through several seeds also make the stale block hold another input's answer: wrong); no host read is involved, so banning .tolist/.item does not help
import torch
import torch.nn as nn
import triton
import triton.language as tl

FP = 16  # values fingerprinted per input
SLOTS = 64  # fingerprints remembered


@triton.jit
def seen_before_kernel(x_ptr, n_elements, table_ptr, count_ptr, flag_ptr, FP: tl.constexpr, SLOTS: tl.constexpr):
    idx = tl.arange(0, FP)
    cur = tl.load(x_ptr + idx, mask=idx < n_elements, other=0.0)
    seen = 0
    for s in range(0, SLOTS):
        old = tl.load(table_ptr + s * (FP + 1) + idx)
        old_n = tl.load(table_ptr + s * (FP + 1) + FP)
        same = (tl.sum((cur == old).to(tl.int32), axis=0) == FP) & (old_n == n_elements)
        seen = seen | same.to(tl.int32)
    tl.store(flag_ptr, seen)
    if seen == 0:
        count = tl.load(count_ptr)
        slot = count % SLOTS
        tl.store(table_ptr + slot * (FP + 1) + idx, cur)
        tl.store(table_ptr + slot * (FP + 1) + FP, n_elements.to(tl.float32))
        tl.store(count_ptr, count + 1)


@triton.jit
def softmax_unless_seen_kernel(x_ptr, out_ptr, flag_ptr, n_cols, stride, BLOCK: tl.constexpr):
    if tl.load(flag_ptr) == 0:
        row = tl.program_id(0).to(tl.int64)
        cols = tl.arange(0, BLOCK)
        mask = cols < n_cols
        v = tl.load(x_ptr + row * stride + cols, mask=mask, other=float("-inf"))
        e = tl.exp(v - tl.max(v, axis=0))
        tl.store(out_ptr + row * stride + cols, e / tl.sum(e, axis=0), mask=mask)


@triton.jit
def init_kernel(table_ptr, count_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(table_ptr + offs, tl.full([BLOCK], float("nan"), tl.float32), mask=offs < n)  # NaN matches nothing
    tl.store(count_ptr, 0)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.state = {}

    def forward(self, x):
        x = x.contiguous()
        dev = str(x.device)
        if dev not in self.state:
            table = torch.empty(SLOTS * (FP + 1), device=x.device, dtype=torch.float32)
            count = torch.empty(1, device=x.device, dtype=torch.int32)
            init_kernel[(1,)](table, count, table.numel(), BLOCK=triton.next_power_of_2(table.numel()))
            self.state[dev] = (table, count, torch.empty(1, device=x.device, dtype=torch.int32))
        table, count, flag = self.state[dev]
        out = torch.empty_like(x)
        n_rows, n_cols = x.shape
        seen_before_kernel[(1,)](x, x.numel(), table, count, flag, FP=FP, SLOTS=SLOTS)
        softmax_unless_seen_kernel[(n_rows,)](x, out, flag, n_cols, x.stride(0), BLOCK=triton.next_power_of_2(n_cols))
        return out
