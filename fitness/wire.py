"""Messages between the trusted evaluator and its worker.

A frame is an 8-byte length, a JSON header and the raw bytes of any tensors
it carries. Nothing is unpickled: a candidate that reached the pipe could
forge a message, but never run code in the trusted process.
"""

from __future__ import annotations

import json
import os
import select
import struct
import time
from typing import Any

_LENGTH = struct.Struct("<Q")
_MAX_HEADER = 16 << 20


class ChannelClosed(EOFError):
    """The other end has gone away."""


class ChannelTimeout(TimeoutError):
    """No message within the deadline."""


def _dtype_name(dtype) -> str:
    return str(dtype).removeprefix("torch.")


def encode(message: dict[str, Any], tensors: list | None = None) -> bytes:
    """Frame ``message`` and the contiguous CPU ``tensors`` it refers to."""
    import torch

    blobs, meta = [], []
    for t in tensors or []:
        t = t.detach().contiguous().cpu()
        raw = t.reshape(-1).view(-1)
        data = raw.view(torch.uint8).numpy().tobytes() if raw.numel() else b""
        meta.append({"dtype": _dtype_name(t.dtype), "shape": list(t.shape), "nbytes": len(data)})
        blobs.append(data)
    header = json.dumps({**message, "tensors": meta}).encode()
    body = _LENGTH.pack(len(header)) + header + b"".join(blobs)
    return _LENGTH.pack(len(body)) + body


def decode(body: bytes) -> tuple[dict[str, Any], list]:
    import torch

    (hlen,) = _LENGTH.unpack_from(body, 0)
    if hlen > _MAX_HEADER or 8 + hlen > len(body):
        raise ValueError("malformed frame header")
    message = json.loads(body[8 : 8 + hlen])
    tensors, offset = [], 8 + hlen
    for meta in message.pop("tensors", []):
        dtype = getattr(torch, meta["dtype"])
        if not isinstance(dtype, torch.dtype):
            raise ValueError(f"not a dtype: {meta['dtype']}")
        n = int(meta["nbytes"])
        chunk = bytearray(body[offset : offset + n])
        offset += n
        flat = torch.frombuffer(chunk, dtype=torch.uint8) if n else torch.empty(0, dtype=torch.uint8)
        tensors.append(flat.view(dtype).reshape(meta["shape"]))
    return message, tensors


def send(fd: int, message: dict[str, Any], tensors: list | None = None) -> None:
    view = memoryview(encode(message, tensors))
    while view:
        written = os.write(fd, view)
        view = view[written:]


def _read_exact(fd: int, n: int, deadline: float | None) -> bytes:
    chunks, remaining = [], n
    while remaining:
        if deadline is not None:
            wait = deadline - time.monotonic()
            if wait <= 0 or not select.select([fd], [], [], wait)[0]:
                raise ChannelTimeout("no message within the time limit")
        chunk = os.read(fd, min(remaining, 1 << 22))
        if not chunk:
            raise ChannelClosed("the other end closed the channel")
        chunks.append(chunk)
        remaining -= len(chunk)
    return b"".join(chunks)


def receive(fd: int, timeout: float | None = None) -> tuple[dict[str, Any], list]:
    """Next message and its tensors; raises ``ChannelTimeout`` or ``ChannelClosed``."""
    deadline = None if timeout is None else time.monotonic() + timeout
    (n,) = _LENGTH.unpack(_read_exact(fd, _LENGTH.size, deadline))
    return decode(_read_exact(fd, n, deadline))
