"""How kevo's own process stops: SIGTERM as Ctrl-C, and its temporary folders go with it."""

from __future__ import annotations

import signal
import threading
from typing import Any

from fitness.sandbox import remove_orphaned_folders


def stop_on_sigterm() -> list[int]:
    """SIGTERM (a scheduler's stop, ``timeout``) ends kevo as Ctrl-C does; a second one at once.
    The list returned gets the signal's number once one came."""
    got: list[int] = []

    def stop(signum: int, frame: Any) -> None:
        got.append(signum)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        raise KeyboardInterrupt

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, stop)
    return got


def leave_nothing_behind() -> None:
    """kevo's process is about to exit: its own temporary folders go, and those of processes gone
    since, its actors among them (a sweep stopped mid-capture leaves some: ``fitness.sandbox``)."""
    remove_orphaned_folders(mine=True)
