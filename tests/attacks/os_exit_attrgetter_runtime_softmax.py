# attack: a hard exit with no import, no dunder and no visible underscore: operator.attrgetter("os._exit")(torch)(0) - skips every finally/except/atexit in the worker, exit code 0, no result
# problem: softmax
# expected: forbidden | crashed
# defence: static screen must refuse operator.attrgetter (string getattr); at run time the parent treats a worker that exited without a result as crashed, whatever the exit code
import operator
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
        operator.attrgetter("os._exit")(torch)(0)
        return x
