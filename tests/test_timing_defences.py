"""The timing window's defences against the field's newer timing hacks (docs/EVALUATION.md, "Timing"):
launches counted per run, inputs at a fresh address every call, each run's L2 persisting lines reset."""

from __future__ import annotations

import pytest

from tests.conftest import PROBLEMS, SMALL_SHAPES

from fitness import Evaluator, Status
from fitness.refusal import Refusal
from fitness.worker.timed_step import TimedWindow, addresses, apart


def run_window(launches: dict[int, int], warm: int = 2, runs: int = 8) -> list[int]:
    """Play a window whose run ``i`` (warm-ups negative) launches ``launches.get(i, 2)`` kernels, only its last
    run checked; the runs handed over. Raises the window's ``Refusal``."""
    handed: list[int] = []
    current = {"i": 0}
    steps = TimedWindow(100, check_seed=1, checks=0, draw=lambda seed: ([seed], [None]), forward=lambda args, i: args,
                        changed=lambda witnesses, args: None, hand_over=lambda i, seed, out: handed.append(i),
                        launched=lambda: launches.get(current["i"], 2))
    for i in [-1 - k for k in range(warm)]:
        current["i"] = i
        args = steps.prepare(i)
        steps.finish(i, args, steps.run(i, args))
    steps.window(runs)
    for i in range(runs):
        current["i"] = i
        args = steps.prepare(i)
        steps.finish(i, args, steps.run(i, args))
    return handed


def test_a_run_that_launches_fewer_kernels_is_refused_though_nobody_checks_it():
    assert run_window({-1: 9}) == [7]  # the first warm-up run may compile or autotune: not compared
    with pytest.raises(Refusal) as refused:
        run_window({5: 1})  # run 5 skips the work of a run: not among the checked ones
    assert refused.value.status is Status.FORBIDDEN
    assert "timed run 5 launched 1 Triton kernel(s), warm-up run 2 2" in refused.value.reason
    with pytest.raises(Refusal, match=r"timed run 0 launched 2 Triton kernel\(s\), warm-up run 2 3"):
        run_window({-2: 3})  # the warm-up runs after the first count too
    with pytest.raises(Refusal, match=r"timed run 1 launched 1 Triton kernel\(s\), timed run 0 2"):
        run_window({1: 1}, warm=1)  # one warm-up run (the CPU's): the window's first run sets the count


class Block:
    def __init__(self, address: int) -> None:
        self.address = address

    def data_ptr(self) -> int:
        return self.address

    def numel(self) -> int:
        return 1


class CachingAllocator:
    """Hands out the lowest free block, as a caching allocator hands a freed block out again."""

    def __init__(self) -> None:
        self.live: set[int] = set()

    def draw(self, n: int = 2) -> list:
        blocks = []
        for _ in range(n):
            address = min(a for a in range(100) if a not in self.live)
            self.live.add(address)
            blocks.append(Block(address))
        return blocks

    def free(self, blocks: list) -> None:
        self.live -= {b.address for b in blocks}


def test_each_draw_s_inputs_lie_away_from_the_last_draw_s():
    allocator = CachingAllocator()
    last = allocator.draw()
    allocator.free(last)
    assert addresses(allocator.draw()) == addresses(last)  # what a plain draw does: the same blocks again
    allocator.live.clear()

    def draw() -> list:
        args = allocator.draw()
        drawn.append(args)
        return args

    previous: set[int] = set()
    for _ in range(6):
        drawn: list = []
        args = apart(draw, previous)
        for other in drawn:
            if other is not args:
                allocator.free(other)  # the held draws go once the inputs are drawn elsewhere
        assert not addresses(args) & previous
        previous = addresses(args)
        allocator.free(args)
    empty = [type("Empty", (), {"numel": lambda self: 0, "data_ptr": lambda self: 0})(), 3]
    assert addresses(empty) == set()  # an empty tensor or a number has no address to avoid


@pytest.mark.parametrize("problem", ["elementwise"])
def test_no_call_s_inputs_lie_where_the_last_call_s_did(device_kind, problem):
    """Through the worker, every call and timed run: a kernel that sees an input at an address of the last
    call's inputs raises (on a GPU the caching allocator would hand the same blocks out again)."""
    source = (PROBLEMS / problem / "seed.py").read_text()
    source = source.replace("class ModelNew", "LAST = [set()]\n\n\nclass ModelNew", 1)
    probe = ("    def forward(self, x, y):\n"
             "        now = {x.data_ptr(), y.data_ptr()}\n"
             "        if now & LAST[0]:\n"
             "            raise RuntimeError('an input lies where the last call put one')\n"
             "        LAST[0] = now\n")
    assert "    def forward(self, x, y):\n" in source
    source = source.replace("    def forward(self, x, y):\n", probe, 1)
    shapes = SMALL_SHAPES[problem] if device_kind == "cpu" else {"batch_size": 64, "dim": 4096}
    with Evaluator(PROBLEMS / problem / "reference.py", platform=device_kind, shapes=shapes) as evaluator:
        result = evaluator.evaluate(source)
    assert result.status is Status.ACCEPTED, result.reason


HARNESS_WITH_L2_SET_ASIDE = """
import sys
from fitness.refusal import Refusal
from fitness.worker.harness import Harness
from platforms import TimingSettings
import dataclasses

harness = Harness("cpu", 0)
harness.load(open(sys.argv[1]).read(), sys.argv[2], open(sys.argv[2]).read(), {"batch_size": 4, "dim": 100}, 0)
harness._hand_over = lambda run, seed, outputs: None
timing = dataclasses.asdict(TimingSettings(warmup_ms=0, window_ms=0, min_runs=3, max_runs=3))
harness.time(1, 2, 1, [1600], timing)  # nothing set aside: timed
harness.platform.persisting_l2_bytes = lambda: 4 << 20  # what a candidate's raised limit reads as on a GPU
try:
    harness.time(1, 2, 1, [1600], timing)
except Refusal as refusal:
    print(refusal.status.value, refusal.fatal, refusal.reason)
"""


def test_l2_set_aside_for_persisting_lines_after_the_window_is_forbidden(tmp_path):
    """The worker reads the platform's set-aside L2 after every time step (a GPU's is checked in
    tests/test_gpu.py); any is refused, and the worker, whose context keeps it, goes."""
    import os
    import subprocess
    import sys

    from platforms.cpu import CpuPlatform

    script = tmp_path / "harness.py"
    script.write_text(HARNESS_WITH_L2_SET_ASIDE)
    env = {**os.environ, **CpuPlatform.worker_env, "PYTHONPATH": str(PROBLEMS.parent), "TMPDIR": str(tmp_path)}
    done = subprocess.run([sys.executable, str(script), str(PROBLEMS / "elementwise" / "seed.py"),
                           str(PROBLEMS / "elementwise" / "reference.py")],
                          capture_output=True, text=True, env=env, timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == \
        f"forbidden True the candidate set aside {4 << 20} bytes of L2 for persisting lines", done.stdout
