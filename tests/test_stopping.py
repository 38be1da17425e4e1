"""kevo's own process and SIGTERM (evolve.stopping): a stop sent twice at once is one stop."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

from tests.conftest import ROOT

# kevo's handler, then a loop until the interrupt, then a cleanup that takes a while
CHILD = """
import sys, time
from evolve.stopping import stop_on_sigterm
stop_on_sigterm()
try:
    print("ready", flush=True)  # inside: the stop may come before print returns
    while True:
        time.sleep(0.001)
except KeyboardInterrupt:
    print("stopping", flush=True)
    time.sleep(float(sys.argv[1]))
    print("cleaned up", flush=True)
"""


def stopped(second_after_s: float, cleanup_s: float = 2.0) -> tuple[int, str]:
    """SIGTERM once the child is ready, and again ``second_after_s`` after its cleanup began."""
    proc = subprocess.Popen([sys.executable, "-c", CHILD, str(cleanup_s)], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        proc.send_signal(signal.SIGTERM)
        assert proc.stdout.readline().strip() == "stopping"  # the first one's handler has run
        time.sleep(second_after_s)
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=30)
        return proc.returncode, out
    finally:
        proc.kill()


def test_the_same_stop_sent_again_at_once_lets_the_cleanup_finish():
    # as GNU timeout does: SIGTERM to its child, then to its whole process group
    code, out = stopped(0.0)
    assert code == 0 and "cleaned up" in out


def test_a_second_stop_later_ends_the_process_at_once():
    code, out = stopped(1.5, cleanup_s=10.0)
    assert code == -signal.SIGTERM and "cleaned up" not in out
