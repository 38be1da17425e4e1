"""A sweep's budget follows the headroom: what runs at the speed of light saved goes where most is left.

A run with ``search.stop_at_sol`` stops once its best reaches that share of
the speed of light, before its ``max_evaluations``. ``share_saved`` says who
gets the evaluations it did not spend, by this rule:

1. **Saved**: over the runs that stopped at the speed of light, the sum of
   ``max_evaluations - evaluations`` (a run that got extra evaluations
   itself is left out: what the second pass saves is not handed on again).
2. **Who may take it**: the runs that finished with a best whose SOL is known,
   that did not stop at the speed of light, whose best did not read below
   the floor (a flagged kernel's SOL means nothing), and that spent their
   whole budget: a run that stopped for ``patience``, ``max_generations``,
   ``target_speedup``, its wall limit or an exhausted search space would not
   spend more, and a run without an accepted kernel has no SOL to say how
   much is left there. A run takes a share once.
3. **How much**: in proportion to the headroom ``1 - sol``, rounded down,
   each run at most ``cap`` times its own budget (``DEFAULT_CAP``: at most
   double it); what rounding and the caps leave goes, one evaluation at a
   time, to the runs with the most headroom first (ties: the sweep's order).

The sweep (``evolve.sweep``, unless its file says ``spend_saved: false``)
fixes the shares once every run of the first pass has ended, keeps them in
the sweep's directory, raises each receiving run's stored budget by its share
(``evolve.session.raise_budget``, recorded in the run's store, once) and
resumes it: a second pass. The runs of the second pass spend what they get,
or less where they reach the speed of light or another stop first; what
they save is not handed on again.

>>> from evolve.report_sweep import Outcome
>>> runs = [Outcome("gelu", "finished", evaluations=20, max_evaluations=100, best_ms=1.0, sol=0.95, at_sol=True),
...         Outcome("gemm", "finished", evaluations=100, max_evaluations=100, best_ms=1.0, sol=0.2),
...         Outcome("norm", "finished", evaluations=100, max_evaluations=100, best_ms=1.0, sol=0.6)]
>>> share_saved(runs)
{'gemm': 54, 'norm': 26}
"""

from __future__ import annotations

from typing import Any

DEFAULT_CAP = 1.0


def saved(outcomes: list[Any]) -> int:
    """Evaluations the runs that stopped at the speed of light did not spend (the second pass's not)."""
    return sum(max(0, (o.max_evaluations or 0) - o.evaluations) for o in outcomes
               if o.at_sol and not _extra(o))


def _extra(outcome: Any) -> int:
    """Evaluations the run was granted on top of its own budget (its share, once it got it)."""
    return getattr(outcome, "extra_evaluations", 0) or 0


def share_saved(outcomes: list[Any], cap: float = DEFAULT_CAP) -> dict[str, int]:
    """Extra evaluations per run name, by the module's rule; runs that get none are left out.

    ``outcomes`` are ``evolve.report_sweep.Outcome``s (``run_outcome``): their name, status,
    evaluations, max_evaluations, sol, below_floor, at_sol and extra_evaluations are read.
    """
    pot = saved(outcomes)
    takers = [o for o in outcomes if o.status == "finished" and o.sol is not None and not o.at_sol
              and not o.below_floor and o.sol < 1.0 and o.max_evaluations
              and o.evaluations >= o.max_evaluations and not _extra(o)]
    if pot <= 0 or not takers:
        return {}
    order = sorted(range(len(takers)), key=lambda i: -(1.0 - takers[i].sol))  # stable: the sweep's order on ties
    room = [int(cap * t.max_evaluations) for t in takers]
    headroom = sum(1.0 - t.sol for t in takers)
    extra = [min(room[i], int(pot * (1.0 - t.sol) / headroom)) for i, t in enumerate(takers)]
    left = pot - sum(extra)
    while left > 0 and any(extra[i] < room[i] for i in order):
        for i in order:
            if left > 0 and extra[i] < room[i]:
                extra[i] += 1
                left -= 1
    return {t.name: e for t, e in zip(takers, extra) if e > 0}
