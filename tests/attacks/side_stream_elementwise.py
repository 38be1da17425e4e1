# attack: launches the (honest) kernel on a side CUDA stream and returns without waiting, so a timer that records events only on the current stream stops before the work is done (on the CPU it is simply honest)
# problem: elementwise
# expected: accepted
# defence: the timer synchronises the whole device (not just the current stream) before reading events and before checking outputs; runtime_ms must be comparable to honest_elementwise.py's, never far below it
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def gate_kernel(x_ptr, y_ptr, out_ptr, n_elements, REPEAT: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_elements
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    y = tl.load(y_ptr + offs, mask=mask, other=0.0)
    acc = x * tl.sigmoid(y)
    for _ in range(REPEAT):  # make the hidden work long enough to matter
        acc = x * tl.sigmoid(y + acc * 0.0)
    tl.store(out_ptr + offs, acc, mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.side = torch.cuda.Stream() if torch.cuda.is_available() else None

    def forward(self, x, y):
        x = x.contiguous()
        y = y.contiguous()
        out = torch.empty_like(x)
        n = x.numel()
        grid = (triton.cdiv(n, 1024),)
        if self.side is not None and x.is_cuda:
            self.side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(self.side):
                gate_kernel[grid](x, y, out, n, REPEAT=64, BLOCK=1024)
            return out  # no wait_stream back: the caller's stream does not know about the work
        gate_kernel[grid](x, y, out, n, REPEAT=4, BLOCK=1024)
        return out
