"""The worker confined by the operating system (``fitness.boundary.confine``), and the guard's rule
that a library may not do for a candidate what the candidate may not do (``fitness.worker.guard``).

With the static screen off (``EvalSettings(screen=False)``: the runtime defences alone), a
candidate that writes, reads or reaches the network through a library is ``forbidden``,
and nothing gets out; the honest kernels still pass. What the guard cannot see (C code
deeper in a library) the operating system stops; those tests run the confinement itself
in a child process.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from tests.conftest import PROBLEMS, PYTHONPATH, ROOT, SMALL_SHAPES

from fitness import EvalSettings, Status
from fitness.boundary import confine
from fitness.boundary.sandbox import WorkerProcess

SOFTMAX = (PROBLEMS / "softmax" / "seed.py").read_text()
FORWARD = "        n_rows, n_cols = x.shape\n"
IMPORTS = "import triton.language as tl\n"
UNSCREENED = EvalSettings(screen=False)


def in_forward(lines: str) -> str:
    """The softmax seed with ``lines`` run at the start of forward."""
    assert FORWARD in SOFTMAX
    return SOFTMAX.replace(FORWARD, FORWARD + textwrap.indent(textwrap.dedent(lines), " " * 8), 1)


def at_import(lines: str) -> str:
    """The softmax seed with ``lines`` run when the candidate is imported."""
    assert IMPORTS in SOFTMAX
    return SOFTMAX.replace(IMPORTS, IMPORTS + textwrap.dedent(lines), 1)


def layers(said: str) -> set[str]:
    """The layers a confinement's words say are in force: "landlock+netns (...)" -> {landlock, netns}."""
    return set(said.split(" (")[0].split("+"))


@pytest.fixture
def listener():
    """A TCP listener on loopback: (its port, the connections it accepted)."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    server.settimeout(0.2)
    accepted: list = []
    done = threading.Event()

    def accept() -> None:
        while not done.is_set():
            try:
                accepted.append(server.accept()[0])
            except socket.timeout:
                continue
            except OSError:
                return

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield server.getsockname()[1], accepted
    done.set()
    thread.join()
    server.close()


@pytest.fixture
def secret(tmp_path):
    """A file outside everything a worker may read through a library, holding a tensor."""
    import torch

    path = tmp_path / "secret" / "key.pt"
    path.parent.mkdir()
    torch.save(torch.arange(4.0), path)
    return path


# -- through the evaluator, screen off ----------------------------------------------------


def test_a_worker_says_what_confines_it():
    worker = WorkerProcess("cpu", 0, {"TRITON_INTERPRET": "1"}, startup_timeout=120)
    try:
        said = worker.confinement
    finally:
        worker.stop()
    assert said and not said.startswith("none"), said
    # each layer is in force, or named as missing with the reason
    if confine.landlock_abi() >= 2:
        assert "landlock" in layers(said) and "reads open" not in said, said  # writes and reads held
    else:
        assert "landlock unavailable: " in said, said
    assert layers(said) & {"netns", "seccomp"} or "network isolation unavailable: " in said, said


@pytest.mark.parametrize("where", ["forward", "import"])
def test_a_write_through_torch_save_is_forbidden(evaluators, tmp_path, where):
    target = tmp_path / "written.pt"
    line = f"torch.save(torch.zeros(1), {str(target)!r})\n"
    source = in_forward(line) if where == "forward" else at_import(line)
    result = evaluators.get("softmax", settings=UNSCREENED).evaluate(source)
    assert result.status is Status.FORBIDDEN, result.reason
    assert "save" in result.reason
    assert not target.exists()


@pytest.mark.parametrize("how", [
    "torch.load({path!r})",  # Python opens it inside torch: the audit hook sees it
    "torch.amp.autocast_mode.np.fromfile({path!r})",  # NumPy's C code, reached through torch
    "torch.from_file({path!r}, size=4)",  # torch's C code opens it by name
    "torch.TypedStorage.from_file({path!r}, False, 4)",  # the same, through torch's Python
])
def test_a_read_through_a_library_is_forbidden(evaluators, secret, how):
    source = in_forward(how.format(path=str(secret)) + "\n")
    result = evaluators.get("softmax", settings=UNSCREENED).evaluate(source)
    assert result.status is Status.FORBIDDEN, result.reason


def test_a_read_at_import_through_torch_c_code_is_forbidden(evaluators, secret):
    # no dispatch trace at import: the guard's own rule must catch it
    source = at_import(f"STOLEN = torch.from_file({str(secret)!r}, size=4)\n")
    result = evaluators.get("softmax", settings=UNSCREENED).evaluate(source)
    assert result.status is Status.FORBIDDEN, result.reason


@pytest.mark.parametrize("how", [
    "torch.hub.download_url_to_file('http://127.0.0.1:{port}/x', {scratch!r} + '/x', progress=False)",
    "torch.hub.urlopen('http://127.0.0.1:{port}/x', timeout=2)",  # urllib, re-exported by torch.hub
])
def test_a_socket_through_a_library_is_forbidden(evaluators, listener, tmp_path, how):
    port, accepted = listener
    source = in_forward(how.format(port=port, scratch=str(tmp_path)) + "\n")
    result = evaluators.get("softmax", settings=UNSCREENED).evaluate(source)
    time.sleep(0.5)
    assert result.status is Status.FORBIDDEN, result.reason
    assert accepted == [], "the listener got a connection"


@pytest.mark.parametrize("problem", sorted(SMALL_SHAPES))
def test_honest_kernels_pass_under_the_guard_and_the_confinement(evaluators, problem):
    seed = (PROBLEMS / problem / "seed.py").read_text()
    result = evaluators.get(problem, settings=UNSCREENED).evaluate(seed)
    assert result.status is Status.ACCEPTED, result.reason


# -- the guard where no profile hook runs (timed runs) --------------------------------------

GUARD_SCRIPT = r'''
import json, os, sys, importlib.util
import torch
from fitness.worker.guard import Guard

scratch, secret, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
path = os.path.join(scratch, "candidate.py")
with open(path, "w") as f:
    f.write("import torch\n"
            "def fetch(url, to):\n    return torch.hub.download_url_to_file(url, to, progress=False)\n"
            "def load(path):\n    return torch.load(path)\n"
            "def save(t, path):\n    torch.save(t, path)\n")
spec = importlib.util.spec_from_file_location("candidate", path)
candidate = importlib.util.module_from_spec(spec)
spec.loader.exec_module(candidate)
guard = Guard()
guard.candidate_files.add(path)
guard.confine_files([scratch])
torch.save(torch.ones(2), os.path.join(scratch, "mine.pt"))
outcomes = {}
for name, call in [("fetch", lambda: candidate.fetch(f"http://127.0.0.1:{port}/x", os.path.join(scratch, "x"))),
                   ("load outside", lambda: candidate.load(secret)),
                   ("load inside", lambda: candidate.load(os.path.join(scratch, "mine.pt"))),
                   ("save inside", lambda: candidate.save(torch.ones(1), os.path.join(scratch, "s.pt")))]:
    guard.violations.clear()
    try:
        with guard.running(profile=False):
            call()
        outcomes[name] = "ran"
    except PermissionError:
        outcomes[name] = "refused: " + "; ".join(guard.violations)
print(json.dumps(outcomes))
'''


def test_the_guard_refuses_a_library_s_socket_and_reads_without_the_profile_hook(tmp_path, listener, secret):
    """A timed run has no profile hook: the audit hook alone must refuse what a library
    does for a candidate, and let it work in its scratch directory."""
    port, accepted = listener
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    done = subprocess.run([sys.executable, "-c", GUARD_SCRIPT, str(scratch), str(secret), str(port)],
                          cwd=ROOT, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]
    outcomes = json.loads(done.stdout.strip().splitlines()[-1])
    assert outcomes["fetch"].startswith("refused: use the network"), outcomes
    assert outcomes["load outside"].startswith("refused: read"), outcomes
    assert outcomes["load inside"] == outcomes["save inside"] == "ran", outcomes
    time.sleep(0.5)
    assert accepted == []


# -- the operating system's part, in a child process -----------------------------------------

OS_SCRIPT = r'''
import json, os, socket, sys
import torch
scratch, outside, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
said = json.loads(os.environ["KEVO_CONFINEMENT"])["in_force"]
outcomes = {"said": said}

def attempt(name, action):
    try:
        action()
        outcomes[name] = "done"
    except (OSError, RuntimeError) as exc:
        outcomes[name] = f"failed: {type(exc).__name__}"

attempt("save inside", lambda: torch.save(torch.ones(1), os.path.join(scratch, "in.pt")))
attempt("save outside", lambda: torch.save(torch.ones(1), outside))  # C++ opens it: no audit event
attempt("connect", lambda: socket.create_connection(("127.0.0.1", port), timeout=2))
attempt("unix socket", lambda: socket.socket(socket.AF_UNIX).close())
attempt("read", lambda: open(sys.executable, "rb").read(4))  # reads stay open

import triton, triton.language as tl

@triton.jit
def add(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) + tl.load(y_ptr + offsets, mask=mask), mask=mask)

x, y = torch.randn(1000), torch.randn(1000)
out = torch.empty_like(x)
add[(8,)](x, y, out, 1000, BLOCK=128)
outcomes["triton interpreter"] = "right" if torch.equal(out, x + y) else "wrong"
print(json.dumps(outcomes))
'''


def run_confined(policy_dirs: list[str], script: str, *args: str, patch: str = "", **held) -> dict:
    """Run ``script`` (with ``args``) confined to ``policy_dirs`` as a worker is (the
    bootstrap of ``fitness.boundary.confine`` and then an exec); ``patch``: Python run in the
    bootstrap before it confines (to take a layer away); ``held``: the policy's other fields.
    Its last line of output, as JSON."""
    policy = confine.Policy(tuple(policy_dirs), **held).to_json()
    bootstrap = [sys.executable, "-I", confine.__file__, policy, "--"]
    if patch:
        bootstrap = [sys.executable, "-I", "-c",
                     f"import runpy, sys\n"
                     f"ns = runpy.run_path({confine.__file__!r}, run_name='kevo_confine')['main'].__globals__\n"
                     f"{patch}\nns['main'](sys.argv[1:])", policy, "--"]
    env = {**os.environ, "PYTHONPATH": PYTHONPATH, "TRITON_INTERPRET": "1"}
    done = subprocess.run([*bootstrap, sys.executable, "-c", script, *args], cwd=policy_dirs[0], env=env,
                          capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_os_stops_writes_and_sockets_the_guard_cannot_see(tmp_path, listener):
    port, accepted = listener
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    outside = tmp_path / "outside.pt"
    outcomes = run_confined([str(scratch), "/dev/shm"], OS_SCRIPT, str(scratch), str(outside), str(port))
    if "landlock" not in layers(outcomes["said"]) or not layers(outcomes["said"]) & {"netns", "seccomp"}:
        pytest.skip(f"this machine does not offer it all: {outcomes['said']}")
    assert outcomes["save inside"] == "done" and (scratch / "in.pt").exists(), outcomes
    assert outcomes["save outside"].startswith("failed") and not outside.exists(), outcomes
    assert outcomes["connect"].startswith("failed"), outcomes
    assert outcomes["unix socket"] == outcomes["read"] == "done", outcomes
    assert outcomes["triton interpreter"] == "right", outcomes
    time.sleep(0.5)
    assert accepted == [], "the listener got a connection"


CONNECT = '''
import json, os, socket, sys
outcomes = {"said": json.loads(os.environ["KEVO_CONFINEMENT"])["in_force"]}
for port in sys.argv[1:]:
    try:
        socket.create_connection(("127.0.0.1", int(port)), timeout=5).close()
        outcomes[port] = "done"
    except OSError as exc:
        outcomes[port] = f"failed: {exc}"
print(json.dumps(outcomes))
'''


def test_a_program_a_profiler_wraps_shares_the_network_but_reaches_only_the_profiler_s_ports(tmp_path, listener):
    """``network=False`` (``fitness.profiling.candidate.confined``): no network of its own, and TCP refused but on
    the policy's ports."""
    if confine.landlock_abi() < 4:
        pytest.skip("Landlock refuses TCP from ABI 4 on")
    (allowed, accepted), other = listener, socket.socket()
    other.bind(("127.0.0.1", 0))
    other.listen(1)
    refused = other.getsockname()[1]
    try:
        outcomes = run_confined([str(tmp_path)], CONNECT, str(allowed), str(refused), network=False, ports=(allowed,))
    finally:
        other.close()
    assert outcomes[str(allowed)] == "done" and outcomes[str(refused)].startswith("failed"), outcomes
    assert outcomes["said"].endswith(f"; network shared, TCP only on ports {allowed})"), outcomes
    time.sleep(0.5)
    assert len(accepted) == 1


# Layers taken away the way a platform lacks them (``ns``: the bootstrap's globals): a system
# call the kernel does not have, namespaces refused, no seccomp filter for the machine.
NO_LANDLOCK = "ns['_CREATE_RULESET'] = 100000"
NO_NAMESPACES = "ns['_CLONE_NEWNET'] = ns['_CLONE_NEWUSER'] = 1"  # an invalid flag: EINVAL
NO_SECCOMP = "ns['_SECCOMP_ARCH'].clear()"


def test_without_landlock_or_namespaces_the_rest_holds_and_the_gap_is_said(tmp_path, listener):
    port, accepted = listener
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    outside = tmp_path / "outside.pt"
    patch = "\n".join([NO_LANDLOCK, NO_NAMESPACES])
    outcomes = run_confined([str(scratch)], OS_SCRIPT, str(scratch), str(outside), str(port), patch=patch)
    said = outcomes["said"]
    assert said.startswith("seccomp (landlock unavailable: the kernel offers none (ENOSYS"), said
    assert outcomes["save outside"] == "done", outcomes  # no Landlock: writes are open, and that is said
    assert outcomes["connect"].startswith("failed") and outcomes["unix socket"] == "done", outcomes
    assert outcomes["triton interpreter"] == "right", outcomes
    time.sleep(0.5)
    assert accepted == []


def test_with_nothing_the_os_offers_the_worker_says_guard_only(tmp_path):
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    script = "import json, os; print(json.dumps(json.loads(os.environ['KEVO_CONFINEMENT'])))"
    patch = "\n".join([NO_LANDLOCK, NO_NAMESPACES, NO_SECCOMP])
    said = run_confined([str(scratch)], script, patch=patch)["in_force"]
    assert said.startswith("guard only (network isolation unavailable: unshare: EINVAL"), said
    assert "seccomp: no filter for" in said and "landlock unavailable" in said, said


def test_writable_dirs_are_the_worker_s_own_and_the_compile_caches():
    dirs = confine.writable_dirs("/tmp/kevo-worker-1-a", "/dev/shm/kevo-spill-1-b",
                                 {"HOME": "/home/u", "TORCHINDUCTOR_CACHE_DIR": "/ind"})
    assert dirs[:3] == ("/tmp/kevo-worker-1-a", "/dev/shm/kevo-spill-1-b", "/home/u/.triton/cache")
    assert "/ind" in dirs and "/dev/shm" in dirs
    assert not any(d in ("/", "/tmp", "/home/u", "/dev") for d in dirs)
    assert all(Path(p).parts[:2] == ("/", "dev") for p in confine.device_nodes())
