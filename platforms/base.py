"""The interface every platform implements.

A platform owns what differs between vendors: which device a process sees,
how the whole device is synchronised, its events and activity trace, how the
L2 cache is flushed between runs and what the hardware is. Code outside
``platforms/`` never asks which vendor it runs on. How a run is timed is
not the platform's: ``platforms.timing.time_runs`` is one protocol for every
platform, and asks a platform only for ``events``, ``synchronize``,
``flush_cache`` and ``device_trace``.

A new platform provides (abstract here):

- ``available()``, ``device()``, ``device_name()``: whether it runs here, the
  torch device string, a readable name (``specs()`` looks the name up);
- ``synchronize()``, ``events()``, ``flush_cache()``: what the timer needs;
- ``poison_memory(sizes)``, ``free_memory()``: what the checks need.

and overrides, where its device has them (the defaults do without):
``device_trace()`` (no trace: events only), ``visibility_env`` (one device
per process), ``worker_env`` and ``worker_setup()`` (nothing to install),
``memory_guard()`` (none), ``export_tensor``/``import_tensor`` (outputs
travel as bytes), ``witness``/``unchanged`` (a copy of the input),
``release_memory`` (nothing to give back), ``persisting_l2_bytes`` (none), ``track_peak``/``peak_since`` (no
peak known), ``process_overhead_bytes`` (0), ``context_lost`` (never), and
``timing``, its default ``TimingSettings``.

Platforms import torch lazily: a worker process must be able to set its
environment (device visibility, Triton's interpreter) before torch loads.
"""

from __future__ import annotations

import abc
import contextlib
from collections.abc import Iterator
from typing import Any

from platforms.fingerprint import Fingerprint, scratch_bytes as fingerprint_scratch_bytes
from platforms.timing import Events, TimingSettings


class Platform(abc.ABC):
    """One kind of device kevo can evaluate on."""

    name: str = ""
    #: Environment a worker process for this platform needs before torch loads.
    worker_env: dict[str, str] = {}
    #: Default timing for this platform.
    timing: TimingSettings = TimingSettings()

    def visibility_env(self, devices: list[int]) -> dict[str, str]:
        """Environment that makes a child process see only ``devices``."""
        return {}

    @abc.abstractmethod
    def available(self) -> bool:
        """True when this machine can run this platform."""

    @abc.abstractmethod
    def device(self) -> str:
        """torch device string for tensors on this platform."""

    @abc.abstractmethod
    def synchronize(self) -> None:
        """Wait for all work on the whole device, every stream included."""

    @abc.abstractmethod
    def device_name(self) -> str:
        """Human-readable name of the device."""

    @abc.abstractmethod
    def flush_cache(self) -> None:
        """Evict the last-level cache so a timed run starts cold."""

    @abc.abstractmethod
    def events(self) -> Events:
        """A fresh (mark, elapsed_ms) pair: ``mark()`` stamps a point on the device
        timeline, ``elapsed_ms(start, stop)`` reads the milliseconds between two stamps."""

    #: Whether ``device_trace()`` gives a window's record, host operators included
    #: (``platforms.timeline.DeviceTimeline.host_ops``).
    has_device_trace = False

    def device_trace(self) -> Any:
        """A ``platforms.timeline.DeviceTimeline`` for one window, or None if the platform has none."""
        return None

    @abc.abstractmethod
    def poison_memory(self, sizes: list[int]) -> None:
        """Fill free allocator blocks of each size in ``sizes`` (bytes) with NaN.

        Called with the sizes of the expected outputs before every call, so a
        kernel that leaves part of its output unwritten cannot pass by reusing
        a freed buffer that happened to hold the right answer.
        """

    def worker_setup(self) -> dict[str, tuple[Any, str]]:
        """Run once in a worker before any candidate: what the platform installs there (the
        CPU platform gives the interpreter libdevice), as tamper-watch entries
        (readable name -> (object, attribute))."""
        return {}

    def persisting_l2_bytes(self) -> int:
        """Bytes of the last-level cache set aside for lines a kernel marked persisting, in this
        process's context: a worker sets none (``worker_setup``), so more means a candidate raised it.
        0 where the device has no such thing."""
        return 0

    def warm_up(self) -> None:
        """Pay a new worker's one-time costs before its first candidate: the device's context,
        the compiler's first use (Triton hashes its own sources once a process). Unpaid, they
        land on the first evaluation each worker serves, seconds each. Nothing by default."""

    def memory_guard(self) -> Any:
        """Checks on the memory a kernel touches, installed once in a worker, or None.

        The object returned has ``violations`` (a list of what was refused,
        cleared by the worker per step) and ``watched()`` (objects the tamper
        watch must keep). Where the platform has no such check, None.
        """
        return None

    def export_tensor(self, tensor: Any) -> dict[str, Any] | None:
        """What another process needs to open contiguous device ``tensor`` where it lies, or None.

        Plain values only (they travel as JSON). The exporting process keeps
        ``tensor`` alive until the other one has its copy. None (the
        default): the tensor travels as bytes, through shared memory.
        """
        return None

    def import_tensor(self, shared: dict[str, Any], dtype: Any, shape: list[int], producer_pid: int) -> Any:
        """This process's own copy, on the device, of a tensor that process
        ``producer_pid`` described with ``export_tensor``.

        ``shared`` comes from an untrusted process: anything in it that does
        not check out raises ``ValueError`` before the device is touched.
        """
        raise ValueError(f"the {self.name} platform opens no device memory of another process")

    #: The largest input (bytes) whose witness is a copy; a larger one's is a fingerprint
    #: (``platforms.fingerprint``), so that an evaluation does not hold its inputs twice.
    witness_copy_max = 256 << 20

    def device_lock(self) -> Any:
        """The ``platforms.device_lock.DeviceLock`` that keeps timed windows on this device apart
        across processes, or None (nothing else times here)."""
        return None

    def cannot_run_kernels(self) -> str | None:
        """Why Triton kernels cannot run on this platform as installed, or None (they can)."""
        return None

    def witness(self, tensor: Any) -> Any:
        """What tells later whether ``tensor`` was changed (``unchanged``): a copy of it, or
        above ``witness_copy_max`` bytes a keyed fingerprint of its bytes."""
        if tensor.numel() * tensor.element_size() > self.witness_copy_max:
            return Fingerprint.of(tensor)
        return tensor.clone()

    def witness_bytes(self, tensor_bytes: int) -> int:
        """Device memory the witness of an input of ``tensor_bytes`` holds (the memory plan's)."""
        if tensor_bytes > self.witness_copy_max:
            return fingerprint_scratch_bytes()
        return tensor_bytes

    def unchanged(self, witness: Any, tensor: Any) -> bool:
        """True when ``tensor`` holds, bit for bit, what it held when ``witness`` was taken."""
        import torch

        if isinstance(witness, Fingerprint):
            return witness.matches(tensor)
        if witness.shape != tensor.shape or witness.dtype != tensor.dtype:
            return False
        a8 = witness.contiguous().reshape(-1).view(torch.uint8)
        b8 = tensor.contiguous().reshape(-1).view(torch.uint8)
        return bool(torch.equal(a8, b8))

    def release_memory(self, keep_bytes: int = 0) -> None:
        """Give cached, unused device memory back when more than ``keep_bytes`` of it is
        cached (after running out of it, or between steps, so that the other processes
        evaluating on the device can have it)."""

    @contextlib.contextmanager
    def memory_capped(self, extra_bytes: int) -> Iterator[None]:
        """Within the block this process may take at most ``extra_bytes`` of device memory beyond
        what it holds now; an allocation past that fails as out of memory (a warm step, whose
        candidate runs on ``meta`` and should take none). No cap where the platform has none."""
        yield

    #: Whether Triton compiles a kernel here (not the CPU's interpreter), so that compiling a
    #: candidate's kernels before its evaluation holds memory saves it time (``fitness.judge.ahead``).
    compiles_ahead: bool = False

    #: Device memory a process that evaluates holds besides its tensors (its context,
    #: the cache-flush buffer): counted once per evaluation in flight by the memory plan.
    process_overhead_bytes: int = 0

    def track_peak(self) -> Any:
        """Start watching this process's peak device allocation; ``peak_since`` reads it."""
        return None

    def peak_since(self, mark: Any) -> int | None:
        """Bytes allocated at the peak since ``track_peak`` returned ``mark``, beyond what
        was allocated then; None where the platform cannot tell."""
        return None

    def context_lost(self, exc: BaseException) -> bool:
        """True when ``exc`` leaves the process unable to use the device again."""
        return False

    @abc.abstractmethod
    def free_memory(self) -> int:
        """Bytes the device could still allocate."""

    def total_memory(self) -> int | None:
        """Bytes the device has in all; None where that is not known."""
        return None

    def specs(self) -> dict[str, Any]:
        """What is known of the hardware (see ``platforms.specs``)."""
        from platforms.specs import lookup

        return lookup(self.device_name())
