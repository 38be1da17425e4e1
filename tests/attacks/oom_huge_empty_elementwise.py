# attack: asks for 2**46 float32 elements (256 TiB) for its output - more than any device or the 47-bit user address space holds, so it fails even where memory is overcommitted
# problem: elementwise
# expected: out_of_memory
# defence: the worker maps allocation failures (torch.OutOfMemoryError on a GPU; RuntimeError "DefaultCPUAllocator: can't allocate memory" on a CPU) to out_of_memory, and survives to report it
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


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, y):
        workspace = torch.empty(1 << 46, device=x.device, dtype=torch.float32)
        out = workspace[: x.numel()].view(x.shape)
        n = x.numel()
        gate_kernel[(triton.cdiv(n, 1024),)](x, y, out, n, BLOCK=1024)
        return out
