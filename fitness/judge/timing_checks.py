"""What the judge checks of a worker's time reply before it believes it.

The worker times the candidate (``fitness.worker.timed_step``) and reports per-run
times, the wall clock around each run, the timer's own overhead and the runs
it handed over. The worker is where untrusted code runs, so the judge checks
each of these against what it knows itself:

- the runs handed over are the ones it had to hand over (``handed_over``);
- the timer agrees with the wall clock (``timer_disagrees``);
- the timer's overhead, which ``platforms.Timing.median_ms`` subtracts from the
  median (up to half of it, where there is no device trace), is bounded by the
  judge's own measurement of the same protocol in its own process
  (``trusted_timing``): a forged overhead could otherwise make a kernel read up
  to 2x faster.
"""

from __future__ import annotations

import statistics

from fitness.boundary.protocol import Timed
from platforms import Timing

#: The worker's timer overhead is believed up to this many times the judge's own, plus
#: ``OVERHEAD_SLACK_MS``: the same protocol in another process on the same device costs about
#: the same (a few microseconds on the CPU, tens on a GPU), never many times more.
OVERHEAD_FACTOR = 2.0
OVERHEAD_SLACK_MS = 0.01


def handed_over(reply: Timed, judged: list[int], checks: int) -> bool:
    """Whether the worker handed over what it had to: the runs judged, the last among them,
    and at least ``checks`` of the window's runs (all of them, if it has fewer)."""
    n_runs = len(reply.runs_ms)
    return reply.checked == judged and n_runs - 1 in judged and len(judged) >= min(n_runs, checks)


def trusted_timing(reply: Timed, judge_overhead_ms: float | None) -> Timing:
    """The timing of ``reply``, its overhead clamped to ``OVERHEAD_FACTOR`` times the judge's own
    (``judge_overhead_ms``; None: not measured, only the slack) plus ``OVERHEAD_SLACK_MS``.

    >>> reply = Timed([1.0, 1.0, 1.0], [1.0, 1.0, 1.0], 10.0, None, [2], {})
    >>> trusted_timing(reply, 0.002).median_ms  # a forged 10 ms overhead would have halved it
    0.986
    """
    bound = OVERHEAD_FACTOR * (judge_overhead_ms or 0.0) + OVERHEAD_SLACK_MS
    return Timing(reply.runs_ms, reply.wall_ms, min(reply.overhead_ms, bound), reply.device_ms)


def timer_disagrees(runs: list[float], walls: list[float], step_wall_s: float) -> str:
    """Reason to distrust the timings, or ``""``.

    Each timed run is bracketed by a wall clock read outside the candidate's
    reach: a device timer cannot report more than the wall time around it, nor
    much less (runs synchronise the device, so the wall time is the kernel's
    plus a launch and a synchronisation). That there is one finite time >= 0
    of each kind per run, ``fitness.boundary.protocol.Timed`` has checked.
    """
    if sum(runs) > step_wall_s * 1e3 * 1.05 + 1.0:
        return "the timer reported more time than passed on the wall clock"
    med_run, med_wall = statistics.median(runs), statistics.median(walls)
    if med_run > med_wall * 1.10 + 0.05:
        return f"the timer ({med_run:.4g} ms) disagrees with the wall clock ({med_wall:.4g} ms)"
    if med_run < 0.5 * med_wall - 0.1:
        return f"the timer ({med_run:.4g} ms) disagrees with the wall clock ({med_wall:.4g} ms)"
    return ""
