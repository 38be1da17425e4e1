"""A sweep's capture that runs out of device memory beside other runs waits for the memory, then tries once more."""

from __future__ import annotations

import time

import pytest

from evolve.seeding import room
from tests.conftest import PROBLEMS
from tests.test_seed_variants import MSE, problem_file, replay

GB = 1 << 30


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def test_the_wait_ends_when_the_memory_is_there_or_at_its_limit():
    clock = Clock()
    frees = iter([1 * GB, 2 * GB, 9 * GB])
    assert room.wait_for(8 * GB, lambda: (next(frees), 140 * GB), 60, clock.sleep, clock)
    assert clock.now == 2 * room.POLL_S  # two looks short of it, then enough
    clock = Clock()
    assert not room.wait_for(8 * GB, lambda: (1 * GB, 140 * GB), 60, clock.sleep, clock)
    assert 60 <= clock.now <= 60 + room.POLL_S
    clock = Clock()
    assert not room.wait_for(200 * GB, lambda: (1 * GB, 140 * GB), 60, clock.sleep, clock)  # never on this device
    assert clock.now == 0


def test_a_capture_needs_the_inputs_and_two_sets_of_outputs():
    need = room.capture_bytes(PROBLEMS / "softmax" / "reference.py", {"batch_size": 4, "dim": 100}, None)
    assert need == 3 * 4 * 100 * 4  # x, eager's softmax and the compiled program's, in fp32


def test_out_of_memory_is_told_from_other_failures():
    assert room.out_of_memory(RuntimeError("CUDA out of memory. Tried to allocate 7.00 GiB"))
    assert room.out_of_memory(type("OutOfMemoryError", (Exception,), {})("cuda"))
    assert not room.out_of_memory(RuntimeError("an illegal memory access was encountered"))


@pytest.mark.parametrize("wait_s, again", [(30.0, True), (0.0, False)])
def test_a_configuration_that_ran_out_beside_others_is_captured_again_once_there_is_room(monkeypatch, wait_s, again):
    from evolve.seeding import inductor, seed

    tried: list[str] = []
    replaying = replay(tried)

    def crowded(path, **kwargs):
        if kwargs.get("variant") == "default" and tried.count("default") == 0:
            tried.append("default")
            raise RuntimeError("CUDA out of memory. Tried to allocate 7.00 GiB. GPU 0 has 1.06 GiB free")
        return replaying(path, **kwargs)

    monkeypatch.setattr(inductor, "capture", crowded)
    monkeypatch.setattr(seed, "_require_gpu", lambda device: None)
    monkeypatch.setattr(seed, "_release", lambda device: None)
    frees = iter([1 * GB] + [100 * GB] * 10)
    monkeypatch.setattr(room, "_device_memory", lambda: (next(frees), 140 * GB))
    monkeypatch.setattr(room, "POLL_S", 0.01)
    seeds = seed.compile_seeds(problem_file(MSE), device="cuda", memory_wait_s=wait_s)
    assert tried.count("default") == (2 if again else 1)
    skipped = dict(seeds[0].skipped)
    if again:
        assert seeds[0].variant == "default" and "default" not in skipped
        assert seeds[0].recording["memory_wait_s"] >= 0  # the run keeps the wait
    else:
        assert "out of memory" in skipped["default"] and seeds[0].variant != "default"


def test_a_problem_that_waited_in_vain_does_not_wait_again_for_its_next_configurations(monkeypatch):
    """Out of memory in every configuration, the device never freeing enough: one wait of
    ``memory_wait_s``, not one a configuration (four configurations could hold a sweep's run for
    12 minutes of waiting before it was set aside to run alone)."""
    from evolve.seeding import inductor, seed

    def full(path, **kwargs):
        raise RuntimeError("CUDA out of memory. Tried to allocate 7.00 GiB. GPU 0 has 1.06 GiB free")

    waits: list[float] = []

    def wait_for(need, memory, wait_s, *args, **kwargs):
        waits.append(wait_s)
        return False  # the room never came

    monkeypatch.setattr(inductor, "capture", full)
    monkeypatch.setattr(seed, "_require_gpu", lambda device: None)
    monkeypatch.setattr(seed, "_release", lambda device: None)
    monkeypatch.setattr(seed, "_reference_error", lambda *args: "")
    monkeypatch.setattr(room, "wait_for", wait_for)
    with pytest.raises(seed.SeedError, match="out of memory") as raised:
        seed.compile_seeds(problem_file(MSE), device="cuda", memory_wait_s=30.0)
    assert waits == [30.0]  # the first configuration waited; the others ran out at once
    assert str(raised.value).count("out of memory") >= 2  # every configuration was still tried


class _Held:
    """What a capture holds on the device, in the capture's own frame."""


def test_a_capture_that_ran_out_lets_go_of_what_it_held_before_it_waits():
    """The error's traceback keeps the failed capture's frames and their tensors: on an H100, three
    captures that ran out together held 73 of 80 GB while each waited for the others' room."""
    import weakref

    held: list[weakref.ref] = []
    at_release: list[bool] = []

    def capture():
        tensors = _Held()  # the capture's inputs and outputs, in its frame
        held.append(weakref.ref(tensors))
        if len(held) == 1:
            raise RuntimeError("CUDA out of memory. Tried to allocate 7.00 GiB")
        return {"codes": []}

    def release():
        import gc

        gc.collect()
        at_release.append(held[0]() is None)

    recording = room.captured_with_room(capture, PROBLEMS / "softmax" / "reference.py", {"batch_size": 4, "dim": 100},
                                        None, 30.0, release, memory=lambda: (100 * GB, 140 * GB))
    assert at_release == [True]  # gone before the wait, not only after the second capture
    assert recording["memory_wait_s"] >= 0


def test_large_captures_side_by_side_take_turns_on_the_device_and_small_ones_do_not(tmp_path, monkeypatch):
    import threading
    import time

    from platforms.device_lock import DeviceLock

    monkeypatch.setenv("KEVO_LOCK_DIR", str(tmp_path))
    problem = PROBLEMS / "softmax" / "reference.py"
    shapes = {"batch_size": 4, "dim": 100}
    need = room.capture_bytes(problem, shapes, None)

    def overlapped(total: int) -> bool:
        spans: list[tuple[float, float]] = []

        def capture():
            start = time.monotonic()
            time.sleep(0.3)
            spans.append((start, time.monotonic()))
            return {}

        def one():
            room.captured_with_room(capture, problem, shapes, None, 30.0, lambda: None, memory=lambda: (total, total),
                                    turns=True, lock=lambda: DeviceLock("gpu-capture"))

        threads = [threading.Thread(target=one) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        (a0, a1), (b0, b1) = sorted(spans)
        return b0 < a1

    assert not overlapped(total=need * 4)  # a quarter of the device each: one at a time
    assert overlapped(total=need * 1000)  # a thousandth: side by side


def test_a_capture_says_where_its_time_went_attempts_made_again_included(monkeypatch, tmp_path):
    """A capture made again in another form (Dynamo refused the symbolic sizes) records the seconds of
    the attempt it threw away: on an H100 a template capture took 235.7 s with 'compile 1.8 s'."""
    import time

    from evolve.seeding import inductor
    from evolve.seeding.seed import _capture_parts

    forms = []

    def fake_capture(path, device, mode, time_it, shapes, dtype, variant, strict, oblivious, static=False):
        forms.append(strict)
        if strict:
            time.sleep(0.05)
            raise RuntimeError("Dynamo specialized it to be a constant")
        return {"compile_s": 1.8, "timing_s": 2.5}

    monkeypatch.setattr(inductor, "_capture", fake_capture)
    entry = inductor.capture(tmp_path / "p.py", device="cuda")
    assert forms == [True, False]
    assert len(entry["retried_s"]) == 1 and entry["retried_s"][0] >= 0.05
    line = _capture_parts(entry)
    assert line.startswith("compile 1.8 s, timing 2.5 s, 1 attempt made again after ")


def test_a_configuration_starts_in_the_form_the_last_one_ended_in(monkeypatch):
    """Dynamo's refusal of symbolic sizes that the model's own code causes recurs in every configuration:
    once one configuration had to fix sizes, the next ones fix them from their first attempt (on an H100,
    86_conv_depthwise_separable_2D's max-autotune capture threw away 76 s of autotuning at full size
    before Dynamo refused, as its default configuration had been refused 7 s in)."""
    from evolve.seeding import inductor, seed

    attempts: list[tuple[str, bool]] = []

    def fake_capture(path, device, mode, time_it, shapes, dtype, variant, strict, oblivious, static=False):
        attempts.append((variant, strict))
        if strict:
            raise RuntimeError("Dynamo specialized it to be a constant")
        return {"variant": variant, "codes": [], "static_dims": True, "compile_s": 0.1}

    monkeypatch.setattr(inductor, "_capture", fake_capture)
    monkeypatch.setattr(seed, "_require_gpu", lambda device: None)
    monkeypatch.setattr(seed, "_release", lambda device: None)
    monkeypatch.setattr(seed, "_reference_error", lambda *args: "")
    with pytest.raises(seed.SeedError):  # the stand-in's code converts to no seed
        seed.compile_seeds(problem_file(MSE), device="cuda", variants=["default", "max_autotune", "coordinate_descent"])
    assert attempts == [("default", True), ("default", False), ("max_autotune", False), ("coordinate_descent", False)]


def test_a_capture_in_a_given_form_records_it_and_a_first_capture_starts_symbolic(monkeypatch, tmp_path):
    from evolve.seeding import inductor

    forms = []

    def fake_capture(path, device, mode, time_it, shapes, dtype, variant, strict, oblivious, static=False):
        forms.append((strict, oblivious))
        return {"compile_s": 0.1}

    monkeypatch.setattr(inductor, "_capture", fake_capture)
    assert inductor.capture(tmp_path / "p.py", device="cuda")["form"] == {"strict": True, "oblivious": True}
    fixed = inductor.capture(tmp_path / "p.py", device="cuda", form={"strict": False, "oblivious": False})
    assert fixed["form"] == {"strict": False, "oblivious": False} and fixed["retried_s"] == []
    assert forms == [(True, True), (False, False)]


class _Locked:
    """A platform whose device has a timed-window lock (the CPU platform has none)."""

    def __init__(self, name: str) -> None:
        from platforms.device_lock import DeviceLock

        self.lock = DeviceLock(name)

    def device_lock(self):
        return self.lock


def test_inductors_benchmarks_wait_for_another_processs_timed_window(monkeypatch, tmp_path):
    """A capture's autotuning times kernels on the device (for minutes under max-autotune): each of
    Inductor's benchmarks takes the device's timed-window lock, so it waits while another run times a
    candidate, and no candidate's window sees the benchmarked kernels."""
    from torch._inductor.runtime import benchmarking

    from platforms.device_lock import _HELD, LOCK_DIR_ENV
    from tests.test_device_lock import hold_elsewhere

    monkeypatch.setenv(LOCK_DIR_ENV, str(tmp_path))
    platform, bench = _Locked("gpu-test"), benchmarking.benchmarker
    held: list[int] = []

    def fake(*args, **kwargs) -> float:  # stands in for a GPU benchmark: is the window held around it?
        held.append(_HELD[str(platform.lock.path)][1][1])
        return 1.0

    monkeypatch.setattr(bench, "benchmark_gpu", fake)
    child = hold_elsewhere(1.5)  # another process's timed window
    started = time.monotonic()
    with room.benchmarks_alone("cuda", platform):
        assert bench.benchmark_gpu(lambda: None) == 1.0
        waited = time.monotonic() - started
        assert bench.benchmark_gpu is not fake
    child.wait(timeout=10)
    assert waited > 1.0 and held == [1]
    assert bench.benchmark_gpu is fake  # as it was before
    with room.benchmarks_alone("cpu", platform):
        assert bench.benchmark_gpu is fake  # nothing to keep apart on the CPU


def test_the_benchmarker_gets_its_own_methods_back():
    from torch._inductor.runtime import benchmarking

    bench = benchmarking.benchmarker
    before = dict(vars(bench))
    with room.benchmarks_alone("cuda", _Locked("gpu-test")):
        assert {name for name in room.BENCHMARK_METHODS if hasattr(bench, name)} <= set(vars(bench))
    assert dict(vars(bench)) == before
    with room.benchmarks_alone("cuda", type("NoLock", (), {"device_lock": lambda self: None})()):
        assert dict(vars(bench)) == before  # a device without a lock: nothing wrapped
