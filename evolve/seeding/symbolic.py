"""Ops traced in a form that keeps their sizes symbolic, while a capture compiles.

A seed holds at every shape kevo checks only where the code Inductor wrote
takes its sizes as arguments. Some ops' shape functions fix a size while
Dynamo traces them, and then the code bakes it in: ``torch.max_pool1d``'s
turns the sequence length into a constant (``guard_int`` in
``torch.nn.functional._max_pool1d``), and its seed, compiled at one length,
computes that length's output at any other and reads past its input (41_Max_Pooling_1D
at a held-out length). The same pooling as a 2-D pooling over a height of 1,
which Inductor lowers that way anyway, keeps the length symbolic.
``nn.InstanceNorm``'s forward compares the channels with ``num_features`` only
to warn (without affine weights nothing else reads it), and Dynamo guards on
the comparison: the channel count became a constant, and 34_InstanceNorm's seed
read past its input at held-out channels. The same forward without the check
keeps them symbolic.

``symbolic_sizes()`` puts such equivalents in place of the ops for the
duration of a capture (one capture at a time in a process:
``evolve.seeding.inductor``); each computes exactly what the op does.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any


def _one(value: Any, default: Any = None) -> Any:
    """A 1-D pooling argument as one int (an int, or a sequence of one); ``default`` for None or empty."""
    if value is None or (isinstance(value, (tuple, list)) and not value):
        return default
    if isinstance(value, (tuple, list)):
        if len(value) != 1:
            raise ValueError(f"a 1-D pooling argument has one value, got {value!r}")
        return value[0]
    return value


def _max_pool1d_as_2d(original: Any) -> Any:
    import torch

    def max_pool1d(input: Any, kernel_size: Any, stride: Any = (), padding: Any = 0, dilation: Any = 1,
                   ceil_mode: bool = False) -> Any:
        if not isinstance(input, torch.Tensor) or input.dim() not in (2, 3):
            return original(input, kernel_size, stride, padding, dilation, ceil_mode)
        k = _one(kernel_size)
        s, p, d = _one(stride, k), _one(padding, 0), _one(dilation, 1)
        out = torch.max_pool2d(input.unsqueeze(-2), (1, k), (1, s), (0, p), (1, d), ceil_mode)
        return out.squeeze(-2)

    max_pool1d.kevo_original = original  # type: ignore[attr-defined]
    return max_pool1d


def _instance_norm_unchecked(original: Any) -> Any:
    def forward(self: Any, input: Any) -> Any:
        if self.affine:  # its weights fix the channels anyway, and a mismatch must raise as before
            return original(self, input)
        self._check_input_dim(input)
        if input.dim() == self._get_no_batch_dim():
            return self._handle_no_batch_input(input)
        return self._apply_instance_norm(input)

    forward.kevo_original = original  # type: ignore[attr-defined]
    return forward


@contextlib.contextmanager
def attributes_replaced(replacements: list[tuple[Any, str, Any]]) -> Iterator[None]:
    """Each ``(owner, name, value)``'s attribute set to ``value`` inside the block, and put back after it,
    also when the block raises (``evolve.seeding.conv_forms`` replaces ops this way too)."""
    originals = [(owner, name, getattr(owner, name)) for owner, name, _ in replacements]
    try:
        for owner, name, value in replacements:
            setattr(owner, name, value)
        yield
    finally:
        for owner, name, original in originals:
            setattr(owner, name, original)


@contextlib.contextmanager
def symbolic_sizes() -> Iterator[None]:
    """``torch.max_pool1d`` as a 2-D max pooling over a height of 1, and ``nn.InstanceNorm``
    without its warning's channel check, inside the block."""
    import torch
    from torch.nn.modules.instancenorm import _InstanceNorm

    with attributes_replaced([(torch, "max_pool1d", _max_pool1d_as_2d(torch.max_pool1d)),
                              (_InstanceNorm, "forward", _instance_norm_unchecked(_InstanceNorm.forward))]):
        yield
