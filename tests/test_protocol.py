"""The judge<->worker protocol: typed messages, and a worker's forged or malformed reply is
``forbidden``, never an exception of kevo."""

from __future__ import annotations

import math
import statistics

import pytest

from tests.conftest import PROBLEMS

from fitness import Status
from fitness.boundary.messages import ProtocolViolation
from fitness.boundary.protocol import (MAX_REASON, Call, Compiled, Compiling, Continue, Environment, Failed, Info, Load,
                                       Ok, Outputs, Ping, Refused, Reset, Stop, Time, Timed, TimedRun, Warm, Warmed,
                                       read_answer, read_reply, read_step)
from fitness.boundary.sandbox import WorkerProcess
from fitness.judge.timing_checks import OVERHEAD_FACTOR, OVERHEAD_SLACK_MS
from fitness.problems.probes import Probe

SEED = (PROBLEMS / "elementwise" / "seed.py").read_text()
TIMED = Timed([1.0, 2.0, 1.5], [1.2, 2.1, 1.6], 0.01, None, [0, 2], {"prepare": 0.1})

# Each step with a reply of each kind it may get.
EXCHANGES = [
    (Warm("src", "/p.py", "x = 1", [{"dim": 4}, {"dim": 9}], 7, "float16"),
     [Warmed(1), Warmed(0, compile_s=0.5), Compiling(), Compiled(), Refused(Status.FORBIDDEN, "z", fatal=True)]),
    (Load("src", "/p.py", "x = 1", {"dim": 4}, 7, None, lend=True), [Ok(), Compiling(), Compiled(), Refused(Status.WRONG, "x")]),
    (Call(3, [16, 8], Probe(signs=True, factor=150.0), lend=True),
     [Outputs(), Outputs(compile_s=1.25), Compiling(), Compiled()]),
    (Time(1, 2, 3, [16], {"warmup_ms": 0.0, "min_runs": 3, "device_trace": True}),
     [TIMED, TimedRun(2, 3), Refused(Status.MUTATED_INPUT, "y", fatal=True, harness=True)]),
    (Ping(), [Ok()]),
    (Reset(), [Ok()]),
    (Info(), [Environment(["PATH"])]),
]


@pytest.mark.parametrize("step, replies", EXCHANGES, ids=lambda x: type(x).__name__ if not isinstance(x, list) else "")
def test_every_message_reads_back_as_it_was_sent(step, replies):
    wire = {**step.to_wire(), "nonce": "ab12"}  # the channel's own fields are not the message's
    assert read_step(wire) == step
    for reply in replies:
        tensors = [object()] if reply.TENSORS else []
        assert read_reply(step, {**reply.to_wire(), "nonce": "ab12", "tensors": []}, tensors) == reply
    for answer in (Continue(), Stop()):
        assert read_answer(answer.to_wire()) == answer
    assert Failed("trace", fatal=True).to_wire() == {"ok": False, "status": "internal_error", "reason": "trace",
                                                     "fatal": True}


def _timed(**changes) -> dict:
    return {**TIMED.to_wire(), **changes}


@pytest.mark.parametrize("step, data, tensors", [
    (Load("s", "p", "", {}, 0), [], []),  # not an object
    (Load("s", "p", "", {}, 0), {"ok": False, "status": "accepted", "reason": "", "fatal": False, "harness": False}, []),
    (Load("s", "p", "", {}, 0), {"ok": False, "status": "internal_error ", "reason": "", "fatal": False,
                             "harness": False}, []),
    (Load("s", "p", "", {}, 0), {"ok": 1}, []),  # 1 is not true
    (Load("s", "p", "", {}, 0), {"ok": True, "extra": 1}, []),
    (Load("s", "p", "", {}, 0), {"ok": True}, [object()]),  # tensors with a load
    (Load("s", "p", "", {}, 0, lend=False), {"ok": True, "interim": "compiling"}, []),  # no loan in this step
    (Call(0, []), {"ok": True, "interim": ["compiling"]}, []),
    (Call(0, [], lend=True), {"ok": True, "interim": "timed_run", "run": 0, "seed": 0}, []),
    (Call(0, []), {"ok": False, "status": "wrong", "reason": "x" * (MAX_REASON + 1), "fatal": False,
                   "harness": False}, []),
    (Call(0, []), {"ok": False, "status": "wrong", "reason": "x", "fatal": 0, "harness": False}, []),
    (Time(0, 0, 1, [], {}), _timed(runs_ms=[]), []),
    (Time(0, 0, 1, [], {}), _timed(runs_ms=[1.0, math.nan, 1.0]), []),
    (Time(0, 0, 1, [], {}), _timed(runs_ms=[1.0, -1.0, 1.0]), []),
    (Time(0, 0, 1, [], {}), _timed(wall_ms=[1.0, math.inf, 1.0]), []),
    (Time(0, 0, 1, [], {}), _timed(wall_ms=[1.0]), []),
    (Time(0, 0, 1, [], {}), _timed(overhead_ms="0.1"), []),
    (Time(0, 0, 1, [], {}), _timed(device_ms=[1.0]), []),
    (Time(0, 0, 1, [], {}), _timed(checked=[2, 0]), []),
    (Time(0, 0, 1, [], {}), _timed(checked=[0, 3]), []),
    (Time(0, 0, 1, [], {}), _timed(checked=[True]), []),
    (Time(0, 0, 1, [], {}), _timed(phases_s={"prepare": -1.0}), []),
    (Time(0, 0, 1, [], {}), _timed(phases_s={1: 1.0}), []),
    (Time(0, 0, 1, [], {}), _timed(compile_s=-0.5), []),
    (Call(0, []), {"ok": True, "compile_s": math.nan}, [object()]),
    (Call(0, []), {"ok": True}, [object()]),  # an honest worker always says how long it compiled
    (Time(0, 0, 1, [], {}), _timed(), [object()]),
    (Time(0, 0, 1, [], {}), {"ok": True, "interim": "timed_run", "run": -1, "seed": 0}, []),
    (Time(0, 0, 1, [], {}), {"ok": True, "interim": "timed_run", "run": 0, "seed": 1.0}, []),
    (Time(0, 0, 1, [], {}), {"ok": True, "interim": "compiling"}, []),
    (Info(), {"ok": True, "env": ["PATH", 3]}, []),
])
def test_a_malformed_reply_is_a_protocol_violation(step, data, tensors):
    with pytest.raises(ProtocolViolation):
        read_reply(step, data, tensors)


ODD_VALUES = [None, True, 0, -1, 2**70, 1.5, math.nan, -math.inf, "", "x", [], [None], [math.nan], {}, {"a": None}]


@pytest.mark.parametrize("step, replies", EXCHANGES, ids=lambda x: type(x).__name__ if not isinstance(x, list) else "")
def test_any_field_of_any_reply_changed_reads_as_a_message_or_a_violation(step, replies):
    """Every field of every reply, set to each odd value: a message (typed as declared) or a
    ``ProtocolViolation``, never another exception."""
    for reply in replies:
        wire = reply.to_wire()
        for name in [*wire, "unknown"]:
            for value in ODD_VALUES:
                try:
                    read = read_reply(step, {**wire, name: value}, [])
                except ProtocolViolation:
                    continue
                assert type(read) is type(reply), (name, value, read)


@pytest.mark.parametrize("forge", [
    # a refusal that claims acceptance, in place of the timings
    lambda reply, tensors: ({"ok": False, "status": "accepted", "reason": "", "fatal": False, "harness": False,
                             "nonce": reply["nonce"]}, tensors) if "runs_ms" in reply else (reply, tensors),
    # a timer that reports negative times
    lambda reply, tensors: ({**reply, "runs_ms": [-1.0] * len(reply["runs_ms"])}, tensors)
    if "runs_ms" in reply else (reply, tensors),
    # tensors with the timings, which have none
    lambda reply, tensors: (reply, [object()]) if "runs_ms" in reply else (reply, tensors),
], ids=["refusal_claims_acceptance", "negative_times", "tensors_with_timings"])
def test_a_forged_reply_is_forbidden_and_ends_the_worker(evaluators, monkeypatch, forge):
    evaluator = evaluators.get("elementwise")
    original = WorkerProcess.answer
    monkeypatch.setattr(WorkerProcess, "answer", lambda self, nonce, timeout: forge(*original(self, nonce, timeout)))
    result = evaluator.evaluate(SEED)
    assert result.status is Status.FORBIDDEN, result.reason
    assert "broke the protocol" in result.reason
    assert evaluator.channel.worker is None  # killed: the next evaluation gets a fresh one


def test_a_forged_timer_overhead_is_bounded_by_the_judges_own(evaluators, monkeypatch):
    """``Timing.median_ms`` subtracts the timer's overhead (up to half the median where there is no
    device trace): a worker that reports a huge one would read up to 2x faster. The judge bounds it
    by its own measurement of the same protocol (``fitness.judge.timing_checks.trusted_timing``)."""
    evaluator = evaluators.get("elementwise")
    original = WorkerProcess.answer
    honest: list[float] = []

    def forge(self, nonce, timeout):
        reply, tensors = original(self, nonce, timeout)
        if "runs_ms" in reply:
            honest.extend(reply["runs_ms"])
            reply = {**reply, "overhead_ms": 1e3, "device_ms": None}
        return reply, tensors

    monkeypatch.setattr(WorkerProcess, "answer", forge)
    result = evaluator.evaluate(SEED)
    assert result.accepted, result.reason
    judge = evaluator.prepared.overhead_ms
    assert judge is not None and judge < 1.0  # measured in the judge's own process, as the reference was timed
    median = statistics.median(honest)
    assert result.runtime_ms >= median - OVERHEAD_FACTOR * judge - OVERHEAD_SLACK_MS - 1e-9
    assert result.runtime_ms > 0.9 * median  # not the half a forged overhead would have made it


def test_compiles_are_timed_into_the_step_and_the_evaluators_breakdown():
    """The worker's compile entry point adds its seconds to the harness's count (the evaluator
    shows them as the ``compile`` part of an evaluation's ``walls_s``)."""
    import contextlib
    import time

    from fitness.worker.instrument import instrument_compiles

    class Jit:
        def _do_compile(self, key):
            time.sleep(0.05)
            return key

    class Harness:
        compile_s = 0.0
        loans = 0

        @contextlib.contextmanager
        def compiling(self):
            self.loans += 1
            yield

    harness = Harness()
    instrument_compiles(harness, Jit)
    assert Jit()._do_compile("k") == "k" and Jit()._do_compile("j") == "j"
    assert harness.loans == 2 and 0.1 <= harness.compile_s < 1.0


def test_an_evaluation_that_waits_for_a_new_worker_says_so():
    """The seconds a new worker takes to start (the first, or one after a crash or running out of
    memory) are the ``worker start`` part of that evaluation's ``walls_s``; a worker started ahead
    (``start_worker``) costs the evaluation nothing."""
    from fitness import Evaluator

    shapes = {"batch_size": 4, "dim": 100}
    with Evaluator(PROBLEMS / "elementwise" / "reference.py", platform="cpu", shapes=shapes) as evaluator:
        first = evaluator.evaluate(SEED)
        assert first.accepted and first.walls_s["worker start"] > 0.05
        assert "worker start" not in evaluator.evaluate(SEED).walls_s  # the same worker
        evaluator.channel.discard()  # as after a crash
        again = evaluator.evaluate(SEED)
        assert again.accepted and again.walls_s["worker start"] > 0.05
    with Evaluator(PROBLEMS / "elementwise" / "reference.py", platform="cpu", shapes=shapes) as evaluator:
        evaluator.start_worker()
        assert "worker start" not in evaluator.evaluate(SEED).walls_s
