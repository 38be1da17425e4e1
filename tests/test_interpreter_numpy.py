"""The CPU platform says, before judging anything, when Triton's interpreter as installed
cannot run kernels with loops (an upstream bug under numpy 2.4), instead of refusing every
candidate with the same runtime error."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest


def test_the_cpu_platform_names_an_interpreter_that_cannot_run_loops(monkeypatch, tmp_path):
    """Triton's interpreter before triton-lang/triton#9171 under numpy 2.4: every kernel with a
    loop fails, honest ones too. kevo says so before judging anything, not per candidate."""
    import numpy
    import triton.runtime.interpreter as interpreter

    from fitness import Evaluator
    from platforms import PlatformUnavailable
    from platforms.cpu import interpreter_problem

    def unfixed(tensor, scope):  # the shape of the code before the fix
        scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data))

    assert interpreter_problem() is None  # this machine's: numpy < 2.4 (pyproject.toml)
    monkeypatch.setattr(numpy, "__version__", "2.4.6")
    fixed = "int(self.handle.data))" not in inspect.getsource(interpreter._patch_lang_tensor)
    assert (interpreter_problem() is None) == fixed  # this machine's Triton, under numpy 2.4
    monkeypatch.setattr(interpreter, "_patch_lang_tensor", unfixed)
    why = interpreter_problem()
    assert why and "numpy<2.4" in why and "9171" in why
    root = Path(__file__).resolve().parents[1]
    with pytest.raises(PlatformUnavailable, match="cannot run kernels with loops under numpy 2.4.6"):
        Evaluator(root / "problems" / "softmax" / "reference.py", platform="cpu", shapes={"batch_size": 4, "dim": 8})
