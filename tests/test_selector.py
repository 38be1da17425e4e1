"""The operator selector: class priors, learning from outcomes, determinism, resume."""

from __future__ import annotations

import collections
import json
import random

import pytest

from operators.selector import FOCUSES, OperatorSelector
from platforms.profiling.classes import COMPUTE_BOUND, LAUNCH_BOUND, MEMORY_BOUND, UNKNOWN

WEIGHTS = {"parametric_mutation": 0.7, "parametric_crossover": 0.3, "llm_mutation": 1.0, "llm_crossover": 0.0}


def draws(selector: OperatorSelector, bottleneck: str, n: int, focus: bool = False) -> collections.Counter:
    choose = selector.choose_focus if focus else selector.choose
    return collections.Counter(choose(bottleneck) for _ in range(n))


def test_the_same_seed_gives_the_same_choices():
    a, b = OperatorSelector(WEIGHTS, random.Random(7)), OperatorSelector(WEIGHTS, random.Random(7))
    for selector in (a, b):
        selector.update(MEMORY_BOUND, "llm_mutation", True, focus="memory")
    assert [a.choose(MEMORY_BOUND) for _ in range(50)] == [b.choose(MEMORY_BOUND) for _ in range(50)]
    assert [a.choose_focus(COMPUTE_BOUND) for _ in range(50)] == [b.choose_focus(COMPUTE_BOUND) for _ in range(50)]


def test_a_zero_weight_is_never_chosen():
    counts = draws(OperatorSelector(WEIGHTS, random.Random(1)), UNKNOWN, 2000)
    assert counts["llm_crossover"] == 0
    assert set(counts) == {"parametric_mutation", "parametric_crossover", "llm_mutation"}


def test_without_evidence_choices_follow_weights_times_class_bias():
    selector = OperatorSelector(WEIGHTS, random.Random(2))
    unknown = draws(selector, UNKNOWN, 6000)
    # no bias: in proportion to the config weights (0.7 : 1.0)
    assert 0.55 < unknown["parametric_mutation"] / unknown["llm_mutation"] < 0.85
    focuses = draws(selector, MEMORY_BOUND, 6000, focus=True)
    assert focuses["memory"] > 3 * focuses["compute"]  # bias 3.0 vs 0.5
    compute = draws(selector, COMPUTE_BOUND, 6000, focus=True)
    assert compute["compute"] > 3 * compute["memory"]
    launch = draws(selector, LAUNCH_BOUND, 6000, focus=True)
    assert launch.most_common(1)[0][0] == "launch"


def test_it_learns_which_operator_pays_off_under_which_class():
    selector = OperatorSelector(WEIGHTS, random.Random(3))
    for _ in range(40):
        selector.update(MEMORY_BOUND, "parametric_crossover", True)
        selector.update(MEMORY_BOUND, "parametric_mutation", False)
        selector.update(MEMORY_BOUND, "llm_mutation", False)
    learnt = draws(selector, MEMORY_BOUND, 3000)
    assert learnt["parametric_crossover"] > 0.8 * 3000  # it had the smallest weight (0.3)
    other = draws(selector, COMPUTE_BOUND, 3000)  # what was learnt under one class stays there
    assert other["parametric_crossover"] < 0.3 * 3000


def test_table_reports_tries_and_improvements_per_class():
    selector = OperatorSelector(WEIGHTS, random.Random(4))
    selector.update(MEMORY_BOUND, "llm_mutation", True, focus="memory")
    selector.update(MEMORY_BOUND, "llm_mutation", False, focus="memory")
    selector.update(COMPUTE_BOUND, "parametric_mutation", True)
    rows = {(r.bottleneck, r.kind, r.arm): (r.tries, r.improvements, r.rate) for r in selector.table()}
    assert rows == {
        (MEMORY_BOUND, "operator", "llm_mutation"): (2, 1, 0.5),
        (MEMORY_BOUND, "focus", "memory"): (2, 1, 0.5),
        (COMPUTE_BOUND, "operator", "parametric_mutation"): (1, 1, 1.0),
    }


def test_state_resumes_the_same_run():
    a = OperatorSelector(WEIGHTS, random.Random(5))
    for i in range(30):
        a.update(COMPUTE_BOUND, a.choose(COMPUTE_BOUND), i % 3 == 0, focus=a.choose_focus(COMPUTE_BOUND))
    state = json.loads(json.dumps(a.state()))
    rng_state = a.rng.getstate()
    b = OperatorSelector.from_state(state, WEIGHTS, random.Random())
    b.rng.setstate(rng_state)
    assert b.table() == a.table()
    assert [b.choose(COMPUTE_BOUND) for _ in range(40)] == [a.choose(COMPUTE_BOUND) for _ in range(40)]
    with pytest.raises(ValueError, match="version"):
        OperatorSelector.from_state({"version": 99, "stats": {}}, WEIGHTS, random.Random())


def test_bad_input_is_refused_with_a_clear_error():
    selector = OperatorSelector(WEIGHTS, random.Random(6))
    with pytest.raises(ValueError, match="unknown bottleneck class"):
        selector.choose("slow")
    with pytest.raises(ValueError, match="unknown operator 'magic'"):
        selector.update(MEMORY_BOUND, "magic", True)
    with pytest.raises(ValueError, match="unknown focus"):
        selector.update(MEMORY_BOUND, "llm_mutation", True, focus="vibes")
    with pytest.raises(ValueError, match="at least one positive"):
        OperatorSelector({"parametric_mutation": 0.0}, random.Random())
    assert set(FOCUSES) == {"memory", "compute", "occupancy", "launch", "tiling"}
