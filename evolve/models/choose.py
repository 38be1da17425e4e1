"""Which of ``kevo apply``'s kernels go into the model under torch.compile, and its figure.

A region's kernel goes in only where the whole model, under torch.compile, gets faster with it.
In order of the regions' shares, the compiled model with the kernels chosen so far, and with
this one too, are timed in ``ROUNDS`` interleaved rounds (each window alone on the device:
``platforms.device_lock``); the kernel stays only if the model is faster with it in every round.
One Dynamo capture serves every trial (``evolve.models.compiled.KernelBackend``: each set of
kernels compiled once). Then the chosen model is checked against the original on fresh inputs,
and eager, torch.compile (its defaults: the incumbent, a model of its own) and the chosen model
are timed in ``ROUNDS`` interleaved rounds: the figure over torch.compile, with its interval.
With no kernel chosen the model is torch.compile's own, and the report says so.
"""

from __future__ import annotations

import contextlib
import dataclasses
import secrets
import statistics
from collections.abc import Callable
from typing import Any

from evolve.models.compiled import RegionKernel, compile_with
from evolve.models.model import time_forward
from fitness.judge.compare import compare
from fitness.judge.incumbent import matmul_precision
from fitness.problems.problem import Problem, build_model, make_inputs
from platforms import Platform

#: Rounds in which two models are timed against each other, interleaved.
ROUNDS = 3


@dataclasses.dataclass
class Trial:
    """A kernel tried in the compiled model: the model without it over the model with it, per round."""

    key: str
    label: str
    ratios: list[float]
    kept: bool

    @property
    def ratio(self) -> float:
        return statistics.median(self.ratios)


@dataclasses.dataclass
class Compiled:
    """The compiled model's outcome: the kernels tried, the ones in, the check and the times."""

    trials: list[Trial]
    chosen: list[str]  # keys, in the order they went in
    found: dict[str, int]  # per key: the regions it matched in the traced graphs
    fault: str = ""  # the check's failure, or ""
    max_abs_diff: float = 0.0
    times: dict[str, list[float]] = dataclasses.field(default_factory=dict)  # eager, compiled, patched


Timer = Callable[[Platform, Callable[..., Any], Problem], float]


def _warm(forward: Callable[..., Any], problem: Problem, platform: Platform) -> None:
    import torch

    with torch.no_grad():
        forward(*make_inputs(problem, 0, platform.device()))
    platform.synchronize()


def choose(problem: Problem, kernels: list[RegionKernel], platform: Platform, original: Any, cutoff: float,
           checks: int, force: bool = False, rounds: int = ROUNDS, timer: Timer = time_forward) -> Compiled:
    """The compiled model with the ``kernels`` (in order: the larger region's first) that make it
    faster, or all of them with ``force``; checked on ``checks`` fresh input sets against ``original``
    under ``cutoff``, and timed (see the module doc). torch.compile failing raises."""
    import torch

    model = build_model(problem.Model, problem, 0, platform.device())
    # a model that draws in its forward draws in the compiled graphs as eager does, so the check can compare
    patched, backend = compile_with(model, kernels, active=(), exact_random=True)
    _warm(patched, problem, platform)  # the capture: which regions each kernel matches
    found = backend.found()
    trials, chosen = [], []
    for kernel in kernels:
        if kernel.key not in found:
            continue
        if force:
            chosen.append(kernel.key)
            continue
        with_it = [*chosen, kernel.key]
        for active in (with_it, chosen):  # each set compiled before its window
            backend.active = set(active)
            _warm(patched, problem, platform)
        ratios = []
        for _ in range(rounds):
            backend.active = set(chosen)
            without = timer(platform, patched, problem)
            backend.active = set(with_it)
            ratios.append(without / timer(platform, patched, problem))
        kept = min(ratios) > 1.0
        trials.append(Trial(kernel.key, kernel.label, ratios, kept))
        if kept:
            chosen.append(kernel.key)
    backend.active = set(chosen)
    _warm(patched, problem, platform)
    outcome = Compiled(trials, chosen, found)
    for _ in range(checks):
        inputs = make_inputs(problem, secrets.randbelow(1 << 30) + 1, platform.device())
        drawn = secrets.randbelow(1 << 30) + 1  # a model that draws in its forward draws the same in both
        with torch.no_grad():
            torch.manual_seed(drawn)
            refs = output_tensors(original(*[x.clone() if isinstance(x, torch.Tensor) else x for x in inputs]))
            torch.manual_seed(drawn)
            outs = output_tensors(patched(*inputs))
        verdict = compare(outs, [r.detach() for r in refs], cutoff)
        outcome.max_abs_diff = max(outcome.max_abs_diff, verdict.max_abs_diff)
        if verdict.status != "accepted" and not outcome.fault:
            outcome.fault = f"the compiled model's {verdict.reason}"
    if outcome.fault:
        return outcome
    eager = build_model(problem.Model, problem, 0, platform.device())
    incumbent = torch.compile(build_model(problem.Model, problem, 0, platform.device()))
    _warm(incumbent, problem, platform)
    sides = [("eager", eager, False), ("compiled", incumbent, False), ("patched", patched, False)]
    lower = {k.key for k in kernels if k.lower_precision}
    if lower & set(outcome.chosen) and platform.name != "cpu":  # TF32 is a line of PyTorch away for a user too
        with matmul_precision(True):
            tf32 = torch.compile(build_model(problem.Model, problem, 0, platform.device()))
            _warm(tf32, problem, platform)
        sides.append(("compiled_tf32", tf32, True))
    outcome.times = {name: [] for name, _, _ in sides}
    for _ in range(rounds):
        for name, forward, allowed in sides:
            with matmul_precision(True) if allowed else contextlib.nullcontext():
                outcome.times[name].append(timer(platform, forward, problem))
    return outcome


def versus(times: dict[str, list[float]], incumbent: str = "compiled") -> dict[str, Any]:
    """The patched model over torch.compile (``incumbent``: ``compiled_tf32`` for torch.compile with TF32
    allowed), round by round: ``ratio`` (the median), ``low``, ``high``, ``rounds`` and ``faster`` (who is,
    in every round).

    >>> versus({"compiled": [2.0, 2.2, 1.9], "patched": [1.0, 1.0, 1.0]})["faster"]
    'kevo'
    """
    ratios = [c / p for c, p in zip(times[incumbent], times["patched"])]
    faster = "kevo" if min(ratios) > 1 else "torch.compile" if max(ratios) < 1 else "neither"
    return {"ratio": statistics.median(ratios), "low": min(ratios), "high": max(ratios), "rounds": len(ratios),
            "faster": faster}


def output_tensors(out: Any) -> list[Any]:
    """The tensors a model's forward returns, in order, however nested (a tensor, a tuple, a dict)."""
    import torch
    from torch.utils._pytree import tree_leaves

    return [leaf for leaf in tree_leaves(out) if isinstance(leaf, torch.Tensor)]
