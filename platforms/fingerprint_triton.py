"""The fingerprint's weighted sum in one launch on a GPU (``platforms.fingerprint``).

``weighted_sum(words, weights, multipliers)`` is ``sum_i words[i] *
weights[i mod L] * multipliers[i div L]`` mod 2^64 (L the weights' length):
the digest's chunked sum, with each chunk's multiplier applied inside. Done
with torch ops it is four launches a 16M-word chunk (about 200 for a 6.4 GB
input, twice a timed run) and a product the size of a chunk; here one launch
writes one partial sum a block, and one more adds them. Integer arithmetic
wraps mod 2^64 in both, so the digest is the same to the bit
(``fingerprint.fused_ok`` checks that once a process, on the device itself).
"""

from __future__ import annotations

from typing import Any

import triton
import triton.language as tl

#: Words a block sums: a divisor of ``fingerprint.WORDS_PER_CHUNK``, so a block lies in one chunk.
BLOCK = 4096


# The sizes come through memory and the words' alignment is not specialised on: the kernel has
# one compiled form a ONE_CHUNK_A_BLOCK, both built and checked at a worker's start
# (``fingerprint.fused_ok``), before any candidate runs: none is compiled later, from a cache a
# candidate could have written to.
try:
    _jit = triton.jit(do_not_specialize_on_alignment=["words_ptr"])
except TypeError:  # a Triton without the option: two forms, both built by fused_ok too
    _jit = triton.jit


@_jit
def weighted_sum_kernel(words_ptr, weights_ptr, meta_ptr, partial_ptr, BLOCK: tl.constexpr,
                        ONE_CHUNK_A_BLOCK: tl.constexpr):
    n_words = tl.load(meta_ptr)  # meta: the words, a chunk's words, then each chunk's multiplier
    length = tl.load(meta_ptr + 1)
    pid = tl.program_id(0).to(tl.int64)
    start = pid * BLOCK
    lanes = tl.arange(0, BLOCK)
    offs = start + lanes
    mask = offs < n_words
    words = tl.load(words_ptr + offs, mask=mask, other=0)
    if ONE_CHUNK_A_BLOCK:
        chunk = start // length
        weights = tl.load(weights_ptr + (start - chunk * length) + lanes, mask=mask, other=0)
        part = tl.sum(words * weights, axis=0) * tl.load(meta_ptr + 2 + chunk)
    else:  # a chunk shorter than a block, or not a multiple of it: each word's own chunk
        chunks = offs // length
        weights = tl.load(weights_ptr + (offs - chunks * length), mask=mask, other=0)
        multipliers = tl.load(meta_ptr + 2 + chunks, mask=mask, other=0)
        part = tl.sum(words * weights * multipliers, axis=0)
    tl.store(partial_ptr + pid, part)


def weighted_sum(words: Any, weights: Any, multipliers: list[int]) -> Any:
    """A 0-dim int64 tensor: the sum above, for 1-D int64 ``words`` (contiguous) and ``weights`` on
    one device, and ``multipliers`` (one a chunk of ``len(weights)`` words, each below 2^63)."""
    import torch

    n_words, length = words.numel(), weights.numel()
    blocks = triton.cdiv(n_words, BLOCK)
    meta = torch.tensor([n_words, length, *multipliers], dtype=torch.int64).to(words.device)
    partial = torch.empty(blocks, dtype=torch.int64, device=words.device)
    one_chunk = length % BLOCK == 0 or n_words <= length
    weighted_sum_kernel[(blocks,)](words, weights, meta, partial, BLOCK=BLOCK, ONE_CHUNK_A_BLOCK=one_chunk)
    return partial.sum()
