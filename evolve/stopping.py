"""How kevo's own process stops: SIGTERM as Ctrl-C, and its temporary folders go with it."""

from __future__ import annotations

import os
import signal
import threading
import time
from typing import Any

from fitness.boundary.sandbox import remove_orphaned_folders


#: A SIGTERM this soon after the first is the same stop sent again: GNU ``timeout`` signals its
#: child, then its whole process group, which holds the child (seen with strace: two kill calls).
REPEAT_S = 1.0


def stop_on_sigterm() -> list[int]:
    """SIGTERM (a scheduler's stop, ``timeout``) ends kevo as Ctrl-C does; a second one, once
    ``REPEAT_S`` have passed, at once (while kevo's own code runs: SIGKILL for the rest).
    The list returned gets the signal's number once one came."""
    got: list[int] = []
    first: list[float] = []

    def stop(signum: int, frame: Any) -> None:
        if first:
            if time.monotonic() - first[0] < REPEAT_S:
                return  # the same stop again: the first one's cleanup goes on
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGTERM)
            return
        got.append(signum)
        first.append(time.monotonic())
        raise KeyboardInterrupt

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, stop)
    return got


def leave_nothing_behind() -> None:
    """kevo's process is about to exit: its own temporary folders go, and those of processes gone
    since, its actors among them (a sweep stopped mid-capture leaves some: ``fitness.boundary.sandbox``)."""
    remove_orphaned_folders(mine=True)
