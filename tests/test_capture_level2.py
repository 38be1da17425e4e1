"""Captures of models like KernelBench level 2's (evolve/seeding/conv_forms.py, evolve/seeding/inductor.py).

- A convolution with a bias failed under max-autotune's Triton template on the
  CPU (``triton_convolution2d() takes 6 positional arguments but 7 were
  given``: on a GPU Inductor takes the bias out of the convolution itself, on
  the CPU it passes it on): 1_Conv2D_ReLU_BiasAdd and level 2's other 2-D
  convolutions got no seed there. In a template capture the convolution now
  runs without its bias and the bias is added after.
- A ``warnings.warn`` in a model's forward broke Dynamo's graph in two, and a
  seed needs one graph. The capture now lets Dynamo move the call after the
  graph (``reorderable_logging_functions``).

Captures run in a child process: Triton's interpreter must be on before Triton is imported.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
import torch
import torch.nn.functional as F

from tests.conftest import ROOT, problem_path

from evolve.seeding.conv_forms import template_forms


def _run(code: str) -> dict[str, str]:
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600,
                         env={**os.environ, "TRITON_INTERPRET": "1"})
    lines = dict(line.split(" ", 1) for line in out.stdout.splitlines() if " " in line)
    lines["_log"] = out.stdout + out.stderr[-3000:]
    return lines


# --- a convolution's bias, added after the convolution in a template capture ---

@pytest.mark.parametrize("n, batched", [(1, True), (2, True), (2, False), (3, True), (2, None)])
def test_a_biased_convolution_in_template_form_is_the_convolution_its_bias_added_after(n, batched, monkeypatch):
    """The op the stand-in calls gets no bias (Inductor's CPU template takes none); the result is the
    op's with its bias, batched or not, and without a bias (``batched=None``) the op's own."""
    torch.manual_seed(0)
    name = f"conv{n}d"
    x = torch.randn(*([2] if batched is not False else []), 4, *[9, 8, 7][:n], dtype=torch.float64)
    w = torch.randn(6, 2, *[3] * n, dtype=torch.float64)
    b = None if batched is None else torch.randn(6, dtype=torch.float64)
    expected = getattr(F, name)(x, w, b, 1, 1, 1, 2)
    biases = []
    for each in ("conv1d", "conv2d", "conv3d"):  # the ops as template_forms finds them (a 1-D one calls conv2d)

        def op(*args, _original=getattr(F, each), **kwargs):  # recording the bias each is given
            biases.append(args[2] if len(args) > 2 else kwargs.get("bias"))
            return _original(*args, **kwargs)

        monkeypatch.setattr(F, each, op)
    recorder = getattr(F, name)
    with template_forms():
        got = getattr(F, name)(x, w, b, stride=1, padding=1, groups=2)
    assert getattr(F, name) is recorder  # put back
    torch.testing.assert_close(got, expected, rtol=1e-12, atol=1e-12)
    assert biases and all(bias is None for bias in biases)


CONV_CAPTURE = """
import os, sys
os.environ["TRITON_INTERPRET"] = "1"
sys.path.insert(0, {root!r})
from evolve.seeding.inductor import capture
from operators.seeds.convert import seed_source
from fitness import Evaluator
path, shapes = {path!r}, {shapes!r}
entry = capture(path, device="cpu", shapes=shapes, time_it=False, variant="max_autotune")
source = seed_source(entry, open(path).read())
print("graphs", len(entry["graph_args"]))
print("extern", "extern_kernels.convolution" in "".join(entry["codes"]))
with Evaluator(path, platform="cpu", shapes=shapes) as evaluator:
    result = evaluator.evaluate(source)
print("verdict", result.status.value, result.reason[:300])
"""


def test_a_biased_2d_convolution_gets_a_template_seed_on_the_cpu():
    """1_Conv2D_ReLU_BiasAdd (nn.Conv2d with its bias, then a bias of the model's own) under
    max-autotune's Triton convolution template, captured live on the CPU and judged there."""
    path = problem_path("kernelbench/level2/1_Conv2D_ReLU_BiasAdd")
    shapes = dict(batch_size=2, in_channels=4, out_channels=6, height=9, width=10)
    lines = _run(CONV_CAPTURE.format(root=str(ROOT), path=str(path), shapes=shapes))
    assert lines.get("graphs") == "1", lines["_log"]
    assert lines.get("extern") == "False"  # the template's Triton code, no extern convolution
    assert lines.get("verdict", "").startswith("accepted"), lines["_log"]


# --- a warnings.warn in the forward: one graph, not two ---

WARNING_PROBLEM = '''
import warnings

import torch
import torch.nn as nn

batch_size = 4
dim = 100


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, y):
        h = torch.relu(x)
        warnings.warn("a model that warns as it runs")
        return h * torch.sigmoid(y)


def get_inputs():
    return [torch.randn(batch_size, dim), torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
'''

WARN_CAPTURE = """
import os, sys, warnings
os.environ["TRITON_INTERPRET"] = "1"
sys.path.insert(0, {root!r})
from evolve.seeding.inductor import capture
from operators.seeds.convert import seed_source
path = {path!r}
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    entry = capture(path, device="cpu", time_it=False)
print("graphs", len(entry["graph_args"]))
print("warned", any("warns as it runs" in str(w.message) for w in caught))
source = seed_source(entry, open(path).read())
print("seed", "def _inductor_call" in source)
"""


def test_a_warning_in_the_forward_leaves_one_graph(tmp_path):
    path = tmp_path / "warns.py"
    path.write_text(textwrap.dedent(WARNING_PROBLEM), encoding="utf-8")
    lines = _run(WARN_CAPTURE.format(root=str(ROOT), path=str(path)))
    assert lines.get("graphs") == "1", lines["_log"]
    assert lines.get("warned") == "True"  # the warning is still given, after the graph
    assert lines.get("seed") == "True", lines["_log"]
