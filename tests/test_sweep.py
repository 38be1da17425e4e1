"""Sweeps (evolve.sweep_file, evolve.sweep, ``kevo sweep``): many problems as one resumable job, on the CPU."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import yaml

from tests.conftest import PROBLEMS, ROOT, SMALL_SHAPES

from evolve.config import ConfigError
from evolve.report_sweep import Outcome, format_sweep_summary, sweep_summary
from evolve.sweep import SUMMARY_FILE, run_sweep
from evolve.sweep_file import load_sweep
from population_store import STORE_FILE, RunStore

DEFAULTS = {"search": {"population_size": 3, "max_evaluations": 6, "seed": 1}, "platform": "cpu",
            "cluster": {"actors": 0}}


def kevo(*args, timeout: float = 600, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "evolve.cli", *map(str, args)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)


def problem(name: str, **extra) -> dict:
    return {"reference": str(PROBLEMS / name / "reference.py"), "seeds": [str(PROBLEMS / name / "seed.py")],
            "shapes": SMALL_SHAPES[name], "held_out_shapes": [], **extra}


@pytest.fixture
def kernelbench_folder(tmp_path) -> tuple[Path, Path]:
    """Problems named and laid out as KernelBench's level folders are, with kernels for two of three."""
    refs, seeds = tmp_path / "level1", tmp_path / "kernels"
    refs.mkdir()
    seeds.mkdir()
    for number, name in ((2, "softmax"), (10, "elementwise"), (1, "rmsnorm")):
        shutil.copy(PROBLEMS / name / "reference.py", refs / f"{number}_{name}.py")
        if name != "rmsnorm":
            shutil.copy(PROBLEMS / name / "seed.py", seeds / f"{number}_{name}.py")
    (refs / "README.py").write_text("# not a problem: defines no Model\n")
    return refs, seeds


def write_sweep(path: Path, problems: list, defaults: dict = DEFAULTS) -> Path:
    path.write_text(yaml.safe_dump({"defaults": defaults, "problems": problems}))
    return path


def test_a_sweep_file_expands_to_one_run_per_problem_and_variant(tmp_path, kernelbench_folder):
    refs, seeds = kernelbench_folder
    config = tmp_path / "softmax.yaml"
    config.write_text(yaml.safe_dump({"problem": {"reference": str(PROBLEMS / "softmax" / "reference.py"),
                                                  "seeds": [str(PROBLEMS / "softmax" / "seed.py")]},
                                      "search": {"max_evaluations": 9}}))
    sweep = write_sweep(tmp_path / "s.yaml", [
        {"config": str(config)},
        {"reference": str(PROBLEMS / "matvec" / "reference.py"), "seeds": [str(PROBLEMS / "matvec" / "seed.py")],
         "variants": [{"M": 33}, {"M": 65, "dtype": "bfloat16", "max_abs_diff": 0.05}]},
        {"folder": str(refs), "seeds_folder": str(seeds), "shapes": {"batch_size": 4}},
    ])
    entries = load_sweep(sweep)
    names = [e.name for e in entries]
    assert names == ["000-softmax", "001-matvec-M33", "002-matvec-M65-bfloat16", "003-1_rmsnorm", "004-2_softmax",
                     "005-10_elementwise"]  # KernelBench's numbers in their natural order
    by_name = {e.name: e.config for e in entries}
    assert by_name["000-softmax"]["search"] == {"population_size": 3, "max_evaluations": 9, "seed": 1}
    assert by_name["002-matvec-M65-bfloat16"]["problem"]["shapes"] == {"M": 65}
    assert by_name["002-matvec-M65-bfloat16"]["problem"]["dtype"] == "bfloat16"
    assert by_name["002-matvec-M65-bfloat16"]["fitness"] == {"max_abs_diff": 0.05}
    assert "dtype" not in by_name["001-matvec-M33"]["problem"]
    assert by_name["004-2_softmax"]["problem"]["seeds"] == [str(seeds / "2_softmax.py")]
    assert by_name["003-1_rmsnorm"]["problem"]["seeds"] == []  # no kernel of its own, and no LLM:
    assert "no seed kernel" in entries[3].skip and not any(e.skip for e in entries if e is not entries[3])


@pytest.mark.parametrize("problems, words", [
    ([{"reference": "nope.py", "seeds": []}], "file not found"),
    ([{"config": "a.yaml", "reference": "b.py"}], "exactly one of"),
    ([{"folder": "."}], "holds no problem file"),
    ([{"reference": str(PROBLEMS / "softmax" / "reference.py"), "sedes": []}], "unknown key 'sedes'"),
    ([], "list at least one problem"),
])
def test_a_bad_sweep_file_is_one_clear_error(tmp_path, problems, words):
    with pytest.raises(ConfigError, match=words):
        load_sweep(write_sweep(tmp_path / "s.yaml", problems))


def test_a_problem_without_seed_is_skipped_without_an_llm(tmp_path):
    sweep = write_sweep(tmp_path / "s.yaml", [{"reference": str(PROBLEMS / "softmax" / "reference.py")}])
    (entry,) = load_sweep(sweep)
    assert "no seed kernel" in entry.skip


def test_summary_in_the_fields_terms():
    outcomes = [Outcome("a", "finished", best_ms=1.0, speedup=2.5), Outcome("b", "finished", best_ms=1.0, speedup=0.8),
                Outcome("c", "finished", best_ms=1.0, speedup=1.6), Outcome("d", "failed", "no seed accepted")]
    s = sweep_summary(outcomes)
    assert s["fraction_correct"] == 0.75
    assert (s["fast_1"], s["fast_1.5"], s["fast_2"]) == (0.5, 0.5, 0.25)
    assert s["geomean_speedup_correct"] == pytest.approx((2.5 * 0.8 * 1.6) ** (1 / 3))
    assert s["profiling"] == {"profiles": 0, "seconds": 0.0, "device_s": 0.0}
    assert "profiling" not in format_sweep_summary(s)


def test_the_summary_says_what_profiling_cost():
    outcomes = [Outcome("a", "finished", best_ms=1.0, speedup=2.0, profiles=3, profiling_s=4.5, profiling_device_s=1.5),
                Outcome("b", "finished", best_ms=1.0, speedup=1.0, profiles=1, profiling_s=0.5, profiling_device_s=0.25)]
    s = sweep_summary(outcomes)
    assert s["profiling"] == {"profiles": 4, "seconds": 5.0, "device_s": 1.75}
    assert [r["profiling_s"] for r in s["runs"]] == [4.5, 0.5]
    assert "profiling: 4 parents, 5.0 s (1.8 s of it on the device)" in format_sweep_summary(s)


@pytest.mark.slow
def test_kevo_sweep_runs_every_problem_and_resumes_after_kill_9(tmp_path):
    lax = tmp_path / "lax.yaml"  # a cutoff so loose that all zeros pass: that run fails, the sweep goes on
    lax.write_text(yaml.safe_dump({"problem": problem("softmax"), "fitness": {"max_abs_diff": 1000.0}}))
    sweep = write_sweep(tmp_path / "s.yaml", [problem("elementwise"), {"config": str(lax), "name": "lax"},
                                              problem("matmul")])
    run_dir = tmp_path / "sweep"
    (tmp_path / "tmp").mkdir()  # the sweep's temp folder: nothing of kevo's is left there at the end
    env = {**os.environ, "TMPDIR": str(tmp_path / "tmp")}
    # kill -9 once the last run has committed a result
    proc = subprocess.Popen([sys.executable, "-m", "evolve.cli", "sweep", str(sweep), "--run-dir", str(run_dir)],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True, env=env)
    store = run_dir / "002-matmul" / STORE_FILE
    deadline = time.monotonic() + 400
    while time.monotonic() < deadline and proc.poll() is None:
        if store.exists():
            with RunStore.open(store, readonly=True) as s:
                if any(i.status != "pending" for i in s.individuals()):
                    break
        time.sleep(0.2)
    assert proc.poll() is None, proc.stderr.read().decode()[-2000:]
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(30)
    assert not (run_dir / SUMMARY_FILE).exists()
    done = kevo("resume", run_dir, env=env)
    assert done.returncode == 1, done.stderr[-3000:]  # one run failed: the exit code says so
    assert "1 run(s) failed: 001-lax" in done.stderr
    assert "1/3 correct" in done.stdout or "2/3 correct" in done.stdout, done.stdout
    summary = json.loads((run_dir / SUMMARY_FILE).read_text())
    runs = {r["name"]: r for r in summary["runs"]}
    assert runs["000-elementwise"]["status"] == "finished" and runs["000-elementwise"]["best_ms"]
    assert runs["001-lax"]["status"] == "failed" and "cutoff" in runs["001-lax"]["reason"]
    assert runs["002-matmul"]["status"] == "finished"
    # what profiling the parents cost, run by run from their stores, and over the sweep
    assert summary["profiling"]["profiles"] == sum(r["profiles"] for r in summary["runs"])
    for name in ("000-elementwise", "002-matmul"):
        with RunStore.open(run_dir / name / STORE_FILE, readonly=True) as s:
            assert runs[name]["profiles"] == len(s.profiles())
            rows = s.individuals()
            assert len(rows) == 6 and all(r.status != "pending" for r in rows)
            assert len({r.source_hash for r in rows}) == 6  # nothing evaluated twice
            # an evaluation's median wall time and the run's pace, from its verdicts' walls_s
            walls = sorted(r.result["walls_s"]["total"] for r in rows)
            assert runs[name]["evaluation_s"] == pytest.approx((walls[2] + walls[3]) / 2)
            assert runs[name]["pace_per_s"] > 0
    report = kevo("report", run_dir, "--json")  # a sweep's directory: its summary
    assert report.returncode == 0 and json.loads(report.stdout)["runs"] == summary["runs"], report.stderr
    # once more: every run has ended, nothing is evaluated again
    again = kevo("sweep", sweep, "--run-dir", run_dir, "--json", env=env)
    assert again.returncode == 1, again.stderr[-2000:]
    assert json.loads(again.stdout)["runs"] == summary["runs"]
    left = [n for n in os.listdir(tmp_path / "tmp") if n.startswith("kevo") and not n.startswith("kevo-ray-home-")]
    assert left == [], left


def test_the_shipped_suite_sweep_loads():
    entries = load_sweep(ROOT / "configs" / "sweep_suite.yaml")
    assert [e.name.split("-", 1)[1] for e in entries] == ["elementwise", "softmax", "rmsnorm", "sum_middle",
                                                         "matvec", "matmul"]
    assert not any(e.skip for e in entries)
    assert all(e.config["platform"] == "cuda" for e in entries)


def test_a_run_that_fails_in_kevo_itself_is_recorded_and_the_sweep_goes_on(tmp_path, monkeypatch):
    from fitness import ProblemError
    from platforms import PlatformUnavailable

    sweep = write_sweep(tmp_path / "s.yaml", [problem("elementwise"), problem("softmax"), problem("matmul")])
    entries = load_sweep(sweep)
    started = []
    failures = [RuntimeError("kevo's worker failed (a bug of kevo):\nTraceback ..."),
                ProblemError("the reference fails"), PlatformUnavailable("no such GPU")]

    def start(config_path: Path, run_dir: Path, observer, dispatchers) -> str:
        started.append(run_dir.name)
        raise failures[len(started) - 1]

    monkeypatch.setattr("evolve.sweep.start_run", start)
    monkeypatch.setattr("evolve.sweep.resume_run", lambda *a, **k: pytest.fail("nothing to resume"))
    outcomes = run_sweep(entries, tmp_path / "out")
    assert started == [e.name for e in entries]  # the sweep went on past each failure
    assert [o.status for o in outcomes] == ["failed", "failed", "failed"]
    assert outcomes[0].reason.startswith("kevo failed (RuntimeError: kevo's worker failed")
    assert outcomes[1].reason == "ProblemError: the reference fails"
    assert outcomes[2].reason == "PlatformUnavailable: no such GPU"  # the user's, as `kevo run` has it
    stored = json.loads((tmp_path / "out" / entries[0].name / "failed.json").read_text())
    assert stored["reason"] == outcomes[0].reason  # a resumed sweep does not run it again
    assert json.loads((tmp_path / "out" / SUMMARY_FILE).read_text())["problems"] == 3
    monkeypatch.setattr("evolve.sweep.start_run", lambda *a, **k: pytest.fail("started again"))
    assert [o.reason for o in run_sweep(entries, tmp_path / "out")] == [o.reason for o in outcomes]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("defaults, words", [
    ({**DEFAULTS, "platform": "cuda", "cluster": {}}, "platform 'cuda' is not available on this machine"),
    ({**DEFAULTS, "platform": "rocm", "cluster": {"actors": 0}}, "platform 'rocm' is not available"),
    ({**DEFAULTS, "cluster": {"address": f"127.0.0.1:{free_port()}"}}, "nothing answers there"),
])
def test_a_sweep_this_machine_cannot_run_says_so_in_one_line_before_any_run(tmp_path, defaults, words):
    """No GPU of the kind asked for, or no Ray cluster at the address: exit 2 at once, as `kevo run`
    does for bad input, with nothing started (not one failed run per problem)."""
    if defaults["platform"] != "cpu":
        from platforms import get_platform

        if get_platform("auto").name == defaults["platform"]:
            pytest.skip(f"this machine has a {defaults['platform']} GPU")
    sweep = write_sweep(tmp_path / "s.yaml", [problem("elementwise"), problem("softmax")], defaults)
    began = time.monotonic()
    done = kevo("sweep", sweep, "--run-dir", tmp_path / "sweep", timeout=60)
    assert time.monotonic() - began < 30
    assert done.returncode == 2, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and words in done.stderr, done.stderr
    assert "Traceback" not in done.stderr and "000-elementwise" in done.stderr
    assert not (tmp_path / "sweep").exists()  # no run directory, no sweep directory


def test_runs_given_by_reference_are_named_after_the_problem_file(tmp_path, kernelbench_folder):
    refs, seeds = kernelbench_folder
    files = sorted(refs.glob("*.py"))[:2]
    sweep = write_sweep(tmp_path / "s.yaml", [{"reference": str(f)} for f in files] + [problem("softmax")])
    names = [e.name for e in load_sweep(sweep)]
    assert names == [f"000-{files[0].stem}", f"001-{files[1].stem}", "002-softmax"]


KERNELBENCH = ROOT.parent / "shared" / "kernelbench" / "level1"


@pytest.mark.slow
def test_a_small_sweep_over_kernelbench_itself(tmp_path):
    """A KernelBench level folder as it is, with the seed kernels of bench/kernelbench_seeds
    (the README's first sweep), at shapes the CPU interpreter can run."""
    if not KERNELBENCH.is_dir():
        pytest.skip(f"KernelBench's problem files are not at {KERNELBENCH}")
    sweep = tmp_path / "kb.yaml"
    sweep.write_text(yaml.safe_dump({
        "defaults": {"search": {"population_size": 2, "max_evaluations": 3, "seed": 0}, "platform": "cpu"},
        "problems": [{"folder": str(KERNELBENCH), "seeds_folder": str(ROOT / "bench" / "kernelbench_seeds" / "level1"),
                      "shapes": {"batch_size": 4, "dim": 300}}],
    }))
    done = kevo("sweep", sweep, "--run-dir", tmp_path / "runs", "--json", timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads(done.stdout)
    runs = {r["name"].split("-", 1)[1]: r for r in summary["runs"]}
    seeded = {p.stem for p in (ROOT / "bench" / "kernelbench_seeds" / "level1").glob("*.py")}
    assert {n for n, r in runs.items() if r["status"] == "finished"} == seeded
    assert all(r["status"] == "skipped" for n, r in runs.items() if n not in seeded)  # no seed, no LLM
    assert summary["correct"] == len(seeded) and summary["problems"] == len(runs)


@pytest.mark.parametrize("sweep", sorted((ROOT / "bench").glob("*sweep*.yaml")) + sorted((ROOT / "bench").glob(
    "*vs_compile*.yaml")) + [ROOT / "configs" / "sweep_suite.yaml"], ids=lambda p: p.name)
def test_every_sweep_file_kept_here_loads(sweep):
    """The benches' sweep files are read as ``kevo sweep`` reads them: a file that lost its keys in an
    edit would otherwise fail only on the GPU machine, after the device time is spent."""
    if "kernelbench" in sweep.read_text() and not KERNELBENCH.is_dir():
        pytest.skip(f"KernelBench's problem files are not at {KERNELBENCH}")
    entries = load_sweep(sweep)
    assert entries and all(e.config["problem"]["reference"] for e in entries)


# -- problems side by side -------------------------------------------------------------


def progress(run_dir: Path) -> tuple[bool, bool]:
    """(the run has committed a result, the run has stopped)."""
    store = run_dir / STORE_FILE
    if not store.exists():
        return False, False
    with RunStore.open(store, readonly=True) as s:
        return any(i.status != "pending" for i in s.individuals()), bool(s.events("stopped"))


def first(run_dir: Path, kind: str) -> float:
    """When a run's first event of ``kind`` was recorded."""
    with RunStore.open(run_dir / STORE_FILE, readonly=True) as s:
        return s.events(kind)[0]["created_at"]


@pytest.mark.slow
def test_problems_side_by_side_share_the_evaluators_and_resume_after_kill_9(tmp_path):
    """Three runs at once on two Ray actors; killed while two are under way, resumed to every budget."""
    names = ["elementwise", "softmax", "gelu", "rmsnorm"]
    defaults = {**DEFAULTS, "search": {"population_size": 2, "max_evaluations": 4, "seed": 1},
                "cluster": {"actors": 2}, "profiler": {"enabled": False}}
    sweep = tmp_path / "s.yaml"
    sweep.write_text(yaml.safe_dump({"side_by_side": 3, "defaults": defaults,
                                     "problems": [problem(name) for name in names]}))
    assert {e.side_by_side for e in load_sweep(sweep)} == {3}
    run_dir = tmp_path / "sweep"
    proc = subprocess.Popen([sys.executable, "-m", "evolve.cli", "sweep", str(sweep), "--run-dir", str(run_dir)],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    deadline = time.monotonic() + 400
    runs = [run_dir / f"{i:03d}-{name}" for i, name in enumerate(names)]
    while time.monotonic() < deadline and proc.poll() is None:
        states = [progress(run) for run in runs]
        # two problems have results and one of them is still under way: killed mid-sweep
        if sum(started for started, _ in states) >= 2 and any(s and not stopped for s, stopped in states):
            break
        time.sleep(0.2)
    assert proc.poll() is None, proc.stderr.read().decode()[-3000:]
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(30)
    done = kevo("resume", run_dir, "--json")
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads(done.stdout)
    assert [r["name"] for r in summary["runs"]] == [run.name for run in runs]  # the sweep's order
    for run in runs:  # each run's store as it would be alone: its budget exactly, nothing twice
        with RunStore.open(run / STORE_FILE, readonly=True) as s:
            rows = s.individuals()
            assert len(rows) == 4 and all(r.status != "pending" for r in rows), run.name
            assert len({r.source_hash for r in rows}) == 4
            assert s.events("stopped")[-1]["data"]["reason"] == "max_evaluations reached (4)"
    # side by side: three runs were set going before the first one stopped (whether their results
    # also interleave depends on the machine's pace: on two cores one run's 4 can all come first,
    # while the next one's problem is still being prepared)
    set_going = sorted((run / "config.yaml").stat().st_mtime for run in runs)
    assert set_going[2] < min(first(run, "stopped") for run in runs), set_going
    usage = json.loads((run_dir / SUMMARY_FILE).read_text())["evaluators"]
    assert 0 < usage["busy_share"] <= 1, usage
    assert "up to 3 at once" in done.stderr and "evaluators busy" in done.stderr


def test_side_by_side_is_a_count_of_runs(tmp_path):
    for value in (0, "two", True):
        sweep = tmp_path / "s.yaml"
        sweep.write_text(yaml.safe_dump({"side_by_side": value, "problems": [problem("softmax")]}))
        with pytest.raises(ConfigError, match="side_by_side: expected an integer >= 1"):
            load_sweep(sweep)


def test_runs_side_by_side_in_process_end_in_the_sweep_s_order(tmp_path, monkeypatch):
    """Without Ray each run has its own evaluator; the threads start the runs in order and the
    outcomes come back in the sweep's order, whichever ends first."""
    import threading

    sweep = write_sweep(tmp_path / "s.yaml", [problem("elementwise"), problem("softmax"), problem("matmul")])
    text = yaml.safe_load(sweep.read_text())
    sweep.write_text(yaml.safe_dump({**text, "side_by_side": 2}))
    entries = load_sweep(sweep)
    started, both = [], threading.Barrier(2, timeout=30)

    def start(config_path: Path, run_dir: Path, observer, dispatchers) -> str:
        started.append(run_dir.name)
        if len(started) <= 2:
            both.wait()  # the first two runs go at once
        if run_dir.name.startswith("000"):
            time.sleep(0.3)  # the first ends last
        raise RuntimeError(f"stand-in run {run_dir.name}")

    monkeypatch.setattr("evolve.sweep.start_run", start)
    outcomes = run_sweep(entries, tmp_path / "out")
    assert started[:2] in ([entries[0].name, entries[1].name], [entries[1].name, entries[0].name])
    assert [o.name for o in outcomes] == [e.name for e in entries]
    assert all(o.status == "failed" and "stand-in run" in o.reason for o in outcomes)


@pytest.mark.slow
def test_sigterm_to_the_whole_process_group_stops_a_sweep_on_ray_actors_at_once(tmp_path):
    """``timeout`` and shells stop a command by signalling its process group. Ray's local processes
    (its GCS, raylet and actors) are out of the driver's group, so the driver alone gets the SIGTERM
    and closes its actors itself: exit 143 within seconds (not Ray's 60 s give-up once its GCS was
    stopped too), nothing of kevo's left in the temp folder, and the resume meets every budget."""
    # short: Ray's socket paths, under the temp folder, must fit in a Unix socket's 107 bytes
    temp = Path(tempfile.mkdtemp(prefix="ks", dir="/tmp"))
    try:
        _sigterm_to_the_group(tmp_path, temp)
    finally:
        shutil.rmtree(temp, ignore_errors=True)


def _sigterm_to_the_group(tmp_path: Path, temp: Path) -> None:
    env = {**os.environ, "TMPDIR": str(temp)}
    names = ["elementwise", "softmax"]
    defaults = {**DEFAULTS, "cluster": {"actors": 1}}
    sweep = tmp_path / "s.yaml"
    sweep.write_text(yaml.safe_dump({"defaults": defaults, "side_by_side": 2,
                                     "problems": [problem(n) for n in names]}))
    run_dir = tmp_path / "sweep"
    proc = subprocess.Popen([sys.executable, "-m", "evolve.cli", "sweep", str(sweep), "--run-dir", str(run_dir)],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            start_new_session=True)  # its own group, as timeout makes one
    try:
        deadline = time.monotonic() + 400
        while True:  # stop once a run has a result
            done = 0
            for i, n in enumerate(names):
                store = run_dir / f"{i:03d}-{n}" / STORE_FILE
                if store.exists():
                    with RunStore.open(store, readonly=True) as s:
                        done += sum(i.status != "pending" for i in s.individuals())
            if done >= 1:
                break
            assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read()[-2000:]
            time.sleep(0.1)
        stopped = time.monotonic()
        # as GNU timeout does: SIGTERM to its child, then to its whole group (here once the first one's
        # handler has surely run: the second must not end kevo before its cleanup)
        os.kill(proc.pid, signal.SIGTERM)
        time.sleep(0.3)
        os.killpg(proc.pid, signal.SIGTERM)
        _, stderr = proc.communicate(timeout=120)
        took = time.monotonic() - stopped
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(30)
    assert proc.returncode == 143, stderr[-3000:]
    assert took < 40, f"{took:.1f} s to stop"
    assert f"continue with 'kevo resume {run_dir}'" in stderr and "Traceback" not in stderr, stderr[-3000:]
    left = [n for n in os.listdir(temp) if n.startswith("kevo") and not n.startswith("kevo-ray-home-")]
    assert left == [], left
    done = kevo("resume", run_dir, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    for i, name in enumerate(names):
        with RunStore.open(run_dir / f"{i:03d}-{name}" / STORE_FILE, readonly=True) as s:
            rows = s.individuals()
            assert len(rows) == DEFAULTS["search"]["max_evaluations"] and all(r.status != "pending" for r in rows)


@pytest.mark.slow
def test_sigterm_stops_a_sweep_side_by_side_and_it_resumes(tmp_path):
    """A scheduler's stop in the middle of a sweep with two runs at once: exit 143, nothing of
    kevo's left in the temp folder, and the resume ends every run at its budget."""
    (tmp_path / "tmp").mkdir()
    env = {**os.environ, "TMPDIR": str(tmp_path / "tmp")}
    names = ["elementwise", "softmax", "matvec", "gelu"]
    sweep = tmp_path / "s.yaml"
    sweep.write_text(yaml.safe_dump({"defaults": DEFAULTS, "side_by_side": 2, "problems": [problem(n) for n in names]}))
    run_dir = tmp_path / "sweep"
    proc = subprocess.Popen([sys.executable, "-m", "evolve.cli", "sweep", str(sweep), "--run-dir", str(run_dir)],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        deadline = time.monotonic() + 400
        while True:  # stop once a run has a result and another is under way
            stores = [run_dir / f"{i:03d}-{n}" / STORE_FILE for i, n in enumerate(names)]
            done = []
            for store in (s for s in stores if s.exists()):
                with RunStore.open(store, readonly=True) as s:
                    done.append(sum(i.status != "pending" for i in s.individuals()))
            if len(done) >= 2 and max(done) >= 1:
                break
            assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read()[-2000:]
            time.sleep(0.1)
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)
    assert proc.returncode == 143, stderr[-3000:]
    assert f"continue with 'kevo resume {run_dir}'" in stderr and "Traceback" not in stderr, stderr[-3000:]
    left = [n for n in os.listdir(tmp_path / "tmp") if n.startswith("kevo") and not n.startswith("kevo-ray-home-")]
    assert left == [], left
    done = kevo("resume", run_dir, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads((run_dir / SUMMARY_FILE).read_text())
    assert [r["status"] for r in summary["runs"]] == ["finished"] * len(names)
    for i, name in enumerate(names):
        with RunStore.open(run_dir / f"{i:03d}-{name}" / STORE_FILE, readonly=True) as s:
            rows = s.individuals()
            assert len(rows) == DEFAULTS["search"]["max_evaluations"] and all(r.status != "pending" for r in rows)


class _RanThrough(Exception):
    """A stand-in run's end, once it got past where it would fail."""


def test_a_run_out_of_memory_beside_others_runs_again_alone_after_them(tmp_path, monkeypatch):
    """On one H200, ten problems at their own sizes side by side: 19_ReLU, 31_ELU and three captures
    ran out of device memory that their neighbours held, and 34_InstanceNorm found too little free.
    Such a run starts again once, alone, after the others; any other failure is recorded at once,
    and a run that runs out of memory alone too stays failed."""
    import threading

    from fitness import ProblemError

    sweep = write_sweep(tmp_path / "s.yaml", [problem(n) for n in ("elementwise", "softmax", "matmul", "gelu")])
    sweep.write_text(yaml.safe_dump({**yaml.safe_load(sweep.read_text()), "side_by_side": 2}))
    entries = load_sweep(sweep)
    first, second, third, fourth = (e.name for e in entries)
    lock, live, log = threading.Lock(), set(), []
    both = threading.Barrier(2, timeout=30)

    def start(config_path: Path, run_dir: Path, observer, dispatchers) -> str:
        name = run_dir.name
        with lock:
            live.add(name)
            log.append((name, len(live)))
        try:
            if len(log) <= 2:
                both.wait()  # the first two go at once
            (run_dir / STORE_FILE).write_text("half a run")  # what a run leaves before it fails
            with lock:
                crowded = len(live) > 1
            if len(log) <= 2:
                both.wait()  # and both saw the other there
            if name == first and crowded:
                raise RuntimeError("CUDA out of memory. Tried to allocate 6.00 GiB")  # kevo's own side
            if name == second and crowded:
                raise ProblemError("one evaluation needs about 59.0 GB of memory, but only 20.0 GB is free")
            if name == third:
                time.sleep(0.5)  # still going when the fourth starts
                raise ProblemError("the reference fails")  # not memory: recorded at once
            if name == fourth:
                raise ProblemError("no seed kernel is accepted (seed 1: out_of_memory)")
            raise _RanThrough(name)
        finally:
            with lock:
                live.discard(name)

    monkeypatch.setattr("evolve.sweep.start_run", start)
    monkeypatch.setattr("evolve.sweep.resume_run", lambda *a, **k: pytest.fail("a set-aside run starts afresh"))
    outcomes = {o.name: o for o in run_sweep(entries, tmp_path / "out")}
    assert {name for name, _ in log[:2]} == {first, second} and {name for name, _ in log[2:4]} == {third, fourth}
    again = log[4:]
    assert sorted(name for name, _ in again) == sorted([first, second, fourth])  # crowded out: once more
    assert all(at_once == 1 for _, at_once in again)  # each with the device to itself, after the others
    for name in (first, second):
        assert outcomes[name].status == "failed" and "_RanThrough" in outcomes[name].reason  # ran through
        aside = tmp_path / "out" / f".{name}.crowded"
        assert (aside / STORE_FILE).read_text() == "half a run"  # the first try, kept out of the way
    assert outcomes[third].reason == "ProblemError: the reference fails"
    assert outcomes[fourth].reason.endswith("(seed 1: out_of_memory)")  # out of memory alone too: stays
    assert [name for name, _ in log].count(third) == 1
