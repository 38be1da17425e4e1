"""Secrets out of reach: a candidate cannot read an API key set in kevo's environment.

The evaluator that starts a worker holds the key (``OPENAI_API_KEY`` in the environment it
was started with, so in its ``/proc/PID/environ`` too), a file under the user's home holds
it, a ``.env`` in kevo's checkout holds it, and so does a file beside the problem (kept under
the home). The worker gets none of it: its environment is stripped
(``fitness.boundary.sandbox.worker_environment``), and Landlock's read rules
(``fitness.boundary.confine``, the policy of ``sandbox.worker_policy``) refuse every path to
the rest. ``ATTACK`` runs as a candidate's library code would with no Python guard at all
(the confinement alone, as a worker gets it), tries every path it can name, and prints what
it read; the key must not be in it. The same attack with the reads left open finds the key,
so the test has teeth. A candidate the profiler runs (``fitness.profiling.target``, started
by the process that holds the key) is confined the same way.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from tests.conftest import PROBLEMS, PYTHONPATH, ROOT, SMALL_SHAPES

from fitness.boundary import confine

pytestmark = pytest.mark.skipif(confine.landlock_abi() < 2, reason="the kernel offers no Landlock (ABI 2 or later)")

ATTACK = r'''
import ctypes, json, os, sys
home, *named = sys.argv[1:]
ppid, got = os.getppid(), {"environ": repr(dict(os.environ))}

def read(path, offset=0):
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            got[path] = f.read(1 << 20).decode("latin-1")
    except (OSError, ValueError) as exc:
        got[path] = f"refused: {type(exc).__name__}"

pids = [name for name in os.listdir("/proc") if name.isdigit()]
for pid in pids:
    for what in ("environ", "cmdline"):
        read(f"/proc/{pid}/{what}")
for path in [f"/proc/{ppid}/task/{ppid}/environ", f"/proc/{ppid}/cwd/{os.path.basename(named[0])}",
             f"/proc/{ppid}/root{named[0]}", "/proc/self/environ", "/proc/thread-self/environ",
             "/proc/self/../%d/environ" % ppid, "/proc/kcore", "/dev/mem", "/dev/kmem", *named]:
    read(path)
for fd in (os.listdir(f"/proc/{ppid}/fd") if os.access(f"/proc/{ppid}/fd", os.R_OK) else ["0", "1", "2", "3"]):
    read(f"/proc/{ppid}/fd/{fd}")
try:  # an O_PATH descriptor needs no right; opened again through /proc/self/fd it meets the rules
    fd = os.open(f"/proc/{ppid}/environ", os.O_PATH)
    read(f"/proc/self/fd/{fd}")
except OSError as exc:
    got["O_PATH"] = f"refused: {type(exc).__name__}"
for top, dirs, files in os.walk(home):  # listing directories stays open: every file is named
    for name in files:
        read(os.path.join(top, name))
# the parent's memory: where its environment lies (from its stat, if readable), through /proc/PID/mem
# and process_vm_readv
read(f"/proc/{ppid}/stat")
stat = got[f"/proc/{ppid}/stat"]
fields = stat.rsplit(")", 1)[-1].split() if not stat.startswith("refused") else []
start, end = (int(fields[-3]), int(fields[-2])) if len(fields) > 40 else (0x7ff000000000, 0x7ff000001000)
read(f"/proc/{ppid}/mem", start)
class iovec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]
buf = ctypes.create_string_buffer(end - start)
libc = ctypes.CDLL(None, use_errno=True)
n = libc.process_vm_readv(ppid, ctypes.byref(iovec(ctypes.addressof(buf), end - start)), 1,
                          ctypes.byref(iovec(start, end - start)), 1, 0)
got["process_vm_readv"] = buf.raw[:n].decode("latin-1") if n > 0 else f"refused: errno {ctypes.get_errno()}"
print(json.dumps(got))
'''

# The evaluator's part: a worker's scratch and spill directories, its environment and its
# policy as the sandbox makes them (argv[1] "open": the same with no directory hidden, so
# reads stay open), then the attack run confined as a worker is.
EVALUATOR = r'''
import os, subprocess, sys, tempfile
from fitness.boundary import confine, sandbox
reads, *attack = sys.argv[1:]
scratch = tempfile.mkdtemp(prefix=f"kevo-worker-{os.getpid()}-")
spill = tempfile.mkdtemp(prefix=f"kevo-spill-{os.getpid()}-")
env = {**sandbox.worker_environment(dict(os.environ), {}), "TMPDIR": scratch}
policy = sandbox.worker_policy(scratch, spill, env)
if reads == "open":
    policy = confine.Policy(policy.writable)
done = subprocess.run([sys.executable, "-I", confine.__file__, policy.to_json(), "--", sys.executable, *attack],
                      env=env, cwd=scratch, capture_output=True, text=True, timeout=120)
sys.stdout.write(done.stdout + done.stderr)
'''


@pytest.fixture
def planted(tmp_path):
    """(the key, the evaluator's environment): the key in that environment, in a netrc of the
    home it names, in a ``.env`` at kevo's checkout, and beside a problem under that home."""
    key = f"sk-kevo-test-{os.urandom(12).hex()}"
    home = tmp_path / "home"
    problem = home / "problems" / "softmax"
    problem.mkdir(parents=True)
    (home / ".netrc").write_text(f"machine api.openai.com login me password {key}\n")
    (problem / "reference.py").write_text((PROBLEMS / "softmax" / "reference.py").read_text())
    (problem / "notes.txt").write_text(f"OPENAI_API_KEY={key}\n")
    dotenv = ROOT / f".env.kevo-test-{os.getpid()}"
    dotenv.write_text(f"OPENAI_API_KEY={key}\n")
    env = {**os.environ, "OPENAI_API_KEY": key, "HOME": str(home), "PYTHONPATH": PYTHONPATH,
           "TRITON_INTERPRET": "1"}
    try:
        yield key, env, [str(dotenv), str(problem / "notes.txt"), str(home / ".netrc")]
    finally:
        dotenv.unlink()


def attack(planted, reads: str) -> tuple[str, dict]:
    key, env, named = planted
    done = subprocess.run([sys.executable, "-c", EVALUATOR, reads, "-c", ATTACK, env["HOME"], *named],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout, json.loads(done.stdout.strip().splitlines()[-1])


def test_a_candidate_s_library_code_cannot_read_the_key_by_any_path_it_names(planted):
    key, env, named = planted
    output, got = attack(planted, "closed")
    assert key not in output, [path for path, text in got.items() if key in text]
    assert all(got[path].startswith("refused") for path in named), {p: got[p][:80] for p in named}
    # what a worker needs is still there: its own environment and files, the system's
    assert "refused" not in got["/proc/self/environ"] and "refused" not in got["/proc/thread-self/environ"]


def test_a_worker_s_policy_hides_the_home_the_checkout_proc_and_dev_but_what_it_needs(tmp_path):
    from fitness.boundary.sandbox import worker_policy

    scratch, home = tmp_path / "kevo-worker-1-a", tmp_path / "home"
    scratch.mkdir()
    policy = worker_policy(str(scratch), "/dev/shm", {"HOME": str(home), "CUDA_HOME": str(home / "cuda")})
    assert {"/proc", "/dev", str(home), str(ROOT), os.getcwd()} <= set(policy.hidden)
    rules = confine.read_rules(policy.hidden, policy.readable)
    assert str(home / "cuda") in rules and str(scratch) in rules and "/dev/shm" in rules
    checkout = [rule for rule in rules if rule == str(ROOT) or rule.startswith(str(ROOT) + "/")]
    # in the checkout: kevo's two packages the worker imports, and Python itself where its
    # environment lies there (CI's .venv)
    prefix = os.path.realpath(sys.prefix)
    python = [rule for rule in checkout if rule == prefix or rule.startswith(prefix + "/")]
    assert [rule for rule in checkout if rule not in python] == [str(ROOT / "fitness"), str(ROOT / "platforms")], checkout
    assert str(ROOT) not in rules
    assert not any(rule.startswith("/proc/") for rule in rules)  # confine adds the worker's own, when it runs


def test_with_reads_open_the_same_attack_finds_the_key(planted):
    key, _, named = planted
    output, got = attack(planted, "open")
    assert key in output
    assert all(key in got[path] for path in named), {p: got[p][:80] for p in named}


# Through the evaluator, screen off: the problem lives under the (hidden) home and reaches the
# worker as text; a candidate that reads what it can and fails with it in its message gets a
# verdict whose reason holds no key.
THROUGH = r'''
import json, sys
from fitness import EvalSettings, Evaluator
reference, shapes, honest, thief = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3], sys.argv[4]
with Evaluator(reference, platform="cpu", shapes=shapes, settings=EvalSettings(screen=False)) as evaluator:
    verdicts = [evaluator.evaluate(source) for source in (open(honest).read(), open(thief).read())]
print(json.dumps([[v.status.value, v.reason, v.confinement] for v in verdicts]))
'''

THIEF = textwrap.dedent('''
    got = []
    for path in ["/proc/self/environ", {netrc!r}, {notes!r}, {dotenv!r}]:
        try:
            got.append(repr(torch.amp.autocast_mode.np.fromfile(path, dtype="uint8").tobytes()))
        except Exception as exc:
            got.append(repr(exc))
    raise RuntimeError(" ".join(got))
''')


def test_through_the_evaluator_the_problem_travels_as_text_and_no_verdict_holds_the_key(planted, tmp_path):
    key, env, (dotenv, notes, netrc) = planted
    seed = (PROBLEMS / "softmax" / "seed.py").read_text()
    forward = "        n_rows, n_cols = x.shape\n"
    thief = tmp_path / "thief.py"
    thief.write_text(seed.replace(forward, forward + textwrap.indent(
        THIEF.format(netrc=netrc, notes=notes, dotenv=dotenv), " " * 8), 1))
    reference = os.path.join(env["HOME"], "problems", "softmax", "reference.py")
    done = subprocess.run([sys.executable, "-c", THROUGH, reference, json.dumps(SMALL_SHAPES["softmax"]),
                           str(PROBLEMS / "softmax" / "seed.py"), str(thief)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    (honest, why, said), (status, reason, _) = json.loads(done.stdout.strip().splitlines()[-1])
    assert honest == "accepted", why
    assert "landlock" in said and "reads open" not in said, said
    assert status != "accepted" and key not in reason, reason


# A profiled candidate: the target program a profiler wraps, started here by the process that holds the key (an
# evaluator in the driver, ``cluster: {actors: 0}``), loads a candidate whose import runs the attack.
PROFILED = r'''
import json, subprocess, sys
from fitness.profiling import candidate
from platforms.profiling import Profiler, roofline_record
reads, reference, source = sys.argv[1:]
if reads == "open":
    candidate.confined = lambda command, env, *where: (command, env)

class Running(Profiler):
    tool = "running"

    def _profile(self, command, env, kernel_filter, timeout_s, workload):
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout_s)
        sys.stdout.write(done.stdout + done.stderr)
        return roofline_record(workload, self.thresholds)

candidate.profile_candidate(Running("cpu"), reference, {"batch_size": 4, "dim": 64}, open(source).read(), "cpu", 0,
                            120.0, runtime_ms=1.0)
'''


def profiled_attack(planted, tmp_path, reads: str) -> tuple[str, dict]:
    key, env, named = planted
    source = tmp_path / "attack.py"
    source.write_text(f"import sys\nsys.argv = [sys.argv[0], {env['HOME']!r}, *{named!r}]\n" + ATTACK)
    reference = os.path.join(env["HOME"], "problems", "softmax", "reference.py")
    done = subprocess.run([sys.executable, "-c", PROFILED, reads, reference, str(source)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    found = [line for line in done.stdout.splitlines() if line.startswith("{")]
    assert found, done.stdout[-3000:]
    return done.stdout, json.loads(found[-1])


def test_a_profiled_candidate_cannot_read_the_key_either(planted, tmp_path):
    key, _, named = planted
    output, got = profiled_attack(planted, tmp_path, "closed")
    assert key not in output, [path for path, text in got.items() if key in text]
    assert all(got[path].startswith("refused") for path in named), {p: got[p][:80] for p in named}
    assert "refused" not in got["/proc/self/environ"]
    _, got = profiled_attack(planted, tmp_path, "open")  # the program as it ran before it was confined
    assert all(key in got[path] for path in named), {p: got[p][:80] for p in named}
