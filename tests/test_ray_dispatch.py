"""Evaluation on Ray actors (evolve.dispatch.ray), on CPU actors.

Ray starts once for the whole module (2 CPUs); one dispatcher with two CPU
actors serves the dispatch tests. Candidates that must stay in flight while an
actor is killed are the hanging attack kernel: it holds its actor for
``TIMEOUT_S`` and then comes back as ``timeout``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from tests.conftest import PROBLEMS, ROOT, SMALL_SHAPES

from evolve.config import config_from_dict
from evolve.session import uses_ray
from fitness import CutoffError, EvalSettings, Incumbent, Status

ray = pytest.importorskip("ray", reason="Ray is not installed (pip install 'ray>=2.50')")

from evolve.dispatch.fleet import Plan, actor_plan, placement  # noqa: E402
from evolve.dispatch.ray import EvaluatorSpec, RayDispatcher, start_ray  # noqa: E402
from evolve.search.loop import Search, run_search  # noqa: E402
from evolve.session import search_space  # noqa: E402
from platforms import PlatformUnavailable  # noqa: E402
from population_store import RunStore  # noqa: E402

ATTACKS = Path(__file__).parent / "attacks"
SEED = (PROBLEMS / "elementwise" / "seed.py").read_text()
HANG = (ATTACKS / "hang_forward_loop_elementwise.py").read_text()
QUIT = (ATTACKS / "exit_builtin_quit_elementwise.py").read_text()
# Long enough for an honest step on a busy 2-core machine, short enough for a hang to be cheap.
TIMEOUT_S = 8.0
WAIT_S = 120  # nothing here may block longer than this


def spec(**overrides) -> EvaluatorSpec:
    fields = dict(reference=str(PROBLEMS / "elementwise" / "reference.py"), platform="cpu",
                  shapes=SMALL_SHAPES["elementwise"], held_out=[],
                  settings=EvalSettings(timeout_s=TIMEOUT_S, startup_timeout_s=60))
    return EvaluatorSpec(**{**fields, **overrides})


# -- loopback only -----------------------------------------------------------------

PROBE = textwrap.dedent("""
    import os
    from evolve.dispatch.ray import start_ray
    start_ray(num_cpus=1)
    import ray

    @ray.remote(num_cpus=1)
    def pid():
        return os.getpid()

    assert ray.get(pid.remote(), timeout=60) != os.getpid()
    ray.shutdown()
""")
CONNECT = re.compile(r"connect\(\d+, \{sa_family=(AF_INET6?),")
ADDRESS = re.compile(r'inet_addr\("([^"]+)"\)|inet_pton\(AF_INET6, "([^"]+)"')
LOOPBACK = {"127.0.0.1", "::1", "::ffff:127.0.0.1"}


def test_local_ray_connects_to_loopback_only(tmp_path):
    strace = shutil.which("strace") or ("/usr/bin/strace" if Path("/usr/bin/strace").exists() else None)
    if strace is None:
        pytest.skip("strace is not installed (apt-get install strace): cannot watch Ray's connections")
    trace = tmp_path / "connect.trace"
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    done = subprocess.run([strace, "-f", "-e", "trace=connect", "-o", str(trace), sys.executable, "-c", PROBE],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=WAIT_S)
    assert done.returncode == 0, done.stderr[-3000:]
    inet = [line for line in trace.read_text().splitlines() if CONNECT.search(line)]
    addresses = {a or b for line in inet for a, b in ADDRESS.findall(line)}
    assert inet and addresses, "no TCP/UDP connect was traced: the probe did not reach Ray"
    assert addresses <= LOOPBACK, "Ray connected off loopback:\n" + "\n".join(
        line for line in inet if not any(a in line for a in LOOPBACK))


KEYLESS = textwrap.dedent("""
    import os
    from evolve.dispatch.ray import start_ray
    start_ray(num_cpus=1)
    import ray

    @ray.remote(num_cpus=1)
    def held():
        with open("/proc/self/environ", "rb") as f:
            return repr(dict(os.environ)) + repr(f.read()) + repr(ray.get_runtime_context().get())

    print(os.environ["OPENAI_API_KEY"] in ray.get(held.remote(), timeout=60), os.environ["OPENAI_API_KEY"])
    ray.shutdown()
""")


def test_a_local_ray_s_actors_hold_no_key_and_the_driver_keeps_it():
    """The evaluators run in Ray's actors: started by kevo, Ray hands them no secret-looking
    variable (fitness.boundary.keys), in their environment or the one they were started with."""
    key = f"sk-kevo-test-{os.urandom(8).hex()}"
    done = subprocess.run([sys.executable, "-c", KEYLESS], cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, "OPENAI_API_KEY": key}, timeout=WAIT_S)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1] == f"False {key}", done.stdout


KEPT_SIGTERM = textwrap.dedent("""
    import signal
    from evolve.dispatch.ray import start_ray

    def ours(signum, frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, ours)
    start_ray(num_cpus=1)
    import ray
    print(signal.getsignal(signal.SIGTERM) is ours)
    ray.shutdown()
""")


def test_starting_ray_keeps_the_drivers_sigterm_handler():
    """ray.init puts in its own SIGTERM handler (sys.exit); kevo's, which ends a run as Ctrl-C does
    (evolve.cli), stays."""
    done = subprocess.run([sys.executable, "-c", KEPT_SIGTERM], cwd=ROOT, capture_output=True, text=True,
                          timeout=WAIT_S)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1] == "True", done.stdout


# -- dispatch -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def local_ray():
    start_ray(num_cpus=2)
    yield
    ray.shutdown()


def test_an_actor_with_two_slots_checks_two_candidates_at_once_and_times_one_at_a_time(local_ray):
    # Runs before the module's dispatcher takes both CPUs.
    with RayDispatcher(spec(), num_actors=1, slots=2, ready_timeout_s=WAIT_S) as d:
        assert d.capacity == 2
        for key in range(4):
            d.submit(key, SEED)
        assert len(d.running()) == 2  # both slots of the one actor
        results = dict(d.results())
        assert sorted(results) == [0, 1, 2, 3] and all(r.status is Status.ACCEPTED for r in results.values())
        assert len({d.served_by[k] for k in results}) == 1
        (lane,) = d.lane_stats()
        assert lane["timings"] >= 4 and 0 < lane["busy_share"] < 1, lane
        # another problem on the same actors (a sweep's next problem)
        info = d.retarget(spec(reference=str(PROBLEMS / "softmax" / "reference.py"),
                               shapes=SMALL_SHAPES["softmax"]))
        assert info["platform"] == "cpu"
        d.submit(9, (PROBLEMS / "softmax" / "seed.py").read_text())
        d.submit(10, SEED)  # the elementwise kernel is wrong for softmax
        results = dict(d.results())
        assert results[9].status is Status.ACCEPTED, results[9]
        assert results[10].status is not Status.ACCEPTED
        # the incumbent, torch.compile of the reference, through the actor like a candidate (evolve.search.confirm)
        d.submit(11, Incumbent())
        d.submit(12, (PROBLEMS / "softmax" / "seed.py").read_text())
        results = dict(d.results())
        assert results[11].status is Status.ACCEPTED and results[11].runtime_ms > 0, results[11]
        assert results[11].reference_ms > 0 and results[12].status is Status.ACCEPTED


@pytest.fixture(scope="module")
def dispatcher(local_ray):
    with RayDispatcher(spec(), num_actors=2, ready_timeout_s=WAIT_S) as d:
        yield d


def wait_until(condition, what: str, timeout: float = WAIT_S):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def test_a_problem_the_evaluator_refuses_raises_from_the_constructor(local_ray):
    # Runs before the module's dispatcher takes both CPUs.
    with pytest.raises(CutoffError):  # so lax that all zeros would pass
        RayDispatcher(spec(max_abs_diff=100.0), num_actors=1, ready_timeout_s=WAIT_S)


def test_every_key_comes_back_once_and_both_actors_work(dispatcher):
    for key in range(4):
        dispatcher.submit(key, SEED)
    assert dispatcher.in_flight == 4
    assert len(dispatcher.running()) == 2  # one per actor; the other two wait in the queue
    results = dict(dispatcher.results())
    assert sorted(results) == [0, 1, 2, 3]
    assert all(r.status is Status.ACCEPTED for r in results.values()), results
    assert dispatcher.in_flight == 0
    assert len({dispatcher.served_by[k] for k in results}) == 2, dispatcher.served_by
    with pytest.raises(LookupError):
        dispatcher.next_result()


def test_failed_candidates_are_results_and_not_retried(dispatcher):
    pids = set(dispatcher.pids.values())
    dispatcher.submit(10, HANG)
    dispatcher.submit(11, QUIT)
    results = dict(dispatcher.results())
    assert results[10].status is Status.TIMEOUT, results[10]
    assert results[11].status in (Status.CRASHED, Status.RUNTIME_ERROR, Status.FORBIDDEN), results[11]
    assert set(dispatcher.pids.values()) == pids  # no actor was lost or replaced
    assert not dispatcher._jobs.deaths


def test_killed_actor_requeues_its_candidate_on_a_replacement(dispatcher):
    dispatcher.submit(20, HANG)
    actor = dispatcher.running()[20]
    killed = dispatcher.pids[actor]
    time.sleep(0.5)  # let the evaluation start
    ray.kill(actor)
    key, result = dispatcher.next_result()
    assert key == 20 and result.status is Status.TIMEOUT, result  # evaluated again, to its own verdict
    assert dispatcher.served_by[20] != killed
    assert dispatcher.in_flight == 0 and len(dispatcher.actors()) == 2


def test_candidate_that_kills_two_actors_is_recorded_as_crashed(dispatcher):
    dispatcher.submit(30, HANG)
    first = dispatcher.running()[30]
    answer: list = []
    collector = threading.Thread(target=lambda: answer.append(dispatcher.next_result()), daemon=True)
    time.sleep(0.5)
    ray.kill(first)
    collector.start()  # handles the death: requeues 30 on another actor, and waits
    second = wait_until(lambda: (a := dispatcher.running().get(30)) is not None and a != first and a,
                        "the candidate to be evaluated again")
    time.sleep(0.5)
    ray.kill(second)
    collector.join(WAIT_S)
    assert answer, "next_result did not return"
    key, result = answer[0]
    assert key == 30 and result.status is Status.CRASHED, result
    assert "died 2 times" in result.reason
    assert dispatcher.in_flight == 0 and len(dispatcher.actors()) == 2
    dispatcher.submit(31, SEED)  # the replacements work
    assert dispatcher.next_result()[1].status is Status.ACCEPTED


def test_cancelled_candidates_are_never_returned_and_their_slots_come_back(dispatcher):
    dispatcher.submit(40, HANG)
    dispatcher.submit(41, HANG)
    dispatcher.submit(42, SEED)  # queued behind them
    assert not dispatcher.wait(0.5)
    assert sorted(dispatcher.cancel()) == [40, 41, 42]
    assert dispatcher.in_flight == 0 and dispatcher.running() == {}
    with pytest.raises(LookupError):
        dispatcher.next_result()
    dispatcher.submit(43, SEED)  # waits for a slot: the hanging ones run on to their timeout
    key, result = dispatcher.next_result()
    assert key == 43 and result.status is Status.ACCEPTED


WALL_S = 3.0


def test_a_run_at_its_wall_limit_leaves_what_is_in_flight_pending_and_a_resume_evaluates_it(dispatcher, tmp_path):
    """A hanging seed holds its actor for TIMEOUT_S; the run stops at its limit all the same."""
    wait_until(lambda: dispatcher.ready() == 0 and len(dispatcher._slots.idle) == 2, "every slot free")
    config = config_from_dict({"problem": {"reference": str(PROBLEMS / "elementwise" / "reference.py"),
                                           "seeds": [str(PROBLEMS / "elementwise" / "seed.py")]},
                               "search": {"population_size": 2, "max_evaluations": 4, "max_wall_time_s": WALL_S},
                               "platform": "cpu"}, origin="test", base_dir=ROOT)
    path = tmp_path / "run.sqlite"
    began = time.monotonic()
    with RunStore.create(path, config.to_dict()) as store:
        reason = run_search(Search(store, dispatcher, config, [SEED, HANG], search_space(config, [SEED])))
    wall = time.monotonic() - began
    assert reason.startswith("max_wall_time_s reached"), reason
    assert wall < WALL_S + 2.0 < TIMEOUT_S, wall  # the hanging candidate was not waited for
    with RunStore.open(path, readonly=True) as store:
        rows = {row.source: row for row in store.individuals()}
        left = store.events("stopped")[-1]["data"]["not_evaluated"]
    assert rows[HANG].status == "pending" and rows[HANG].id in left
    with RunStore.open(path) as store:  # resumed: the limit is spent, what was left is evaluated
        reason = run_search(Search(store, dispatcher, config, [SEED, HANG], search_space(config, [SEED])))
        rows = {row.source: row for row in store.individuals()}
    assert reason.startswith("max_wall_time_s reached"), reason
    assert len(rows) == 2 and rows[HANG].status == "timeout" and rows[SEED].status == "accepted"
    assert dispatcher.in_flight == 0


# -- choosing the dispatcher ----------------------------------------------------------


@pytest.mark.parametrize("platform, cluster, expected", [
    ("cpu", {}, False),  # the quickstart stays in process
    ("cpu", {"actors": 2}, True),
    ("cuda", {"actors": 0}, False),
    ("cuda", {}, True),
    ("cpu", {"address": "10.0.0.1:6379"}, True),
])
def test_which_dispatcher_the_config_chooses(platform, cluster, expected):
    config = config_from_dict({"problem": {"reference": "r.py", "seeds": ["s.py"]}, "platform": platform,
                               "cluster": cluster}, origin="test.yaml", base_dir=ROOT)
    assert uses_ray(config) is expected


# -- one actor per GPU, on fake GPUs ----------------------------------------------------

FAKE_GPUS = textwrap.dedent("""
    import json, os
    from evolve.dispatch.ray import EvaluatorSpec, RayDispatcher, start_ray
    from fitness import EvalResult, Status

    class SeesItsDevice:
        '''EvaluatorActor's methods; says which devices Ray made visible to it.'''
        def __init__(self, home=None):
            pass
        def prepare(self, spec):
            return {"pid": os.getpid(), "platform": spec.platform, "device_name": "fake", "cutoff": 1.0}
        def evaluate(self, spec, source):
            seen = os.environ.get("CUDA_VISIBLE_DEVICES", "")
            return os.getpid(), EvalResult(Status.ACCEPTED, seen, max_abs_diff=0.0, runtime_ms=1.0,
                                           runtime_spread=0.0, reference_ms=1.0, platform="cuda", device_name="fake")
        def lane_stats(self):
            return {}
        def close(self):
            pass

    start_ray(num_cpus=2, num_gpus=2)  # Ray's GPU resources, without GPUs
    with RayDispatcher(EvaluatorSpec("r.py", platform="cuda"), actor_class=SeesItsDevice,
                       actor_options={"num_cpus": 0}) as d:
        for key in range(6):
            d.submit(key, "source")
        seen = {d.served_by[k]: r.reason for k, r in d.results()}
        print(json.dumps({"actors": len(d.actors()), "capacity": d.capacity, "seen": sorted(seen.values())}))
""")


def test_one_actor_per_gpu_each_seeing_only_its_own(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    env.pop("CUDA_VISIBLE_DEVICES", None)
    done = subprocess.run([sys.executable, "-c", FAKE_GPUS], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=WAIT_S)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["actors"] == 2 and report["capacity"] == 6  # one actor per GPU, three slots each on a GPU
    assert report["seen"] == ["0", "1"]  # Ray gave each actor one GPU, a different one


@pytest.mark.parametrize("platform, resources, asked, local, expected", [
    ("cuda", {"GPU": 4, "CPU": 16}, None, False, Plan({"num_gpus": 1}, "GPU", None)),  # one per GPU of every node
    ("rocm", {"GPU": 2}, 1, True, Plan({"num_gpus": 1}, "GPU", 1)),
    ("auto", {"CPU": 8}, None, True, Plan({"num_cpus": 1}, "CPU", 2)),
    ("cpu", {"GPU": 8, "CPU": 8}, 3, False, Plan({"num_cpus": 1}, "CPU", 3)),
    ("cpu", {"CPU": 6}, None, False, Plan({"num_cpus": 1}, "CPU", None)),  # a cluster: one per CPU of every node
])
def test_actor_plans(platform, resources, asked, local, expected):
    assert actor_plan(platform, resources, asked, local) == expected


def test_more_actors_than_the_cluster_has_gpus_or_cpus_for_is_an_error():
    with pytest.raises(PlatformUnavailable, match="only 2 GPU"):
        actor_plan("cuda", {"GPU": 2}, 3, local=True)
    with pytest.raises(PlatformUnavailable, match="has none"):
        actor_plan("cuda", {"CPU": 8}, None, local=True)
    with pytest.raises(PlatformUnavailable, match="only 2 CPU"):
        actor_plan("cpu", {"CPU": 2}, 3, local=False)


@pytest.mark.parametrize("capacity, placed, total, expected", [
    ({"a": 2, "b": 1, "head": 0}, {}, None, {"a": 2, "b": 1}),  # every unit of every node
    ({"a": 2, "b": 2}, {}, 3, {"a": 2, "b": 1}),  # spread in turn
    ({"a": 2, "b": 2}, {"a": 2}, 3, {"b": 1}),  # a node lost and back, or one that joined
    ({"a": 1, "c": 4}, {"a": 1}, None, {"c": 4}),
    ({"a": 1}, {"a": 1}, 5, {}),  # no room left: the rest wait for a node
])
def test_placement_fills_every_node_in_turn(capacity, placed, total, expected):
    assert placement(capacity, placed, total) == expected


def test_a_run_on_a_local_ray_instance_leaves_no_session_folder_of_rays(tmp_path):
    """Ray keeps every session's folder (logs, sockets) under its temporary folder; the instance kevo
    starts is stopped at exit and its folder removed, with the ``session_latest`` link to it."""
    import tempfile

    ray_tmp = Path(tempfile.gettempdir()) / "ray"
    before = set(os.listdir(ray_tmp)) if ray_tmp.is_dir() else set()
    config = tmp_path / "run.yaml"
    config.write_text(textwrap.dedent(f"""\
        problem:
          reference: {PROBLEMS / 'softmax' / 'reference.py'}
          seeds: [{PROBLEMS / 'softmax' / 'seed.py'}]
          shapes: {json.dumps(SMALL_SHAPES['softmax'])}
        search: {{population_size: 2, max_evaluations: 3, seed: 0}}
        platform: cpu
        cluster: {{actors: 2}}
        """))
    done = subprocess.run([sys.executable, "-m", "evolve.cli", "run", str(config), "--run-dir", str(tmp_path / "run")],
                          cwd=ROOT, capture_output=True, text=True, timeout=WAIT_S)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Started a local Ray instance" in done.stderr  # the test tests something: Ray ran
    after = set(os.listdir(ray_tmp)) if ray_tmp.is_dir() else set()
    assert not {n for n in after - before if n.startswith("session_")}, sorted(after - before)
