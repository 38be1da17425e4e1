"""``kevo run / resume / report / export`` as a user runs them: real processes, a real kill -9."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from evolve.search.loop import STATE_KEY
from population_store import STORE_FILE, Individual, RunStore, source_hash
from tests.conftest import PROBLEMS, ROOT

BUDGET, POPULATION = 40, 4


def kevo(*args, timeout: float = 300, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "evolve.cli", *map(str, args)], cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout, env=env)


def kevo_temp_files(tmpdir: Path) -> list[str]:
    """kevo's files in a temp folder, but for the directory that holds Ray's local-cluster marker
    (``evolve.dispatch.connect.bootstrap_home``), kept from one run to the next on purpose."""
    return sorted(n for n in os.listdir(tmpdir) if n.startswith("kevo") and not n.startswith("kevo-ray-home-"))


def one_line_error(done: subprocess.CompletedProcess, command: str, *words: str) -> None:
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"kevo {command}:"), done.stderr
    assert all(w in lines[0] for w in words), lines[0]


def snapshot(path: Path) -> tuple[dict[int, Individual], dict | None]:
    with RunStore.open(path, readonly=True) as store:
        return {i.id: i for i in store.individuals()}, store.get_state(STATE_KEY)


@pytest.fixture(scope="module")
def killed_and_resumed(tmp_path_factory):
    """A run killed with SIGKILL in the middle of a generation, then resumed.

    While the run writes, this process reads the store, and ``kevo report``
    and ``kevo resume`` are tried from other processes. The run and the resume have a temp
    folder of their own (``TMPDIR``).
    """
    tmp = tmp_path_factory.mktemp("cli_run")
    (tmp / "tmp").mkdir()
    env = {**os.environ, "TMPDIR": str(tmp / "tmp")}
    config = tmp / "matvec.yaml"
    config.write_text(f"""\
problem:
  reference: {PROBLEMS}/matvec/reference.py
  seeds: [{PROBLEMS}/matvec/seed.py]
  shapes: {{M: 33, K: 300}}
search: {{population_size: {POPULATION}, max_evaluations: {BUDGET}, seed: 11}}
platform: cpu
""")
    run_dir = tmp / "run"
    store_path = run_dir / STORE_FILE
    run = subprocess.Popen([sys.executable, "-m", "evolve.cli", "run", str(config), "--run-dir", str(run_dir)],
                           cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    live, others = {}, {}
    try:
        deadline = time.monotonic() + 240
        while not store_path.exists():
            assert run.poll() is None and time.monotonic() < deadline, "the run never created its store"
            time.sleep(0.05)
        # Both finish before the kill, or a resume could take the run over after it.
        others = {command: subprocess.Popen([sys.executable, "-m", "evolve.cli", command, str(run_dir), *extra],
                                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                  for command, extra in (("report", ["--json"]), ("resume", []))}
        for command, process in others.items():
            stdout, stderr = process.communicate(timeout=120)
            live[command] = subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)
        with RunStore.open(store_path, readonly=True) as reader:
            while (state := reader.get_state(STATE_KEY)) is None or state["generation"] < 1:
                assert run.poll() is None and time.monotonic() < deadline, "the run ended too early"
                time.sleep(0.05)
            while True:  # kill while this generation has results in and candidates in flight
                state = reader.get_state(STATE_KEY)
                current = [i for i in reader.individuals() if i.id > state["last_id"]]
                if any(i.status == "pending" for i in current) and any(i.status != "pending" for i in current):
                    break
                assert run.poll() is None and time.monotonic() < deadline, "no moment to kill the run"
                time.sleep(0.01)
        os.kill(run.pid, signal.SIGKILL)
        run.wait(timeout=30)
    finally:
        for process in [run, *others.values()]:
            if process.poll() is None:
                process.kill()
                process.wait(timeout=30)
    before = snapshot(store_path)
    left_by_the_kill = kevo_temp_files(tmp / "tmp")
    resumed = kevo("resume", run_dir, timeout=300, env=env)
    return run_dir, before, resumed, live, (left_by_the_kill, kevo_temp_files(tmp / "tmp"))


def test_a_run_killed_and_resumed_leaves_nothing_of_kevos_in_the_temp_folder(killed_and_resumed):
    """SIGKILL leaves the killed run's worker directories; the resume removes them (their owner
    is gone) and its own as it ends."""
    *_, (left_by_the_kill, left_after) = killed_and_resumed
    assert left_by_the_kill, "the kill left nothing: the test tests nothing"
    assert left_after == [], left_after


def test_a_killed_run_resumes_to_exactly_its_budget(killed_and_resumed):
    run_dir, (before, state_before), resumed, *_ = killed_and_resumed
    assert resumed.returncode == 0, resumed.stderr
    assert resumed.stdout.strip() == str(run_dir)  # stdout carries the run directory only
    assert "max_evaluations reached" in resumed.stderr
    progress = [line for line in resumed.stderr.splitlines() if f"/{BUDGET} evaluated" in line]
    assert progress and all(w in progress[-1] for w in (f"{BUDGET}/{BUDGET}", "best", "x)", "accepted", "eval/s"))
    after, state = snapshot(run_dir / STORE_FILE)
    assert len(after) == BUDGET and state["evaluations"] == BUDGET
    assert all(i.status != "pending" for i in after.values())
    assert len({i.source_hash for i in after.values()}) == BUDGET  # no source evaluated twice
    assert any(i.status == "pending" for i in before.values())  # the kill did cut a generation short
    for ind_id, old in before.items():
        new = after[ind_id]
        if old.status != "pending":
            assert new == old  # nothing committed changed, its verdict included
        else:  # in flight at the kill: evaluated now, in the same row
            assert (new.source_hash, new.parents, new.generation) == (old.source_hash, old.parents, old.generation)
            assert new.result is not None


def test_resume_continues_the_stored_random_state(killed_and_resumed):
    run_dir, (before, state_before), resumed, *_ = killed_and_resumed
    after, _ = snapshot(run_dir / STORE_FILE)
    cut = state_before["generation"] + 1  # the generation the kill cut short
    made_before_kill = [i for i in sorted(before) if i > state_before["last_id"]]
    generation = [i for i in sorted(after) if after[i].generation == cut]
    # From the stored random state the resumed run drew the very children it
    # had drawn before the kill (a fresh generator would draw others), then
    # went on to complete the generation: no extra rows.
    assert generation[:len(made_before_kill)] == made_before_kill
    assert len(generation) == min(POPULATION, BUDGET - state_before["evaluations"])
    assert "not made again" not in resumed.stderr
    with RunStore.open(run_dir / STORE_FILE, readonly=True) as store:
        # the CPU's profiler fallback is recorded once, not again by the resumed session
        assert [e["kind"] for e in store.events()] == ["started", "profiler_fallback", "resumed", "stopped"]


def test_the_store_is_readable_while_the_run_writes(killed_and_resumed):
    run_dir, _, _, live, _ = killed_and_resumed
    report = live["report"]
    assert report.returncode == 0, report.stderr
    data = json.loads(report.stdout)
    assert 0 <= data["evaluations"] <= BUDGET and data["max_evaluations"] == BUDGET
    one_line_error(live["resume"], "resume", "being run by another kevo process")


def test_report_json_holds_a_verify_like_best_record(killed_and_resumed):
    run_dir, *_ = killed_and_resumed
    done = kevo("report", run_dir, "--json", timeout=120)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["evaluations"] == BUDGET and sum(report["status_counts"].values()) == BUDGET
    best = report["best"]
    for key in ("status", "max_abs_diff", "runtime_ms", "reference_ms", "speedup", "reason", "source_hash"):
        assert key in best
    with RunStore.open(run_dir / STORE_FILE, readonly=True) as store:
        fastest = store.best(1)[0]
    assert best["source_hash"] == fastest.source_hash and best["runtime_ms"] == fastest.runtime_ms
    assert best["status"] == "accepted" and best["speedup"] == best["reference_ms"] / best["runtime_ms"]
    assert report["lineage"][-1]["id"] == best["id"] and report["lineage"][0]["operator"] == "seed"
    assert Path(report["plot"]).read_bytes()[:4] == b"\x89PNG"
    assert Path(report["plot"]).parent == run_dir
    # the pace two ways: over both sessions' walls (start-up included), and from the first result to the last
    pace = report["pace"]
    with RunStore.open(run_dir / STORE_FILE, readonly=True) as store:
        ends = sorted(i.finished_at for i in store.individuals())
        starts = [e["data"]["began_at"] for e in store.events() if e["kind"] in ("started", "resumed")]
    assert pace["sessions"] == 2 and len(starts) == 2
    assert pace["first_to_last_per_s"] == pytest.approx((BUDGET - 1) / (ends[-1] - ends[0]))
    assert ends[-1] - starts[1] < pace["whole_run_s"] < ends[-1] - starts[0]  # the time between sessions left out
    assert pace["whole_run_per_s"] == pytest.approx(BUDGET / pace["whole_run_s"])


def test_report_text_shows_top_kernels_and_lineage(killed_and_resumed):
    run_dir, *_ = killed_and_resumed
    done = kevo("report", run_dir, timeout=120)
    assert done.returncode == 0, done.stderr
    for words in ("fastest kernels", "lineage of kernel", f"evaluated  {BUDGET} of {BUDGET}", "progress.png",
                  "evaluations/s over the whole run (", "2 sessions); ", "/s from the first result to the last"):
        assert words in done.stdout


def test_export_writes_the_best_kernel(killed_and_resumed, tmp_path):
    run_dir, *_ = killed_and_resumed
    with RunStore.open(run_dir / STORE_FILE, readonly=True) as store:
        best = store.best(1)[0]
    printed = kevo("export", run_dir, timeout=120)
    header, _, body = printed.stdout.partition("\n\n")
    assert printed.returncode == 0 and body == best.source  # the kernel as judged, under its header
    assert header.startswith(f"# kevo export: kernel {best.id} ") and all(
        line.startswith("#") for line in header.splitlines())
    # on the CPU there is no torch.compile to compare with, and the header says why
    assert "# vs torch.compile: no clean torch.compile time: torch.compile is timed on a GPU only" in header
    written = kevo("export", run_dir, "-o", tmp_path / "best.py", timeout=120)
    assert written.returncode == 0 and written.stdout == "" and "no clean torch.compile time" in written.stderr
    assert (tmp_path / "best.py").read_text() == printed.stdout
    assert source_hash((tmp_path / "best.py").read_text().partition("\n\n")[2]) == best.source_hash


def test_usage_errors_exit_2_with_one_line(killed_and_resumed, tmp_path):
    run_dir, *_ = killed_and_resumed
    one_line_error(kevo("resume", tmp_path / "nowhere"), "resume", "holds no kevo run")
    one_line_error(kevo("report", tmp_path / "nowhere"), "report", "holds no kevo run")
    config = tmp_path / "c.yaml"
    config.write_text(f"problem:\n  reference: {PROBLEMS}/matvec/reference.py\n"
                      f"  seeds: [{PROBLEMS}/matvec/seed.py]\n  shapes: {{M: 33, K: 300}}\nplatform: cpu\n")
    one_line_error(kevo("run", config, "--run-dir", run_dir), "run", "already holds a run", "kevo resume")
    nothing = tmp_path / "failed"
    with RunStore.create(nothing / STORE_FILE, {"problem": {}}) as store:
        src = "x = 1\n"
        store.add_individual(Individual(None, src, source_hash(src), 0, 0, "seed", [], {}, status="compile_error",
                                        result={"status": "compile_error", "reason": "no"}))
    one_line_error(kevo("export", nothing), "export", "no accepted kernel", "compile_error 1")


def test_sigterm_stops_a_run_as_ctrl_c_does_and_it_resumes(tmp_path):
    """A scheduler's stop (SIGTERM; Slurm, ``timeout``, ``docker stop``): kevo ends as on Ctrl-C,
    exit 143, what was committed kept, nothing of kevo's left in the temp folder; the resume
    reaches the budget exactly."""
    (tmp_path / "tmp").mkdir()
    env = {**os.environ, "TMPDIR": str(tmp_path / "tmp")}
    config = tmp_path / "matvec.yaml"
    config.write_text(f"""\
problem:
  reference: {PROBLEMS}/matvec/reference.py
  seeds: [{PROBLEMS}/matvec/seed.py]
  shapes: {{M: 33, K: 300}}
search: {{population_size: 4, max_evaluations: 24, seed: 3}}
platform: cpu
""")
    run_dir = tmp_path / "run"
    run = subprocess.Popen([sys.executable, "-m", "evolve.cli", "run", str(config), "--run-dir", str(run_dir)],
                           cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        deadline = time.monotonic() + 240
        while not (run_dir / STORE_FILE).exists() or not any(
                i.status != "pending" for i in snapshot(run_dir / STORE_FILE)[0].values()):
            assert run.poll() is None and time.monotonic() < deadline, "no result to stop after"
            time.sleep(0.1)
        run.send_signal(signal.SIGTERM)
        _, stderr = run.communicate(timeout=120)
    finally:
        if run.poll() is None:
            run.kill()
            run.wait(timeout=30)
    assert run.returncode == 143, stderr[-2000:]
    assert f"continue with 'kevo resume {run_dir}'" in stderr and "Traceback" not in stderr
    assert kevo_temp_files(tmp_path / "tmp") == []  # the workers' folders went with them
    stopped, _ = snapshot(run_dir / STORE_FILE)
    assert 0 < sum(i.status != "pending" for i in stopped.values()) < 24
    resumed = kevo("resume", run_dir, env=env)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    after, state = snapshot(run_dir / STORE_FILE)
    assert len(after) == 24 and state["evaluations"] == 24 and all(i.status != "pending" for i in after.values())
    assert all(after[i] == old for i, old in stopped.items() if old.status != "pending")
    assert kevo_temp_files(tmp_path / "tmp") == []


def test_a_gpu_platform_on_a_machine_without_one_fails_in_one_line_before_ray_starts(tmp_path):
    """A ``platform: cuda`` config on a CPU-only machine: kevo's words, at once, and neither Ray's
    session folder nor a run directory left behind (before: Ray started, 7 s, 'the Ray cluster has none')."""
    from platforms import get_platform

    if get_platform("auto").name == "cuda":
        pytest.skip("this machine has a CUDA GPU")
    (tmp_path / "tmp").mkdir()
    config = tmp_path / "cuda.yaml"
    config.write_text((ROOT / "configs" / "quickstart.yaml").read_text().replace("platform: cpu", "platform: cuda")
                      .replace("../problems", str(ROOT / "problems")))
    began = time.monotonic()
    done = kevo("run", config, "--run-dir", tmp_path / "run", env={**os.environ, "TMPDIR": str(tmp_path / "tmp")})
    one_line_error(done, "run", "platform 'cuda' is not available on this machine")
    assert time.monotonic() - began < 15 and not (tmp_path / "run").exists()
    assert os.listdir(tmp_path / "tmp") == [], os.listdir(tmp_path / "tmp")  # no Ray session, no kevo folder
