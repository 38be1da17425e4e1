"""What each platform tells an LLM that writes kernels for it.

Vendor knowledge lives in ``platforms/`` and nowhere else: the LLM operators
put this text in their prompts as it is, so a prompt never carries an
``if rocm`` of its own. Keep each text short and about what changes the code
a model writes (thread-group width, block sizes, on-chip memory, matrix
units, launch options); a model knows the rest of Triton already.
"""

from __future__ import annotations

from collections.abc import Mapping

_CUDA = """\
Target: an NVIDIA GPU through Triton's CUDA backend.
- A warp is 32 threads; `num_warps` (usually 4 or 8, up to 16 for large tiles) sets threads per program.
- Block sizes (`tl.constexpr`) must be powers of two; tiles of 64 to 256 per side suit matrix work,
  1024 to 8192 elements suit elementwise and row-wise work.
- Loads and stores should be contiguous along the fastest-moving dimension so they coalesce;
  `tl.multiple_of` / `tl.max_contiguous` hints help vectorise them.
- Shared memory (up to about 228 KB per SM on Hopper, 164 KB on Ampere) holds the tiles Triton stages;
  `num_stages` (2 to 5) sets how many loads are in flight in a pipelined loop; too many run out of shared memory.
- Tensor cores are reached through `tl.dot` on fp16/bf16 (or tf32) tiles with every dimension >= 16.
  `tl.dot` on fp32 inputs uses TF32 by default, which may break a tight cutoff: pass
  `input_precision="ieee"` when the cutoff needs full fp32.
- Launch enough programs to fill every SM (over a hundred on data-centre GPUs); use a persistent
  grid or split-K when a problem has too few tiles.
- Write device-agnostic host code: tensors on `x.device`, never a hard-coded GPU index."""

_ROCM = """\
Target: an AMD Instinct GPU through Triton's ROCm (HIP) backend.
- A wavefront is 64 threads, not 32: `num_warps` counts wavefronts, so `num_warps=4` is 256 threads.
  Prefer `num_warps` of 4 or 8; 16 rarely pays.
- Block sizes must be powers of two and should be multiples of 64 (the wavefront width); a block of
  32 leaves half of every wavefront idle.
- PyTorch exposes AMD GPUs as `cuda` devices: `device='cuda'`, `torch.cuda.*` and `x.is_cuda` are
  right on ROCm. Never write `device='hip'` or `'rocm'`.
- On-chip memory is the LDS (64 KB per compute unit on MI200/MI300, 160 KB on MI350), much smaller
  than NVIDIA's shared memory: large tiles times `num_stages` overflow it. `num_stages=2` is the usual
  best on AMD (1 for kernels without a pipelined loop); more stages rarely help.
- Matrix cores (MFMA) are reached through `tl.dot` on fp16/bf16 tiles with every dimension >= 16;
  `matrix_instr_nonkdim=16` (a launch option) picks the 16x16 MFMA instructions, often the fastest.
- `waves_per_eu` (a launch option, 1 to 4) trades registers per wavefront for occupancy; try it
  when a kernel is latency-bound.
- No CUDA-only features: no PTX inline assembly, no TMA descriptors, no warp specialisation."""

_CPU = """\
Target: the CPU, through Triton's interpreter (`TRITON_INTERPRET=1`): kernels run as NumPy, one
program at a time, so correctness is checked exactly as on a GPU but timings are CPU figures.
- Write the kernel as you would for a GPU (it must stay correct there): powers-of-two block sizes,
  masked loads and stores at every boundary, no hard-coded shapes.
- Fewer, larger programs run faster here (each program has a fixed interpreter cost); block sizes of
  1024 to 4096 elements suit elementwise and row-wise work.
- `num_warps`, `num_stages` and other launch options are accepted and ignored.
- No inline assembly and no vendor-specific intrinsics: the interpreter has none."""

GUIDANCE: Mapping[str, str] = {"cuda": _CUDA, "rocm": _ROCM, "cpu": _CPU}


def guidance(platform_name: str) -> str:
    """The text an LLM gets about the platform named ``platform_name`` (``cuda``, ``rocm``, ``cpu``).

    Raises ``ValueError`` for any other name: ``auto`` must be resolved to a
    platform first.

    >>> "wavefront is 64 threads" in guidance("rocm")
    True
    """
    try:
        return GUIDANCE[platform_name]
    except KeyError:
        raise ValueError(
            f"no LLM guidance for platform {platform_name!r}; known platforms: {', '.join(GUIDANCE)}"
        ) from None
