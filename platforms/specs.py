"""What kevo knows of each GPU: the figures a roofline and a prompt need.

One entry per device *as software sees it*: an MI250X is two GCDs and torch
shows each as its own GPU, so its entry is one GCD. Peaks are dense (no
sparsity). ``fp32_tflops`` is the vector (non-tensor) fp32 rate;
``fp32_matrix_tflops`` is AMD's MFMA fp32 rate (true fp32, unlike TF32);
``bf16_tflops`` and ``fp16_tflops`` the dense tensor/matrix rates;
``tf32_tflops`` the dense TF32 tensor rate (fp32 operands rounded to a 10-bit
mantissa: what Triton's ``tl.dot`` does with fp32 by default), absent where
the vendor lists none (CDNA 2; CDNA 4's MI350 series). ``l2_mb`` is the L2 proper;
AMD's Infinity Cache (MALL) is ``infinity_cache_mb``. Every figure names its
source in ``sources`` (a key of ``SOURCES``); estimates say so in ``note``.
"""

from __future__ import annotations

from typing import Any

SOURCES: dict[str, str] = {
    "a100-ds": "NVIDIA A100 Tensor Core GPU datasheet (2021), 80GB SXM column, https://www.nvidia.com/content/"
               "dam/en-zz/Solutions/Data-Center/a100/pdf/nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf",
    "ampere-wp": "NVIDIA A100 Tensor Core GPU Architecture whitepaper (2020): 108 SMs, 40 MB L2",
    "h100-ds": "NVIDIA H100 Tensor Core GPU datasheet (2023), SXM column, "
               "https://resources.nvidia.com/en-us-tensor-core/nvidia-tensor-core-gpu-datasheet",
    "hopper-wp": "NVIDIA H100 Tensor Core GPU Architecture whitepaper (2022): H100 SXM5 132 SMs, 50 MB L2",
    "h200-ds": "NVIDIA H200 Tensor Core GPU datasheet (2024), SXM column, https://www.nvidia.com/en-us/data-center/h200/",
    "h200-ncu": "measured: ncu 2025.3.1 device__attribute_* on an H200 (tests/fixtures/profilers/ncu_h200): "
                "132 SMs, 233,472 B shared memory per SM, 62,914,560 B L2",
    "blackwell-tb": "NVIDIA Blackwell Architecture Technical Brief (2024), HGX B200 (1,000 W) column",
    "b200-ds": "NVIDIA HGX B200 datasheet (2024): 8 TB/s HBM3e per GPU",
    "cuda-guide": "CUDA C++ Programming Guide, Technical Specifications per Compute Capability "
                  "(maximum shared memory per SM)",
    "l40s-ds": "NVIDIA L40S datasheet (2023), https://resources.nvidia.com/en-us-l40s/l40s-datasheet-28413",
    "ada-wp": "NVIDIA Ada GPU Architecture whitepaper (2022): AD102 L2",
    "rocm-specs": "ROCm documentation, GPU hardware specifications (compute units, wavefront, LDS, L2, "
                  "Infinity Cache), https://rocm.docs.amd.com/en/latest/reference/gpu-arch-specs.html",
    "mi200-ds": "AMD Instinct MI200 series (MI250X / MI250) datasheet (2021), "
                "https://www.amd.com/system/files/documents/amd-instinct-mi200-datasheet.pdf",
    "mi300x-ds": "AMD Instinct MI300X accelerator data sheet (2023), https://www.amd.com/content/dam/amd/en/"
                 "documents/instinct-tech-docs/data-sheets/amd-instinct-mi300x-data-sheet.pdf",
    "mi300a-ds": "AMD Instinct MI300A APU data sheet (2023), https://www.amd.com/content/dam/amd/en/"
                 "documents/instinct-tech-docs/data-sheets/amd-instinct-mi300a-data-sheet.pdf",
    "mi325x-ds": "AMD Instinct MI325X accelerator data sheet (2024), https://www.amd.com/content/dam/amd/en/"
                 "documents/instinct-tech-docs/product-briefs/instinct-mi325x-datasheet.pdf",
    "mi350-ds": "AMD Instinct MI350X / MI355X product pages and CDNA 4 architecture whitepaper (2025), "
                "https://www.amd.com/content/dam/amd/en/documents/instinct-tech-docs/white-papers/"
                "amd-cdna-4-architecture-whitepaper.pdf",
    "estimate": "kevo estimate: no vendor figure found; see the entry's note",
}

_FIELDS = ("units", "warp_size", "smem_per_unit_kb", "l2_mb", "mem_bw_gbs", "fp32_tflops", "bf16_tflops",
           "fp16_tflops")


def _gpu(vendor: str, arch: str, sources: dict[str, str], note: str = "", **figures: Any) -> dict[str, Any]:
    """One entry; ``sources`` maps figures to ``SOURCES`` keys (``"*"``: every figure not listed)."""
    default = sources.get("*")
    resolved = {field: sources.get(field, default) for field in figures}
    missing = [f for f in _FIELDS if f not in figures]
    if missing or any(s is None or s not in SOURCES for s in resolved.values()):
        raise ValueError(f"specs entry for {arch} lacks {missing or 'a source'}")  # a bug of this table
    return dict(vendor=vendor, arch=arch, **figures, sources=resolved, note=note,
                source="; ".join(SOURCES[key] for key in dict.fromkeys(resolved.values())))


#: The figures of an AMD entry that ROCm's table of GPU hardware gives (the rest: its datasheet);
#: a figure the entry does not have is left out of its sources.
_ROCM_SPECS = {field: "rocm-specs" for field in ("units", "warp_size", "smem_per_unit_kb", "l2_mb", "xcds",
                                                 "infinity_cache_mb")}


# name fragment (lower case) -> specs; the first fragment found in the device
# name wins, so longer names come before their prefixes.
GPU_SPECS: dict[str, dict[str, Any]] = {
    "a100": _gpu("nvidia", "sm_80", {"*": "a100-ds", "units": "ampere-wp", "l2_mb": "ampere-wp",
                                     "warp_size": "cuda-guide", "smem_per_unit_kb": "cuda-guide"},
                 note="80GB SXM figures; the 40GB PCIe card has 1,555 GB/s",
                 units=108, warp_size=32, smem_per_unit_kb=164, l2_mb=40, mem_bw_gbs=2039,
                 fp32_tflops=19.5, bf16_tflops=312, fp16_tflops=312, tf32_tflops=156),
    "h100 pcie": _gpu("nvidia", "sm_90", {"*": "h100-ds", "warp_size": "cuda-guide",
                                          "smem_per_unit_kb": "cuda-guide", "l2_mb": "hopper-wp"},
                      units=114, warp_size=32, smem_per_unit_kb=228, l2_mb=50, mem_bw_gbs=2000,
                      fp32_tflops=51, bf16_tflops=756, fp16_tflops=756, tf32_tflops=378),
    "h100": _gpu("nvidia", "sm_90", {"*": "h100-ds", "units": "hopper-wp", "l2_mb": "hopper-wp",
                                     "warp_size": "cuda-guide", "smem_per_unit_kb": "cuda-guide"},
                 note="SXM5 figures", units=132, warp_size=32, smem_per_unit_kb=228, l2_mb=50,
                 mem_bw_gbs=3350, fp32_tflops=67, bf16_tflops=989.4, fp16_tflops=989.4, tf32_tflops=494.7),
    "h200": _gpu("nvidia", "sm_90", {"*": "h200-ds", "units": "h200-ncu", "smem_per_unit_kb": "h200-ncu",
                                     "l2_mb": "h200-ncu", "warp_size": "h200-ncu"},
                 units=132, warp_size=32, smem_per_unit_kb=228, l2_mb=60, mem_bw_gbs=4800,
                 fp32_tflops=67, bf16_tflops=989.4, fp16_tflops=989.4, tf32_tflops=494.7),
    "b200": _gpu("nvidia", "sm_100", {"*": "blackwell-tb", "mem_bw_gbs": "b200-ds", "warp_size": "cuda-guide",
                                      "smem_per_unit_kb": "cuda-guide", "units": "estimate", "l2_mb": "estimate"},
                 note="units: 148 SMs as CUDA reports them on B200 (not in a datasheet); l2_mb: 126 MB is an "
                      "estimate (NVIDIA publishes no B200 L2 figure); fp32 80 TFLOPS at the HGX 1,000 W "
                      "configuration, other configurations differ",
                 units=148, warp_size=32, smem_per_unit_kb=228, l2_mb=126, mem_bw_gbs=8000,
                 fp32_tflops=80, bf16_tflops=2250, fp16_tflops=2250, tf32_tflops=1125),
    "l40s": _gpu("nvidia", "sm_89", {"*": "l40s-ds", "warp_size": "cuda-guide", "smem_per_unit_kb": "cuda-guide",
                                     "l2_mb": "estimate"},
                 note="142 SMs = 18,176 CUDA cores / 128; l2_mb: 96 MB is AD102's full L2 (Ada whitepaper), "
                      "the L40S datasheet does not state it (estimate)",
                 units=142, warp_size=32, smem_per_unit_kb=100, l2_mb=96, mem_bw_gbs=864,
                 fp32_tflops=91.6, bf16_tflops=362.05, fp16_tflops=362.05, tf32_tflops=183),
    "mi250x": _gpu("amd", "gfx90a", {"*": "mi200-ds", **_ROCM_SPECS},
                   note="one GCD (half the package's datasheet figures: 3,276.8 GB/s, 47.9 / 95.7 / 383 TFLOPS)",
                   units=110, warp_size=64, smem_per_unit_kb=64, l2_mb=8, mem_bw_gbs=1638.4,
                   fp32_tflops=23.95, fp32_matrix_tflops=47.85, bf16_tflops=191.5, fp16_tflops=191.5, xcds=1),
    "mi250": _gpu("amd", "gfx90a", {"*": "mi200-ds", **_ROCM_SPECS},
                  note="one GCD (half the package's datasheet figures: 3,276.8 GB/s, 45.3 / 90.5 / 362.1 TFLOPS)",
                  units=104, warp_size=64, smem_per_unit_kb=64, l2_mb=8, mem_bw_gbs=1638.4,
                  fp32_tflops=22.65, fp32_matrix_tflops=45.25, bf16_tflops=181.05, fp16_tflops=181.05, xcds=1),
    "mi300x": _gpu("amd", "gfx942", {"*": "mi300x-ds", **_ROCM_SPECS},
                   units=304, warp_size=64, smem_per_unit_kb=64, l2_mb=32, infinity_cache_mb=256,
                   mem_bw_gbs=5300, fp32_tflops=163.4, fp32_matrix_tflops=163.4, bf16_tflops=1307.4,
                   fp16_tflops=1307.4, tf32_tflops=653.7, xcds=8),
    "mi300a": _gpu("amd", "gfx942", {"*": "mi300a-ds", **_ROCM_SPECS},
                   units=228, warp_size=64, smem_per_unit_kb=64, l2_mb=24, infinity_cache_mb=256,
                   mem_bw_gbs=5300, fp32_tflops=122.6, fp32_matrix_tflops=122.6, bf16_tflops=980.6,
                   fp16_tflops=980.6, tf32_tflops=490.3, xcds=6),
    "mi325x": _gpu("amd", "gfx942", {"*": "mi325x-ds", **_ROCM_SPECS},
                   units=304, warp_size=64, smem_per_unit_kb=64, l2_mb=32, infinity_cache_mb=256,
                   mem_bw_gbs=6000, fp32_tflops=163.4, fp32_matrix_tflops=163.4, bf16_tflops=1307.4,
                   fp16_tflops=1307.4, tf32_tflops=653.7, xcds=8),
    "mi355x": _gpu("amd", "gfx950", {"*": "mi350-ds", **_ROCM_SPECS},
                   note="bf16 2.5 PFLOPS dense as AMD states it (2,516.6 TFLOPS)",
                   units=256, warp_size=64, smem_per_unit_kb=160, l2_mb=32, infinity_cache_mb=256,
                   mem_bw_gbs=8000, fp32_tflops=157.3, fp32_matrix_tflops=157.3, bf16_tflops=2516.6,
                   fp16_tflops=2516.6, xcds=8),
    "mi350x": _gpu("amd", "gfx950", {"*": "mi350-ds", **_ROCM_SPECS},
                   note="bf16 2.3 PFLOPS dense as AMD states it (2,306.9 TFLOPS)",
                   units=256, warp_size=64, smem_per_unit_kb=160, l2_mb=32, infinity_cache_mb=256,
                   mem_bw_gbs=8000, fp32_tflops=144.2, fp32_matrix_tflops=144.2, bf16_tflops=2306.9,
                   fp16_tflops=2306.9, xcds=8),
}


def lookup(device_name: str) -> dict[str, Any]:
    """Specs of the GPU whose name contains a known fragment, else ``{}``.

    >>> lookup("NVIDIA H200")["warp_size"]
    32
    >>> lookup("AMD Instinct MI300X")["arch"]
    'gfx942'
    """
    lowered = device_name.lower()
    for fragment, specs in GPU_SPECS.items():
        if fragment in lowered:
            return dict(specs, name=fragment)
    return {}
