"""A keyed fingerprint of a tensor's bytes, computed where the tensor lies.

The worker keeps a witness of each input before a candidate runs, to tell
afterwards whether the candidate changed it (``Platform.witness``). A copy
is exact but doubles the inputs' memory, which at KernelBench's own sizes
is gigabytes per evaluation in flight. Above ``Platform.witness_copy_max``
the witness is this fingerprint instead: the input's bytes read as 64-bit
words ``w[i]`` from its first 8-byte boundary (the few bytes before it and after
the last whole word count a word each, with multipliers of their own), and

    digest = sum over chunks c of  m_c * sum_i w[i] * k[i]   (mod 2^64)

with odd weights ``k`` and odd chunk multipliers ``m_c`` drawn from a key
the OS gives for each witness. Changing any one word changes the digest
(an odd weight times a nonzero 64-bit difference is never 0 mod 2^64);
changes that cancel need the key. It is computed on the device, chunk by
chunk with torch ops, or on a GPU in one Triton launch that sums the same
(``platforms.fingerprint_triton``, checked against the torch ops once a
process: ``fused_ok``); either needs at most about ``scratch_bytes()`` of
memory whatever the size.

The key lives in the worker, as a copy would: a candidate able to read the
worker's memory could rewrite either. What the witness guards against is a
kernel that writes into its inputs, which it catches as a copy does.
"""

from __future__ import annotations

import dataclasses
import secrets
import warnings
from typing import Any

#: 64-bit words summed at a time: 16 Mi words (a 128 MiB slice of the tensor). The words are read
#: where they lie (no widened copy): a product and a sum, four bytes of traffic a byte of input.
WORDS_PER_CHUNK = 1 << 24
_MASK = (1 << 64) - 1


def scratch_bytes(words_per_chunk: int = WORDS_PER_CHUNK) -> int:
    """Device memory one fingerprint needs besides the tensor: the weights and one chunk, as int64."""
    return 2 * 8 * words_per_chunk


@dataclasses.dataclass(frozen=True)
class Fingerprint:
    """What a tensor held, as a digest of its bytes under ``key`` (see the module doc)."""

    shape: tuple[int, ...]
    dtype: Any
    stride: tuple[int, ...]
    key: int
    digest: int

    @classmethod
    def of(cls, tensor: Any, key: int | None = None, words_per_chunk: int = WORDS_PER_CHUNK) -> "Fingerprint":
        key = secrets.randbits(63) if key is None else key
        return cls(tuple(tensor.shape), tensor.dtype, tuple(tensor.stride()), key,
                   _digest(tensor, key, words_per_chunk))

    def matches(self, tensor: Any, words_per_chunk: int = WORDS_PER_CHUNK) -> bool:
        """Whether ``tensor`` holds, to the digest, what the fingerprinted tensor held."""
        if (tuple(tensor.shape), tensor.dtype, tuple(tensor.stride())) != (self.shape, self.dtype, self.stride):
            return False
        return _digest(tensor, self.key, words_per_chunk) == self.digest


def _digest(tensor: Any, key: int, words_per_chunk: int, fused: bool | None = None) -> int:
    """The digest of ``tensor``'s bytes; ``fused``: whether to sum in one launch (None: where
    ``fused_ok`` says so)."""
    import torch

    flat = tensor.detach()
    if not flat.is_contiguous():
        flat = flat.contiguous()
    raw = flat.reshape(-1).view(torch.uint8)
    n_bytes = raw.numel()
    # 64-bit words from the first 8-byte boundary: read as they lie, no widening pass
    head = min(n_bytes, (-(flat.storage_offset() * flat.element_size())) % 8)
    n_words = (n_bytes - head) // 8
    words = raw[head: head + 8 * n_words].view(torch.int64) if n_words else raw[:0]
    edges = [(raw[:head], -2), (raw[head + 8 * n_words:], -1)]  # bytes in no whole word, a word each
    generator = torch.Generator(device=raw.device)
    generator.manual_seed(key)
    # odd weights in [1, 2^62): one table for every chunk, the chunk's own multiplier on top
    length = max(min(words_per_chunk, n_words), 7)  # a chunk's words, and the up to 7 bytes of an edge
    weights = torch.randint(0, 1 << 61, (length,), generator=generator, device=raw.device, dtype=torch.int64)
    weights = weights.mul_(2).add_(1)
    if n_words and (fused_ok(raw.device) if fused is None else fused):  # one launch (platforms.fingerprint_triton), the same sum
        from platforms.fingerprint_triton import weighted_sum

        multipliers = [_multiplier(key, c) for c in range(-(-n_words // words_per_chunk))]
        total = weighted_sum(words, weights[:min(words_per_chunk, n_words)], multipliers)
    else:
        total = _chunked_sum(words, weights, key, words_per_chunk)
    for edge, chunk in edges:
        if edge.numel():
            part = edge.to(torch.int64).mul_(weights[: edge.numel()])
            total.add_(part.sum().mul_(_multiplier(key, chunk)))
    return int(total.item()) & _MASK


def _chunked_sum(words: Any, weights: Any, key: int, words_per_chunk: int) -> Any:
    """The words' weighted sum with torch ops, chunk by chunk (a 0-dim int64 tensor)."""
    import torch

    product = torch.zeros(weights.numel(), dtype=torch.int64, device=words.device)
    total = torch.zeros((), dtype=torch.int64, device=words.device)
    for c, start in enumerate(range(0, words.numel(), words_per_chunk)):
        part = words[start:start + words_per_chunk]
        n = part.numel()
        total.add_(torch.mul(part, weights[:n], out=product[:n]).sum().mul_(_multiplier(key, c)))
    return total


#: Per device: whether the one-launch sum gives the chunked sum's digest there (checked once).
_FUSED: dict[str, bool] = {}


def fused_ok(device: Any) -> bool:
    """Whether ``device`` sums with one launch: a GPU on which the launch gives, on a test
    tensor, the digest the torch ops give (else, or without Triton, the torch ops stay)."""
    import torch

    if device.type == "cpu":
        return False
    name = str(device)
    if name not in _FUSED:
        try:
            from platforms.fingerprint_triton import BLOCK

            g = torch.Generator(device=device).manual_seed(7)
            words = torch.randint(-(1 << 62), 1 << 62, (3 * BLOCK + 5,), generator=g, device=device)
            # a block a chunk, many chunks a block, one chunk; words 16-byte aligned and not
            same = all(_digest(tensor.view(torch.float64), 11, per_chunk, fused=True)
                       == _digest(tensor.view(torch.float64), 11, per_chunk, fused=False)
                       for per_chunk, tensor in ((BLOCK, words), (7, words[1:]), (10 * BLOCK, words[1:])))
            _FUSED[name] = same
            if not same:
                warnings.warn(f"the fingerprint's one-launch sum differs from the torch ops' on {name}: "
                              "the torch ops stay", RuntimeWarning, stacklevel=2)
        except Exception:  # no Triton for this device: the torch ops
            _FUSED[name] = False
    return _FUSED[name]


def _multiplier(key: int, chunk: int) -> int:
    """An odd 62-bit multiplier for ``chunk`` (a splitmix-style mix of key and chunk: plain Python)."""
    z = (key * 0x9E3779B97F4A7C15 + (chunk + 2) * 0xBF58476D1CE4E5B9) & _MASK
    z = ((z ^ (z >> 31)) * 0x94D049BB133111EB) & _MASK
    return ((z ^ (z >> 29)) >> 2) | 1
