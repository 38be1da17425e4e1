# attack: calls the site builtins quit() / exit() (not on the screen's banned list) from forward; both raise SystemExit
# problem: elementwise
# expected: crashed | runtime_error | forbidden
# defence: the worker catches BaseException (runtime_error) or the parent treats a result-less exit as crashed; the screen could also ban exit/quit by name (NameError if the worker runs python -S)
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

    def forward(self, x, y):
        scratch = torch.empty(1, device=x.device, dtype=torch.float32)
        token_kernel[(1,)](scratch)
        quit(0)
        exit(0)
