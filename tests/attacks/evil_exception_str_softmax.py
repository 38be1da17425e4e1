# attack: raises an exception whose argument is a list nested 100000 deep: str(), repr() and pickle of it all fail with RecursionError, so a worker that formats or pickles the reason inside its except block dies there with a second, unhandled error (no dunder, no type(), nothing the screen can see)
# problem: softmax
# expected: runtime_error | crashed
# defence: the worker formats candidate exceptions defensively (type name alone if str() fails, message truncated) - runtime_error; at worst the worker dies and the parent reports crashed; kevo itself never raises
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def token_kernel(scratch_ptr):
    tl.store(scratch_ptr, 0.0)


def deep(depth):
    nest = []
    for _ in range(depth):
        nest = [nest]
    return nest


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        scratch = torch.empty(1, device=x.device, dtype=torch.float32)
        token_kernel[(1,)](scratch)
        raise RuntimeError(deep(100000))
