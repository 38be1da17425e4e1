"""The timing lane (fitness.judge.lane): timing runs alone, checks overlap each other."""

from __future__ import annotations

import contextlib
import threading
import time
from pathlib import Path

from fitness.judge.lane import NoLane, TimingLane


def test_timing_never_overlaps_a_check_and_checks_overlap_each_other():
    lane = TimingLane()
    active = {"shared": 0, "exclusive": 0}
    seen = {"max_shared": 0, "overlap": 0}
    guard = threading.Lock()

    def enter(kind: str) -> None:
        with guard:
            active[kind] += 1
            if active["exclusive"] and (active["shared"] or active["exclusive"] > 1):
                seen["overlap"] += 1
            seen["max_shared"] = max(seen["max_shared"], active["shared"])

    def leave(kind: str) -> None:
        with guard:
            active[kind] -= 1

    def worker(kind: str, rounds: int) -> None:
        for _ in range(rounds):
            with getattr(lane, kind)():
                enter(kind)
                time.sleep(0.002)
                leave(kind)

    threads = [threading.Thread(target=worker, args=(kind, 40)) for kind in ("shared",) * 3 + ("exclusive",) * 2]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not any(t.is_alive() for t in threads)
    assert seen["overlap"] == 0
    assert seen["max_shared"] >= 2  # checks did run side by side
    assert lane.stats()["timings"] == 80 and lane.stats()["timing_s"] > 0


def test_a_waiting_timing_holds_back_new_checks():
    lane = TimingLane()
    order: list[str] = []
    first = lane.shared()
    first.__enter__()  # a check is running
    held = []  # the contexts stay referenced: a collected one would let go of the lane

    def enter(context, name: str) -> None:
        held.append(context)
        context.__enter__()
        order.append(name)

    timer = threading.Thread(target=enter, args=(lane.exclusive(), "timing"), daemon=True)
    timer.start()
    deadline = time.monotonic() + 10
    while not lane._writers_waiting and time.monotonic() < deadline:
        time.sleep(0.001)
    checker = threading.Thread(target=enter, args=(lane.shared(), "check"), daemon=True)
    checker.start()
    time.sleep(0.05)
    assert order == []  # the timing waits for the running check; the new check waits for the timing
    first.__exit__(None, None, None)
    timer.join(10)
    assert order == ["timing"]
    assert checker.is_alive()  # the timing has not let go of the lane yet


def _hold_until(enter, name: str, order: list[str], may_end: threading.Event) -> None:
    """Hold ``enter()`` (a lane's ``shared`` or ``exclusive``) until ``may_end`` is set, noting in
    ``order`` when the hold starts and ends."""
    with enter():
        order.append(f"{name} starts")
        may_end.wait(10)
        order.append(f"{name} ends")


def test_a_lent_hold_lets_a_timing_through_and_is_taken_back_after_it():
    lane = TimingLane()
    order: list[str] = []
    timing_may_end = threading.Event()

    with lane.shared() as hold:  # a check is running; its worker starts to compile
        timer = threading.Thread(target=_hold_until, args=(lane.exclusive, "timing", order, timing_may_end),
                                 daemon=True)
        timer.start()
        time.sleep(0.05)
        assert order == []  # the check holds the lane
        hold.release()  # lent out while the compile runs
        deadline = time.monotonic() + 10
        while not order and time.monotonic() < deadline:
            time.sleep(0.001)
        assert order == ["timing starts"]
        taker = threading.Thread(target=hold.acquire, daemon=True)
        taker.start()
        time.sleep(0.05)
        assert taker.is_alive()  # taking it back waits for the timing
        timing_may_end.set()
        taker.join(10)
        assert not taker.is_alive() and hold.held
        assert order == ["timing starts", "timing ends"]
    timer.join(10)
    assert lane._readers == 0  # the hold was given back once, at the end


def test_the_evaluator_answers_a_loan_and_refuses_anything_else():
    import collections
    import types

    import pytest

    from fitness.boundary.protocol import Compiled, Compiling, Continue, TimedRun
    from fitness.boundary.sandbox import WorkerGone
    from fitness.judge.channel import WorkerChannel
    from fitness.settings import EvalSettings

    synced = []
    channel = WorkerChannel(types.SimpleNamespace(synchronize=lambda: synced.append(1)), EvalSettings(),
                            collections.Counter())
    with NoLane().shared() as alone:  # an evaluator alone on its device lends nothing, but answers the same
        answer = channel.lending(alone)
        assert answer(Compiling(), []) == Continue()
        assert answer(Compiled(), []) == Continue()
        assert alone.held
    synced.clear()
    lane = TimingLane()
    with lane.shared() as hold:
        answer = channel.lending(hold)
        assert answer(Compiling(), []) == Continue()
        assert not hold.held and lane._readers == 0 and synced == [1]
        with pytest.raises(WorkerGone):  # lent twice
            answer(Compiling(), [])
        assert answer(Compiled(), []) == Continue()
        assert hold.held and lane._readers == 1
        with pytest.raises(WorkerGone):  # taken back twice
            answer(Compiled(), [])
        with pytest.raises(WorkerGone):  # tensors with a loan
            answer(Compiling(), [object()])
        with pytest.raises(WorkerGone):  # a timed run's hand-over in a checked call
            answer(TimedRun(0, 0), [])
    assert lane._readers == 0


WATCH_SCRIPT = r"""
import json, os, sys, tempfile, importlib.util
from fitness.worker.guard import Guard
folder = tempfile.TemporaryDirectory()
path = os.path.join(folder.name, "candidate_x.py")
with open(path, "w") as f:
    f.write("def helper(x):\n    return [i for i in range(x)]\n\ndef gen():\n    yield 1\n    yield 2\n")
spec = importlib.util.spec_from_file_location("candidate_x", path)
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
guard = Guard()
guard.candidate_files.add(path)
fired = []
before = sys.getprofile()
with guard.on_candidate_code(lambda: fired.append("seen")):
    json.dumps({"a": [1, 2]})  # library code: not the candidate's
    quiet = list(fired)
    module.helper(3)
    module.helper(4)
after_inside = list(fired)
module.helper(5)
g = module.gen()
next(g)
with guard.on_candidate_code(lambda: fired.append("resumed")):
    next(g)  # a generator of the candidate's resumed
print(json.dumps({"quiet": quiet, "inside": after_inside, "all": fired,
                  "profile_restored": sys.getprofile() is before}))
"""


def test_the_compile_watch_sees_the_first_start_of_candidate_code_only():
    import json
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    done = subprocess.run([sys.executable, "-c", WATCH_SCRIPT], cwd=root, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["quiet"] == []  # the standard library ran and nothing fired
    assert seen["inside"] == ["seen"]  # once, at the candidate's first start
    assert seen["all"] == ["seen", "resumed"]  # not outside the watch; a resumed generator counts
    assert seen["profile_restored"]



HARNESS_SCRIPT = r"""
import collections, json, os, sys, threading, types
from fitness.boundary import wire
from fitness.judge.channel import WorkerChannel
from fitness.judge.lane import TimingLane
from fitness.boundary.protocol import Call, read_reply
from fitness.settings import EvalSettings
from fitness.worker.harness import Harness

harness = Harness("cpu", 0)
to_worker_r, to_worker_w = os.pipe()
from_worker_r, from_worker_w = os.pipe()
harness.in_fd, harness.out_fd, harness.nonce = to_worker_r, from_worker_w, "n1"
lane = TimingLane()
walls = collections.Counter()
channel = WorkerChannel(types.SimpleNamespace(synchronize=lambda: None), EvalSettings(), walls)
seen = []

def evaluator_side(hold):
    answer = channel.lending(hold)
    for _ in range(2):
        message, tensors = wire.receive(from_worker_r, 30)
        seen.append((message["interim"], message["nonce"], lane._readers))
        wire.send(to_worker_w, answer(read_reply(Call(0, [], lend=True), message, tensors), tensors).to_wire())

import select, time
stop = threading.Event()
busy = threading.Thread(target=lambda: [time.sleep(0.001) for _ in iter(stop.is_set, True)])
busy.start()  # another thread running Python, as a candidate's could: no loan while it lives
harness.loan.lending = True
with harness.compiling():
    pass
stop.set()
busy.join()
quiet_with_thread = not select.select([from_worker_r], [], [], 0)[0]

with lane.shared() as hold:
    side = threading.Thread(target=evaluator_side, args=(hold,))
    side.start()
    harness.loan.own_threads.add(side.ident)  # it plays the evaluator, another process in kevo
    harness.loan.lending = True
    with harness.compiling():
        during = lane._readers  # lent out while this runs
    side.join(30)
    after = lane._readers
    harness.loan.lending = False
    with harness.compiling():  # a step that does not lend: no messages
        pass
print(json.dumps({"seen": seen, "during": during, "after": after, "lent_s": harness.loan.lent_s,
                  "quiet_with_thread": quiet_with_thread,
                  "lane_lent": walls["lane lent"]}))
import shutil
shutil.rmtree(harness.tmpdir)  # a worker's own is inside its scratch directory, which kevo removes
"""


def test_the_worker_and_the_evaluator_pass_a_loan_back_and_forth(tmp_path):
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    done = subprocess.run([sys.executable, "-c", HARNESS_SCRIPT], cwd=root, capture_output=True, text=True,
                          env={**os.environ, "TMPDIR": str(tmp_path)},
                          timeout=120)  # a loan nobody answers would hang it
    assert [p.name for p in tmp_path.glob("kevo-*")] == []  # nothing of kevo's left in the temp folder
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["seen"] == [["compiling", "n1", 1], ["compiled", "n1", 0]]  # the step's nonce on both
    assert seen["during"] == 0 and seen["after"] == 1  # lent while compiling, held again after
    assert seen["lent_s"] > 0 and seen["lane_lent"] > 0
    assert seen["quiet_with_thread"]  # no loan asked for while another thread ran Python



def test_a_candidate_cannot_open_a_loan_itself():
    """Triton's compile entry point is kevo's wrapper in the worker: a candidate calling it
    directly (screen off), to have the lane lent while it does device work, is refused."""
    from fitness import EvalSettings, Evaluator, Status
    from tests.conftest import PROBLEMS

    seed = (PROBLEMS / "elementwise" / "seed.py").read_text()
    enter = ("        try:\n            triton.runtime.jit.JITFunction._do_compile(None)\n"
             "        except Exception:\n            pass\n")
    source = seed.replace("        out = torch.empty_like(x)\n", enter + "        out = torch.empty_like(x)\n", 1)
    assert source != seed
    lane = TimingLane()
    with Evaluator(PROBLEMS / "elementwise" / "reference.py", platform="cpu",
                   shapes={"batch_size": 4, "dim": 100}, settings=EvalSettings(screen=False),
                   lane=lane) as evaluator:
        result = evaluator.evaluate(source)
    assert result.status is Status.FORBIDDEN, result.reason
    assert "_do_compile" in result.reason
    assert lane._readers == 0 and not lane._writer



class _Watched(TimingLane):
    """A lane that knows how deep it is held, shared or exclusive, at any moment (this thread's view)."""

    def __init__(self) -> None:
        super().__init__()
        self.depth = 0

    @contextlib.contextmanager
    def shared(self):
        with super().shared() as hold:
            self.depth += 1
            try:
                yield hold
            finally:
                self.depth -= 1

    @contextlib.contextmanager
    def exclusive(self):
        with super().exclusive() as held:
            self.depth += 1
            try:
                yield held
            finally:
                self.depth -= 1


def test_the_evaluators_device_work_runs_inside_the_lane(monkeypatch):
    """The reference's preparation and every comparison are device work: a slot doing them while
    another slot's window runs would charge them to that candidate (on the H200, comparisons of
    multi-GB outputs ran outside the lane before)."""
    from fitness import Evaluator, Status
    from fitness.judge import evaluator as evaluator_module

    lane = _Watched()
    seen = {"prepare": [], "compare": []}
    real_prepared, real_compare = evaluator_module.PreparedProblem, evaluator_module.compare

    def prepared(*args, **kwargs):
        seen["prepare"].append(lane.depth)
        return real_prepared(*args, **kwargs)

    def compare(*args, **kwargs):
        seen["compare"].append(lane.depth)
        return real_compare(*args, **kwargs)

    monkeypatch.setattr(evaluator_module, "PreparedProblem", prepared)
    monkeypatch.setattr(evaluator_module, "compare", compare)
    softmax = Path(__file__).resolve().parents[1] / "problems" / "softmax"
    with Evaluator(softmax / "reference.py", platform="cpu", shapes={"batch_size": 4, "dim": 64},
                   lane=lane) as evaluator:
        result = evaluator.evaluate((softmax / "seed.py").read_text())
    assert result.status is Status.ACCEPTED, result.reason
    assert seen["prepare"] == [1]
    assert len(seen["compare"]) >= result.checks > 5 and all(depth >= 1 for depth in seen["compare"]), seen


def test_the_devices_peaks_are_measured_alone_on_it_once(monkeypatch, tmp_path):
    """Peaks measured beside another slot's checks would read low, and the cache would keep them:
    the first evaluator on a device measures them with the lane to itself; later ones read the cache."""
    from fitness import Evaluator
    from fitness.judge import floor as floor_module
    from platforms import peaks

    monkeypatch.setenv(peaks.CACHE_ENV, str(tmp_path / "peaks.json"))
    lane, depths = _Watched(), []
    real = floor_module.achievable_peaks

    def watched(platform, **kwargs):
        depths.append(lane.depth)
        return real(platform, **kwargs)

    monkeypatch.setattr(floor_module, "achievable_peaks", watched)
    softmax = Path(__file__).resolve().parents[1] / "problems" / "softmax"
    for _ in range(2):
        with Evaluator(softmax / "reference.py", platform="cpu", shapes={"batch_size": 4, "dim": 64}, lane=lane):
            pass
    assert (tmp_path / "peaks.json").exists()
    # measured once, inside the exclusive lane; then read from the cache (by floor_for, inside the shared hold)
    assert depths[0] == 1 and len(depths) == 3, depths
    assert lane.timings == 1  # one exclusive hold: the measurement's (the second evaluator took none)


class SlowCompiler:
    """A worker that says it compiles, then answers nothing within any limit."""

    def __init__(self):
        self.waits, self.sent = [], []

    def alive(self):
        return True

    def send(self, message):
        self.sent.append(message)
        return "n1"

    def answer(self, nonce, timeout):
        from fitness.boundary.protocol import Compiling
        from fitness.boundary.sandbox import WorkerGone

        self.waits.append(timeout)
        if len(self.waits) == 1:
            return {**Compiling().to_wire(), "nonce": nonce}, []
        raise WorkerGone("timeout", f"no answer within {timeout:g} s; the worker was killed")

    def stop(self):
        pass


def test_a_kernel_that_compiles_past_its_budget_is_a_timeout_and_the_step_limit_stays_for_the_rest():
    """fitness.compile_timeout_s: once the worker says it compiles, the evaluator waits that long
    for it, not the step's whole timeout_s, and says what ran over."""
    import collections
    import types

    import pytest

    from fitness.boundary.protocol import Call
    from fitness.boundary.sandbox import WorkerGone
    from fitness.judge.channel import WorkerChannel
    from fitness.settings import EvalSettings

    settings = EvalSettings(timeout_s=300.0, compile_timeout_s=7.0)
    channel = WorkerChannel(types.SimpleNamespace(synchronize=lambda: None, name="cpu"), settings,
                            collections.Counter())
    worker = channel.worker = SlowCompiler()
    with NoLane().shared() as hold, pytest.raises(WorkerGone) as gone:
        channel.step(Call(101, [16], None, lend=True), interim=channel.lending(hold))
    assert worker.waits == [300.0, 7.0]  # the step's limit until the compile began, then the budget
    assert gone.value.status == "timeout"
    assert "compiling one kernel took more than 7 s" in gone.value.reason
    assert channel.worker is None  # discarded: the next step starts a new worker


def test_a_window_shares_the_lane_while_it_judges_and_takes_it_back_after_the_checks_that_came_in():
    lane = TimingLane()
    order: list[str] = []
    check_may_end = threading.Event()

    with lane.exclusive() as window:
        checker = threading.Thread(target=_hold_until, args=(lane.shared, "check", order, check_may_end),
                                   daemon=True)
        checker.start()
        time.sleep(0.05)
        assert order == []  # the timing holds the device to itself
        with window.sharing():  # a run judged: device work, but no timing
            deadline = time.monotonic() + 10
            while not order and time.monotonic() < deadline:
                time.sleep(0.001)
            assert order == ["check starts"]
            threading.Timer(0.1, check_may_end.set).start()
        # back only once the check that came in is over: the next timed run runs alone
        assert order == ["check starts", "check ends"]
        assert lane._writer and lane._readers == 0
    checker.join(10)
    assert lane.stats()["timings"] == 1 and not lane._writer


def test_only_the_exclusive_stretches_count_as_the_lane_busy():
    lane = TimingLane()
    with lane.exclusive() as window:
        time.sleep(0.05)
        with window.sharing():
            time.sleep(0.3)
        time.sleep(0.05)
    assert 0.09 <= lane.stats()["timing_s"] < 0.3
    with NoLane().exclusive() as alone, alone.sharing():  # an evaluator alone on its device: nothing to share
        pass
