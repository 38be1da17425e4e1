"""Probe inputs from a wider value domain than the problem's draw (fitness.problems.probes)."""

from __future__ import annotations

import json
import textwrap

import pytest
import torch

from tests.conftest import PROBLEMS, SMALL_SHAPES
from tests.test_cli import kevo

from fitness import CutoffError, EvalSettings, Evaluator, ProblemError, Status
from fitness.problems.probes import Probe, transform
from fitness.problems.problem import load_problem, make_inputs

GELU = PROBLEMS / "gelu" / "reference.py"
ATTACKS = PROBLEMS.parent / "tests" / "attacks"


def write_problem(tmp_path, forward: str, inputs: str, extra: str = "", name: str = "problem.py"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(f"""
        import torch
        import torch.nn as nn

        batch_size = 4
        dim = 64
        {extra}

        class Model(nn.Module):
            def forward(self, *xs):
                {forward}

        def get_inputs():
            return {inputs}

        def get_init_inputs():
            return []
    """))
    return path


def test_a_probe_changes_floating_inputs_the_same_way_for_the_same_seed_and_leaves_the_rest():
    x, idx, mask = torch.rand(3, 50), torch.arange(6), torch.rand(6) > 0.5
    a = [x.clone(), idx.clone(), mask.clone()]
    b = [x.clone(), idx.clone(), mask.clone()]
    probe = Probe(signs=True, factor=200.0)
    assert transform(a, probe, 7, ["real"] * 3) == 1
    transform(b, probe, 7, ["real"] * 3)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], idx) and torch.equal(a[2], mask)
    assert torch.equal(a[0].abs(), x * 200.0)
    negative = (a[0] < 0).float().mean()
    assert 0.3 < negative < 0.7, "about half of the signs are flipped"
    c = [x.clone()]
    transform(c, probe, 8, ["real"])
    assert not torch.equal(c[0], a[0]), "another seed, other signs"


def test_declared_domains_keep_the_probes_inside_them():
    x = torch.rand(4, 10)
    kept = [x.clone(), x.clone()]
    transform(kept, Probe(signs=True, factor=150.0), 1, ["nonnegative", "as_drawn"])
    assert torch.equal(kept[0], x * 150.0) and torch.equal(kept[1], x)
    signs_only = [x.clone()]
    assert transform(signs_only, Probe(signs=True), 1, ["nonnegative"]) == 0


def test_a_bad_input_domain_is_a_clear_problem_error(tmp_path):
    path = write_problem(tmp_path, "return xs[0] * 2", "[torch.rand(batch_size, dim)]", 'INPUT_DOMAIN = "positive"')
    with pytest.raises(ProblemError, match="INPUT_DOMAIN entry 'positive'"):
        make_inputs(load_problem(path), 1, "cpu", Probe(signs=True))
    path = write_problem(tmp_path, "return xs[0] * 2", "[torch.rand(batch_size, dim)]", 'INPUT_DOMAIN = ["real", "real"]')
    with pytest.raises(ProblemError, match="one per input"):
        make_inputs(load_problem(path), 1, "cpu", Probe(signs=True))


def test_a_probe_the_reference_cannot_take_is_dropped_with_a_note_and_tried_without_signs(tmp_path):
    path = write_problem(tmp_path, "return torch.log(xs[0])", "[torch.rand(batch_size, dim) + 0.5]")
    evaluator = Evaluator(path, platform="cpu", max_abs_diff=1e-4)
    try:
        probes = evaluator.prepared.probes
        assert len(probes) == 1 and not probes[0].signs and probes[0].factor >= 100, probes
        notes = " ".join(evaluator.prepared.notes)
        assert "random signs) dropped" in notes and "not finite" in notes
    finally:
        evaluator.close()


def test_a_declared_nonnegative_domain_needs_no_dropping(tmp_path):
    path = write_problem(tmp_path, "return torch.log(xs[0])", "[torch.rand(batch_size, dim) + 0.5]",
                         'INPUT_DOMAIN = "nonnegative"')
    evaluator = Evaluator(path, platform="cpu", max_abs_diff=1e-4)
    try:
        assert [p.signs for p in evaluator.prepared.probes] == [False]
        assert evaluator.prepared.notes == []
    finally:
        evaluator.close()


def test_a_problem_without_floating_inputs_has_no_probes(tmp_path):
    path = write_problem(tmp_path, "return (xs[0] * 3 + 1).float()", "[torch.randint(0, 1000, (batch_size, dim))]")
    evaluator = Evaluator(path, platform="cpu", max_abs_diff=1e-3)
    try:
        assert evaluator.prepared.probes == []
    finally:
        evaluator.close()


def test_a_probe_cutoff_follows_the_reference_scale_and_never_loosens_the_own_check():
    evaluator = Evaluator(GELU, platform="cpu", shapes=SMALL_SHAPES["gelu"])
    try:
        signed, signed_scaled, scaled = evaluator.prepared.probes
        assert (signed.signs, signed_scaled.signs, scaled.signs) == (True, True, False)
        assert signed.cutoff == evaluator.cutoff  # GELU on (-1, 1) stays below its scale on [0, 1)
        assert scaled.factor == signed_scaled.factor >= 100
        assert scaled.cutoff > 50 * evaluator.cutoff  # outputs reach about the scale factor
        result = evaluator.evaluate((PROBLEMS / "gelu" / "seed.py").read_text())
        assert result.status is Status.ACCEPTED, result.reason
        assert result.max_abs_diff <= evaluator.cutoff  # the problem's own checks, at their cutoff
    finally:
        evaluator.close()


def test_truly_constant_outputs_stay_refused_with_the_probes_named(tmp_path):
    path = write_problem(tmp_path, "return xs[0] * 0.0", "[torch.rand(batch_size, dim)]")
    with pytest.raises(CutoffError, match="probe inputs do not tell it from the answer either"):
        Evaluator(path, platform="cpu")


def test_without_probes_a_fitted_kernel_passes_and_the_store_keeps_the_new_status(tmp_path):
    source = (ATTACKS / "fitted_polynomial_gelu.py").read_text()
    with Evaluator(GELU, platform="cpu", shapes=SMALL_SHAPES["gelu"], settings=EvalSettings(probes=False)) as ev:
        assert ev.prepared.probes == []
        assert ev.evaluate(source).status is Status.ACCEPTED
    with Evaluator(GELU, platform="cpu", shapes=SMALL_SHAPES["gelu"]) as ev:
        result = ev.evaluate(source)
    assert result.status is Status.WRONG_OFF_DISTRIBUTION
    assert "inputs with random signs" in result.reason
    from operators.llm.prompt import describe_result
    from population_store import Individual, RunStore, source_hash

    with RunStore.create(tmp_path / "run.sqlite", {"search": {"seed": 0}}) as store:
        ind = store.add_individual(Individual(None, source, source_hash(source), generation=0, island=0,
                                              operator="seed", parents=[], params={}))
        store.set_result(ind, result.to_dict(), result.status.value, None)
        assert store.status_counts() == {"wrong_off_distribution": 1}
    line = describe_result(result.to_dict())
    assert line.startswith("wrong_off_distribution") and "random signs" in line


def test_verify_no_probes_and_the_probes_in_its_json():
    args = ["verify", GELU, ATTACKS / "fitted_polynomial_gelu.py", "--device", "cpu", "--json",
            "--shape", "batch_size=4", "--shape", "dim=100"]
    with_probes = kevo(*args)
    record = json.loads(with_probes.stdout)
    assert with_probes.returncode == 1 and record["status"] == "wrong_off_distribution"
    assert len(record["probes"]) == 3 and record["notes"] == []
    without = kevo(*args, "--no-probes")
    record = json.loads(without.stdout)
    assert without.returncode == 0 and record["status"] == "accepted" and record["probes"] == []


def test_the_config_switches_probes_off(tmp_path):
    from evolve.config import load_config
    from evolve.session import eval_settings

    config = tmp_path / "c.yaml"
    config.write_text(f"problem:\n  reference: {GELU}\n  seeds: [{PROBLEMS / 'gelu' / 'seed.py'}]\n"
                      "fitness:\n  probes: false\nplatform: cpu\n")
    assert eval_settings(load_config(config)).probes is False
    config.write_text(f"problem:\n  reference: {GELU}\n  seeds: [{PROBLEMS / 'gelu' / 'seed.py'}]\nplatform: cpu\n")
    assert eval_settings(load_config(config)).probes is True
