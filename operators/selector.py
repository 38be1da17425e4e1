"""Which operator (and which LLM focus) to apply to a parent, given its bottleneck class.

A bandit over (class, arm) pairs, where an arm is an operator or an LLM
focus. Before any evidence, an arm is drawn with probability proportional to
its config weight times the class's bias for it (``CLASS_BIAS``): a
memory-bound parent gets the "memory" focus more often. Each offspring
reports back whether it improved on its parent; the improvement rate of
each (class, arm) pair is learnt with a Beta posterior, and every choice is
drawn in proportion to ``weight x bias x θ``, θ sampled from that posterior
(a proportional variant of Thompson sampling: arms that pay off are chosen
more, none starves). All randomness comes from the ``random.Random`` given,
so a seed reproduces the choices; ``state()`` and ``from_state()`` carry
what was learnt across a resume.

"Improved" allows for timing noise (``improved``): a child counts as better
than its parent only when their times differ by more than their spreads.
``ModelChooser`` draws the model of each LLM request in the same way, from
what each model's children achieved per dollar.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Collection, Iterable, Mapping
from typing import Any

from platforms.profiling.classes import (
    AT_ROOFLINE,
    BOTTLENECK_CLASSES,
    COMPUTE_BOUND,
    LATENCY_BOUND,
    LAUNCH_BOUND,
    MEMORY_BOUND,
    UNKNOWN,
)
from platforms.timing import faster_beyond_noise

#: Operators the selector knows by default (a run's weights may name a subset).
OPERATORS: tuple[str, ...] = ("parametric_mutation", "parametric_crossover", "llm_mutation", "llm_crossover")
#: What an LLM operator is asked to work on.
FOCUSES: tuple[str, ...] = ("memory", "compute", "occupancy", "launch", "tiling")

#: Multipliers on an arm's weight per class before any evidence; arms not named get 1.
CLASS_BIAS: dict[str, dict[str, float]] = {
    MEMORY_BOUND: {"memory": 3.0, "tiling": 1.5, "compute": 0.5, "launch": 0.5, "llm_mutation": 1.5},
    COMPUTE_BOUND: {"compute": 3.0, "tiling": 2.0, "memory": 0.5, "launch": 0.5, "llm_mutation": 1.5},
    LATENCY_BOUND: {"occupancy": 3.0, "tiling": 1.5, "launch": 0.5, "parametric_mutation": 1.5},
    LAUNCH_BOUND: {"launch": 3.0, "memory": 0.5, "compute": 0.5, "occupancy": 0.5, "llm_mutation": 1.5,
                   "parametric_mutation": 0.5, "parametric_crossover": 0.5},
    AT_ROOFLINE: {"memory": 1.5, "compute": 1.5, "occupancy": 0.5, "parametric_mutation": 0.5,
                  "parametric_crossover": 0.5, "llm_mutation": 2.0},
    UNKNOWN: {},
}

_STATE_VERSION = 1
_KINDS = ("operator", "focus")


@dataclasses.dataclass
class ArmStats:
    """Offspring made by an arm under a class, and how many improved on their parent."""

    tries: int = 0
    improvements: int = 0


@dataclasses.dataclass(frozen=True)
class SelectorRow:
    """One line of the report: how an arm did under a class."""

    bottleneck: str
    kind: str  # operator | focus
    arm: str
    tries: int
    improvements: int

    @property
    def rate(self) -> float:
        return self.improvements / self.tries if self.tries else 0.0


class OperatorSelector:
    """Chooses operators and LLM focuses per bottleneck class and learns from the outcomes.

    >>> selector = OperatorSelector({"parametric_mutation": 0.7, "parametric_crossover": 0.3}, random.Random(0))
    >>> selector.choose("memory_bound") in ("parametric_mutation", "parametric_crossover")
    True
    """

    def __init__(self, weights: Mapping[str, float], rng: random.Random,
                 focuses: Mapping[str, float] | Iterable[str] = FOCUSES,
                 bias: Mapping[str, Mapping[str, float]] | None = None,
                 prior_rate: float = 0.2, prior_strength: float = 2.0) -> None:
        focus_weights = dict(focuses) if isinstance(focuses, Mapping) else {f: 1.0 for f in focuses}
        self.weights = {"operator": _checked(weights, "operator"), "focus": _checked(focus_weights, "focus")}
        self.rng = rng
        self.bias = {cls: dict(arms) for cls, arms in (CLASS_BIAS if bias is None else bias).items()}
        unknown = set(self.bias) - set(BOTTLENECK_CLASSES)
        if unknown:
            raise ValueError(f"bias for unknown bottleneck classes {sorted(unknown)}")
        if not 0 < prior_rate < 1 or prior_strength <= 0:
            raise ValueError("prior_rate must be in (0, 1) and prior_strength positive")
        self.prior_rate, self.prior_strength = prior_rate, prior_strength
        self.stats: dict[str, dict[str, dict[str, ArmStats]]] = {kind: {} for kind in _KINDS}

    def choose(self, bottleneck: str, among: Collection[str] | None = None) -> str:
        """An operator for a parent of class ``bottleneck``, from ``among`` only when given.

        Raises ``ValueError`` when no operator with a positive weight is left to choose.
        """
        return self._draw("operator", bottleneck, among)

    def choose_focus(self, bottleneck: str) -> str:
        """A focus for an LLM operator working on a parent of class ``bottleneck``."""
        return self._draw("focus", bottleneck)

    def update(self, bottleneck: str, operator: str, improved: bool, focus: str | None = None) -> None:
        """Record one offspring of ``operator`` (and ``focus``) on a ``bottleneck`` parent."""
        for kind, arm in (("operator", operator), ("focus", focus)):
            if arm is None:
                continue
            self._arms(kind, arm)
            stats = self.stats[kind].setdefault(_checked_class(bottleneck), {}).setdefault(arm, ArmStats())
            stats.tries += 1
            stats.improvements += bool(improved)

    def _draw(self, kind: str, bottleneck: str, among: Collection[str] | None = None) -> str:
        bias = self.bias.get(_checked_class(bottleneck), {})
        seen = self.stats[kind].get(bottleneck, {})
        arms = {arm: w for arm, w in self.weights[kind].items() if among is None or arm in among}
        if not any(w > 0 for w in arms.values()):
            raise ValueError(f"no {kind} with a positive weight among {sorted(among or ())}")
        scores = []
        for arm, weight in arms.items():
            stats = seen.get(arm, ArmStats())
            alpha = self.prior_strength * self.prior_rate + stats.improvements
            beta = self.prior_strength * (1 - self.prior_rate) + stats.tries - stats.improvements
            theta = self.rng.betavariate(alpha, beta)
            scores.append((arm, weight * bias.get(arm, 1.0) * theta))
        total = sum(score for _, score in scores)
        if total <= 0:  # every draw underflowed: fall back to the prior weights
            scores = [(arm, weight * bias.get(arm, 1.0)) for arm, weight in arms.items()]
            total = sum(score for _, score in scores)
        point = self.rng.random() * total
        for arm, score in scores:
            point -= score
            if point < 0:
                return arm
        return next(arm for arm, score in reversed(scores) if score > 0)

    def _arms(self, kind: str, arm: str) -> None:
        if arm not in self.weights[kind]:
            raise ValueError(f"unknown {kind} {arm!r} (known: {', '.join(self.weights[kind])})")

    def table(self) -> list[SelectorRow]:
        """What paid off under which class, for the report (arms that were tried)."""
        rows = []
        for cls in BOTTLENECK_CLASSES:
            for kind in _KINDS:
                for arm in self.weights[kind]:
                    stats = self.stats[kind].get(cls, {}).get(arm)
                    if stats is not None and stats.tries:
                        rows.append(SelectorRow(cls, kind, arm, stats.tries, stats.improvements))
        return rows

    def state(self) -> dict[str, Any]:
        """What was learnt, JSON-safe (the rng's state is the caller's to store)."""
        return {
            "version": _STATE_VERSION,
            "stats": {kind: {cls: {arm: [s.tries, s.improvements] for arm, s in arms.items()}
                             for cls, arms in by_class.items()} for kind, by_class in self.stats.items()},
        }

    @classmethod
    def from_state(cls, state: Mapping[str, Any], weights: Mapping[str, float], rng: random.Random,
                   **kwargs: Any) -> OperatorSelector:
        """A selector with the run's weights that resumes from ``state``."""
        if state.get("version") != _STATE_VERSION:
            raise ValueError(f"selector state version {state.get('version')!r} is not {_STATE_VERSION}")
        selector = cls(weights, rng, **kwargs)
        for kind, by_class in state["stats"].items():
            for bottleneck, arms in by_class.items():
                for arm, (tries, improvements) in arms.items():
                    if arm in selector.weights[kind]:  # an operator the resumed run no longer uses is dropped
                        selector.stats[kind].setdefault(_checked_class(bottleneck), {})[arm] = \
                            ArmStats(int(tries), int(improvements))
        return selector


def _checked(weights: Mapping[str, float], kind: str) -> dict[str, float]:
    checked = {str(arm): float(w) for arm, w in weights.items()}
    if any(w < 0 for w in checked.values()) or not any(w > 0 for w in checked.values()):
        raise ValueError(f"{kind} weights must be non-negative with at least one positive: {checked}")
    return checked


def _checked_class(bottleneck: str) -> str:
    if bottleneck not in BOTTLENECK_CLASSES:
        raise ValueError(f"unknown bottleneck class {bottleneck!r} (known: {', '.join(BOTTLENECK_CLASSES)})")
    return bottleneck


def improved(runtime_ms: float | None, spread: float | None, parent_ms: float | None,
             parent_spread: float | None) -> bool:
    """Whether a kernel timed at ``runtime_ms`` beats its parent's ``parent_ms`` beyond the timing noise.

    The search's own rule for faster (``platforms.timing.faster_beyond_noise``,
    with each verdict's ``runtime_spread``): the child's time range lies wholly
    below its parent's, by at least ``platforms.timing.MIN_GAIN``. A child or parent with no
    time did not improve.

    >>> improved(0.9, 0.0, 1.0, None), improved(0.95, 0.1, 1.0, 0.1), improved(0.8, 0.1, 1.0, 0.1)
    (True, False, True)
    """
    return (runtime_ms is not None and parent_ms is not None
            and faster_beyond_noise(runtime_ms, spread, parent_ms, parent_spread))


class ModelChooser:
    """Which of the configured models writes the next LLM child: improvements per dollar, learnt as the run goes.

    Each model has its weight ``w`` (``llm.models``), the requests it was
    judged on ``n`` (a reply that gave no kernel counts, a failed or slower
    kernel counts), the improvements among them ``k`` (``improved``), and its
    mean cost per request ``c`` in USD (from the run's accounting, ``price``).
    A draw samples ``theta ~ Beta(a + k, b + n - k)`` per model (the same prior
    as the operator selector's) and picks a model with probability
    proportional to ``w * theta / c``: Thompson-style sampling of improvements
    per dollar, in which no model starves. A model with no paid reply yet
    costs the mean of the others (1 when none has one); a model's cost is at
    least 1% of the dearest one's, so a free local model is favoured but not
    without bound. With one model there is nothing to draw (and no draw is
    taken from the generator).

    >>> chooser = ModelChooser({"openai/a": 1.0, "openai/b": 1.0}, random.Random(0))
    >>> chooser.choose() in ("openai/a", "openai/b")
    True
    """

    def __init__(self, weights: Mapping[str, float], rng: random.Random, state: Mapping[str, Any] | None = None,
                 prior_rate: float = 0.2, prior_strength: float = 2.0) -> None:
        self.weights = _checked(weights, "model")
        self.rng = rng
        self.prior_rate, self.prior_strength = prior_rate, prior_strength
        self.stats = {model: ArmStats() for model in self.weights}
        for model, (tries, improvements) in (state or {}).get("stats", {}).items():
            if model in self.stats:
                self.stats[model] = ArmStats(int(tries), int(improvements))
        # USD per request, for the models that have paid replies
        self.costs = {m: float(c) for m, c in (state or {}).get("costs", {}).items() if m in self.weights}

    def choose(self) -> str:
        """The model for the next request."""
        models = [m for m, w in self.weights.items() if w > 0]
        if len(models) == 1:
            return models[0]
        known = list(self.costs.values())
        default = sum(known) / len(known) if known else 1.0
        least = 0.01 * max(known, default=default) or 1e-12
        scores = []
        for model in models:
            stats = self.stats[model]
            theta = self.rng.betavariate(self.prior_strength * self.prior_rate + stats.improvements,
                                         self.prior_strength * (1 - self.prior_rate) + stats.tries
                                         - stats.improvements)
            scores.append(self.weights[model] * theta / max(self.costs.get(model, default), least))
        point = self.rng.random() * sum(scores)
        for model, score in zip(models, scores):
            point -= score
            if point < 0:
                return model
        return models[-1]

    def update(self, model: str, improved: bool) -> None:
        """Record one judged request of ``model``."""
        if model in self.stats:  # "" for a request the budget refused: no model was asked
            self.stats[model].tries += 1
            self.stats[model].improvements += bool(improved)

    def price(self, usage: Mapping[str, tuple[int, float]]) -> None:
        """Take each model's paid requests and their cost in USD (the run's accounting) as its cost per request."""
        self.costs = {m: cost / requests for m, (requests, cost) in usage.items() if m in self.weights and requests}

    def state(self) -> dict[str, Any]:
        """What was learnt, JSON-safe."""
        return {"stats": {m: [s.tries, s.improvements] for m, s in self.stats.items() if s.tries},
                "costs": dict(self.costs)}

    def table(self) -> list[dict[str, Any]]:
        """Per model: requests judged, improvements, USD per request (the report's view)."""
        return [{"model": m, "tries": s.tries, "improvements": s.improvements, "usd_per_request": self.costs.get(m)}
                for m, s in self.stats.items()]
