"""The evaluator actor (evolve.dispatch.actor) in this process: its slots' workers, and the
workers it hands from one problem to the next."""

from __future__ import annotations

import dataclasses

import pytest

from tests.conftest import PROBLEMS

from evolve.dispatch.actor import EvaluatorActor, EvaluatorSpec
from fitness import EvalSettings, Status


def test_an_actor_starts_every_slots_worker_when_it_prepares_a_problem():
    actor = EvaluatorActor(slots=2)  # the Ray actor's class, called in this process
    spec = EvaluatorSpec(str(PROBLEMS / "elementwise" / "reference.py"), platform="cpu",
                         shapes={"batch_size": 4, "dim": 100})
    try:
        info = actor.prepare(spec)
        assert info["platform"] == "cpu"
        built = actor.evaluators.all[spec]
        assert len(built) == 2 and sorted(map(id, actor.evaluators.free[spec])) == sorted(map(id, built))
        assert all(e.channel.worker is not None and e.channel.worker.alive() for e in built)  # ready before evaluating
        assert built[0].prepared is built[1].prepared  # one prepared problem for both slots
    finally:
        actor.close()


def test_the_wait_for_the_memory_plan_s_room_is_in_the_verdict_and_its_limit_in_the_info():
    """Two slots, the memory plan's limit at 1: the second evaluation waits for the first's room, and
    its verdict says for how long (a run's report counts it); ``prepare`` says how many run at once."""
    import threading

    actor = EvaluatorActor(slots=2)
    spec = EvaluatorSpec(str(PROBLEMS / "elementwise" / "reference.py"), platform="cpu",
                         shapes={"batch_size": 4, "dim": 100})
    source = (PROBLEMS / "elementwise" / "seed.py").read_text()
    try:
        info = actor.prepare(spec)
        assert info["at_once"] == 2 and info["footprint_gb"] >= 0
        actor.admissions.limit[spec] = 1  # as a plan that fits one evaluation would set it
        results = []
        threads = [threading.Thread(target=lambda: results.append(actor.evaluate(spec, source)[1])) for _ in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert [r.status for r in results] == [Status.ACCEPTED] * 2
        first, second = sorted(results, key=lambda r: r.walls_s["wait: memory plan"])
        assert first.walls_s["wait: memory plan"] < 0.5 * first.walls_s["total"]
        assert second.walls_s["wait: memory plan"] >= 0.5 * first.walls_s["total"]  # it waited for the first
        # each verdict says when it held its place: the second's began once the first's ended
        assert first.admitted_s[0] < first.admitted_s[1] <= second.admitted_s[0] < second.admitted_s[1]
        assert second.admitted_s[1] - second.admitted_s[0] >= second.walls_s["total"]
        assert all(r.walls_s["wait: an evaluator"] <= r.walls_s["wait: memory plan"] for r in results)
    finally:
        actor.close()


def test_the_next_problem_s_evaluators_take_over_the_last_one_s_workers():
    actor = EvaluatorActor(slots=2)
    first = EvaluatorSpec(str(PROBLEMS / "elementwise" / "reference.py"), platform="cpu",
                          shapes={"batch_size": 4, "dim": 100})
    second = EvaluatorSpec(str(PROBLEMS / "softmax" / "reference.py"), platform="cpu",
                           shapes={"batch_size": 4, "dim": 100})
    try:
        actor.prepare(first)
        pids = sorted(e.channel.worker.process.pid for e in actor.evaluators.all[first])
        assert actor.evaluate(first, (PROBLEMS / "elementwise" / "seed.py").read_text())[1].status is Status.ACCEPTED
        actor.prepare(second)
        assert first not in actor.evaluators.all  # forgotten, its evaluators closed
        built = actor.evaluators.all[second]
        assert sorted(e.channel.worker.process.pid for e in built) == pids  # the same processes, reset
        assert all(e.channel.served == 1 for e in built)  # judged others before: a crash is retried on a fresh one
        result = actor.evaluate(second, (PROBLEMS / "softmax" / "seed.py").read_text())[1]
        assert result.status is Status.ACCEPTED, result.reason
        # workers started otherwise (an address-space cap here) are not handed over
        third = dataclasses.replace(second, settings=EvalSettings(memory_limit_bytes=16 << 30))
        actor.prepare(third)
        fresh = sorted(e.channel.worker.process.pid for e in actor.evaluators.all[third])
        assert not set(fresh) & set(pids) and all(e.channel.served == 0 for e in actor.evaluators.all[third])
    finally:
        actor.close()
    assert actor.evaluators.spare == []


def test_out_of_memory_beside_another_problem_s_idle_evaluators_is_tried_again_without_them(monkeypatch):
    # A sweep with problems side by side keeps each problem's evaluators (their references, their
    # workers' memory). On the H200 a seed ran out of memory while timing beside another problem's
    # idle evaluators, and its problem failed. Those are closed now and the candidate tried again.
    from fitness import EvalResult, Evaluator

    actor = EvaluatorActor(slots=1, keep_problems=2)
    first = EvaluatorSpec(str(PROBLEMS / "elementwise" / "reference.py"), platform="cpu",
                          shapes={"batch_size": 4, "dim": 100})
    second = EvaluatorSpec(str(PROBLEMS / "softmax" / "reference.py"), platform="cpu",
                           shapes={"batch_size": 4, "dim": 100})
    evaluate, calls = Evaluator.evaluate, []

    def out_of_memory_once(self, source):
        calls.append(self.prepared.reference_path.parent.name)
        if len(calls) == 1:
            return EvalResult(Status.OUT_OF_MEMORY, "kevo's worker ran out of memory during time", platform="cpu")
        return evaluate(self, source)

    try:
        actor.prepare(first)
        actor.prepare(second)
        assert first in actor.evaluators.all and second in actor.evaluators.all  # both kept: side by side
        monkeypatch.setattr(Evaluator, "evaluate", out_of_memory_once)
        result = actor.evaluate(second, (PROBLEMS / "softmax" / "seed.py").read_text())[1]
        assert result.status is Status.ACCEPTED, result.reason
        assert calls == ["softmax", "softmax"]  # tried once more ...
        assert first not in actor.evaluators.all and second in actor.evaluators.all  # ... the idle one let go
        assert actor.admissions.limit[second] == 1  # nothing else was in flight: the limit stays
        # the first problem comes back on its next candidate, prepared again
        again = actor.evaluate(first, (PROBLEMS / "elementwise" / "seed.py").read_text())[1]
        assert again.status is Status.ACCEPTED, again.reason
    finally:
        actor.close()


def test_an_actor_closing_stops_a_profile_in_flight_and_waits_for_it():
    """The driver kills an actor right after its close: a profile still running then would leave
    its tool running and its temporary folder behind."""
    import threading
    import time

    from platforms.profiling import runner

    class Profiling:  # an evaluator whose profile runs a tool that takes long
        def profile(self, source, runtime_ms, room=None):
            try:
                runner.run_tool(["sleep", "60"], None, 120.0)
            except runner.ProfilerFailure as failure:
                return {"reason": failure.reason}
            return {"reason": ""}

        def close(self):
            pass

    actor = EvaluatorActor(slots=1)
    spec = EvaluatorSpec(str(PROBLEMS / "elementwise" / "reference.py"), platform="cpu")
    actor.evaluators.all[spec] = [Profiling()]
    records = []
    thread = threading.Thread(target=lambda: records.append(actor.profile(spec, "source", None)))
    thread.start()
    deadline = time.monotonic() + 30
    while not runner._running:
        assert time.monotonic() < deadline and thread.is_alive()
        time.sleep(0.05)
    start = time.monotonic()
    actor.close()
    assert time.monotonic() - start < 5 and not thread.is_alive()
    assert records == [{"reason": "sleep was stopped: the work it profiled for has ended"}]


def _gb(n: float) -> int:
    return int(n * (1 << 30))


def test_too_little_free_on_a_device_that_would_fit_it_is_no_room_now_not_the_problem_s_fault(monkeypatch):
    from platforms.cpu import CpuPlatform

    from fitness import Evaluator, NoRoomNow, ProblemError

    reference = str(PROBLEMS / "elementwise" / "reference.py")
    monkeypatch.setattr(CpuPlatform, "free_memory", lambda self: 1 << 20)
    monkeypatch.setattr(CpuPlatform, "total_memory", lambda self: _gb(100))
    with pytest.raises(NoRoomNow, match=r"only 0.0 GB is free .*; the device has 100.0 GB: other work holds the rest now$"):
        Evaluator(reference, platform="cpu", shapes={"batch_size": 64, "dim": 4096})
    monkeypatch.setattr(CpuPlatform, "total_memory", lambda self: 1 << 20)  # it would not fit an empty device
    with pytest.raises(ProblemError) as refused:
        Evaluator(reference, platform="cpu", shapes={"batch_size": 64, "dim": 4096})
    assert not isinstance(refused.value, NoRoomNow)


def test_no_room_now_gives_back_idle_problems_then_is_an_out_of_memory_verdict_and_not_a_refusal(monkeypatch):
    # On the H200, eight problems side by side: a problem whose evaluators had been given back for
    # another's room found 3.6 GB free when its next candidate came, and the ProblemError that
    # building them again raised stopped the sweep's shared dispatcher, and every run with it.
    from platforms.cpu import CpuPlatform

    actor = EvaluatorActor(slots=1, keep_problems=2)
    first = EvaluatorSpec(str(PROBLEMS / "elementwise" / "reference.py"), platform="cpu",
                          shapes={"batch_size": 4, "dim": 100})
    second = EvaluatorSpec(str(PROBLEMS / "softmax" / "reference.py"), platform="cpu",
                           shapes={"batch_size": 4, "dim": 100})
    state = {"crowded": False, "free_while_crowded": 1 << 10}

    def free(self):  # while crowded, nothing is free as long as the first problem's evaluators are kept
        if state["crowded"] and (first in actor.evaluators.all or state["free_while_crowded"] is not None):
            return state["free_while_crowded"] or (1 << 10)
        return _gb(64)

    monkeypatch.setattr(CpuPlatform, "free_memory", free)
    monkeypatch.setattr(CpuPlatform, "total_memory", lambda self: _gb(100))
    softmax = (PROBLEMS / "softmax" / "seed.py").read_text()
    try:
        actor.prepare(first)
        state.update(crowded=True, free_while_crowded=None)  # room comes once the first problem is let go
        result = actor.evaluate(second, softmax)[1]
        assert result.status is Status.ACCEPTED, result.reason
        assert first not in actor.evaluators.all
        # no room at all: a verdict, and the problem is not refused for good
        actor.evaluators.forget([second])
        actor.evaluators.prepared.pop(second, None)
        state.update(free_while_crowded=1 << 10)
        result = actor.evaluate(second, softmax)[1]
        assert result.status is Status.OUT_OF_MEMORY and result.reason.startswith("not evaluated: ")
        assert "other work holds the rest" in result.reason and second not in actor.evaluators.errors
        state.update(crowded=False)
        assert actor.evaluate(second, softmax)[1].status is Status.ACCEPTED
    finally:
        actor.close()


def test_admission_under_the_memory_plan_s_limit_goes_in_the_order_asked():
    """Six slots, room for one: the evaluations waiting enter oldest first (woken together, none
    passes an older one), so a candidate is not left waiting while later ones go by."""
    import threading
    import time

    actor = EvaluatorActor(slots=6)
    spec = "a problem"  # any key: the limit is per problem
    actor.admissions.limit[spec] = 1
    order, release = [], threading.Event()

    def hold():
        with actor.admissions.admitted(spec):
            release.wait(10)

    def wait_turn(name):
        with actor.admissions.admitted(spec):
            order.append(name)
            time.sleep(0.01)

    first = threading.Thread(target=hold)
    first.start()
    while actor.admissions.in_flight != 1:
        time.sleep(0.001)
    waiters = []
    for name in "abcde":
        waiters.append(threading.Thread(target=wait_turn, args=(name,)))
        waiters[-1].start()
        while len(actor.admissions.turns) != len(waiters):  # queued before the next asks
            time.sleep(0.001)
    release.set()
    for thread in [first, *waiters]:
        thread.join(10)
    assert order == list("abcde")
    assert actor.admissions.in_flight == 0 and not actor.admissions.turns
    actor.close()


def test_problems_side_by_side_enter_where_their_footprints_fit_together():
    """Each plan's count is of its own problem's evaluations: side by side, a 45 GB evaluation of
    one problem and 60 GB of another's under room for 100 would both have entered, and one of them
    run out of memory (on an H100, 34_InstanceNorm beside 38 and 89). The footprints in flight,
    whatever their problem, are counted against the room; alone, an evaluation always enters."""
    import threading
    import time

    actor = EvaluatorActor(slots=6)
    big, small = "a large problem", "a smaller problem"
    actor.admissions.limit.update({big: 3, small: 3})
    actor.admissions.need.update({big: 60, small: 45})
    actor.admissions.room.update({big: 100, small: 100})
    entered, release = [], threading.Event()

    def evaluate(spec, name, hold=False):
        with actor.admissions.admitted(spec):
            entered.append(name)
            if hold:
                release.wait(10)

    first = threading.Thread(target=evaluate, args=(small, "small 1", True))
    first.start()
    while actor.admissions.in_flight != 1:
        time.sleep(0.001)
    assert actor.admissions.bytes_in_flight == 45
    second = threading.Thread(target=evaluate, args=(small, "small 2", True))
    second.start()
    while actor.admissions.in_flight != 2:  # 90 of 100: its own problem's plan lets it in
        time.sleep(0.001)
    third = threading.Thread(target=evaluate, args=(big, "big"))
    third.start()
    time.sleep(0.2)
    assert entered == ["small 1", "small 2"]  # 90 + 60 > 100, though its own count (3) has room
    release.set()
    for thread in (first, second, third):
        thread.join(10)
    assert entered[-1] == "big" and actor.admissions.in_flight == 0 and actor.admissions.bytes_in_flight == 0
    actor.admissions.room[big] = 10  # less room than one evaluation: alone, it still enters
    evaluate(big, "big alone")
    assert entered[-1] == "big alone"
    actor.close()


def test_one_that_runs_out_of_memory_after_others_joined_it_is_tried_again_alone(monkeypatch):
    """On the H200 at real size a candidate that started first ran out of memory once four more had
    joined it (another process held 92.6 GB), and its verdict stood: only those that found others in
    flight when they started were tried again. Any that had company while it ran is now."""
    import threading

    from fitness import EvalResult, Evaluator

    actor = EvaluatorActor(slots=2)
    spec = EvaluatorSpec(str(PROBLEMS / "elementwise" / "reference.py"), platform="cpu",
                         shapes={"batch_size": 4, "dim": 100})
    source = (PROBLEMS / "elementwise" / "seed.py").read_text()
    evaluate, calls, joined, done = Evaluator.evaluate, [], threading.Event(), threading.Event()

    def first_runs_out_once_the_second_joins(self, source):
        calls.append(threading.current_thread().name)
        if len(calls) == 1:  # the first: alone when it starts, out of memory once the second is in
            joined.wait(10)
            return EvalResult(Status.OUT_OF_MEMORY, "kevo's worker ran out of memory during call", platform="cpu")
        if len(calls) == 2:
            joined.set()
            done.wait(10)  # still in flight while the first ends
        return evaluate(self, source)

    try:
        actor.prepare(spec)
        monkeypatch.setattr(Evaluator, "evaluate", first_runs_out_once_the_second_joins)
        results = {}
        first = threading.Thread(target=lambda: results.setdefault("first", actor.evaluate(spec, source)[1]),
                                 name="first")
        first.start()
        while not calls:
            threading.Event().wait(0.01)
        second = threading.Thread(target=lambda: results.setdefault("second", actor.evaluate(spec, source)[1]),
                                  name="second")
        second.start()
        while actor.admissions.in_flight != 1 or len(calls) < 2:  # the first ended (and waits to go alone)
            threading.Event().wait(0.01)
        done.set()
        first.join(30)
        second.join(30)
        assert results["first"].status is Status.ACCEPTED, results["first"].reason  # tried again, alone
        assert "out of memory: first try" in results["first"].walls_s
        assert calls == ["first", "second", "first"]
        assert actor.admissions.limit[spec] == 1  # two were in flight when it ran out: one at once from now on
    finally:
        actor.close()
