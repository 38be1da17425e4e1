"""Convolutions in the forms Inductor's Triton templates take, while a template capture compiles.

Inductor's convolution template covers 2-D and 3-D convolutions with a
dilation of 1 and nothing else; a 1-D convolution, a dilated one and every
transposed one go to cuDNN, and max-autotune with Triton alone has no choice
for them (``NoValidChoicesError``): 20 of KernelBench level 1's 34
convolutions got no seed. Each has an exact equivalent the template takes:

- a 1-D convolution is a 2-D one over a height of 1;
- a dilated convolution is one with a dilation of 1 over its kernel spread
  out with zeros between the taps;
- a transposed convolution is a plain one over its input spread out with
  ``stride - 1`` zeros between elements and padded by ``dilation * (kernel - 1) -
  padding`` on each side (``output_padding`` more after; a negative pad
  crops), with the kernel flipped along every spatial axis and its input and
  output channels swapped within each group.

A convolution's bias is added after it (Inductor's template on the CPU takes
none; on a GPU Inductor takes it out the same way itself).

Each sums the same products (the zeros add nothing), in another order. The
seeds this gives are slower than cuDNN where the zeros are many (a stride of
2 multiplies a transposed convolution's work by 4 in 2-D); they are starts
that hold, which the search then improves. ``template_forms()`` puts the
equivalents in place of ``torch.nn.functional``'s convolutions (and
``torch``'s) for the duration of a capture under a template configuration;
anything they do not cover (a padding given as a string) goes to the op
itself.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from evolve.seeding.symbolic import attributes_replaced

#: (the op's name, the number of spatial dimensions, transposed)
_OPS = (("conv1d", 1, False), ("conv2d", 2, False), ("conv3d", 3, False),
        ("conv_transpose1d", 1, True), ("conv_transpose2d", 2, True), ("conv_transpose3d", 3, True))


def _each(value: Any, n: int) -> tuple[int, ...]:
    if isinstance(value, (tuple, list)):
        if len(value) == 1 and n > 1:
            return tuple(value) * n
        return tuple(value)
    return (value,) * n


def _spread(t: Any, steps: tuple[int, ...]) -> Any:
    """``t`` with ``step - 1`` zeros between neighbours along each of its last ``len(steps)`` axes.

    Each axis of L elements as L x 1, padded to L x step, flattened and cut at (L - 1) * step + 1: a
    pad and views, which Inductor lowers for symbolic sizes too (a strided slice assignment into new
    zeros it does not, where the sizes are symbolic)."""
    import torch.nn.functional as F

    for axis, step in zip(range(t.dim() - len(steps), t.dim()), steps):
        if step == 1:
            continue
        last = t.movedim(axis, -1)
        size = last.shape[-1]
        wide = F.pad(last.unsqueeze(-1), (0, step - 1)).reshape(*last.shape[:-1], size * step)
        t = wide[..., :(size - 1) * step + 1].movedim(-1, axis)
    return t


class _Forms:
    """The stand-ins, each calling the ops as they were before ``template_forms`` replaced them."""

    def __init__(self, originals: dict[str, Any]) -> None:
        self.op = originals

    def conv(self, n: int, input: Any, weight: Any, bias: Any = None, stride: Any = 1, padding: Any = 0,
             dilation: Any = 1, groups: int = 1) -> Any:
        name, x, w = f"conv{n}d", input, weight
        if isinstance(padding, str) or x.dim() not in (n + 1, n + 2):
            return self.op[name](x, w, bias, stride, padding, dilation, groups)
        stride, padding, dilation = _each(stride, n), _each(padding, n), _each(dilation, n)
        if n == 1:  # over a height of 1 (an unbatched input gets its batch of one for the while)
            batched = x if x.dim() == 3 else x.unsqueeze(0)
            out = self.conv(2, batched.unsqueeze(-2), w.unsqueeze(-2), bias, (1, *stride), (0, *padding),
                            (1, *dilation), groups).squeeze(-2)
            return out if x.dim() == 3 else out.squeeze(0)
        if any(d != 1 for d in dilation):
            w = _spread(w, dilation)
        out = self.op[name](x, w, None, stride, padding, 1, groups)
        # the bias added after: Inductor's template on the CPU takes none (a GPU's lowering takes it out
        # itself; the CPU's passes it on, one argument more than the template has)
        return out if bias is None else out + bias.view(-1, *[1] * n)

    def conv_transpose(self, n: int, input: Any, weight: Any, bias: Any = None, stride: Any = 1, padding: Any = 0,
                       output_padding: Any = 0, groups: int = 1, dilation: Any = 1) -> Any:
        import torch
        import torch.nn.functional as F

        x, w = input, weight
        if isinstance(padding, str) or x.dim() not in (n + 1, n + 2):
            return self.op[f"conv_transpose{n}d"](x, w, bias, stride, padding, output_padding, groups, dilation)
        stride, padding = _each(stride, n), _each(padding, n)
        output_padding, dilation = _each(output_padding, n), _each(dilation, n)
        # the channels and taps as numbers: the template fixes the weight's sizes anyway, and a size
        # computed from symbolic ones (channels // groups) is one it cannot prove equal to the input's
        kernel = tuple(int(k) for k in w.shape[2:])
        c_in, c_out = int(w.shape[0]), int(w.shape[1])
        z = _spread(x, stride)
        # each side padded by dilation * (kernel - 1) - padding (and output_padding more after): the
        # convolution's own padding where that is the same on both sides and not negative, a pad
        # (or a crop) of the input for the rest
        around, pads = [], []
        for k, p, op, d in reversed(list(zip(kernel, padding, output_padding, dilation))):
            before = d * (k - 1) - p
            around.insert(0, max(before, 0))
            pads += [before - around[0], before + op - around[0]]
        if any(pads):
            z = F.pad(z, pads)
        flipped = w.reshape(groups, c_in // groups, c_out, *kernel).transpose(1, 2).flip(list(range(3, 3 + n)))
        if groups > 1:
            # one dense convolution, its weight zero outside each group's block: Inductor's template
            # cannot prove a grouped one's input channels those of the spread input (it has no choice)
            block = torch.eye(groups, dtype=w.dtype, device=w.device).reshape(groups, 1, groups, 1, *[1] * n)
            flipped = flipped.unsqueeze(2) * block
        flipped = flipped.reshape(groups * c_out, c_in, *kernel)
        return self.conv(n, z, flipped, bias, 1, tuple(around), dilation, 1)


@contextlib.contextmanager
def template_forms() -> Iterator[None]:
    """The convolutions of ``torch.nn.functional`` and ``torch`` as their template-ready equivalents."""
    import torch
    import torch.nn.functional as F

    originals = {name: getattr(F, name) for name, _, _ in _OPS}
    on_torch = {name for name, _, _ in _OPS if hasattr(torch, name)}
    forms = _Forms(originals)
    replacements = []
    for name, n, transposed in _OPS:
        method = forms.conv_transpose if transposed else forms.conv

        def standin(*args: Any, _n: int = n, _method: Any = method, **kwargs: Any) -> Any:
            return _method(_n, *args, **kwargs)

        standin.__name__ = name
        replacements.append((F, name, standin))
        if name in on_torch:
            replacements.append((torch, name, standin))
    with attributes_replaced(replacements):
        yield
