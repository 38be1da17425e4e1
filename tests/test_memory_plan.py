"""The memory plan of one evaluation (fitness.judge.memory_plan): what each phase holds, the
reference computed before the candidate when that lets more evaluations run at once,
and a timed run's inputs dropped before its outputs are judged."""

from __future__ import annotations

from pathlib import Path

import pytest

from fitness import Evaluator, Status
from fitness.judge.memory_plan import Variant
from fitness.worker.timed_step import TimedWindow

ROOT = Path(__file__).resolve().parents[1]
SOFTMAX = ROOT / "problems" / "softmax"
GB = 1 << 30


def variant(i: int, o: int, s: int = 0, w: int | None = None, p: int = 0) -> Variant:
    return Variant({}, None, None, [o], i, s, i if w is None else w, p)  # type: ignore[arg-type]


def test_a_real_size_problem_holds_its_tensors_about_twice_not_four_times():
    # 24_LogSoftmax at its own shapes: 6.4 GB in, 6.4 GB out (no output set aside at that size)
    big = variant(i=6 * GB, o=6 * GB, w=GB // 4)
    apart, together = big.footprint(overlap=False), big.footprint(overlap=True)
    assert apart == 6 * GB + 3 * 6 * GB  # the judging of a timed run: I + 3 O (worker O, the copy, the reference)
    assert together == 2 * 6 * GB + GB // 4 + 2 * 6 * GB  # candidate and reference at once
    assert apart <= 2 * (6 + 6) * GB  # within twice the problem's own tensors
    assert apart < together


def test_each_phase_counts_what_is_alive_then():
    v = variant(i=100, o=10, s=7, w=100, p=3)
    k = 16  # 10-byte outputs: the most runs set aside
    assert v.phases(overlap=True) == {
        "checked call": (100 + 100 + 10 + 7 + 3) + (100 + 10 + 7),
        "hand-over": 3 + 3 * 10,
        "drawing inputs": 2 * 100 + 3 + (100 + 10 + 7),  # a redraw beside the held draw, the reference meanwhile
        "run twice": 100 + 100 + 10 + 7 + 3 + 10,  # the call beside the first run's outputs
        "timed run": 100 + 100 + 10 + 7 + 3 + k * 10,
        "judging a timed run": 3 + 10 + 10 + (100 + 10 + 7) + k * 10,
    }
    apart = v.phases(overlap=False)
    # the candidate alone, then the reference beside the copy of its outputs (the worker's gone)
    assert apart["checked call"] == max(100 + 100 + 10 + 7 + 3, 3 + 10 + (100 + 10 + 7))
    assert apart["hand-over"] == 3 + 2 * 10  # no reference computed meanwhile
    assert apart["drawing inputs"] == 2 * 100 + 3
    own = ("checked call", "hand-over", "drawing inputs")
    assert {k: v for k, v in apart.items() if k not in own} == \
        {k: v for k, v in v.phases(overlap=True).items() if k not in own}
    # inputs far larger than the rest (a fingerprint for a witness): a redraw is the timed run's largest part
    big = variant(i=1000, o=10, s=7, w=1, p=3)
    assert big.phases(overlap=False)["timed run"] == 2 * 1000 + 3 + k * 10


def test_outputs_larger_than_inputs_hold_two_outputs_at_most_when_checked_apart():
    # 87_conv_pointwise_2D: outputs twice its inputs. Checked one after the other, no phase of a
    # check holds three outputs (the worker's, the copy, the reference's) any more.
    v = variant(i=4 * GB, o=8 * GB, w=GB // 4)
    checks = v.phases(overlap=False, timed=False)
    assert max(checks.values()) == 4 * GB + 2 * 8 * GB  # I + 2 O: the reference beside the copy
    assert max(checks.values()) < 3 * 8 * GB


def test_a_held_out_shape_is_only_checked_so_it_counts_the_checks_phases():
    v = variant(i=100, o=10, s=7, w=100, p=3)
    for overlap in (True, False):
        checked = v.phases(overlap, timed=False)
        assert checked == {k: n for k, n in v.phases(overlap).items()
                           if k in ("checked call", "hand-over", "drawing inputs")}
        assert v.footprint(overlap, timed=False) == max(checked.values())


def test_a_grown_held_out_shape_no_longer_counts_as_if_it_were_timed(softmax_evaluator, monkeypatch):
    # 87_conv_pointwise_2D at its own shapes: 4 GB in, 8 GB out; its grown held-out shape
    # (every size up to 130%) is 2.86 times as large. Timed, that variant would need the judging
    # phase's I + 3 O at its size (80 GB: one evaluation at once on an H200); it is only checked.
    prepared = softmax_evaluator.prepared
    main = variant(i=4 * GB, o=8 * GB, w=GB // 4)
    grown = variant(i=int(2.86 * 4 * GB), o=int(2.86 * 8 * GB), w=GB // 4)
    monkeypatch.setattr(prepared, "main", main)
    monkeypatch.setattr(prepared, "variants", lambda: [main, grown])
    overhead = prepared.platform.process_overhead_bytes
    apart = prepared.footprint(overlap=False) - overhead
    assert apart == max(main.footprint(False), grown.footprint(False, timed=False))
    assert apart == grown.phases(False)["checked call"] < grown.footprint(False)  # the reference beside the copy
    monkeypatch.setattr(prepared.platform, "free_memory", lambda: 139 * GB)
    assert prepared.slots_that_fit(3) == 2  # timed, the grown shape would have left room for 1


@pytest.fixture()
def softmax_evaluator():
    with Evaluator(SOFTMAX / "reference.py", platform="cpu", shapes={"batch_size": 4, "dim": 64}) as evaluator:
        yield evaluator


def test_slots_stop_overlapping_only_where_that_fits_more(softmax_evaluator, monkeypatch):
    prepared = softmax_evaluator.prepared
    # a problem whose inputs dwarf its outputs, as the device's copy witnesses them
    big = variant(i=10 * GB, o=GB, w=10 * GB)
    monkeypatch.setattr(prepared, "main", big)
    monkeypatch.setattr(prepared, "variants", lambda: [big])
    together, apart = prepared.footprint(overlap=True), prepared.footprint(overlap=False)
    assert apart < together
    free = {"bytes": 10 * together}
    monkeypatch.setattr(prepared.platform, "free_memory", lambda: free["bytes"])
    assert prepared.slots_that_fit(3) == 3 and prepared.overlap_reference
    free["bytes"] = 2 * apart  # two apart fit, two together do not
    assert prepared.slots_that_fit(3) == 2  # timed, the grown shape would have left room for 1
    assert prepared.footprint() == apart
    free["bytes"] = apart + apart // 2  # one either way: keep the faster checks
    assert together <= free["bytes"] and prepared.slots_that_fit(3) == 1 and prepared.overlap_reference
    free["bytes"] = 10 * together
    assert prepared.slots_that_fit(3) == 3 and prepared.overlap_reference  # room again: overlapping again


@pytest.mark.parametrize("main_overlaps", [False, True])
def test_without_overlap_the_reference_runs_once_the_worker_let_its_outputs_go(softmax_evaluator, monkeypatch,
                                                                              main_overlaps):
    """Nowhere, or at the held-out shapes only (the plan's second: main shapes overlapped)."""
    evaluator = softmax_evaluator
    evaluator.prepared.overlap_reference, evaluator.prepared.overlap_held_out = main_overlaps, False
    main_shapes = evaluator.main.shapes
    loaded: list[dict] = []
    seen: list[tuple] = []  # (what happened, reference outputs computed by then)
    computed = {"n": 0}
    reference_outputs = evaluator.prepared.reference_outputs

    def counted(*args, **kwargs):
        seen.append(("reference", computed["n"]))
        computed["n"] += 1
        return reference_outputs(*args, **kwargs)

    step, let_go = evaluator.channel.step, evaluator.channel.let_go

    def watched(message, meanwhile=None, interim=None):
        if type(message).__name__ == "Load":
            loaded.append(message.shapes)
        if type(message).__name__ == "Call":
            seen.append(("Call", computed["n"], meanwhile is None, loaded[-1] == main_shapes))
        return step(message, meanwhile, interim)

    def letting_go():
        seen.append(("let go", computed["n"]))
        let_go()

    monkeypatch.setattr(evaluator.prepared, "reference_outputs", counted)
    monkeypatch.setattr(evaluator.channel, "step", watched)
    monkeypatch.setattr(evaluator.channel, "let_go", letting_go)
    result = evaluator.evaluate((SOFTMAX / "seed.py").read_text())
    assert result.status is Status.ACCEPTED, result.reason
    calls = [i for i, event in enumerate(seen) if event[0] == "Call"]
    held_out = [i for i in calls if not seen[i][3]]
    assert held_out and len(held_out) < len(calls), seen
    run_twice = [i for i in calls if seen[i][3]][1]  # the main shapes' first inputs again: judged against the first
    assert seen[run_twice + 1][0] == "Call", seen[run_twice:run_twice + 2]  # no reference, nothing let go
    for i in calls:
        n = seen[i][1]
        if i == run_twice:
            continue
        if main_overlaps and seen[i][3]:  # the reference computed meanwhile, no letting go first
            assert seen[i][2] is False and seen[i + 1][0] == "reference", seen[i:i + 2]
            continue
        # the call runs alone (nothing meanwhile) before its reference; the worker lets its
        # outputs go; then the reference for that call is computed, and no other
        assert seen[i][2] is True
        assert seen[i + 1:i + 3] == [("let go", n), ("reference", n)], seen[i:i + 3]


def test_a_checked_timed_runs_inputs_are_dropped_before_its_hand_over():
    handed: list[tuple[int, int]] = []  # (run, inputs still held)
    live: dict[int, list] = {}

    def draw(seed: int):
        args = [seed, seed + 1]
        live[seed] = args
        return args, [None, None]

    window = TimedWindow(100, check_seed=1, checks=2, draw=draw, forward=lambda args, i: sum(args),
                         changed=lambda witnesses, args: None,
                         hand_over=lambda run, seed, outputs: handed.append((run, len(live[seed]))))
    window.window(5)
    for i in range(5):
        args = window.prepare(i)
        window.finish(i, args, window.run(i, args))
    assert handed and all(held == 0 for _, held in handed)
    assert {run for run, _ in handed} == window.chosen
    unchecked = [seed for seed in live if seed - 100 not in window.chosen]
    assert unchecked and all(len(live[seed]) == 2 for seed in unchecked)  # the others keep theirs until time_runs drops them


def test_a_grown_held_out_shape_checked_apart_lets_more_run_at_once_and_the_main_shapes_still_overlap(
        softmax_evaluator, monkeypatch):
    # 23_Softmax at its own shapes (6 GB in, 6 GB out) and a grown held-out shape 1.69 times as large:
    # overlapped everywhere, the held-out check needs 4 x 10 GB; apart there, 3 x 10 GB, while the
    # main shapes' checks keep their reference beside the candidate
    prepared = softmax_evaluator.prepared
    main = variant(i=6 * GB, o=6 * GB, w=GB // 4)
    grown = variant(i=int(1.69 * 6 * GB), o=int(1.69 * 6 * GB), w=GB // 4)
    monkeypatch.setattr(prepared, "main", main)
    monkeypatch.setattr(prepared, "variants", lambda: [main, grown])
    everywhere, held_out_apart = prepared.footprint(True, True), prepared.footprint(True, False)
    nowhere = prepared.footprint(False, False)
    assert held_out_apart < everywhere and nowhere <= held_out_apart
    free = {"bytes": 3 * held_out_apart}
    monkeypatch.setattr(prepared.platform, "free_memory", lambda: free["bytes"])
    assert free["bytes"] // everywhere == 2
    assert prepared.slots_that_fit(6) == 3
    assert (prepared.overlap_reference, prepared.overlap_held_out) == (True, False)
    assert prepared.footprint() == held_out_apart
    free["bytes"] = 10 * everywhere  # room for all: overlapping everywhere again
    assert prepared.slots_that_fit(6) == 6 and (prepared.overlap_reference, prepared.overlap_held_out) == (True, True)


def test_the_log_names_the_phase_and_the_shapes_that_need_the_most():
    from types import SimpleNamespace

    from evolve.dispatch.base import at_once_note, plan_info
    from fitness.judge.memory_plan import largest_phase

    main = Variant({"batch_size": 4096, "dim": 8}, None, None, [6 * GB], 6 * GB, 0, GB // 4, 0)  # type: ignore[arg-type]
    grown = Variant({"batch_size": 5300, "dim": 8}, None, None, [8 * GB], 8 * GB, 0, GB // 4, 0)  # type: ignore[arg-type]
    small = Variant({"batch_size": 100, "dim": 8}, None, None, [GB], GB, 0, GB // 4, 0)  # type: ignore[arg-type]
    prepared = SimpleNamespace(main=main, variants=lambda: [main, small], overlap_reference=False,
                               overlap_held_out=False, footprint=lambda: 24 * GB)
    # the main shapes' judging of a timed run, I + 3 O, is the most: 24 GB against 3 GB checked at batch 100
    assert largest_phase(prepared) == "judging a timed run at the main shapes"
    prepared.variants = lambda: [main, grown, small]
    # a grown held-out shape overlapped: its checked call (2 I + W + 2 O) is 32.25 GB, past the main's 24
    prepared.overlap_held_out = True
    assert largest_phase(prepared) == "checked call at a held-out shape (batch_size=5300)"
    info = plan_info(prepared)
    assert info == {"footprint_gb": 24.0, "plan_phase": "checked call at a held-out shape (batch_size=5300)"}
    assert at_once_note({"at_once": 2, **info}, 6) == (
        "; the memory plan lets 2 run at once (about 24.0 GB each, the most in checked call at a held-out shape "
        "(batch_size=5300))")
