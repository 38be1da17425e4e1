"""The witness of a large input: a keyed fingerprint of its bytes instead of a copy
(platforms.fingerprint), so that an evaluation holds its inputs once, not twice."""

from __future__ import annotations

import pytest
import torch

from platforms.base import Platform
from platforms.fingerprint import Fingerprint, scratch_bytes
from platforms import get_platform

CHUNK = 7  # words a chunk: small, so that a test tensor spans many chunks and a ragged last one


def changed_at(tensor: torch.Tensor, index: int) -> torch.Tensor:
    out = tensor.clone()
    flat = out.view(-1).view(torch.uint8)
    flat[index] ^= 1  # one bit of one byte
    return out


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.int64, torch.uint8])
def test_the_same_bytes_match_and_one_flipped_bit_anywhere_does_not(dtype):
    g = torch.Generator().manual_seed(0)
    tensor = (torch.randn(5, 13, generator=g) * 50).to(dtype)  # 65 elements: a ragged chunk, and a tail for uint8
    print_ = Fingerprint.of(tensor, words_per_chunk=CHUNK)
    assert print_.matches(tensor.clone(), words_per_chunk=CHUNK)
    n_bytes = tensor.numel() * tensor.element_size()
    for index in sorted({0, 1, 3, 4, 27, n_bytes // 2, n_bytes - 2, n_bytes - 1}):
        assert not print_.matches(changed_at(tensor, index), words_per_chunk=CHUNK), f"byte {index} changed unseen"


def test_words_swapped_between_chunks_or_within_one_are_seen():
    tensor = torch.arange(70, dtype=torch.float32)
    print_ = Fingerprint.of(tensor, words_per_chunk=CHUNK)
    swapped = tensor.clone()
    swapped[[0, CHUNK]] = swapped[[CHUNK, 0]]  # the same position in two chunks
    assert not print_.matches(swapped, words_per_chunk=CHUNK)
    swapped = tensor.clone()
    swapped[[1, 2]] = swapped[[2, 1]]
    assert not print_.matches(swapped, words_per_chunk=CHUNK)


def test_another_shape_dtype_or_layout_does_not_match():
    tensor = torch.randn(6, 8)
    print_ = Fingerprint.of(tensor)
    assert print_.matches(tensor)
    assert not print_.matches(tensor.reshape(8, 6))
    assert not print_.matches(tensor.view(torch.int32))
    assert not print_.matches(tensor.t().contiguous().t())  # same values, other strides


def test_a_key_gives_one_digest_and_two_keys_two():
    tensor = torch.randn(1000)
    assert Fingerprint.of(tensor, key=5).digest == Fingerprint.of(tensor.clone(), key=5).digest
    assert Fingerprint.of(tensor, key=5).digest != Fingerprint.of(tensor, key=6).digest


def test_a_view_with_an_offset_and_a_non_contiguous_input_are_fingerprinted():
    base = torch.randn(4, 9)
    view = base[1:, 1:]  # an offset of 10 elements, and rows that are not contiguous
    print_ = Fingerprint.of(view, words_per_chunk=CHUNK)
    assert print_.matches(base.clone()[1:, 1:], words_per_chunk=CHUNK)
    base[2, 3] += 1
    assert not print_.matches(view, words_per_chunk=CHUNK)


@pytest.mark.parametrize("offset, length", [(1, 40), (3, 21), (0, 1), (1, 1), (2, 33)])
def test_bytes_before_the_first_8_byte_boundary_and_after_the_last_word_count_too(offset, length):
    """float32 elements at offsets that leave bytes outside the 64-bit words, at each end."""
    base = torch.arange(64, dtype=torch.float32) * 1.5 + 0.25
    view = base[offset:offset + length]  # contiguous, its start 4 bytes past a boundary for odd offsets
    print_ = Fingerprint.of(view, words_per_chunk=CHUNK)
    assert print_.matches(base.clone()[offset:offset + length], words_per_chunk=CHUNK)
    n_bytes = 4 * length

    def same_place() -> torch.Tensor:  # a copy at the same offset in its storage: the same alignment
        return base.clone()[offset:offset + length]

    for index in sorted({0, 1, 3, 4, 5, n_bytes // 2, n_bytes - 5, n_bytes - 1} & set(range(n_bytes))):
        changed = same_place()
        changed.view(torch.uint8)[index] ^= 1
        assert not print_.matches(changed, words_per_chunk=CHUNK), f"byte {index} changed unseen"
    if length > 2:  # the first and last elements swapped: the two ends are weighed apart
        swapped = same_place()
        swapped[[0, -1]] = swapped[[-1, 0]]
        assert not print_.matches(swapped, words_per_chunk=CHUNK)


def test_a_chunk_shorter_than_an_edge_still_weighs_every_edge_byte():
    base = torch.arange(21, dtype=torch.float32)
    view = base[1:20]  # 4 bytes before the first boundary, 4 after the last word
    print_ = Fingerprint.of(view, words_per_chunk=2)
    assert print_.matches(base.clone()[1:20], words_per_chunk=2)
    changed = base.clone()[1:20]
    changed.view(torch.uint8)[1] ^= 1  # in the head
    assert not print_.matches(changed, words_per_chunk=2)


def test_the_platform_copies_small_inputs_and_fingerprints_large_ones():
    cpu = get_platform("cpu")
    cpu.witness_copy_max = 64  # bytes: the base platform's rule, tried on the CPU's tensors
    small, large = torch.randn(4), torch.randn(100)
    small_w, large_w = Platform.witness(cpu, small), Platform.witness(cpu, large)
    assert isinstance(small_w, torch.Tensor) and isinstance(large_w, Fingerprint)
    assert Platform.unchanged(cpu, small_w, small) and Platform.unchanged(cpu, large_w, large)
    large[57] = -large[57] - 1
    small[3] = -small[3] - 1
    assert not Platform.unchanged(cpu, large_w, large) and not Platform.unchanged(cpu, small_w, small)
    # the memory plan: a copy costs the input, a fingerprint its scratch
    assert Platform.witness_bytes(cpu, 64) == 64 and Platform.witness_bytes(cpu, 1 << 40) == scratch_bytes()



def test_the_worker_watches_the_fingerprint_and_what_it_computes_with():
    """A candidate that replaced what checks a large input (to hide that it wrote into it)
    is caught by the tamper watch at the end of the step (fitness.worker.instrument)."""
    import triton.runtime.interpreter as interpreter
    import triton.runtime.jit as triton_jit

    from fitness.worker.instrument import Watch, watched_objects
    from platforms import fingerprint

    watch = Watch(watched_objects(torch, triton_jit, interpreter, get_platform("cpu")))
    assert not watch.tampered()
    from platforms import fingerprint_triton

    for owner, name in [(Fingerprint, "matches"), (fingerprint, "_digest"), (torch.Tensor, "item"),
                        (torch.Tensor, "sum"), (torch, "randint"), (torch, "equal"),
                        (fingerprint, "fused_ok"), (fingerprint_triton, "weighted_sum")]:
        original = getattr(owner, name)
        setattr(owner, name, lambda *args, **kwargs: True)
        try:
            assert watch.tampered(), f"{name} replaced unseen"
        finally:
            setattr(owner, name, original)
        assert not watch.tampered()


FUSED = """
import sys
import torch
from platforms import fingerprint
from platforms.fingerprint import Fingerprint
from platforms.fingerprint_triton import BLOCK

g = torch.Generator().manual_seed(3)
cases = [(torch.randn(3 * BLOCK + 5, generator=g, dtype=torch.float64), BLOCK),   # a block a chunk
         (torch.randn(700, generator=g)[1:], 7),                                  # an edge, many chunks a block
         (torch.randint(0, 255, (5 * BLOCK + 3,), generator=g, dtype=torch.uint8), 10 * BLOCK)]  # one chunk
original = fingerprint.fused_ok
for tensor, per_chunk in cases:
    chunked = Fingerprint.of(tensor, key=99, words_per_chunk=per_chunk)
    fingerprint.fused_ok = lambda device: True  # the one-launch sum, under Triton's interpreter
    fused = Fingerprint.of(tensor, key=99, words_per_chunk=per_chunk)
    changed = tensor.clone()
    changed.view(torch.uint8)[len(changed.view(torch.uint8)) // 2] ^= 4
    caught = not fused.matches(changed, words_per_chunk=per_chunk)
    fingerprint.fused_ok = original
    print(fused.digest == chunked.digest, caught)
"""


def test_the_one_launch_sum_gives_the_chunked_digest_to_the_bit():
    # On a GPU the digest's sum is one Triton launch (platforms.fingerprint_triton), not four
    # torch ops a chunk; run here under Triton's interpreter, it must give the same digest
    # (a GPU worker checks the same once, at its start: fingerprint.fused_ok).
    import os
    import subprocess
    import sys

    from tests.conftest import ROOT

    env = dict(os.environ, TRITON_INTERPRET="1", PYTHONPATH=str(ROOT))
    done = subprocess.run([sys.executable, "-c", FUSED], capture_output=True, text=True, env=env, cwd=ROOT,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["True", "True"] * 3, done.stdout


def test_the_cpu_keeps_the_torch_ops():
    from platforms.fingerprint import fused_ok

    assert fused_ok(torch.device("cpu")) is False
