"""``kevo sweep``'s line for each run as it ends."""

from __future__ import annotations

import io

from rich.console import Console

from evolve.progress import SweepProgress
from evolve.report_sweep import Outcome


def _line(outcome: Outcome) -> str:
    out = io.StringIO()
    SweepProgress(Console(file=out, width=300)).ended(outcome)
    return out.getvalue().strip()


def test_a_finished_run_without_a_correct_kernel_says_why_it_stopped():
    """On an H100, 89_cumsum's seed was still pending at its 60 s wall limit, and the line said
    only 'finished, no correct kernel', as for a run whose kernels were all wrong."""
    line = _line(Outcome("003-89_cumsum", "finished", "max_wall_time_s reached (61 s)"))
    assert line == "kevo sweep: 003-89_cumsum: finished, no correct kernel (max_wall_time_s reached (61 s))"
    line = _line(Outcome("002-41_Max_Pooling_1D", "finished", "max_evaluations reached", speedup=2.96))
    assert line == "kevo sweep: 002-41_Max_Pooling_1D: finished, 2.96x"  # a kernel found: the reason is noise
    assert _line(Outcome("004-90_cumprod", "failed", "CutoffError: ...")).endswith("no correct kernel (CutoffError: ...)")
