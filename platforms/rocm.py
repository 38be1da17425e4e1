"""AMD GPUs: ROCm shares torch's ``cuda`` API; ``torch.version.hip`` tells them apart."""

from __future__ import annotations

from platforms.cuda import CudaPlatform


class RocmPlatform(CudaPlatform):
    name = "rocm"
    # HIP_VISIBLE_DEVICES indexes within what ROCR_VISIBLE_DEVICES leaves
    # visible; kevo narrows with HIP only and leaves ROCR to the cluster.
    visibility_variable = "HIP_VISIBLE_DEVICES"

    @staticmethod
    def _is_vendor() -> bool:
        import torch

        return torch.version.hip is not None
