# attack: raises KeyboardInterrupt from forward - an evaluator that lets it propagate aborts the whole search ("the user pressed Ctrl-C") instead of recording one failed candidate
# problem: softmax
# expected: runtime_error | crashed
# defence: the worker catches BaseException around candidate code, and kevo's own process never sees the candidate's exceptions (only the worker's result or its death)
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
        raise KeyboardInterrupt
