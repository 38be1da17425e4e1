import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def rmsnorm_kernel(x_ptr, w_ptr, out_ptr, n_cols, x_row_stride, out_row_stride, eps,
                   BLOCK_SIZE: tl.constexpr):
    # One program per row. Pass 1 accumulates the sum of squares block by
    # block (rows may be wider than one block); pass 2 scales and writes.
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * x_row_stride
    out_row = out_ptr + row * out_row_stride
    offsets = tl.arange(0, BLOCK_SIZE)

    acc = tl.zeros([BLOCK_SIZE], dtype=tl.float32)
    for start in range(0, n_cols, BLOCK_SIZE):
        cols = start + offsets
        mask = cols < n_cols
        x = tl.load(x_row + cols, mask=mask, other=0.0)
        acc += x * x
    mean_sq = tl.sum(acc, axis=0) / n_cols
    rstd = 1.0 / tl.sqrt(mean_sq + eps)

    for start in range(0, n_cols, BLOCK_SIZE):
        cols = start + offsets
        mask = cols < n_cols
        x = tl.load(x_row + cols, mask=mask, other=0.0)
        w = tl.load(w_ptr + cols, mask=mask, other=0.0)
        tl.store(out_row + cols, x * rstd * w, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(dim))
        self.eps = eps

    def forward(self, x):
        # Normalise over the last dimension; all leading dimensions are rows.
        n_cols = x.shape[-1]
        x2d = x.reshape(-1, n_cols)
        n_rows = x2d.shape[0]
        out = torch.empty_like(x2d)
        grid = (n_rows,)
        rmsnorm_kernel[grid](x2d, self.weight, out, n_cols, x2d.stride(0), out.stride(0),
                             self.eps, BLOCK_SIZE=1024, num_warps=4)
        return out.reshape(x.shape)
