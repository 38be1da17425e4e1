"""A seed from torch.compile with a fast path at its main shapes (operators.seeds.fast_path): torch.compile's
static code where the forward's arguments are those it was written for, the general code elsewhere; judged
at the main and the held-out shapes like any candidate. The recordings are real Inductor output made on
the CPU (tests/fixtures/seed_variants/record.py, --static for the fast path's)."""

from __future__ import annotations

import pytest
import torch

from tests.test_seed_variants import LAYER_NORM, MSE, evaluator_name, problem_file, recording, replayed  # noqa: F401

from fitness import Evaluator, screen
from operators import check_space, find_tunables
from operators.seeds.code import ConversionError
from operators.seeds.convert import seed_source
from operators.seeds.fast_path import GUARD, fast_path_seed, main_arguments
from operators.space import read_declared_space

FIXTURES = [MSE, "gelu/reference", LAYER_NORM]


def merged(problem: str) -> str:
    source = problem_file(problem).read_text()
    static = recording(problem, "default", static=True)
    return fast_path_seed(seed_source(recording(problem, "default"), source), seed_source(static, source), static)


@pytest.mark.parametrize("problem", FIXTURES)
def test_the_fast_path_seed_is_judged_at_its_main_and_its_held_out_shapes(problem):
    source = merged(problem)
    assert screen(source).ok
    shapes = recording(problem, "default")["shapes"]
    other = {**shapes, "batch_size": shapes["batch_size"] + 3}  # where the general path runs
    with Evaluator(problem_file(problem), platform="cpu", shapes=shapes, held_out=[other]) as evaluator:
        result = evaluator.evaluate(source)
    assert result.status.value == "accepted", result.reason
    assert result.checks > 1


@pytest.mark.parametrize("problem", FIXTURES)
def test_the_search_tunes_the_fast_path_and_leaves_the_general_one_as_it_is(problem):
    source = merged(problem)
    check_space(source, {})  # every name KEVO_SPACE declares is a tunable of the file
    declared = read_declared_space(source).declared
    tunables = {t.name: t.value for t in find_tunables(source)}
    general = {n for n in tunables if not n.split(".")[0].split("@")[0].endswith("_main")}
    assert general and all(declared[n] == (tunables[n],) for n in general)  # pinned: no timed run sees them
    assert any(len(declared.get(n, ())) > 1 for n in set(tunables) - general)  # the timed code is searched


def test_the_fast_path_runs_exactly_at_the_shapes_its_code_was_written_for(tmp_path):
    import importlib.util

    path = tmp_path / "fast_path_seed.py"  # Triton reads a kernel's source from its file
    path.write_text(merged(MSE))
    spec = importlib.util.spec_from_file_location("fast_path_seed", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # defines kernels; none is launched here
    taken: list[str] = []
    module._inductor_call_main = lambda args, device: taken.append("main") or [torch.zeros(())]
    module._inductor_call = lambda args, device: taken.append("general") or [torch.zeros(())]
    model = module.ModelNew()
    (sizes, strides), _ = main_arguments(recording(MSE, "default", static=True))
    main = torch.rand(sizes)
    model(main, torch.rand(sizes))
    model(torch.rand(sizes[0] + 1, *sizes[1:]), torch.rand(sizes[0] + 1, *sizes[1:]))  # another batch
    model(main.t().contiguous().t() if main.dim() == 2 else main[..., ::1].transpose(0, -1), torch.rand(sizes))
    assert taken == ["main", "general", "general"]  # same sizes, other strides: not the code's either


def test_only_a_static_capture_gives_a_fast_path():
    with pytest.raises(ConversionError, match="not static"):
        main_arguments(recording(MSE, "default"))  # the general capture: its sizes are arguments
    assert main_arguments(recording(MSE, "default", static=True)) == [((8, 32768), (32768, 1))] * 2
    general = seed_source(recording(MSE, "default"), problem_file(MSE).read_text())
    with pytest.raises(ConversionError, match="already defines"):
        fast_path_seed(general.replace("def _inductor_call(", "def _inductor_call_main(pass_, x):\n    pass\n\n\n"
                                       "def _inductor_call("), general, recording(MSE, "default", static=True))


def test_a_fast_path_that_cannot_be_captured_leaves_the_seed_as_it_was_and_says_why(replayed):  # noqa: F811
    from evolve.seeding import seed as seeds

    seed = seeds.compile_seeds(problem_file("89_cumsum"), variants=["default"])[0]
    assert GUARD not in seed.source and replayed == ["default", "default static"]
    assert dict(seed.skipped)["default_fast_path"].startswith(
        "no fast path: torch.compile with static sizes failed: RuntimeError: no recording")


def test_the_guard_reads_every_argument_inductor_asserts():
    args = main_arguments(recording(LAYER_NORM, "default", static=True))
    assert all(a is not None and len(a[0]) == len(a[1]) for a in args)
