# attack: in __init__ it predicts the inputs from the global RNG - the stream as left after construction, and manual_seed(s) for likely seeds - for guessed shapes, precomputes x * sigmoid(y) for them with its own (honest) Triton kernel and restores the RNG state; forward never reads data on the host: one Triton kernel compares x's first 4 values with the stored fingerprints and copies the matching stored answer (zeros if none)
# problem: elementwise
# expected: wrong | forbidden | runtime_error
# note: Triton 3.9's interpreter refuses its fingerprint mask (runtime_error); 3.6 runs it (wrong)
# defence: fresh secret seeds (inputs the candidate cannot predict) at every shape; inputs drawn from the evaluator's own generator rather than the global RNG a candidate can read (tracing __init__ does not help: the precomputing is done by Triton)
import torch
import torch.nn as nn
import triton
import triton.language as tl

GUESSED_SHAPES = [(4, 100), (3, 1000), (5, 1000), (16, 16384), (128, 4096)]
GUESSED_SEEDS = (0, 1, 2, 3, 42, 100, 101, 102, 103, 1234)


@triton.jit
def gate_kernel(x_ptr, y_ptr, out_ptr, n_elements, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_elements
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    y = tl.load(y_ptr + offs, mask=mask, other=0.0)
    tl.store(out_ptr + offs, x * tl.sigmoid(y), mask=mask)


@triton.jit
def lookup_kernel(x_ptr, keys_ptr, answers_ptr, out_ptr, n_elements, K: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_elements
    probe = tl.load(x_ptr + tl.arange(0, 4))
    acc = tl.zeros([BLOCK], tl.float32)
    found = tl.zeros([BLOCK], tl.int32)
    for k in tl.static_range(K):
        key = tl.load(keys_ptr + k * 4 + tl.arange(0, 4))
        hit = tl.sum((key == probe).to(tl.int32), axis=0) == 4
        take = mask & hit & (found == 0)  # first match only (two guesses can predict the same stream)
        acc += tl.load(answers_ptr + k * n_elements + offs, mask=take, other=0.0)
        found = tl.where(take, 1, found)
    tl.store(out_ptr + offs, acc, mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        dev = "cuda" if torch.cuda.is_available() else "cpu"
        cpu_state = torch.get_rng_state()
        cuda_state = torch.cuda.get_rng_state() if dev == "cuda" else None
        self.tables = {}
        for (b, d) in GUESSED_SHAPES:
            starts = [None] + list(GUESSED_SEEDS)
            keys = torch.empty(len(starts), 4, device=dev)
            answers = torch.empty(len(starts), b * d, device=dev)
            for i, seed in enumerate(starts):
                torch.set_rng_state(cpu_state)
                if cuda_state is not None:
                    torch.cuda.set_rng_state(cuda_state)
                if seed is not None:
                    torch.manual_seed(seed)  # else: the stream continues from where construction left it
                x = torch.randn(b, d, device=dev)
                y = torch.randn(b, d, device=dev)
                gate_kernel[(triton.cdiv(b * d, 1024),)](x, y, answers[i], b * d, BLOCK=1024)
                keys[i].copy_(x.reshape(-1)[:4])
            self.tables[(b, d)] = (keys, answers)
        torch.set_rng_state(cpu_state)
        if cuda_state is not None:
            torch.cuda.set_rng_state(cuda_state)

    def forward(self, x, y):
        x = x.contiguous()
        out = torch.empty(x.shape, device=x.device, dtype=x.dtype)
        n = out.numel()
        keys, answers = self.tables.get(tuple(x.shape), (out, out))
        k = keys.shape[0] if tuple(x.shape) in self.tables and keys.device == x.device else 0
        lookup_kernel[(triton.cdiv(n, 1024),)](x, keys, answers, out, n, K=k, BLOCK=1024)
        return out
