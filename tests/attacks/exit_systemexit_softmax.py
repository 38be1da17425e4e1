# attack: `raise SystemExit(0)` from forward - legal under the screen; SystemExit is not an Exception, so `except Exception` in the worker lets it through and the process exits 0 without a result
# problem: softmax
# expected: crashed | runtime_error
# defence: the worker catches BaseException around candidate code (runtime_error), or the parent treats a worker that ended without a result as crashed, exit code 0 included
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def token_kernel(scratch_ptr):
    tl.store(scratch_ptr, 0.0)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        scratch = torch.empty(1, device=x.device, dtype=torch.float32)
        token_kernel[(1,)](scratch)
        raise SystemExit(0)
