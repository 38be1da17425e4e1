"""Speed of light on every verdict, and faster than physics is never a plain speedup (fitness.judge.sol),
shown in ``kevo verify``, ``kevo report`` and the sweep summary; ``search.stop_at_sol``; and a
sweep's saved budget shared by headroom (evolve.budget)."""

from __future__ import annotations

import json

import pytest

from tests.conftest import PROBLEMS

import fitness.judge.evaluator as evaluator_module
from evolve.budget import saved, share_saved
from evolve.config import ConfigError, config_from_dict, load_config
from evolve.report_sweep import Outcome, format_sweep_summary, sweep_summary
from evolve.report_sol import sol_figures, sol_lines
from evolve.search.loop import LoopState, stop_reason
from fitness import EvalResult, Status
from fitness.judge.compare import Comparison
from fitness.judge.floor import BELOW_FLOOR_MARGIN, Floor
from fitness.judge.sol import judged_again, why_below, with_floor

SEED = (PROBLEMS / "elementwise" / "seed.py").read_text()


def floor(ms: float, cached: float | None = None) -> Floor:
    return Floor(ms, "memory", 4800, 0.0, 100.0, None, "measured", ms if cached is None else cached)


def test_an_accepted_verdict_carries_the_floor_it_was_judged_against(evaluators):
    evaluator = evaluators.get("elementwise")
    known = evaluator.prepared.floor
    assert known is not None and known.bound == "memory" and known.how["traced"] == "real"
    # elementwise: x + y on two (4, 100) float32 inputs, one (4, 100) output, each moved once
    assert known.bytes == 3 * 4 * 100 * 4 and known.how["bytes"]["outputs"] == 4 * 100 * 4
    result = evaluator.evaluate(SEED)
    assert result.accepted, result.reason
    assert result.floor_ms == known.floor_ms and result.bound == "memory"
    assert result.sol == pytest.approx(known.floor_ms / result.runtime_ms) and 0 < result.sol <= 1
    assert result.floor == known.to_dict() and result.floor["how"]["device"] == evaluator.platform.device_name()
    assert not result.below_floor and result.confinement  # the worker's, as its ready message said
    record = json.loads(json.dumps(result.to_dict()))
    assert {"floor_ms", "sol", "bound", "floor", "below_floor"} <= set(record)


def test_a_rejected_verdict_has_no_floor():
    wrong = with_floor(EvalResult(Status.WRONG, "x"), floor(1.0))
    assert wrong.floor_ms is None and wrong.sol is None and wrong.floor is None


def _spy_on_time_steps(monkeypatch, evaluator):
    """The checks asked of each time step, and how many runs each handed over."""
    steps = []
    real = type(evaluator)._timed_window

    def spy(self, window, checks):
        reply = real(self, window, checks)
        steps.append((checks, len(window.judged), len(reply.runs_ms) if hasattr(reply, "runs_ms") else None))
        return reply

    monkeypatch.setattr(type(evaluator), "_timed_window", spy)
    return steps


def test_a_kernel_faster_than_the_floor_is_judged_again_with_every_run_checked_and_flagged(evaluators, monkeypatch):
    evaluator = evaluators.get("elementwise")
    # a floor the test sets: a thousand seconds, so that an honest kernel reads far below it
    monkeypatch.setattr(evaluator.prepared, "floor", floor(1e6))
    steps = _spy_on_time_steps(monkeypatch, evaluator)
    result = evaluator.evaluate(SEED)
    assert result.accepted, result.reason
    (first_checks, _, _), (checks, handed, runs) = steps  # judged twice
    assert first_checks == evaluator.settings.timed_checks
    assert checks >= evaluator.prepared.timing.max_runs and handed == runs  # every timed run of the window
    assert result.below_floor and result.floor_ms == 1e6 and result.sol == 1.0
    assert "right on every timed run" in result.below_floor_reason and "skips work" in result.below_floor_reason
    assert "does not need all of its inputs" in result.below_floor_reason


def test_a_kernel_wrong_on_a_run_the_second_judgement_checks_is_refused(evaluators, monkeypatch):
    """Stands for a kernel wrong on a run the first judgement's sample missed: every run of the second
    judgement is compared, and one comparison there says wrong."""
    evaluator = evaluators.get("elementwise")
    monkeypatch.setattr(evaluator.prepared, "floor", floor(1e6))
    again = {"on": False}
    real_again, real_compare = type(evaluator)._again, evaluator_module.compare

    def second(self, *args):
        again["on"] = True
        return real_again(self, *args)

    def compare(outputs, references, cutoff):
        verdict = real_compare(outputs, references, cutoff)
        return Comparison("wrong", 1.0, "1 element(s) differ (simulated)") if again["on"] else verdict

    monkeypatch.setattr(type(evaluator), "_again", second)
    monkeypatch.setattr(evaluator_module, "compare", compare)
    result = evaluator.evaluate(SEED)
    assert result.status is Status.WRONG
    assert "below the floor" in result.reason and "every timed run checked" in result.reason
    assert result.floor_ms is None and not result.below_floor


def test_a_second_judgement_above_the_floor_is_a_plain_verdict_that_says_so():
    first = EvalResult(Status.ACCEPTED, runtime_ms=0.5, runtime_spread=0.1, reference_ms=2.0, checks=10)
    second = EvalResult(Status.ACCEPTED, runtime_ms=1.2, runtime_spread=0.1, reference_ms=2.0, checks=20)
    verdict = with_floor(judged_again(first, second, floor(1.0)), floor(1.0))
    assert not verdict.below_floor and "read 1.2 ms then" in verdict.reason and verdict.sol == pytest.approx(1 / 1.2)
    flagged = judged_again(first, EvalResult(Status.ACCEPTED, runtime_ms=0.5, reference_ms=2.0), floor(1.0))
    assert flagged.below_floor and flagged.reason == ""


def test_the_margin_is_the_floors_own_uncertainty():
    f = floor(1.0, cached=0.8)
    assert "0.8 ms" in why_below(f, 0.5)
    limit = 0.8 * (1 - BELOW_FLOOR_MARGIN)
    from fitness.judge.sol import needs_second_judgement
    assert not needs_second_judgement(EvalResult(Status.ACCEPTED, runtime_ms=limit * 1.01), f)
    assert needs_second_judgement(EvalResult(Status.ACCEPTED, runtime_ms=limit * 0.99), f)
    assert not needs_second_judgement(EvalResult(Status.ACCEPTED, runtime_ms=0.1), None)


def test_verify_prints_the_speed_of_light(capsys):
    from evolve.cli import main

    reference = PROBLEMS / "softmax" / "reference.py"
    code = main(["verify", str(reference), str(PROBLEMS / "softmax" / "seed.py"), "--device", "cpu",
                 "--shape", "batch_size=4", "--shape", "dim=100", "--json"])
    record = json.loads(capsys.readouterr().out)
    assert code == 0 and record["status"] == "accepted"
    assert record["floor_ms"] > 0 and 0 < record["sol"] <= 1 and record["bound"] in ("memory", "compute")
    assert record["floor"]["how"]["bytes"] == {"inputs": 1600, "parameters": 0, "outputs": 1600}
    assert record["floor"]["source"] == "measured" and record["below_floor"] is False


# -- the report and the sweep summary ----------------------------------------------------

def test_the_report_shows_sol_for_the_best_eager_and_torch_compile_and_flags_below_floor():
    best = {"id": 7, "floor_ms": 1.0, "runtime_ms": 2.0, "reference_ms": 4.0, "sol": 0.5, "bound": "memory",
            "floor": {"source": "measured"}, "below_floor": False}
    figures = sol_figures(best, compiled_ms=2.5)
    lines = sol_lines({"speed_of_light": figures, "best": best, "below_floor": [], "confirmed": None,
                       "unconfirmed": "", "within_noise": [], "confinement": ["landlock+netns"],
                       "vs_compile": {"why": "not timed"}})
    assert lines[0] == "vs compile no clean torch.compile time: not timed"  # the headline, even without a figure
    assert lines[1].startswith("sol        best 0.5, eager 0.25, torch.compile 0.4 of the speed of light")
    assert "1 ms left on the table" in lines[1] and lines[-1] == "confined   landlock+netns"
    flagged = {**best, "runtime_ms": 0.5, "sol": 1.0, "below_floor": True, "below_floor_reason": "right on every"}
    lines = sol_lines({"speed_of_light": sol_figures(flagged), "best": flagged, "below_floor": [7],
                       "confirmed": None, "unconfirmed": "", "within_noise": [], "confinement": []})
    assert any(line.startswith("FLAGGED    kernel 7 read below the floor") and "right on every" in line
               for line in lines)


def test_the_sweep_summary_shows_sol_left_on_the_table_and_flags():
    outcomes = [Outcome("gelu", "finished", best_ms=3.02, reference_ms=3.04, speedup=1.01, floor_ms=2.9, sol=0.96,
                        eager_sol=0.95),
                Outcome("gemm", "finished", best_ms=14.3, reference_ms=6.46, speedup=0.45, floor_ms=1.0, sol=0.07),
                Outcome("odd", "finished", best_ms=0.5, reference_ms=3.0, speedup=6.0, floor_ms=1.0, sol=1.0,
                        below_floor=True),
                Outcome("bad", "failed", "no seed accepted")]
    summary = sweep_summary(outcomes)
    runs = {r["name"]: r for r in summary["runs"]}
    assert runs["gelu"]["left_ms"] == pytest.approx(0.12) and runs["gemm"]["left_ms"] == pytest.approx(13.3)
    assert runs["bad"]["left_ms"] is None and summary["below_floor"] == ["odd"]
    text = format_sweep_summary(summary)
    assert "| SOL best | SOL eager | SOL compile | left ms |" in text
    assert "| gelu | finished | 0 | 3.02 | - | 3.04 | 1.01x | 0.96 | 0.95 | - | 0.12 |" in text
    assert "| odd | finished | 0 | 0.5 | - | 3 | 6x | below floor! |" in text
    assert "FLAGGED: the best of odd read below the floor" in text


# -- stop at the speed of light; the sweep's saved budget -----------------------------------

def test_stop_at_sol_is_a_config_key_and_a_stop_reason(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text(f"problem: {{reference: {PROBLEMS}/softmax/reference.py, seeds: [{PROBLEMS}/softmax/seed.py]}}\n"
                    "search: {stop_at_sol: 0.9}\n")
    config = load_config(path)
    assert config_from_dict(config.to_dict(), origin="stored").search.stop_at_sol == config.search.stop_at_sol == 0.9
    assert stop_reason(LoopState(generation=1, best_sol=0.89), config, 0.0) is None
    assert stop_reason(LoopState(generation=1, best_sol=0.9), config, 0.0) == \
        "at the speed of light (SOL 0.90 >= 0.9)"
    path.write_text(path.read_text().replace("0.9", "1.5"))
    with pytest.raises(ConfigError, match="search.stop_at_sol"):
        load_config(path)


def test_saved_budget_goes_to_the_problems_with_the_most_headroom():
    runs = [Outcome("gelu", "finished", evaluations=30, max_evaluations=100, best_ms=1.0, sol=0.93, at_sol=True),
            Outcome("tanh", "finished", evaluations=50, max_evaluations=100, best_ms=1.0, sol=0.91, at_sol=True),
            Outcome("gemm", "finished", evaluations=100, max_evaluations=100, best_ms=1.0, sol=0.1),
            Outcome("norm", "finished", evaluations=100, max_evaluations=100, best_ms=1.0, sol=0.7),
            Outcome("odd", "finished", evaluations=100, max_evaluations=100, best_ms=1.0, sol=1.0, below_floor=True),
            Outcome("none", "finished", evaluations=100, max_evaluations=100),
            Outcome("bad", "failed", "x")]
    assert saved(runs) == 120
    shares = share_saved(runs)
    assert shares == {"gemm": 90, "norm": 30}  # 120 x 0.9/1.2 and 120 x 0.3/1.2
    assert share_saved(runs, cap=0.5) == {"gemm": 50, "norm": 50}  # each at most half its budget again
    assert share_saved([r for r in runs if not r.at_sol]) == {}
    summary = sweep_summary(runs)
    assert summary["saved_evaluations"] == 120 and summary["budget_shares"] == shares
    assert "120 evaluations saved by runs at the speed of light; by headroom they go to: gemm 90, norm 30" \
        in format_sweep_summary(summary)
