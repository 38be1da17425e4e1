"""Messages between the trusted evaluator and its worker.

A frame is an 8-byte length, a JSON header and the raw bytes of any tensors
it carries. Device tensors stay on the device where the platform can share
them (``Platform.export_tensor``: CUDA or HIP IPC handles): the header
describes them and the receiver takes its own copy there
(``Platform.import_tensor``). Other large tensors travel through a file in
a spill directory the evaluator chose (shared memory where there is room)
instead of the pipe; the header says where. Nothing is unpickled: a
candidate that reached the channel could forge a message, but never run
code in the trusted process.
"""

from __future__ import annotations

import json
import os
import select
import struct
import time
from typing import Any, Callable

#: ``export(tensor)``: a description another process can open, or None (see ``Platform.export_tensor``).
Exporter = Callable[[Any], "dict[str, Any] | None"]
#: ``open(shared, dtype, shape)``: this process's own copy of an exported tensor.
Opener = Callable[[dict, Any, list], Any]

_LENGTH = struct.Struct("<Q")
_MAX_HEADER = 16 << 20
# Tensors larger than this in total go through the spill file.
SPILL_BYTES = 1 << 20


class ChannelClosed(EOFError):
    """The other end has gone away."""


class ChannelTimeout(TimeoutError):
    """No message within the deadline."""


def _host_bytes(t) -> tuple[dict[str, Any], Any]:
    import torch

    t = t.detach().contiguous().cpu()
    flat = t.reshape(-1).view(torch.uint8).numpy() if t.numel() else None
    meta = {"dtype": str(t.dtype).removeprefix("torch."), "shape": list(t.shape),
            "nbytes": 0 if flat is None else int(flat.nbytes)}
    return meta, flat


def _part(t, export: Exporter | None) -> tuple[dict[str, Any], Any]:
    shared = export(t) if export is not None else None
    if shared is None:
        return _host_bytes(t)
    return {"dtype": str(t.dtype).removeprefix("torch."), "shape": list(t.shape), "nbytes": 0,
            "shared": shared}, None


def encode(message: dict[str, Any], tensors: list | None = None, spill_path: str | None = None,
           export: Exporter | None = None) -> bytes:
    """Frame ``message`` and ``tensors``; large tensors go to ``spill_path`` if given.

    With ``export``, each tensor it can describe stays where it is (the
    sender keeps it alive until the receiver has its copy).
    """
    parts = [_part(t, export) for t in tensors or []]
    total = sum(meta["nbytes"] for meta, _ in parts)
    header = {**message, "tensors": [meta for meta, _ in parts]}
    inline = b""
    if spill_path and total > SPILL_BYTES:
        with open(spill_path, "wb") as f:
            for _, flat in parts:
                if flat is not None:
                    flat.tofile(f)
        header["spill"] = os.path.basename(spill_path)
    else:
        inline = b"".join(flat.tobytes() for _, flat in parts if flat is not None)
    head = json.dumps(header).encode()
    body = _LENGTH.pack(len(head)) + head + inline
    return _LENGTH.pack(len(body)) + body


def decode(body: bytes, spill_dir: str | None = None, open_shared: Opener | None = None) -> tuple[dict[str, Any], list]:
    """The message and tensors of a frame; ``open_shared`` takes copies of exported tensors.

    Raises ``ValueError`` for a frame that does not check out.
    """
    import torch

    (hlen,) = _LENGTH.unpack_from(body, 0)
    if hlen > _MAX_HEADER or 8 + hlen > len(body):
        raise ValueError("malformed frame header")
    message = json.loads(body[8 : 8 + hlen])
    metas = message.pop("tensors", [])
    spill = message.pop("spill", None)
    if spill is not None:
        if spill_dir is None or os.path.basename(spill) != spill:
            raise ValueError("unexpected spill file")
        path = os.path.join(spill_dir, spill)
        with open(path, "rb") as f:
            data = bytearray(os.fstat(f.fileno()).st_size)  # read straight into it: no second copy
            if f.readinto(data) != len(data):
                raise ValueError("spill file shorter than it said")
        os.unlink(path)
        offset = 0
    else:
        data, offset = bytearray(body), 8 + hlen
    tensors = []
    for meta in metas:
        dtype = getattr(torch, str(meta["dtype"]), None)
        if not isinstance(dtype, torch.dtype):
            raise ValueError(f"not a dtype: {meta['dtype']}")
        shape = meta.get("shape")
        if not isinstance(shape, list) or not all(type(d) is int and d >= 0 for d in shape):
            raise ValueError("bad tensor shape")
        if meta.get("shared") is not None:
            if open_shared is None:
                raise ValueError("a shared device tensor where none was expected")
            tensors.append(open_shared(meta["shared"], dtype, shape))
            continue
        n = int(meta["nbytes"])
        if n < 0 or offset + n > len(data):
            raise ValueError("tensor bytes missing from the frame")
        flat = torch.frombuffer(data, dtype=torch.uint8, count=n, offset=offset) if n else torch.empty(0, dtype=torch.uint8)
        offset += n
        tensors.append(flat.view(dtype).reshape(shape))
    return message, tensors


def send(fd: int, message: dict[str, Any], tensors: list | None = None, spill_path: str | None = None,
         export: Exporter | None = None) -> None:
    view = memoryview(encode(message, tensors, spill_path, export))
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


def receive(fd: int, timeout: float | None = None, spill_dir: str | None = None,
            open_shared: Opener | None = None) -> tuple[dict[str, Any], list]:
    """Next message and its tensors; raises ``ChannelTimeout`` or ``ChannelClosed``."""
    deadline = None if timeout is None else time.monotonic() + timeout
    (n,) = _LENGTH.unpack(_read_exact(fd, _LENGTH.size, deadline))
    if n > (8 << 30):
        raise ValueError("frame too large")
    return decode(_read_exact(fd, n, deadline), spill_dir, open_shared)
