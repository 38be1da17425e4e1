# attack: no dunder at all - forward does no work (zeros from a token kernel) and returns a torch.Tensor subclass whose ordinary methods (detach, cpu, clone, contiguous, float, to, numpy, view, reshape, ...) first compute torch.softmax of the remembered input into the buffer; a checker that calls any of them on the output - after the forward trace has ended - sees the right numbers
# problem: softmax
# expected: forbidden | wrong
# defence: the worker accepts only type(out) is torch.Tensor exactly (a subclass: forbidden or wrong), and never calls methods of a candidate-made object; it reads plain data through unbound torch.Tensor functions or bytes
import torch
import torch.nn as nn
import triton
import triton.language as tl

PENDING = {}


@triton.jit
def zero_kernel(out_ptr, n_elements, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.zeros([BLOCK], tl.float32), mask=offs < n_elements)


def materialise(t):
    plain = t.as_subclass(torch.Tensor)
    src = PENDING.pop(torch.Tensor.data_ptr(plain), None)
    if src is not None:
        torch.Tensor.copy_(plain, torch.softmax(src, dim=1))  # the real work, after forward returned
    return plain


class LazyOutput(torch.Tensor):
    def detach(self, *args, **kwargs):
        return torch.Tensor.detach(materialise(self), *args, **kwargs)

    def cpu(self, *args, **kwargs):
        return torch.Tensor.cpu(materialise(self), *args, **kwargs)

    def clone(self, *args, **kwargs):
        return torch.Tensor.clone(materialise(self), *args, **kwargs)

    def contiguous(self, *args, **kwargs):
        return torch.Tensor.contiguous(materialise(self), *args, **kwargs)

    def float(self, *args, **kwargs):
        return torch.Tensor.float(materialise(self), *args, **kwargs)

    def to(self, *args, **kwargs):
        return torch.Tensor.to(materialise(self), *args, **kwargs)

    def view(self, *args, **kwargs):
        return torch.Tensor.view(materialise(self), *args, **kwargs)

    def reshape(self, *args, **kwargs):
        return torch.Tensor.reshape(materialise(self), *args, **kwargs)

    def flatten(self, *args, **kwargs):
        return torch.Tensor.flatten(materialise(self), *args, **kwargs)

    def double(self, *args, **kwargs):
        return torch.Tensor.double(materialise(self), *args, **kwargs)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        out = torch.empty(x.shape, device=x.device, dtype=x.dtype)
        n = out.numel()
        zero_kernel[(triton.cdiv(n, 1024),)](out, n, BLOCK=1024)
        PENDING[out.data_ptr()] = x.clone()
        return out.as_subclass(LazyOutput)
