"""What kevo knows of each GPU: the figures a roofline and a prompt need.

Dense peaks, no sparsity. Each entry names its source.
"""

from __future__ import annotations

from typing import Any

# name fragment (lower case) -> specs; the first fragment found in the device
# name wins, so longer names come before their prefixes.
GPU_SPECS: dict[str, dict[str, Any]] = {
    "h200": dict(vendor="nvidia", units=132, warp_size=32, smem_per_unit_kb=228, l2_mb=60,
                 mem_bw_gbs=4800, fp32_tflops=67, bf16_tflops=989,
                 source="NVIDIA H200 SXM datasheet (2024)"),
    "h100": dict(vendor="nvidia", units=132, warp_size=32, smem_per_unit_kb=228, l2_mb=50,
                 mem_bw_gbs=3350, fp32_tflops=67, bf16_tflops=989,
                 source="NVIDIA H100 SXM5 datasheet (2023)"),
    "a100": dict(vendor="nvidia", units=108, warp_size=32, smem_per_unit_kb=164, l2_mb=40,
                 mem_bw_gbs=2039, fp32_tflops=19.5, bf16_tflops=312,
                 source="NVIDIA A100 80GB SXM datasheet (2021)"),
    "mi300x": dict(vendor="amd", units=304, warp_size=64, smem_per_unit_kb=64, l2_mb=256,
                   mem_bw_gbs=5300, fp32_tflops=163.4, bf16_tflops=1307.4,
                   source="AMD Instinct MI300X datasheet (2023); l2_mb is the Infinity Cache"),
}


def lookup(device_name: str) -> dict[str, Any]:
    """Specs of the GPU whose name contains a known fragment, else ``{}``.

    >>> lookup("NVIDIA H200")["warp_size"]
    32
    """
    lowered = device_name.lower()
    for fragment, specs in GPU_SPECS.items():
        if fragment in lowered:
            return dict(specs, name=fragment)
    return {}
