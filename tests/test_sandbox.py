"""The worker process: no secrets, failures cost one worker, which is replaced."""

from __future__ import annotations

import os

import pytest

from tests.conftest import PROBLEMS

from fitness import EvalSettings, Status
from fitness.boundary.sandbox import WorkerProcess, worker_environment

SEED = (PROBLEMS / "elementwise" / "seed.py").read_text()


def with_forward_prefix(lines: str) -> str:
    """The elementwise seed with ``lines`` run at the start of forward."""
    marker = "    def forward(self, x, y):\n"
    assert marker in SEED
    body = "".join(f"        {line}\n" for line in lines.splitlines())
    return SEED.replace(marker, marker + body, 1)


def test_secrets_never_reach_the_worker(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-secret")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-secret")
    monkeypatch.setenv("MY_SERVICE_TOKEN", "t0ken")
    monkeypatch.setenv("KEVO_HARMLESS", "1")
    worker = WorkerProcess("cpu", 0, {"TRITON_INTERPRET": "1"}, startup_timeout=120)
    try:
        reply, _ = worker.request({"step": "info"}, timeout=60)
    finally:
        worker.kill()
        worker.close()
    assert "KEVO_HARMLESS" in reply["env"] and "TRITON_INTERPRET" in reply["env"]
    for name in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "MY_SERVICE_TOKEN"):
        assert name not in reply["env"]


def test_worker_environment_filters_by_name_pattern():
    env = worker_environment({"HF_TOKEN": "x", "AWS_SECRET_ACCESS_KEY": "y", "PATH": "/bin",
                              "GITHUB_TOKEN": "z", "db_password": "p"}, {"A": "1"})
    assert set(env) == {"PATH", "A", "PYTHONPATH", "PYTHONUNBUFFERED"}


def test_hang_times_out_and_the_worker_is_replaced(evaluators):
    from fitness import Evaluator

    evaluator = Evaluator(PROBLEMS / "elementwise" / "reference.py", platform="cpu",
                          shapes={"batch_size": 4, "dim": 100},
                          settings=EvalSettings(timeout_s=8))
    try:
        result = evaluator.evaluate(with_forward_prefix("while True:\n    pass"))
        assert result.status is Status.TIMEOUT
        assert "killed" in result.reason
        assert evaluator.evaluate(SEED).status is Status.ACCEPTED
    finally:
        evaluator.close()


def test_out_of_memory_request_is_a_result(evaluators):
    evaluator = evaluators.get("elementwise")
    result = evaluator.evaluate(with_forward_prefix("junk = torch.empty(1 << 46, dtype=torch.uint8)"))
    assert result.status is Status.OUT_OF_MEMORY, result.reason
    assert evaluator.evaluate(SEED).status is Status.ACCEPTED


def test_raising_system_exit_is_a_runtime_error_not_a_dead_harness(evaluators):
    evaluator = evaluators.get("elementwise")
    result = evaluator.evaluate(with_forward_prefix("raise SystemExit(0)"))
    assert result.status is Status.RUNTIME_ERROR, result.reason
    assert evaluator.evaluate(SEED).status is Status.ACCEPTED


def test_killed_worker_is_a_crash_and_is_replaced(evaluators):
    evaluator = evaluators.get("elementwise")
    assert evaluator.evaluate(SEED).status is Status.ACCEPTED
    pid = evaluator.channel.worker.process.pid
    os.kill(pid, 9)
    # the next evaluation notices the dead worker and starts a fresh one
    assert evaluator.evaluate(SEED).status is Status.ACCEPTED
    assert evaluator.channel.worker.process.pid != pid


@pytest.mark.parametrize("snippet, status", [
    ("raise ValueError('nope')", Status.RUNTIME_ERROR),
    ("return x", Status.FORBIDDEN),  # no Triton launch at run time
])
def test_known_failures_are_results(evaluators, snippet, status):
    result = evaluators.get("elementwise").evaluate(with_forward_prefix(snippet))
    assert result.status is status, result.reason


def _kill_at_call(monkeypatch, times: int) -> list[int]:
    """Kill the worker as it is handed its next ``times`` call steps: what
    damage left by an earlier candidate would do. Returns the pids killed."""
    original = WorkerProcess.send
    killed: list[int] = []

    def send(self, message):
        if message["step"] == "call" and len(killed) < times:
            killed.append(self.process.pid)
            os.kill(self.process.pid, 9)
        return original(self, message)

    monkeypatch.setattr(WorkerProcess, "send", send)
    return killed


def test_crash_in_a_reused_worker_is_judged_again_in_a_fresh_one(evaluators, monkeypatch):
    evaluator = evaluators.get("elementwise")
    assert evaluator.evaluate(SEED).status is Status.ACCEPTED  # the worker has served a candidate
    killed = _kill_at_call(monkeypatch, times=1)
    result = evaluator.evaluate(SEED)
    assert len(killed) == 1
    assert result.status is Status.ACCEPTED, result.reason
    assert evaluator.channel.worker.process.pid != killed[0]


def test_crash_in_a_fresh_worker_stands(evaluators, monkeypatch):
    evaluator = evaluators.get("elementwise")
    assert evaluator.evaluate(SEED).status is Status.ACCEPTED
    killed = _kill_at_call(monkeypatch, times=10)
    result = evaluator.evaluate(SEED)
    # once in the reused worker, once in a fresh one: no third try
    assert len(killed) == 2 and killed[0] != killed[1]
    assert result.status is Status.CRASHED, result.reason


def test_a_worker_in_the_middle_of_a_step_dies_with_its_evaluator(tmp_path):
    """kill -9 of the process that holds the evaluator, while its worker hangs in forward."""
    import signal
    import subprocess
    import sys
    import time

    script = tmp_path / "hold.py"
    script.write_text(f"""
import sys
from fitness import EvalSettings, Evaluator
evaluator = Evaluator({str(PROBLEMS / "elementwise" / "reference.py")!r}, platform="cpu",
                      shapes={{"batch_size": 4, "dim": 100}}, settings=EvalSettings(timeout_s=600))
worker = evaluator.channel.get_worker()
print(worker.process.pid, worker.spill_dir, flush=True)
evaluator.evaluate(sys.stdin.read())
""")
    root = PROBLEMS.parent
    holder = subprocess.Popen([sys.executable, str(script)], cwd=root, stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(root)})
    try:
        holder.stdin.write(with_forward_prefix("while True:\n    pass"))
        holder.stdin.close()
        pid_text, spill_dir = holder.stdout.readline().split()
        pid = int(pid_text)
        time.sleep(8)  # the worker is in the hanging forward by now
        assert os.path.exists(f"/proc/{pid}")
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    deadline = time.monotonic() + 15
    while os.path.exists(f"/proc/{pid}") and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not os.path.exists(f"/proc/{pid}"), "the worker outlived its evaluator"
    assert not os.path.exists(spill_dir)


LAUNCH_AUDIT = r'''
import sys, types
from fitness.worker.instrument import instrument_launches

events = []
sys.addaudithook(lambda event, args: events.append(event) if event == "sys.setprofile" else None)
seen = []

class Kernel:
    def run(self, *args, **kwargs):
        seen.append(sys.getprofile())
        return "launched"

holder = types.SimpleNamespace(launches=0, trace=None, dry=False)
instrument_launches(holder, Kernel)
assert Kernel().run() == "launched" and holder.launches == 1
assert events == [], events  # no profile on (a timed run): nothing audited for the launch
def profile(frame, event, arg):
    return None
sys.setprofile(profile)
events.clear()
Kernel().run()
restored, audited = sys.getprofile() is profile, list(events)
sys.setprofile(None)
assert seen == [None, None] and restored, (seen, restored)  # a checked call's launch runs without it
assert len(audited) == 2, audited
print("ok")
'''


def test_a_launch_in_a_timed_run_raises_no_audited_event():
    """The guard's audit hook walks the stack at every audited event of the worker; a
    launch must not raise one where no profile is on (each would be charged to a
    timed run), and must still run without the profile hook where one is."""
    import subprocess
    import sys

    from tests.conftest import ROOT

    done = subprocess.run([sys.executable, "-c", LAUNCH_AUDIT], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]


# -- nothing of kevo's left in the temp folder (fitness.boundary.sandbox) --------------------------------

def kevo_files(tmpdir, pid: int) -> list[str]:
    """What is in ``tmpdir``, and kevo's files of process ``pid`` in /dev/shm."""
    import glob

    return sorted(os.listdir(tmpdir)) + sorted(glob.glob(f"/dev/shm/kevo-spill-{pid}-*"))


def run_with_tmpdir(tmpdir, *argv: str, script: str | None = None, timeout: float = 300):
    """A kevo process whose temp folder is ``tmpdir`` (``python -m ARGV`` or ``python -c
    SCRIPT``), run to its end: (its pid, its exit code, its stdout, its stderr)."""
    import subprocess
    import sys

    from tests.conftest import ROOT

    command = [sys.executable, "-c", script] if script is not None else [sys.executable, "-m", *argv]
    env = {**os.environ, "TMPDIR": str(tmpdir), "PYTHONPATH": str(ROOT)}
    process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = process.communicate(timeout=timeout)
    finally:
        process.kill()
    return process.pid, process.returncode, out, err


def test_verify_leaves_nothing_in_the_temp_folder(tmp_path):
    import json

    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    done = run_with_tmpdir(tmpdir, "evolve.cli", "verify", str(PROBLEMS / "elementwise" / "reference.py"),
                           str(PROBLEMS / "elementwise" / "seed.py"), "--shape", "batch_size=4", "--shape", "dim=100",
                           "--device", "cpu", "--json")
    pid, code, out, err = done
    assert code == 0, err[-2000:]
    assert json.loads(out)["status"] == "accepted"
    assert kevo_files(tmpdir, pid) == [], "kevo verify left files behind"


CLOSED_EVALUATOR = f"""
import os, signal, sys
from fitness import EvalSettings, Evaluator
seed = open({str(PROBLEMS / "elementwise" / "seed.py")!r}).read()
evaluator = Evaluator({str(PROBLEMS / "elementwise" / "reference.py")!r}, platform="cpu",
                      shapes={{"batch_size": 4, "dim": 100}}, settings=EvalSettings(probes=False))
assert evaluator.evaluate(seed).accepted
os.kill(evaluator.channel.worker.process.pid, signal.SIGKILL)  # a worker that died: replaced
assert evaluator.evaluate(seed).accepted
evaluator.close()
"""


def test_an_evaluator_used_and_closed_leaves_nothing_in_the_temp_folder(tmp_path):
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    pid, code, out, err = run_with_tmpdir(tmpdir, script=CLOSED_EVALUATOR)
    assert code == 0, err[-2000:]
    assert kevo_files(tmpdir, pid) == []


KILLED_RUN = """
import os, sys, time
from fitness.boundary.sandbox import WorkerProcess
worker = WorkerProcess("cpu", 0, {"TRITON_INTERPRET": "1"}, startup_timeout=120)
print(worker.process.pid, worker.workdir, worker.spill_dir, flush=True)
time.sleep(600)
"""


def test_the_files_of_a_killed_run_go_at_the_next_start(tmp_path):
    """SIGKILL of the whole run (the owner and its worker at once) leaves the worker's
    directories; the next worker started removes them, as their owner is gone."""
    import signal
    import subprocess
    import sys

    from tests.conftest import ROOT

    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    env = {**os.environ, "TMPDIR": str(tmpdir), "PYTHONPATH": str(ROOT)}
    owner = subprocess.Popen([sys.executable, "-c", KILLED_RUN], cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True)
    try:
        worker_pid, workdir, spill_dir = owner.stdout.readline().split()
    finally:
        os.killpg(int(worker_pid), signal.SIGKILL)  # the worker leads its own process group
        owner.send_signal(signal.SIGKILL)
        owner.wait()
    assert os.path.isdir(workdir) and os.path.isdir(spill_dir), "nothing left to clean: the test tests nothing"
    pid, code, _, err = run_with_tmpdir(tmpdir, script="""
from fitness.boundary.sandbox import WorkerProcess
WorkerProcess("cpu", 0, {"TRITON_INTERPRET": "1"}, startup_timeout=120).stop()
""")
    assert code == 0, err[-2000:]
    assert not os.path.exists(workdir) and not os.path.exists(spill_dir)
    assert kevo_files(tmpdir, owner.pid) + kevo_files(tmpdir, pid) == []
