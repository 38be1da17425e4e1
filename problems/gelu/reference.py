"""GELU (the exact, erf form) of inputs drawn as KernelBench draws them: torch.rand.

Memory-bound: one fp32 read and one fp32 write per element. At the default
shape (4096 x 16384 = 64M elements) that is 512 MiB of traffic, about 0.1 ms
at H200 bandwidth.

The inputs lie in [0, 1), as in KernelBench's 26_GELU_: a kernel that is
right there only (a polynomial or a table fitted to [0, 1)) passes the
problem's own draws and is not GELU. kevo's probe inputs (random signs, and
random signs at a large scale) are what refuse it (docs/EVALUATION.md).
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

batch_size = 4096
dim = 16384

# Cutoff on max |out - ref|. On [0, 1) GELU's outputs lie in [0, 0.85); a
# correct fp32 kernel (erf from libdevice or Triton's own, 0.5 x (1 + erf(x /
# sqrt 2))) is within a few ulp, below 1e-6 absolute. 1e-5 leaves margin and
# sits far below the outputs, so zeros, a constant or the input itself (GELU(x)
# - x reaches 0.16 on [0, 1)) all miss. On the probes the cutoff grows with the
# outputs' scale (x 300 or so at the large scale), as an honest kernel's error does.
MAX_ABS_DIFF = 1e-5


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return F.gelu(x)


def get_inputs():
    x = torch.rand(batch_size, dim)
    return [x]


def get_init_inputs():
    return []
