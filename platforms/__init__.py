"""Everything vendor-specific, behind one interface (see ``platforms.base``), and the
one timing protocol over it (``platforms.timing``)."""

from __future__ import annotations

from platforms.base import Platform
from platforms.cpu import CpuPlatform
from platforms.cuda import CudaPlatform
from platforms.rocm import RocmPlatform
from platforms.timing import Timing, TimingSettings, time_runs

PLATFORM_NAMES = ("auto", "cuda", "rocm", "cpu")


class PlatformUnavailable(RuntimeError):
    """The platform asked for cannot run on this machine."""


def get_platform(name: str = "auto", index: int = 0) -> Platform:
    """The platform called ``name``; ``auto`` picks the GPU when there is one.

    >>> get_platform("cpu").name
    'cpu'
    """
    gpus = {"cuda": CudaPlatform(index), "rocm": RocmPlatform(index)}
    if name == "auto":
        for platform in gpus.values():
            if platform.available():
                return platform
        return CpuPlatform()
    if name == "cpu":
        return CpuPlatform()
    if name not in gpus:
        raise PlatformUnavailable(
            f"unknown platform {name!r}; choose one of {', '.join(PLATFORM_NAMES)}"
        )
    if not gpus[name].available():
        raise PlatformUnavailable(
            f"platform {name!r} is not available on this machine (no such GPU visible to torch)"
        )
    return gpus[name]


__all__ = [
    "PLATFORM_NAMES",
    "Platform",
    "PlatformUnavailable",
    "Timing",
    "TimingSettings",
    "get_platform",
    "time_runs",
]
