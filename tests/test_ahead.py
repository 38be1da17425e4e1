"""A candidate's kernels compiled before its evaluation holds device memory (``fitness.judge.ahead``): the
warm step runs it on ``meta`` apart from its evaluation, decides nothing the evaluation would not,
and where memory binds the actor lets it run beside the evaluations on the device."""

from __future__ import annotations

import logging
import sys
import threading
import time

from tests.conftest import PROBLEMS
from tests.test_judge_memory import _all_at_once, _Crowded, _Prepared

from evolve.dispatch.actor import EvaluatorActor, EvaluatorSpec
from fitness import EvalResult, EvalSettings, Evaluator, Status
from fitness.boundary.protocol import Warm
from fitness.judge.ahead import compile_ahead

ELEMENTWISE = PROBLEMS / "elementwise" / "reference.py"
SEED = (PROBLEMS / "elementwise" / "seed.py").read_text()
SHAPES = {"batch_size": 4, "dim": 100}

# The seed keeping, at module level, the devices it ran on, and failing once it ran on ``meta``: a warm
# step that shared the evaluation's module would make its evaluation fail.
REMEMBERING = SEED.replace("class ModelNew(", "_DEVICES = []\n\n\nclass ModelNew(", 1).replace(
    "        out = torch.empty_like(x)\n",
    "        if _DEVICES and _DEVICES[0] == 'meta':\n            raise RuntimeError('ran on meta before')\n"
    "        _DEVICES.append(x.device.type)\n        out = torch.empty_like(x)\n", 1)


def test_a_warm_step_goes_before_the_evaluation_and_its_time_is_kept_apart():
    with Evaluator(ELEMENTWISE, platform="cpu", shapes=SHAPES) as evaluator:
        assert compile_ahead(evaluator, SEED) is None  # no verdict: the evaluation goes on
        assert evaluator.ahead["ahead"] > 0 and "ahead: step warm" in evaluator.ahead
        result = evaluator.evaluate(SEED)
        assert result.status is Status.ACCEPTED, result.reason
        assert result.walls_s["ahead"] > 0 and "step load" in result.walls_s and "ahead: step warm" in result.walls_s
        assert "ahead" not in evaluator.evaluate(SEED).walls_s  # the next evaluation had none


def test_what_a_candidate_keeps_at_module_level_in_a_warm_step_never_reaches_its_evaluation():
    """The warm step imports the candidate as a module of its own: a buffer the candidate keeps at
    module level is on ``meta`` there, and the evaluation's import starts without it."""
    assert "_DEVICES.append" in REMEMBERING
    source = REMEMBERING
    with Evaluator(ELEMENTWISE, platform="cpu", shapes=SHAPES, held_out=[]) as evaluator:
        assert compile_ahead(evaluator, source) is None
        result = evaluator.evaluate(source)
    assert result.status is Status.ACCEPTED, result.reason


def test_a_candidate_the_guard_refuses_in_its_warm_step_is_forbidden_there():
    source = SEED.replace("    def forward(self, ", "    def forward(self, *args):\n"
                          "        import socket\n        socket.socket()\n        return self.run_kernel(*args)\n\n"
                          "    def run_kernel(self, ", 1)
    settings = EvalSettings(screen=False)  # past the static screen: the guard's own refusal, at run time
    with Evaluator(ELEMENTWISE, platform="cpu", shapes=SHAPES, held_out=[], settings=settings) as evaluator:
        verdict = compile_ahead(evaluator, source)
        assert verdict is not None and verdict.status is Status.FORBIDDEN, verdict
        assert verdict.walls_s["ahead"] > 0 and evaluator.ahead == {}


def test_a_candidate_the_screen_refuses_runs_nowhere_before_its_evaluation():
    source = SEED.replace("import torch\n", "import torch\nimport subprocess\n", 1)
    with Evaluator(ELEMENTWISE, platform="cpu", shapes=SHAPES, held_out=[]) as evaluator:
        sent: list = []
        real = evaluator.channel.step
        evaluator.channel.step = lambda step, *a, **k: sent.append(type(step)) or real(step, *a, **k)
        assert compile_ahead(evaluator, source) is None and evaluator.ahead == {}
        assert evaluator.evaluate(source).status is Status.FORBIDDEN
    assert Warm not in sent


def test_a_candidate_that_cannot_run_on_meta_is_judged_as_before(caplog):
    """A candidate that reads a value of its inputs ends its warm step; its evaluation compiles."""
    source = SEED.replace("    def forward(self, ", "    def forward(self, *args):\n"
                          "        assert args[0].abs().max().item() >= 0\n        return self.run_kernel(*args)\n\n"
                          "    def run_kernel(self, ", 1)
    with Evaluator(ELEMENTWISE, platform="cpu", shapes=SHAPES, held_out=[]) as evaluator:
        with caplog.at_level(logging.INFO, logger="fitness.judge.ahead"):
            assert compile_ahead(evaluator, source) is None
        assert "compiling ahead stopped after 0 of 1 shape(s)" in caplog.text  # and says why
        warmed = evaluator.evaluate(source)
    with Evaluator(ELEMENTWISE, platform="cpu", shapes=SHAPES, held_out=[]) as evaluator:
        alone = evaluator.evaluate(source)
    assert warmed.status is alone.status, (warmed.reason, alone.reason)


def test_in_a_warm_step_a_launch_compiles_and_runs_nothing():
    from fitness.worker.instrument import AheadStop, instrument_autotuners, instrument_launches

    calls = []

    class Jit:
        def run(self, *args, grid=None, warmup=False, **kwargs):
            calls.append(("jit", warmup))
            assert sys.getprofile() is None  # Triton's compile runs without the guard's call profile

    class Interpreted:
        def run(self, *args, **kwargs):
            calls.append(("interpreted", kwargs.get("warmup")))

    class Autotuner:
        def run(self, *args, **kwargs):
            calls.append(("autotuner", None))

    class Harness:
        dry, launches, trace = True, 0, None

    harness = Harness()
    instrument_launches(harness, Jit, Interpreted)
    instrument_autotuners(harness, Autotuner)
    sys.setprofile(lambda *a: None)  # the guard's, as in a checked call
    try:
        Jit().run(grid=(1,), warmup=False)
    finally:
        sys.setprofile(None)
    assert Interpreted().run(grid=(1,)) is None
    try:
        Autotuner().run(grid=(1,))
    except AheadStop:
        pass
    else:
        raise AssertionError("an autotuner in a warm step must end it")
    assert calls == [("jit", True)] and harness.launches == 0  # compiled only; counted as no launch
    harness.dry = False
    Jit().run(grid=(1,), warmup=False)
    Interpreted().run(grid=(1,))
    Autotuner().run()
    assert calls[1:] == [("jit", False), ("interpreted", None), ("autotuner", None)] and harness.launches == 2


def _state(**more) -> dict:
    return {"lock": threading.Lock(), "running": 0, "most": 0, "tried": set(), "built": [], "evaluations": [], **more}


class _Compiling(_Crowded):
    """Where memory binds: the plan lets one run, and the device has room beside it for one more worker."""

    def __init__(self, state: dict) -> None:
        super().__init__(state)
        platform = type("_Gpu", (), {"free_memory": staticmethod(lambda: 10 << 30), "compiles_ahead": True,
                                     "process_overhead_bytes": 3 << 29})()  # 1.5 GB
        self.prepared = type("_OneFits", (_Prepared,), {"slots_that_fit": lambda self, wanted: 1,
                                                        "footprint": lambda self: 8 << 30, "platform": platform})()
        state["built"].append(self)

    def evaluate(self, source: str) -> EvalResult:
        started = time.monotonic()
        try:
            time.sleep(0.1)
            return super().evaluate(source)
        finally:
            self.state["evaluations"].append((started, time.monotonic()))


def test_where_memory_binds_candidates_compile_ahead_beside_the_evaluation_on_the_device(monkeypatch):
    """Six slots, one evaluation at a time by the plan (8 GB of 10), room for one more worker: a
    second evaluation takes an evaluator and compiles ahead while the first holds the device,
    no more than two evaluators are built, and the device still has one evaluation at a time."""
    import evolve.dispatch.actor as actor_module

    state = _state(ahead=[], compiles=[])

    def ahead(evaluator, source):
        started = time.monotonic()
        time.sleep(0.1)
        state["ahead"].append(source)
        state["compiles"].append((started, time.monotonic()))

    monkeypatch.setattr(actor_module, "compile_ahead", ahead)
    monkeypatch.setattr(EvaluatorSpec, "build", lambda self, lane=None, prepared=None: _Compiling(state))
    actor, spec = EvaluatorActor(slots=6), EvaluatorSpec("r.py")
    results = _all_at_once(actor, spec, [f"candidate {i}" for i in range(6)])
    assert len(results) == 6 and all(r.status is Status.ACCEPTED for r in results)
    assert actor.admissions.extra[spec] == 1 and sorted(state["ahead"]) == [f"candidate {i}" for i in range(6)]
    assert state["most"] == 1  # the plan's one at a time on the device
    assert len(state["built"]) == 2  # one evaluating, one compiling ahead
    beside = [c for c in state["compiles"] if any(c[0] < e[1] and e[0] < c[1] for e in state["evaluations"])]
    assert len(beside) >= 4  # compiles ran while another evaluation held the device (all but the first two)


def test_a_verdict_from_the_warm_step_is_the_evaluations_and_it_never_takes_the_device(monkeypatch):
    import evolve.dispatch.actor as actor_module

    state = _state()
    monkeypatch.setattr(actor_module, "compile_ahead",
                        lambda evaluator, source: EvalResult(Status.TIMEOUT, "compiling one kernel took more than 8 s"))
    monkeypatch.setattr(EvaluatorSpec, "build", lambda self, lane=None, prepared=None: _Compiling(state))
    actor, spec = EvaluatorActor(slots=6), EvaluatorSpec("r.py")
    _, result = actor.evaluate(spec, "slow to compile")
    assert result.status is Status.TIMEOUT and state["most"] == 0


def test_where_every_slot_fits_nothing_is_compiled_ahead(monkeypatch):
    import evolve.dispatch.actor as actor_module

    state = _state()
    monkeypatch.setattr(actor_module, "compile_ahead", lambda evaluator, source: state["tried"].add("ahead"))

    class _AllFit(_Compiling):
        def __init__(self, state: dict) -> None:
            super().__init__(state)
            self.prepared.slots_that_fit = lambda wanted: wanted

    monkeypatch.setattr(EvaluatorSpec, "build", lambda self, lane=None, prepared=None: _AllFit(state))
    actor, spec = EvaluatorActor(slots=2), EvaluatorSpec("r.py")
    assert all(r.status is Status.ACCEPTED for r in _all_at_once(actor, spec, ["a", "b"]))
    assert "ahead" not in state["tried"] and actor.admissions.extra[spec] == 0


def test_compiling_ahead_can_be_turned_off_in_the_config(monkeypatch, tmp_path):
    import evolve.dispatch.actor as actor_module
    from evolve.config import config_from_dict
    from evolve.dispatch.pool import eval_settings

    problem = {"reference": str(ELEMENTWISE), "seeds": [str(PROBLEMS / "elementwise" / "seed.py")]}
    assert eval_settings(config_from_dict({"problem": problem}, "test")).compile_ahead
    config = config_from_dict({"problem": problem, "fitness": {"compile_ahead": False}}, "test")
    settings = eval_settings(config)
    assert settings.compile_ahead is False

    state = _state()
    monkeypatch.setattr(actor_module, "compile_ahead", lambda evaluator, source: state["tried"].add("ahead"))
    monkeypatch.setattr(EvaluatorSpec, "build", lambda self, lane=None, prepared=None: _Compiling(state))
    actor, spec = EvaluatorActor(slots=6), EvaluatorSpec("r.py", settings=settings)
    assert all(r.status is Status.ACCEPTED for r in _all_at_once(actor, spec, ["a", "b", "c"]))
    assert "ahead" not in state["tried"] and actor.admissions.extra[spec] == 0 and len(state["built"]) == 1


def test_the_warm_step_compiles_at_the_held_out_shapes_its_evaluation_then_checks():
    """Each held-out shape may compile a specialisation of its own: the warm step draws the held-out
    variants, warms the main shapes and then those, and the evaluation checks exactly those."""
    held_out = [{"batch_size": 3, "dim": 70}, {"batch_size": 5, "dim": 33}, {"batch_size": 2, "dim": 17}]
    with Evaluator(ELEMENTWISE, platform="cpu", shapes=SHAPES, held_out=held_out) as evaluator:
        sent: list = []
        real = evaluator.channel.step
        evaluator.channel.step = lambda step, *a, **k: sent.append(step) or real(step, *a, **k)
        for _ in range(4):
            assert compile_ahead(evaluator, SEED) is None
            picked = [dict(v.shapes) for v in evaluator.picked]
            warm = [s for s in sent if isinstance(s, Warm)][-1]
            assert warm.shapes == [SHAPES, *picked]  # the main shapes first
            assert evaluator.evaluate(SEED).status is Status.ACCEPTED
            assert [dict(v.shapes) for v in evaluator.held_out] == picked and evaluator.picked is None
        evaluator.evaluate(SEED)  # without a warm step: drawn as before
        assert evaluator.picked is None and len(evaluator.held_out) == len(picked)


def test_with_problems_side_by_side_nothing_is_compiled_ahead(monkeypatch):
    """An actor that keeps several problems (a sweep side by side): another problem's room would hold
    this one's extra workers, which no plan counts, so each evaluation takes its evaluator once admitted."""
    import evolve.dispatch.actor as actor_module

    state = _state()
    monkeypatch.setattr(actor_module, "compile_ahead", lambda evaluator, source: state["tried"].add("ahead"))
    monkeypatch.setattr(EvaluatorSpec, "build", lambda self, lane=None, prepared=None: _Compiling(state))
    actor, spec = EvaluatorActor(slots=6, keep_problems=2), EvaluatorSpec("r.py")
    assert all(r.status is Status.ACCEPTED for r in _all_at_once(actor, spec, ["a", "b", "c"]))
    assert "ahead" not in state["tried"] and actor.admissions.extra[spec] == 0 and len(state["built"]) == 1


def test_an_actor_prepares_the_workers_that_compile_ahead_too(monkeypatch):
    """Started side by side with the plan's own at ``prepare``: on an H100 the first evaluations that
    compiled ahead each waited 8-9 s for their worker to start."""
    state = _state()
    started = []

    class _Starting(_Compiling):
        def start_worker(self) -> None:
            started.append(self)

    import evolve.dispatch.actor as actor_module

    monkeypatch.setattr(EvaluatorSpec, "build", lambda self, lane=None, prepared=None: _Starting(state))
    monkeypatch.setattr(actor_module, "evaluator_info", lambda evaluator: {})  # the stand-in has no device to name
    actor, spec = EvaluatorActor(slots=6), EvaluatorSpec("r.py")
    info = actor.prepare(spec)
    assert info["at_once"] == 1 and info["ahead"] == 1 and len(started) == 2 == len(state["built"])


def test_a_warm_step_s_compiles_are_under_the_compile_budget():
    """The worker lends (and so tells each compile, ``fitness.worker.loan``) in the steps whose ``lend`` is set:
    a warm step always, so a kernel compiling past ``compile_timeout_s`` there is a timeout, as in the
    evaluation (on an H100 a warm step's compile ran 41.6 s under an 8 s budget before)."""
    import collections
    import types

    import pytest

    from fitness.boundary.protocol import Load, Warm
    from fitness.boundary.sandbox import WorkerGone
    from fitness.judge.channel import WorkerChannel
    from fitness.judge.lane import NoLane
    from fitness.settings import EvalSettings
    from tests.test_lane import SlowCompiler

    step = Warm("src", "/p.py", "", [{"dim": 4}], 7)
    assert getattr(step, "lend", False) is True and getattr(Load("src", "/p.py", "", {}, 7), "lend", False) is False
    assert "lend" not in step.to_wire()  # not on the wire: a warm step always lends

    channel = WorkerChannel(types.SimpleNamespace(synchronize=lambda: None, name="cuda"),
                            EvalSettings(timeout_s=300.0, compile_timeout_s=8.0), collections.Counter())
    worker = channel.worker = SlowCompiler()
    with NoLane().shared() as hold, pytest.raises(WorkerGone) as gone:
        channel.step(step, interim=channel.lending(hold))
    assert worker.waits == [300.0, 8.0] and gone.value.status == "timeout"
    assert "compiling one kernel took more than 8 s" in gone.value.reason
