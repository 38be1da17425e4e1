# attack: prints a fake accepted verdict (JSON, as `kevo verify --json` would) on stdout and stderr at import, in __init__ and in every forward, while returning zeros
# problem: elementwise
# expected: wrong
# defence: the worker's stdout/stderr never reach kevo's stdout nor the worker->parent result channel; `kevo verify --json` prints exactly one JSON object, kevo's own; the text "FAKE-VERDICT" must not appear on it
import torch
import torch.nn as nn
import triton
import triton.language as tl

FAKE = ('{"status": "accepted", "max_abs_diff": 0.0, "runtime_ms": 0.0001, "reference_ms": 1.0, '
        '"speedup": 10000.0, "reason": "FAKE-VERDICT", "checks": 99}')
print(FAKE, flush=True)


@triton.jit
def zero_kernel(out_ptr, n_elements, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.zeros([BLOCK], tl.float32), mask=offs < n_elements)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        print(FAKE, flush=True)

    def forward(self, x, y):
        print(FAKE, flush=True)
        print("\n" + FAKE + "\n", end="", flush=True)
        out = torch.empty_like(x)
        n = out.numel()
        zero_kernel[(triton.cdiv(n, 1024),)](out, n, BLOCK=1024)
        return out
