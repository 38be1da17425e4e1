# attack: captures x * sigmoid(y) in PyTorch into a CUDA graph on its first call and, behind a token Triton launch, replays the graph whenever the inputs lie where the captured ones did (the field's "graph replayed where inputs repeat"); elsewhere the honest kernel
# problem: elementwise
# expected: forbidden
# platform: gpu (CUDA graphs exist only there; on the CPU only the screen can refuse it)
# defence: static screen (torch.cuda.graph, CUDAGraph, replay); with the screen off, the dispatch trace: the capture runs PyTorch's operators inside forward. A replay alone would pass the trace and the launch count (one token launch a run either way); inputs at a fresh address every call keep a replay from finding the previous call's inputs where it captured them
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def gate_kernel(x_ptr, y_ptr, out_ptr, n_elements, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_elements
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    y = tl.load(y_ptr + offs, mask=mask, other=0.0)
    tl.store(out_ptr + offs, x * tl.sigmoid(y), mask=mask)


@triton.jit
def token_kernel(scratch_ptr):
    tl.store(scratch_ptr, 0.0)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.graph, self.captured, self.out = None, None, None

    def forward(self, x, y):
        where = (x.data_ptr(), y.data_ptr(), tuple(x.shape))
        if x.is_cuda and self.graph is None:
            self.graph, self.captured = torch.cuda.CUDAGraph(), where
            with torch.cuda.graph(self.graph):
                self.out = x * torch.sigmoid(y)
        if self.graph is not None and where == self.captured:
            self.graph.replay()
            token_kernel[(1,)](torch.empty(1, device=x.device))
            return self.out.clone()
        out = torch.empty_like(x)
        n = x.numel()
        gate_kernel[(triton.cdiv(n, 1024),)](x.contiguous(), y.contiguous(), out, n, BLOCK=1024)
        return out
