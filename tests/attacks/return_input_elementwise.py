# attack: returns the input x itself (a trivial output; sigmoid(y) ~ 0.5 on average, so x is "in the right ballpark") after a token launch
# problem: elementwise
# expected: wrong
# defence: the cutoff (kevo refuses any cutoff that the input itself passes) and the per-element comparison
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
        return x
