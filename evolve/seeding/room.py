"""Room on the device for a capture beside other work: one that ran out of memory waits for it, then tries again.

In a sweep with problems side by side, each run's capture (torch.compile in
a process of its own, ``evolve.seeding.apart``) allocates the problem's
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

Two things keep captures side by side from holding each other up:

- A capture that ran out gives back what it holds before it waits: the
  error's traceback keeps the failed capture's frames, and with them its
  tensors (on an H100, three captures that ran out together held 73 of 80 GB
  while each waited 180 s for the others' room, and none came).
- A large capture (at least ``TURN_SHARE`` of the device's memory by its own
  estimate) takes its turn on the device (``turn``): captures at KernelBench's
  own sizes run one at a time there, while small ones still compile side by
  side. A capture's own estimate is low (Inductor's intermediates and
  autotuning come on top), so turns, not the estimate, keep them apart.
"""

from __future__ import annotations

import contextlib
import logging
import math
import time
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from fitness.refusal import out_of_memory  # torch's, or Inductor's wrapping of it

log = logging.getLogger(__name__)

T = TypeVar("T")

#: How long a capture in a sweep waits for device memory, once it ran out, before it gives up.
WAIT_S = 180.0
#: Seconds between looks at the device's free memory.
POLL_S = 2.0
#: A capture that needs at least this share of the device's memory takes its turn on the device.
TURN_SHARE = 0.05


def capture_bytes(problem_path: str | Path, shapes: dict[str, int] | None, dtype: str | None) -> int | None:
    """What one capture of the problem holds at least: inputs, parameters and buffers, and its outputs
    twice (eager's and the compiled program's); None when the problem does not run on ``meta``."""
    from fitness.profiling.shape import layout_at

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
                       memory: Callable[[], tuple[int, int]] | None = None, turns: bool = False,
                       lock: Callable[[], Any] | None = None) -> T:
    """``capture()``; where it runs out of device memory and ``wait_s`` > 0, once more after the
    device has the memory the capture needs (``release()`` first gives back this process's cache,
    once the failed capture's frames are cleared). ``turns``: a large capture takes its turn on the
    device (``turn``; a sweep's runs side by side)."""
    memory = memory or _device_memory
    need = capture_bytes(problem_path, shapes, dtype) if (turns or wait_s > 0) else None
    large = turns and need is not None and need >= TURN_SHARE * memory()[1]
    with turn(large, Path(problem_path).name, lock):
        try:
            return capture()
        except Exception as exc:  # noqa: BLE001 - torch.compile of the user's model: any error may be the memory's
            if wait_s <= 0 or not out_of_memory(exc):
                raise
            failure = exc
        # out of the except block, the failed capture's frames cleared: its tensors go before the wait
        traceback.clear_frames(failure.__traceback__)
        release()
        started = time.monotonic()
        if need is None or not wait_for(need, memory, wait_s):
            raise failure
        waited = time.monotonic() - started
        log.info("seed: %s: out of device memory beside other work; room after %.0f s, capturing again",
                 Path(problem_path).name, waited)
        recording = capture()
        if isinstance(recording, dict):  # the run keeps it (inductor_recording.json): the wait is seen there
            recording["memory_wait_s"] = round(waited, 1)
        return recording


@contextlib.contextmanager
def turn(large: bool, name: str, lock: Callable[[], Any] | None = None) -> Iterator[None]:
    """The device to this capture until the block ends, where it is ``large``: a file lock beside the
    device's timed-window lock (``platforms.device_lock``), so captures in other processes take turns."""
    device_lock = (lock or _capture_lock)() if large else None
    if device_lock is None:
        yield
        return
    started = time.monotonic()
    with device_lock.exclusive():
        waited = time.monotonic() - started
        if waited >= 1.0:
            log.info("seed: %s: waited %.0f s for another capture's turn on the device", name, waited)
        yield


#: The methods of Inductor's benchmarker (``torch._inductor.runtime.benchmarking.benchmarker``) that run
#: kernels on the GPU to time them: autotuning's templates and configs, coordinate descent, padding.
BENCHMARK_METHODS = ("benchmark_gpu", "benchmark_gpu_with_cuda_graph")


@contextlib.contextmanager
def benchmarks_alone(device: str, platform: Any = None) -> Iterator[None]:
    """Each benchmark Inductor times while compiling, in a timed window of its own on the device
    (``platforms.device_lock``), until the block ends. A sweep's other runs time candidates
    meanwhile: a max-autotune capture benchmarks templates for minutes (188 s for
    84_conv_depthwise_2D on an H100), and neither's timing may see the other's kernels. The windows
    are taken one benchmark at a time, so the others' windows go on between them. Nothing changes on
    the CPU, or where the device has no lock, or where torch has no such benchmarker."""
    if device == "cpu":
        yield
        return
    from platforms import get_platform
    from platforms.device_lock import window as device_window

    platform = platform or get_platform("auto")
    try:
        from torch._inductor.runtime import benchmarking
        bench = benchmarking.benchmarker
    except (ImportError, AttributeError):
        yield
        return
    if platform.device_lock() is None:
        yield
        return
    patched = [name for name in BENCHMARK_METHODS if callable(getattr(bench, name, None))]
    own = {name: name in vars(bench) for name in patched}  # set on the instance already (kept, restored)
    before = {name: getattr(bench, name) for name in patched}

    def alone(method: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            with device_window(platform):
                return method(*args, **kwargs)
        return timed

    for name in patched:
        setattr(bench, name, alone(before[name]))
    try:
        yield
    finally:
        for name in patched:
            if own[name]:
                setattr(bench, name, before[name])
            else:
                delattr(bench, name)  # the class's method again


def _capture_lock() -> Any:
    """The lock captures on this process's device take turns for (None where it has none)."""
    from platforms import get_platform
    from platforms.device_lock import DeviceLock

    window = get_platform("auto").device_lock()
    return None if window is None else DeviceLock(f"{window.name}-capture")


def _device_memory() -> tuple[int, int]:
    """(free, total) bytes of this process's device (total: free, where the platform does not say)."""
    from platforms import get_platform

    platform = get_platform("auto")
    free = platform.free_memory()
    return free, platform.total_memory() or free

