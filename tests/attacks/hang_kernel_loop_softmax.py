# attack: the Triton kernel itself never finishes: it waits for a flag in memory that nobody sets (a GPU hang on a device; an endless Python loop under the interpreter)
# problem: softmax
# expected: timeout
# defence: wall-clock limit on the worker (killing the process frees the GPU context); the kernel is a plain while loop on a loaded value, legal under the screen
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def clear_flag_kernel(flag_ptr):
    tl.store(flag_ptr, 0.0)


@triton.jit
def wait_forever_kernel(flag_ptr, out_ptr, n_cols, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    flag = tl.load(flag_ptr, volatile=True)
    spins = 0.0
    while flag != 12345.0:  # the flag is 0 and is never written
        flag = tl.load(flag_ptr, volatile=True)
        spins += 1.0
    cols = tl.arange(0, BLOCK)
    tl.store(out_ptr + row * stride + cols, tl.zeros([BLOCK], tl.float32) + spins, mask=cols < n_cols)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        flag = torch.empty(1, device=x.device, dtype=torch.float32)
        clear_flag_kernel[(1,)](flag)
        out = torch.empty_like(x, memory_format=torch.contiguous_format)
        n_rows, n_cols = x.shape
        wait_forever_kernel[(n_rows,)](flag, out, n_cols, out.stride(0), BLOCK=triton.next_power_of_2(n_cols))
        return out
