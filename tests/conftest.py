"""Shared fixtures: evaluators are expensive to start (a worker imports torch
and Triton), so one per (problem, shapes) serves a whole test session; the LLM
tests' loopback-only world (``offline_llm``)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.llm_replay_server import loopback_only

ROOT = Path(__file__).resolve().parents[1]
#: A test's child Python: the checkout first, then the path this process was given (a device's numpy, carried).
PYTHONPATH = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
PROBLEMS = ROOT / "problems"
#: KernelBench's problem files (read in place, never copied; KEVO_KERNELBENCH names another place, a GPU
#: machine's carried copy): tests that need them skip without.
KERNELBENCH = Path(os.environ.get("KEVO_KERNELBENCH") or ROOT.parent / "shared" / "kernelbench")

# Small shapes for the CPU interpreter: odd sizes, rows wider than one block.
SMALL_SHAPES = {
    "elementwise": {"batch_size": 4, "dim": 100},
    "softmax": {"batch_size": 4, "dim": 100},
    "gelu": {"batch_size": 4, "dim": 100},
    "rmsnorm": {"batch_size": 9, "dim": 300},  # dim is the weight's, so held-out shapes vary the batch (8 or more)
    "sum_middle": {"batch_size": 2, "dim1": 37, "dim2": 50},
    "matmul": {"M": 33, "K": 47, "N": 29},
    "matvec": {"M": 33, "K": 300},
}


def gpu_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


def pytest_collection_modifyitems(config, items):
    if gpu_available():
        return
    skip = pytest.mark.skip(reason="needs a GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def problem_path(problem: str) -> Path:
    """A suite problem's reference (``softmax``), or a KernelBench file
    (``kernelbench/level1/19_ReLU``; the test skips when KernelBench is not there)."""
    if problem.startswith("kernelbench/"):
        path = KERNELBENCH / (problem.removeprefix("kernelbench/") + ".py")
        if not path.is_file():
            pytest.skip(f"KernelBench's problem files are not at {KERNELBENCH}")
        return path
    return PROBLEMS / problem / "reference.py"


class EvaluatorCache:
    def __init__(self) -> None:
        self._cache: dict = {}

    def get(self, problem: str, platform: str = "cpu", shapes: dict | None = None, **kwargs):
        from fitness import Evaluator

        shapes = SMALL_SHAPES[problem] if shapes is None else shapes
        key = (problem, platform, tuple(sorted(shapes.items())), repr(sorted(kwargs.items())))
        if key not in self._cache:
            self._cache[key] = Evaluator(problem_path(problem), platform=platform, shapes=shapes, **kwargs)
        return self._cache[key]

    def close(self) -> None:
        for evaluator in self._cache.values():
            evaluator.close()


@pytest.fixture(scope="session")
def evaluators():
    cache = EvaluatorCache()
    yield cache
    cache.close()


@pytest.fixture(scope="session")
def device_kind() -> str:
    return "cuda" if gpu_available() else "cpu"


#: The API key the LLM tests hand litellm (key-shaped; the recorded 401 reply quotes it).
TEST_API_KEY = "sk-test-kevo-0123456789abcdef"


@contextlib.contextmanager
def offline() -> Iterator[None]:
    """An API key for the loopback replay server (``tests/llm_replay_server.py``), and no
    connection but to 127.0.0.1: any other fails the test."""
    with loopback_only(), pytest.MonkeyPatch.context() as patch:
        patch.setenv("OPENAI_API_KEY", TEST_API_KEY)
        yield


@pytest.fixture
def offline_llm() -> Iterator[None]:
    """``offline`` around a test; an LLM test module takes it for every test with
    ``pytestmark = pytest.mark.usefixtures("offline_llm")``."""
    with offline():
        yield


os.environ.setdefault("PYTHONUNBUFFERED", "1")
