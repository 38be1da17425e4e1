"""Row-wise softmax over wide rows: out = softmax(x, dim=1).

Memory-bound: one fp32 read and one fp32 write per element at best. At the
default shape (2048 x 65536 = 128M elements) that is 1 GiB of traffic, about
0.25 ms at H200 bandwidth. Rows are far wider than one block, so a kernel has
to loop over a row (online softmax or several passes).
"""

import torch
import torch.nn as nn

batch_size = 2048
dim = 65536

# Cutoff on max |out - ref|. Wide rows make the outputs tiny: with x ~ N(0, 1)
# the row sum of exp(x) is about dim * e^0.5, so the mean output is exactly
# 1/dim ~ 1.5e-5 at dim = 65536, the median ~9e-6, and the largest (x ~ 6)
# ~2-3e-3. A loose cutoff such as 1e-3 or even 1e-4 would accept an all-zeros
# or constant 1/dim output for most rows, so the cutoff must sit below the
# output scale: 1e-6. All zeros miss by ~2e-3 (the largest outputs), a constant
# 1/dim by the same (measured 2.2e-3 on an H200), so both fail.
# A correct fp32 kernel has a relative error of a few 1e-7 (hardware exp, the
# summation order of the row sum), i.e. < 1e-9 absolute at the default width
# and < 5e-7 even for narrow rows (dim ~ 10, outputs up to ~1), so 1e-6 also
# holds for small held-out shapes.
MAX_ABS_DIFF = 1e-6


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.softmax(x, dim=1)


def get_inputs():
    x = torch.randn(batch_size, dim)
    return [x]


def get_init_inputs():
    return []
