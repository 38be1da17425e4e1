"""Sweeps on a Ray cluster of several nodes (issue 26), all on this machine and on loopback.

A head with no CPUs (it holds no evaluator) and worker nodes of one CPU each,
each node its own raylet in its own process group, so that a node is lost the
way a machine is: its process group killed at once. ``kevo sweep`` joins the
cluster through ``cluster.address`` and places one CPU actor per CPU of every
node. Ray's head notices a lost node within about a second here (its health
checks are made frequent); on a real cluster it takes Ray's defaults.

Worker nodes are started with Ray's ``Node`` rather than ``ray start
--address``: on loopback the command line refuses to join (Ray's
RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0, which keeps every address on 127.0.0.1,
also means "one node only" to ``ray start``), and without that variable it
looks up this machine's address with a UDP connect to a public resolver.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest
import yaml

from tests.conftest import PROBLEMS, ROOT, SMALL_SHAPES
from tests.test_ray_dispatch import ADDRESS, CONNECT, LOOPBACK

from evolve.dispatch.connect import BOOTSTRAP_FILE, BOOTSTRAP_TEXT, LOCAL_ENV
from population_store import STORE_FILE, RunStore

pytest.importorskip("ray", reason="Ray is not installed (pip install 'ray>=2.50')")

RAY = Path(sys.executable).with_name("ray")
WAIT_S = 240
# Ray's head declares a node dead after missing this many health checks this often (ms).
FAST_HEALTH_CHECKS = {"RAY_health_check_period_ms": "500", "RAY_health_check_timeout_ms": "500",
                      "RAY_health_check_failure_threshold": "3", "RAY_health_check_initial_delay_ms": "0"}

WORKER_NODE = textwrap.dedent("""
    import sys
    import ray._private.node, ray._private.parameter
    address, cpus, temp_dir = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    params = ray._private.parameter.RayParams(
        gcs_address=address, node_ip_address="127.0.0.1", num_cpus=cpus, num_gpus=0, temp_dir=temp_dir,
        object_store_memory=100 << 20, min_worker_port=0, max_worker_port=0, node_manager_port=0,
        include_log_monitor=False, dashboard_agent_listen_port=None)
    node = ray._private.node.Node(params, head=False, shutdown_at_exit=False, spawn_reaper=False)
    print(node.node_id, flush=True)
""")


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LocalCluster:
    """A Ray cluster of several raylets on this machine; ``stop`` kills every process it started."""

    def __init__(self) -> None:
        if not RAY.exists():
            pytest.skip(f"Ray's command line is not at {RAY}")
        # short: the raylets' socket paths, under it, must fit in a Unix socket's 107 bytes
        self.temp = Path(tempfile.mkdtemp(prefix="kr", dir="/tmp"))
        home = self.temp / "home"  # the head asks no cloud metadata service when this file is there
        home.mkdir()
        (home / BOOTSTRAP_FILE).write_text(BOOTSTRAP_TEXT)
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
        self.env.update({**LOCAL_ENV, **FAST_HEALTH_CHECKS, "HOME": str(home)})
        self.address = f"127.0.0.1:{free_port()}"
        self.groups: dict[str, int] = {}  # node name -> its process group

    def start_head(self) -> None:
        self._start("head", [str(RAY), "start", "--head", "--node-ip-address=127.0.0.1",
                             f"--port={self.address.rsplit(':', 1)[1]}", "--num-cpus=0",
                             "--include-dashboard=false", f"--temp-dir={self.temp / 'ray'}",
                             "--disable-usage-stats"])

    def add_node(self, name: str, cpus: int = 1) -> str:
        """Start a worker node with ``cpus`` CPUs; its Ray node id."""
        return self._start(name, [sys.executable, "-c", WORKER_NODE, self.address, str(cpus),
                                  str(self.temp / "ray")]).strip().splitlines()[-1]

    def kill(self, name: str) -> None:
        """The node is lost: every process of it killed at once, as when its machine goes."""
        os.killpg(self.groups.pop(name), signal.SIGKILL)

    def stop(self) -> None:
        for name in list(self.groups):
            try:
                self.kill(name)
            except ProcessLookupError:
                pass
        shutil.rmtree(self.temp, ignore_errors=True)

    def _start(self, name: str, command: list[str]) -> str:
        proc = subprocess.Popen(command, env=self.env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, start_new_session=True)
        self.groups[name] = proc.pid  # the node's daemons stay in this group after the command exits
        out, err = proc.communicate(timeout=WAIT_S)
        assert proc.returncode == 0, f"{name} did not start:\n{err[-3000:]}"
        return out


@pytest.fixture
def cluster():
    cluster = LocalCluster()
    try:
        cluster.start_head()
        yield cluster
    finally:
        cluster.stop()


STAND_IN = textwrap.dedent("""
    import json, os, sys, time
    from evolve.dispatch.ray import EvaluatorSpec, RayDispatcher
    from fitness import EvalResult, Status

    class Sleeps:
        '''EvaluatorActor's methods: a candidate is how long to take over it.'''
        def __init__(self, home=None):
            pass
        def prepare(self, spec):
            return {"pid": os.getpid(), "platform": "cpu", "device_name": "stand-in", "cutoff": 1.0}
        def evaluate(self, spec, source):
            time.sleep(float(source))
            return os.getpid(), EvalResult(Status.ACCEPTED, "", max_abs_diff=0.0, runtime_ms=1.0, runtime_spread=0.0,
                                           reference_ms=1.0, platform="cpu", device_name="stand-in")
        def lane_stats(self):
            return {}
        def close(self):
            pass

    d = RayDispatcher(EvaluatorSpec("r.py", platform="cpu"), address=sys.argv[1], actor_class=Sleeps)
    for key in range(4):
        d.submit(key, "3")
    running = {d.node_of(actor) for actor in d.running().values()}
    print(json.dumps({"placed": sorted(d.node_of(a) for a in d.actors()), "running": sorted(running)}), flush=True)
    sys.stdin.readline()  # the test loses a node and adds one meanwhile
    results = [key for key, _ in d.results()]
    for key in range(4, 10):
        d.submit(key, "0.5")
    results += [key for key, _ in d.results()]
    print(json.dumps({"results": results, "served_on": d.served_on, "capacity": d.capacity}), flush=True)
    d.close()
""")


@pytest.mark.slow
def test_actors_on_every_node_and_a_lost_node_s_candidates_go_back_to_the_queue(cluster, tmp_path):
    a, b = cluster.add_node("a"), cluster.add_node("b")
    strace = shutil.which("strace")  # the driver joins on loopback: every connect it makes is watched
    trace = tmp_path / "driver.trace"
    watch = [strace, "-f", "-e", "trace=connect", "-o", str(trace)] if strace else []
    proc = subprocess.Popen([*watch, sys.executable, "-c", STAND_IN, cluster.address], cwd=ROOT, env=cluster.env,
                            text=True, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        started = json.loads(proc.stdout.readline() or "null")
        assert started is not None, proc.stderr.read()[-3000:]
        assert started["placed"] == sorted([a, b])  # one actor per CPU of every node; none on the head (0 CPUs)
        assert started["running"] == sorted([a, b])  # a candidate in flight on each
        cluster.kill("b")
        c = cluster.add_node("c")
        proc.stdin.write("go\n")
        proc.stdin.flush()
        out, err = proc.communicate(timeout=WAIT_S)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err[-3000:]
    done = json.loads(out.strip().splitlines()[-1])
    assert sorted(done["results"]) == list(range(10))  # every candidate once: b's went back to the queue
    assert b not in done["served_on"]  # lost with the candidate it held, which was evaluated elsewhere
    assert done["served_on"].get(c, 0) > 0 and done["capacity"] == 2  # the node that joined got work
    assert "its node was lost; it goes back to the queue" in err
    if strace:
        inet = [line for line in trace.read_text().splitlines() if CONNECT.search(line)]
        addresses = {x or y for line in inet for x, y in ADDRESS.findall(line)}
        assert inet and addresses <= LOOPBACK, addresses


EVALUATIONS = 4  # per problem of the sweep


def sweep_file(path: Path, address: str) -> Path:
    names = ["elementwise", "softmax", "gelu", "rmsnorm", "sum_middle", "matvec", "matmul"]
    problems = [{"reference": str(PROBLEMS / n / "reference.py"), "seeds": [str(PROBLEMS / n / "seed.py")],
                 "shapes": SMALL_SHAPES[n], "held_out_shapes": []} for n in names]
    problems.append({**problems[0], "shapes": {"batch_size": 3, "dim": 70}, "name": "elementwise-small"})
    path.write_text(yaml.safe_dump({
        "defaults": {"search": {"population_size": 2, "max_evaluations": EVALUATIONS, "seed": 0}, "platform": "cpu",
                     # nodes looked at often: the node that joins gets to work while work is left
                     "cluster": {"address": address, "node_check_s": 0.5}, "profiler": {"enabled": False}},
        "problems": problems}))
    return path


def evaluated(run_dir: Path) -> int:
    store = run_dir / STORE_FILE
    if not store.exists():
        return 0
    with RunStore.open(store, readonly=True) as s:
        return sum(1 for i in s.individuals() if i.status != "pending")


@pytest.mark.slow
def test_a_sweep_on_a_cluster_loses_nothing_when_a_node_dies_and_puts_a_node_that_joins_to_work(cluster, tmp_path):
    cluster.add_node("a")
    cluster.add_node("b")
    sweep, run_dir = sweep_file(tmp_path / "sweep.yaml", cluster.address), tmp_path / "sweep"
    env = {**cluster.env, "PYTHONUNBUFFERED": "1"}
    log = (tmp_path / "sweep.log").open("w")
    proc = subprocess.Popen([sys.executable, "-m", "evolve.cli", "sweep", str(sweep), "--run-dir", str(run_dir),
                             "--json"], cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=log, text=True)
    try:
        deadline = time.monotonic() + WAIT_S
        while not evaluated(run_dir / "001-softmax") and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)  # the sweep is under way on both nodes
        assert proc.poll() is None, (tmp_path / "sweep.log").read_text()[-3000:]
        cluster.kill("b")  # mid-sweep, with candidates in flight on it
        cluster.add_node("c")  # a node joins later
        out, _ = proc.communicate(timeout=WAIT_S)
    finally:
        if proc.poll() is None:
            proc.kill()
        log.close()
    stderr = (tmp_path / "sweep.log").read_text()
    assert proc.returncode == 0, stderr[-3000:]
    summary = json.loads(out)
    assert summary["problems"] == 8 and summary["correct"] == 8, summary
    for run in summary["runs"]:  # every budget met exactly: nothing lost, nothing evaluated twice
        assert run["status"] == "finished" and run["evaluations"] == EVALUATIONS, run
        with RunStore.open(run_dir / run["name"] / STORE_FILE, readonly=True) as store:
            rows = store.individuals()
            assert len(rows) == EVALUATIONS and all(r.status != "pending" for r in rows)
            assert len({r.source_hash for r in rows}) == EVALUATIONS
    usage = json.loads((run_dir / "summary.json").read_text())["evaluators"]
    assert 0 < usage["busy_share"] <= 1 and usage["wall_s"] > 0, usage
    assert len(usage["results_by_node"]) == 3, usage  # a, b until it was lost, and c that joined
    assert sum(usage["results_by_node"].values()) >= 8 * EVALUATIONS
    assert "evaluators busy" in stderr
    print(f"busy share {usage['busy_share']:.2f} over {usage['wall_s']:.0f} s; by node {usage['results_by_node']}")
