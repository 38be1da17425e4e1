"""When no Inductor configuration gives a seed, ``compile_seeds`` says whether the problem's own model
fails uncompiled at those shapes (evolve.seeding.seed._reference_error), on the CPU.

The failing model is KernelBench 73's kind of mistake: its ``get_init_inputs`` passes ``groups`` where
the constructor takes ``output_padding``, and a transposed convolution with an output padding past its
stride raises in eager. Its captures are stood in for by one that raises as Inductor's lowering did
("Exponent must be non-negative"); a healthy model with the same failing captures must not be blamed.
"""

from __future__ import annotations

import pytest

from evolve.seeding import inductor, seed
from evolve.seeding.seed import SeedError, compile_seeds

PROBLEM = """
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self, channels, output_padding):
        super().__init__()
        self.conv = nn.ConvTranspose3d(channels, channels, 3, stride=2, padding=1, output_padding=output_padding)

    def forward(self, x):
        return self.conv(x)

batch_size = 2
channels = 4

def get_inputs():
    return [torch.rand(batch_size, channels, 3, 4, 5)]

def get_init_inputs():
    return [channels, OUTPUT_PADDING]
"""


def problem(tmp_path, output_padding: int):
    path = tmp_path / f"transposed_{output_padding}.py"
    path.write_text(PROBLEM.replace("OUTPUT_PADDING", str(output_padding)))
    return path


@pytest.fixture
def lowering_fails(monkeypatch):
    def capture(path, **kwargs):
        raise RuntimeError("Exponent must be non-negative")

    monkeypatch.setattr(inductor, "capture", capture)


def test_the_reference_error_is_the_models_own_and_empty_for_a_model_that_runs(tmp_path):
    why = seed._reference_error(problem(tmp_path, 4), "cpu", None, None)
    assert why.startswith("RuntimeError: output padding must be smaller than either stride or dilation"), why
    assert seed._reference_error(problem(tmp_path, 1), "cpu", None, None) == ""


def test_no_seed_names_a_model_that_fails_uncompiled_before_the_configurations(tmp_path, lowering_fails):
    with pytest.raises(SeedError) as failed:
        compile_seeds(problem(tmp_path, 4), device="cpu", variants=["default", "max_autotune"])
    message = str(failed.value)
    assert "the problem's own model fails at these shapes, uncompiled (RuntimeError: output padding must be" \
        in message, message
    assert message.index("uncompiled") < message.index("default: torch.compile failed: RuntimeError: Exponent")


def test_a_model_that_runs_uncompiled_is_not_blamed(tmp_path, lowering_fails):
    with pytest.raises(SeedError) as failed:
        compile_seeds(problem(tmp_path, 1), device="cpu", variants=["default", "max_autotune"])
    message = str(failed.value)
    assert "own model" not in message and "max_autotune: torch.compile failed: RuntimeError: Exponent" in message


def test_running_out_of_memory_uncompiled_says_nothing_of_the_model(tmp_path, monkeypatch):
    import fitness.problems.problem

    class AcceleratorError(RuntimeError):
        pass

    def crowded(*args, **kwargs):  # as a GPU beside other runs said it, in a type that is not OutOfMemoryError
        raise AcceleratorError("CUDA error: out of memory")

    monkeypatch.setattr(fitness.problems.problem, "make_inputs", crowded)
    assert seed._reference_error(problem(tmp_path, 1), "cpu", None, None) == ""
