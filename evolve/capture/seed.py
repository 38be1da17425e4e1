"""Seeds from torch.compile: ``kevo seed``, ``problem.seeds: compile`` and sweeps without seed files.

``compile_seed(problem_path)`` captures Inductor's output for the problem on
this machine's GPU (``evolve.capture.inductor``) and converts it into a
candidate file (``operators.seeds.convert``). A matmul or convolution that
Inductor hands to an extern library (cuBLAS, cuDNN) is captured again with
its max-autotune Triton templates; where that still calls the library, or
the code holds anything but Triton kernels, the problem gets no seed and
``SeedError`` says why in one line.
"""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path
from typing import Any

from operators.seeds.convert import ConversionError, NotTritonOnly, seed_source
from platforms import get_platform

log = logging.getLogger(__name__)


class SeedError(Exception):
    """No seed could be written for the problem; the message says why in one line."""


@dataclasses.dataclass(frozen=True)
class CompiledSeed:
    source: str  # the candidate file's text
    kernels: list[str]  # the Triton kernels it launches
    mode: str | None  # None, or "max-autotune-triton" when the templates were needed
    eager_ms: float | None
    compiled_ms: float | None
    recording: dict[str, Any]  # what Inductor wrote (evolve.capture.inductor), kept with a run




def compile_seed(problem_path: str | Path, device: str = "cuda", shapes: dict[str, int] | None = None,
                 dtype: str | None = None) -> CompiledSeed:
    """The seed for the problem at ``problem_path`` from torch.compile on ``device``, compiled at
    ``shapes`` (the problem's own if None); ``SeedError`` if none."""
    from evolve.capture.inductor import capture

    problem_path = Path(problem_path)
    try:
        problem_source = problem_path.read_text(encoding="utf-8")
    except OSError as exc:
        raise SeedError(f"cannot read problem file {problem_path}: {exc.strerror}") from None
    _require_gpu(device)
    first: NotTritonOnly | None = None
    for mode in (None, "max-autotune-triton"):
        try:
            recording = capture(problem_path, device=device, mode=mode, shapes=shapes, dtype=dtype)
        except Exception as exc:  # compiling the user's model: any error is the problem's
            reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
            raise SeedError(f"torch.compile failed on {problem_path.name}: {type(exc).__name__}: {reason}") from exc
        finally:
            _release(device)
        try:
            source = seed_source(recording, problem_source)
        except NotTritonOnly as exc:
            if mode is None and "extern" in str(exc):
                first = exc
                log.info("seed: %s: %s; trying Inductor's max-autotune Triton templates", problem_path.name, exc)
                continue
            raise SeedError(f"{problem_path.name}: no Triton-only seed: {first or exc}") from None
        except ConversionError as exc:
            raise SeedError(f"{problem_path.name}: cannot turn Inductor's code into a seed: {exc}") from None
        kernels = sorted((recording.get("kernels") or {}).keys())
        return CompiledSeed(source, [k for k in kernels if k in source], mode,
                            recording.get("eager_ms"), recording.get("compiled_ms"), recording)
    raise SeedError(f"{problem_path.name}: no Triton-only seed: {first}")


def _require_gpu(device: str) -> None:
    if device == "cpu" or get_platform("auto").name == "cpu":
        raise SeedError("no GPU: seeds from torch.compile need one (Inductor writes Triton kernels only for GPU devices; "
                        "this machine has none visible to torch)")


def _release(device: str) -> None:
    import gc

    gc.collect()
    if device != "cpu":
        get_platform("auto").release_memory()


def describe(seed: CompiledSeed, output: Any) -> str:
    """One line on what ``kevo seed`` wrote."""
    timing = ""
    if seed.eager_ms and seed.compiled_ms:
        timing = f"; torch.compile ran {seed.compiled_ms:.4g} ms against eager {seed.eager_ms:.4g} ms"
    how = " (max-autotune Triton templates)" if seed.mode else ""
    static = ("; some sizes are constants in Inductor's code (the model fixes them): the seed holds at "
              "these shapes only") if seed.recording.get("static_dims") else ""
    return (f"wrote {output}: {len(seed.kernels)} Triton kernel(s) from torch.compile{how}: "
            f"{', '.join(seed.kernels)}{timing}{static}")
