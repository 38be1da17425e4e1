"""A sweep's budget follows the headroom, end to end (issue 23 item 4): what runs at the speed of light
save, a second pass spends on the runs with the most left (evolve.budget, evolve.sweep), through a
budget raised on purpose and recorded in the run's store (evolve.session.raise_budget); on the CPU.

Stopping at the speed of light on the CPU: the interpreter runs far from its floor (SOL around 1e-4
at these shapes), so the run meant to stop there asks for ``stop_at_sol: 1e-6`` against its real
floor, instead of a floor the test would set.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from tests.conftest import PROBLEMS, ROOT, SMALL_SHAPES

from evolve.budget import saved, share_saved
from evolve.config import ConfigError
from evolve.report_sweep import Outcome, format_sweep_summary, sweep_summary
from evolve.session import BUDGET_EVENT, raise_budget, resume_run, start_run
from evolve.sweep import BUDGET_FILE, SECOND_PASS, SUMMARY_FILE, SWEEP_FILE, run_sweep
from evolve.sweep_file import load_sweep, stored_entries
from population_store import STORE_FILE, RunStore

AT_SOL_RUN, HEADROOM_RUN = "000-at_sol", "001-softmax"


def problem(name: str) -> dict:
    return {"reference": str(PROBLEMS / name / "reference.py"), "seeds": [str(PROBLEMS / name / "seed.py")],
            "shapes": SMALL_SHAPES[name], "held_out_shapes": []}


def write_sweep(tmp_path: Path, budget: int = 6, **top) -> Path:
    """Two problems: elementwise stops at the speed of light on its seed, saving ``budget - 1``
    evaluations; softmax spends its ``budget`` and is the one run with headroom."""
    at_sol = tmp_path / "at_sol.yaml"
    at_sol.write_text(yaml.safe_dump({"problem": problem("elementwise"), "search": {"stop_at_sol": 1e-6}}))
    sweep = tmp_path / "s.yaml"
    sweep.write_text(yaml.safe_dump({
        **top,
        "defaults": {"search": {"population_size": 3, "max_evaluations": budget, "seed": 1}, "platform": "cpu",
                     "cluster": {"actors": 0}, "profiler": {"enabled": False}},
        "problems": [{"config": str(at_sol)}, problem("softmax")]}))
    return sweep


def rows(run_dir: Path) -> list:
    with RunStore.open(run_dir / STORE_FILE, readonly=True) as store:
        return store.individuals()


def events(run_dir: Path) -> list[dict]:
    with RunStore.open(run_dir / STORE_FILE, readonly=True) as store:
        return store.events()


def kinds(run_dir: Path) -> list[str]:
    return [e["kind"] for e in events(run_dir) if e["kind"] in ("started", "resumed", "stopped", BUDGET_EVENT)]


def check_spent(sweep_dir: Path, budget: int = 6) -> dict:
    """The second pass happened once and in full: what every test below expects of the two runs."""
    extra = budget - 1
    at_sol, headroom = sweep_dir / AT_SOL_RUN, sweep_dir / HEADROOM_RUN
    assert len(rows(at_sol)) == 1 and kinds(at_sol) == ["started", "stopped"]  # its first pass, untouched
    assert events(at_sol)[-1]["data"]["reason"].startswith("at the speed of light")
    found = rows(headroom)
    assert len(found) == budget + extra and all(r.status != "pending" for r in found)  # the extra rows
    assert len({r.source_hash for r in found}) == budget + extra  # nothing evaluated twice
    with RunStore.open(headroom / STORE_FILE, readonly=True) as store:
        assert store.config()["search"]["max_evaluations"] == budget + extra  # the store keeps the raised budget
        (grant,) = store.events(BUDGET_EVENT)  # granted once
        stops = store.events("stopped")
    assert {k: grant["data"][k] for k in ("grant", "extra", "from", "to", "evaluations")} == \
        {"grant": SECOND_PASS, "extra": extra, "from": budget, "to": budget + extra, "evaluations": budget}
    assert stops[-1]["data"]["reason"] == f"max_evaluations reached ({budget + extra})"
    assert json.loads((sweep_dir / BUDGET_FILE).read_text()) == {"saved": extra, "shares": {HEADROOM_RUN: extra}}
    summary = json.loads((sweep_dir / SUMMARY_FILE).read_text())
    assert summary["saved_evaluations"] == extra and summary["budget_shares"] == {HEADROOM_RUN: extra}
    assert summary["second_pass"] is True
    runs = {r["name"]: r for r in summary["runs"]}
    run = runs[HEADROOM_RUN]
    assert run["extra_evaluations"] == extra and run["extra_spent"] == extra
    assert run["evaluations"] == run["max_evaluations"] == budget + extra
    assert run["left_ms"] is not None and run["left_ms"] <= run["left_ms_before_extra"]
    assert runs[AT_SOL_RUN]["at_sol"] and runs[AT_SOL_RUN]["extra_evaluations"] == 0
    assert runs[AT_SOL_RUN]["left_ms_before_extra"] is None
    return summary


# -- the rule, the switch, the grant ------------------------------------------------------------


def test_only_runs_that_spent_their_budget_take_a_share_and_a_share_is_taken_once():
    runs = [Outcome("gelu", "finished", evaluations=40, max_evaluations=100, best_ms=1.0, sol=0.95, at_sol=True),
            Outcome("gemm", "finished", evaluations=100, max_evaluations=100, best_ms=1.0, sol=0.2),
            Outcome("patient", "finished", "no faster kernel for 5 generations (patience 5)", evaluations=70,
                    max_evaluations=100, best_ms=1.0, sol=0.1)]  # more budget would not be spent
    assert saved(runs) == 60 and share_saved(runs) == {"gemm": 60}
    # after the second pass: gemm got its 60 and reached the speed of light with 20 of them unspent
    after = [runs[0], Outcome("gemm", "finished", evaluations=140, max_evaluations=160, best_ms=0.5, sol=0.96,
                              at_sol=True, extra_evaluations=60, extra_spent=40, best_ms_before_extra=1.0,
                              floor_ms=0.48), runs[2]]
    assert saved(after) == 60  # what the second pass saved is not handed on again
    assert share_saved(after) == {}  # and gemm takes no second share
    summary = sweep_summary(after)
    assert summary["budget_shares"] == {"gemm": 60} and summary["second_pass"] is True
    gemm = summary["runs"][1]
    assert gemm["left_ms_before_extra"] == pytest.approx(0.52) and gemm["left_ms"] == pytest.approx(0.02)
    assert ("60 evaluations saved by runs at the speed of light; a second pass gave them by headroom to: "
            "gemm +60 (40 spent; left on the table 0.52 -> 0.02 ms)") in format_sweep_summary(summary)


def test_spend_saved_is_a_sweep_file_switch_that_may_change_between_goes(tmp_path):
    sweep = write_sweep(tmp_path)
    assert all(e.spend_saved for e in load_sweep(sweep))  # on by default
    text = yaml.safe_load(sweep.read_text())
    sweep.write_text(yaml.safe_dump({**text, "spend_saved": False}))
    assert not any(e.spend_saved for e in load_sweep(sweep))
    sweep.write_text(yaml.safe_dump({**text, "spend_saved": "yes"}))
    with pytest.raises(ConfigError, match="spend_saved: expected true or false"):
        load_sweep(sweep)


def test_a_raised_budget_is_recorded_once_and_a_resume_goes_on_to_it(tmp_path):
    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump({"problem": problem("elementwise"), "platform": "cpu",
                                      "search": {"population_size": 2, "max_evaluations": 2, "seed": 1}}))
    run_dir = tmp_path / "run"
    assert start_run(config, run_dir) == "max_evaluations reached (2)"
    with pytest.raises(ValueError, match="integer >= 1"):
        raise_budget(run_dir, 0, "test")
    assert raise_budget(run_dir, 2, "test") is True
    assert raise_budget(run_dir, 2, "test") is False  # the same grant asked again: nothing changes
    with RunStore.open(run_dir / STORE_FILE, readonly=True) as store:
        assert store.config()["search"]["max_evaluations"] == 4
        (grant,) = store.events(BUDGET_EVENT)
    assert grant["data"]["from"] == 2 and grant["data"]["to"] == 4 and grant["data"]["evaluations"] == 2
    assert resume_run(run_dir) == "max_evaluations reached (4)"  # `kevo resume RUN_DIR` goes on from the store
    assert len(rows(run_dir)) == 4 and kinds(run_dir) == ["started", "stopped", BUDGET_EVENT, "resumed", "stopped"]


# -- the sweep ---------------------------------------------------------------------------------


@pytest.mark.slow
def test_a_sweep_spends_what_a_run_at_the_speed_of_light_saved_on_the_run_with_headroom(tmp_path):
    sweep, sweep_dir = write_sweep(tmp_path, spend_saved=False), tmp_path / "sweep"
    # spend_saved: false: the first pass alone; the summary says who would get the saved evaluations
    outcomes = run_sweep(load_sweep(sweep), sweep_dir)
    assert [o.status for o in outcomes] == ["finished", "finished"] and outcomes[0].at_sol
    assert len(rows(sweep_dir / HEADROOM_RUN)) == 6 and not (sweep_dir / BUDGET_FILE).exists()
    summary = json.loads((sweep_dir / SUMMARY_FILE).read_text())
    assert summary["saved_evaluations"] == 5 and summary["budget_shares"] == {HEADROOM_RUN: 5}
    assert summary["second_pass"] is False
    # the same sweep with the switch on (its default), and runs side by side (both may change from one
    # go to the next): the first pass has ended, the second spends
    text = {k: v for k, v in yaml.safe_load(sweep.read_text()).items() if k != "spend_saved"}
    sweep.write_text(yaml.safe_dump({**text, "side_by_side": 2}))
    outcomes = run_sweep(load_sweep(sweep), sweep_dir)
    assert outcomes[1].extra_evaluations == outcomes[1].extra_spent == 5
    assert all(e["spend_saved"] and e["side_by_side"] == 2 for e in json.loads((sweep_dir / SWEEP_FILE).read_text()))
    summary = check_spent(sweep_dir)
    assert "a second pass gave them by headroom to: 001-softmax +5 (5 spent" in format_sweep_summary(summary)
    # once more: every run has ended, nothing is evaluated or granted again
    before = {name: len(events(sweep_dir / name)) for name in (AT_SOL_RUN, HEADROOM_RUN)}
    again = run_sweep(load_sweep(sweep), sweep_dir)
    assert again == outcomes and {n: len(events(sweep_dir / n)) for n in before} == before
    check_spent(sweep_dir)


def in_second_pass(run_dir: Path) -> bool:
    """The run's budget was raised, it has committed a result since, and it has not stopped again."""
    store = run_dir / STORE_FILE
    if not store.exists():
        return False
    with RunStore.open(store, readonly=True) as s:
        raised, stops = s.events(BUDGET_EVENT), s.events("stopped")
        if not raised or stops[-1]["id"] > raised[-1]["id"]:
            return False
        return sum(1 for i in s.individuals() if i.status != "pending") > raised[-1]["data"]["evaluations"]


@pytest.mark.slow
def test_a_sweep_killed_in_its_second_pass_finishes_it_with_nothing_redone_or_granted_twice(tmp_path):
    sweep, sweep_dir = write_sweep(tmp_path), tmp_path / "sweep"
    proc = subprocess.Popen([sys.executable, "-m", "evolve.cli", "sweep", str(sweep), "--run-dir", str(sweep_dir)],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    deadline = time.monotonic() + 400
    while time.monotonic() < deadline and proc.poll() is None and not in_second_pass(sweep_dir / HEADROOM_RUN):
        time.sleep(0.1)
    assert proc.poll() is None, proc.stderr.read().decode()[-3000:]
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(30)
    told = proc.stderr.read().decode()
    assert f"second pass, the evaluations saved at the speed of light go to: {HEADROOM_RUN} +5" in told
    assert not (sweep_dir / SUMMARY_FILE).exists()
    first = [(r.id, r.source_hash) for r in rows(sweep_dir / HEADROOM_RUN)]
    assert 6 < len(first) < 11  # killed with the second pass under way
    entries = stored_entries(sweep_dir)
    assert entries is not None and all(e.spend_saved for e in entries)
    done = subprocess.run([sys.executable, "-m", "evolve.cli", "resume", str(sweep_dir), "--json"], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout)["runs"] == check_spent(sweep_dir)["runs"]
    after = [(r.id, r.source_hash) for r in rows(sweep_dir / HEADROOM_RUN)]
    assert after[:len(first)] == first  # what the killed second pass committed stays as it was
    assert kinds(sweep_dir / HEADROOM_RUN) == ["started", "stopped", BUDGET_EVENT, "resumed", "resumed", "stopped"]
