"""Room on the device for a capture beside other work: one that ran out of memory waits for it, then tries again.

In a sweep with problems side by side, each run's capture (torch.compile in
a process of its own, ``evolve.capture.apart``) allocates the problem's
tensors beside the other runs' evaluators and captures, which no memory plan
counts. One that runs out there is not out of reach: the others' work ends
and gives its memory back. ``captured_with_room`` then waits, up to
``wait_s``, until the device's free memory reaches what the capture needs (the
problem's inputs, parameters and two sets of outputs, eager's and the
compiled program's, from a forward on PyTorch's ``meta`` device), and
captures once more; the recording keeps how long it waited (``memory_wait_s``). A capture that still runs out keeps its error, and the
sweep's own fallback follows (the run set aside to run alone after the
others, ``evolve.sweep``). On the H200, four of level 1's problems run eight
side by side ran out in every configuration at once (``docs/RESULTS.md``).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from fitness.refusal import out_of_memory  # torch's, or Inductor's wrapping of it

log = logging.getLogger(__name__)

T = TypeVar("T")

#: How long a capture in a sweep waits for device memory, once it ran out, before it gives up.
WAIT_S = 180.0
#: Seconds between looks at the device's free memory.
POLL_S = 2.0


def capture_bytes(problem_path: str | Path, shapes: dict[str, int] | None, dtype: str | None) -> int | None:
    """What one capture of the problem holds at least: inputs, parameters and buffers, and its outputs
    twice (eager's and the compiled program's); None when the problem does not run on ``meta``."""
    from fitness.profile_shape import layout_at

    layout = layout_at(problem_path, dict(shapes or {}), dtype)
    if layout is None:
        return None
    return layout.bytes + sum(math.prod(shape) * size for shape, size in layout.outputs)


def wait_for(need: int, memory: Callable[[], tuple[int, int]], wait_s: float,
             sleep: Callable[[float], None] = time.sleep, clock: Callable[[], float] = time.monotonic) -> bool:
    """Whether the free bytes of ``memory()`` (free, total) reached ``need`` within ``wait_s``; at once
    False where the device has less than ``need`` in all."""
    free, total = memory()
    if need > total:
        return False
    deadline = clock() + wait_s
    while free < need:
        if clock() >= deadline:
            return False
        sleep(POLL_S)
        free, _ = memory()
    return True


def captured_with_room(capture: Callable[[], T], problem_path: str | Path, shapes: dict[str, int] | None,
                       dtype: str | None, wait_s: float, release: Callable[[], None],
                       memory: Callable[[], tuple[int, int]] | None = None) -> T:
    """``capture()``; where it runs out of device memory and ``wait_s`` > 0, once more after the
    device has the memory the capture needs (``release()`` first gives back this process's cache)."""
    try:
        return capture()
    except Exception as exc:  # noqa: BLE001 - torch.compile of the user's model: any error may be the memory's
        if wait_s <= 0 or not out_of_memory(exc):
            raise
        release()
        need = capture_bytes(problem_path, shapes, dtype)
        started = time.monotonic()
        if need is None or not wait_for(need, memory or _device_memory, wait_s):
            raise
        waited = time.monotonic() - started
        log.info("seed: %s: out of device memory beside other work; room after %.0f s, capturing again",
                 Path(problem_path).name, waited)
        recording = capture()
        if isinstance(recording, dict):  # the run keeps it (inductor_recording.json): the wait is seen there
            recording["memory_wait_s"] = round(waited, 1)
        return recording


def _device_memory() -> tuple[int, int]:
    """(free, total) bytes of this process's device (total: free, where the platform does not say)."""
    from platforms import get_platform

    platform = get_platform("auto")
    free = platform.free_memory()
    return free, platform.total_memory() or free

