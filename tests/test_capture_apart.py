"""Seeds from torch.compile captured in a process of their own when a thread asks (a sweep's
runs side by side): the same seeds as in process, the same errors, and the session's choice."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from evolve.seeding import apart

ROOT = Path(__file__).resolve().parents[1]
GELU = ROOT / "problems" / "gelu" / "reference.py"


def test_only_a_thread_other_than_the_main_one_captures_apart():
    seen: list[bool] = []
    thread = threading.Thread(target=lambda: seen.append(apart.wanted()))
    thread.start()
    thread.join()
    assert apart.wanted() is False and seen == [True]


def test_an_error_in_the_child_is_the_same_seed_error():
    from evolve.seeding.seed import SeedError

    with pytest.raises(SeedError, match=r"unknown Inductor configuration\(s\) nope"):
        apart.compile_seeds_apart(GELU, device="cpu", variants=["nope"])


def test_a_child_that_dies_is_a_seed_error_not_a_hang(monkeypatch):
    from evolve.seeding.seed import SeedError

    monkeypatch.setattr(apart.sys, "executable", "/bin/false")
    with pytest.raises(SeedError, match="ended without seeds"):
        apart.compile_seeds_apart(GELU, device="cpu", variants=["default"])


@pytest.mark.slow
def test_a_capture_apart_gives_the_seeds_a_capture_in_process_gives(tmp_path):
    """A real CPU capture (Inductor's Triton backend under the interpreter), once apart and once here."""
    script = f"""
import dataclasses, json, sys
sys.path.insert(0, {str(ROOT)!r})
from evolve.seeding.apart import compile_seeds_apart
from evolve.seeding.seed import compile_seeds
args = dict(device="cpu", shapes={{"batch_size": 4, "dim": 64}}, variants=["default"])
here, there = compile_seeds({str(GELU)!r}, **args), compile_seeds_apart({str(GELU)!r}, **args)
same = [(a.source, a.kernels, a.variant, a.duplicates, a.skipped) == (b.source, b.kernels, b.variant, b.duplicates,
        b.skipped) for a, b in zip(here, there)]
print(json.dumps([len(here), len(there), same, there[0].kernels]))
"""
    script = "import logging; logging.basicConfig(level=logging.INFO)\n" + script
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=900, cwd=tmp_path,
                          env={**os.environ, "TRITON_INTERPRET": "1", "CUDA_VISIBLE_DEVICES": ""})
    assert done.returncode == 0, done.stderr[-3000:]
    n_here, n_there, same, kernels = json.loads(done.stdout.strip().splitlines()[-1])
    assert n_here == n_there == 1 and same == [True] and kernels
    # the child's progress, logged again here by the parent: a line per configuration
    assert "INFO:evolve.seeding.apart:seed: " in done.stderr and "configuration default captured in" in done.stderr
    assert not [p for p in Path(os.environ.get("TMPDIR", "/tmp")).glob("kevo-capture-*")
                if p.stat().st_mtime > Path(tmp_path).stat().st_mtime]  # the call's folder went with it


def test_a_run_started_from_a_thread_captures_apart(monkeypatch, tmp_path):
    from evolve import session
    from evolve.seeding.seed import SeedError

    asked: list[str] = []

    def fake(problem_path, **kwargs):
        asked.append(threading.current_thread().name)
        raise SeedError("stop here: the test only asks who captured")

    monkeypatch.setattr(apart, "compile_seeds_apart", fake)
    config = tmp_path / "gelu.yaml"
    config.write_text(f"problem: {{reference: {GELU}, seeds: compile}}\nsearch: {{max_evaluations: 2}}\nplatform: cpu\n")
    errors: list[BaseException] = []

    def run() -> None:
        try:
            session.start_run(config, tmp_path / "run")
        except BaseException as exc:  # noqa: BLE001  (the thread reports what ended the run)
            errors.append(exc)

    thread = threading.Thread(target=run, name="a sweep's run")
    thread.start()
    thread.join(timeout=120)
    assert asked == ["a sweep's run"]
    assert errors and "stop here" in str(errors[0])


def test_the_folder_of_a_capture_whose_driver_was_killed_goes_at_the_next_start(tmp_path, monkeypatch):
    """A driver killed with SIGKILL in the middle of a capture leaves its folder: the next worker
    to start removes it, as it removes a dead owner's worker folders (fitness.boundary.sandbox)."""
    from fitness.boundary import sandbox

    monkeypatch.setattr(sandbox.tempfile, "gettempdir", lambda: str(tmp_path))
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    left = tmp_path / f"kevo-capture-{int(dead.stdout)}-abc123"
    left.mkdir()
    (left / "request.json").write_text("{}")
    ours = tmp_path / f"kevo-capture-{os.getpid()}-def456"  # this process's own: kept
    ours.mkdir()
    sandbox._remove_leftovers.__wrapped__()  # what a process's first worker runs (once: functools.cache)
    assert not left.exists() and ours.exists()


def test_profile_and_apply_folders_of_a_killed_process_go_at_the_next_start(tmp_path, monkeypatch):
    """Seen on the H200: processes stopped by a time limit left kevo-profile-, kevo-ncu- and
    kevo-apply- folders behind. They are named after their owner now, and go like a worker's."""
    import tempfile

    from evolve.models import apply as apply_module
    from fitness.boundary import sandbox
    from fitness.profiling import candidate as profiling
    from platforms.profiling import profilers

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    dead = int(subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                              capture_output=True, text=True).stdout)
    made = []
    for module, kind in ((profiling, "profile"), (profilers, "ncu"), (profilers, "rocprof"), (apply_module, "apply")):
        assert f'prefix=f"kevo-{kind}-{{os.getpid()}}-"' in Path(module.__file__).read_text()
        left = tmp_path / f"kevo-{kind}-{dead}-xyz"
        left.mkdir()
        (left / "report.ncu-rep").write_text("")
        made.append(left)
    with tempfile.TemporaryDirectory(prefix=f"kevo-ncu-{os.getpid()}-") as ours:
        sandbox._remove_leftovers.__wrapped__()
        assert Path(ours).exists()  # a live owner's folder stays
    assert not [p for p in made if p.exists()]


def test_kevo_s_process_takes_its_own_folders_with_it_as_it_exits(tmp_path):
    """Seen on the H200: a side-by-side sweep stopped by SIGTERM while its runs captured seeds left
    nine kevo-capture-<its pid>- folders (the capturing threads never reached their cleanup), to be
    removed only by the next kevo. The command line's process removes its own as it exits."""
    script = (
        "import os, sys, tempfile\n"
        "from evolve import cli\n"
        "tempfile.mkdtemp(prefix=f'kevo-capture-{os.getpid()}-')  # a capture cut short\n"
        "sys.argv = ['kevo', 'report', sys.argv[1]]\n"
        "sys.exit(cli.main())\n")
    env = {**os.environ, "TMPDIR": str(tmp_path / "tmp")}
    (tmp_path / "tmp").mkdir()
    done = subprocess.run([sys.executable, "-c", script, str(tmp_path / "no-run")], env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode != 0 and "holds no kevo run" in done.stderr  # it failed, and still cleaned up
    assert list((tmp_path / "tmp").iterdir()) == []


CHATTY = """
import os, sys, time
print("torch says something", file=sys.stderr, flush=True)
print("kevo-capture: seed: p.py: configuration default captured in 1.0 s", file=sys.stderr, flush=True)
for _ in range(200):  # until the parent has logged the line above, while this process still runs
    if os.path.exists(sys.argv[1]):
        print("the last words", file=sys.stderr, flush=True)
        sys.exit(0)
    time.sleep(0.05)
sys.exit(1)
"""


def test_the_child_s_progress_is_logged_while_it_runs(tmp_path):
    seen = tmp_path / "seen"

    class Handler(logging.Handler):
        def emit(self, record):
            self.message = record.getMessage()
            seen.touch()

    handler = Handler()
    logging.getLogger("evolve.seeding.apart").addHandler(handler)
    logging.getLogger("evolve.seeding.apart").setLevel(logging.INFO)
    try:
        tail = apart._run_child([sys.executable, "-c", CHATTY, str(seen)], dict(os.environ), 60, "p.py")
    finally:
        logging.getLogger("evolve.seeding.apart").removeHandler(handler)
    assert handler.message == "seed: p.py: configuration default captured in 1.0 s"
    assert tail == "the last words"  # the child saw its line logged before it ended


def test_a_child_that_takes_too_long_is_killed():
    from evolve.seeding.seed import SeedError

    started = time.monotonic()
    with pytest.raises(SeedError, match="took more than 1 s"):
        apart._run_child([sys.executable, "-c", "import time; time.sleep(60)"], dict(os.environ), 1, "p.py")
    assert time.monotonic() - started < 20


ORPHAN = """
import os, subprocess, sys
sys.path.insert(0, {root!r})
child = subprocess.Popen([sys.executable, "-c", "import sys, time; sys.path.insert(0, {root!r}); "
                          "from evolve.seeding.apart import watch_parent; watch_parent(%d, 0.1); time.sleep(60)"
                          % os.getpid()], stdout=subprocess.DEVNULL)
print(child.pid, flush=True)
os._exit(0)  # the parent goes, as a driver killed with -9 does
"""


def test_a_capture_whose_driver_is_gone_ends():
    done = subprocess.run([sys.executable, "-c", ORPHAN.format(root=str(ROOT))], capture_output=True, text=True,
                          timeout=60)
    pid = int(done.stdout.strip())
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
            with open(f"/proc/{pid}/stat") as stat:  # ended, not yet reaped (a container's init may not reap)
                if stat.read().rsplit(")", 1)[1].split()[0] == "Z":
                    return
        except (ProcessLookupError, FileNotFoundError):
            return
        time.sleep(0.1)
    os.kill(pid, 9)
    pytest.fail("the orphaned capture still ran 30 s after its parent ended")
