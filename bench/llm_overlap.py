"""How busy an LLM-driven search keeps its evaluators while the model writes (for docs/RESULTS.md).

The run: the elementwise problem on the CPU platform (Triton's interpreter,
the real evaluation protocol) at small shapes, or on a GPU (``--platform cuda``
with ``--shape`` for its sizes), kevo's default weights for a
run that names a model, population 4, one evaluator in this process. The
model is a loopback server (``tests/llm_replay_server.py``) that answers
every request after ``--delay`` seconds with a correct kernel: the problem's
seed (``problems/elementwise/seed.py``) at sizes of its own, a new one for each
request (the sizes cycle; a module constant numbers the variant), through
litellm's real HTTP path.

Busy share = time candidates were being evaluated / wall time, over the
window from the start of the first LLM child's evaluation (the first reply
has landed: the pipeline is started) to the end of the last evaluation. The
share over the window from the first child of any operator is given too
(``from first child``): it counts the first round trip to the model as idle
time, which only a long run amortises. Both loops are measured alike.

``--old REV`` runs the same search with kevo as it was at git revision REV
(for instance the loop that waited for a generation's whole LLM batch before
it submitted any child), from a copy of that tree in a temporary folder,
against the same loopback model; each run is a process of its own.

    python bench/llm_overlap.py --delay 10 --evaluations 120 --concurrency 4 32 --old 41071d7
    python bench/llm_overlap.py --delay 2 --evaluations 12     # a quick look
    python bench/llm_overlap.py --platform cuda --shape batch_size=4096 --shape dim=16384 --delay 10 \
        --evaluations 60 --concurrency 4 16                    # on a GPU machine
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROBLEM = ROOT / "problems" / "elementwise"
SHAPES = {"batch_size": 4, "dim": 100}
MODEL = "openai/gpt-4o-mini"  # litellm has its price; the loopback server answers as it
SEED = PROBLEM / "seed.py"  # every reply is this seed rewritten: its text is read, never copied here
#: What a reply rewrites in the seed: its launch sizes, its gate, and the line its kernel starts on.
REWRITES = (re.compile(r"BLOCK_SIZE=\d+, num_warps=\d+"), re.compile(r"gate = .*"),
            re.compile(r"^@triton\.jit", re.MULTILINE))
BLOCKS, WARPS = (16, 32, 64, 128, 256, 512, 1024, 2048), (1, 2, 4, 8)
GATES = ("tl.sigmoid(y)", "1.0 / (1.0 + tl.exp(-y))")


def kernel_reply(n: int) -> str:
    """The n-th answer: the seed, still correct, with sizes and a gate of its own and a module
    constant that numbers the variant (so each n is a new kernel)."""
    block, warps = BLOCKS[n % len(BLOCKS)], WARPS[(n // len(BLOCKS)) % len(WARPS)]
    gate = GATES[(n // (len(BLOCKS) * len(WARPS))) % len(GATES)]
    kernel = SEED.read_text(encoding="utf-8")
    replacements = (f"BLOCK_SIZE={block}, num_warps={warps}", f"gate = {gate}", f"VARIANT = {n}\n\n\n@triton.jit")
    for pattern, replacement in zip(REWRITES, replacements):
        kernel, found = pattern.subn(replacement, kernel, count=1)
        if not found:
            raise ValueError(f"{SEED} has no {pattern.pattern!r} for the loopback model to rewrite")
    return f"A block of {block} with {warps} warps.\n\n```python\n{kernel}```\n"


def _knob(text: str) -> tuple[str, int]:
    name, _, value = text.partition("=")
    if not name or not value.isdigit():
        raise argparse.ArgumentTypeError(f"{text!r}: expected NAME=VALUE with an integer value")
    return name, int(value)


@contextlib.contextmanager
def loopback_model(delay_s: float):
    """A loopback OpenAI-compatible server answering each request with ``kernel_reply`` after ``delay_s``."""
    sys.path.insert(0, str(ROOT))
    from tests.llm_replay_server import FIXTURES, Reply, ReplayServer

    template = json.loads((FIXTURES / "whole_file.json").read_text(encoding="utf-8"))

    class Model(ReplayServer):
        def _next(self, body, headers):
            n = self.record(body)
            answer = json.loads(json.dumps(template))
            answer["choices"][0]["message"]["content"] = kernel_reply(n)
            answer["usage"] = {"prompt_tokens": 3000, "completion_tokens": 500, "total_tokens": 3500}
            return Reply(answer, delay_s=delay_s)

    with Model() as server:
        yield server


def search_config(api_base: str, evaluations: int, concurrency: int, platform: str = "cpu",
                  shapes: dict | None = None) -> dict:
    return {"problem": {"reference": str(PROBLEM / "reference.py"), "seeds": [str(PROBLEM / "seed.py")],
                        "shapes": shapes or SHAPES},
            "search": {"population_size": 4, "max_evaluations": evaluations, "seed": 0},
            "llm": {"model": MODEL, "api_base": api_base, "concurrency": concurrency, "timeout_s": 120,
                    "retries": 0},
            "platform": platform}


def child(args: argparse.Namespace) -> int:
    """One run, with the kevo of ``--tree``; prints one JSON object: each evaluation's span and operator."""
    sys.path.insert(0, str(args.tree))
    from evolve.dispatch.base import InProcessDispatcher, evaluator_info
    from evolve.dispatch.pool import make_evaluator
    from evolve.session import start_run
    from population_store import RunStore

    spans: list[list] = []

    class Timed(InProcessDispatcher):
        def next_result(self):
            started = time.monotonic()
            key, result = super().next_result()
            spans.append([key, started, time.monotonic()])
            return key, result

    @contextlib.contextmanager
    def dispatchers(config):
        with contextlib.closing(make_evaluator(config)) as evaluator:
            yield Timed(evaluator), evaluator_info(evaluator)

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "run.json"
        path.write_text(json.dumps(search_config(args.api_base, args.evaluations, args.concurrency[0], args.platform,
                                                 dict(args.shape) or None)))
        began = time.monotonic()
        reason = start_run(path, Path(folder) / "run", dispatchers=dispatchers)
        wall = time.monotonic() - began
        with RunStore.open(Path(folder) / "run" / "run.sqlite", readonly=True) as store:
            operators = {i.id: i.operator for i in store.individuals()}
    print(json.dumps({"reason": reason, "wall_s": wall,
                      "spans": [[operators.get(key, "kevo"), start, end] for key, start, end in spans]}))
    return 0


def busy_share(spans: list[list], first: int) -> tuple[float, float]:
    """(time evaluating / wall time, the window in seconds) from the start of ``spans[first]`` to the last end."""
    window = spans[-1][2] - spans[first][1]
    return sum(end - start for _, start, end in spans[first:]) / window, window


def measure(tree: Path, api_base: str, args: argparse.Namespace) -> dict:
    command = [sys.executable, str(Path(__file__).resolve()), "--child", "--tree", str(tree), "--api-base",
               api_base, "--evaluations", str(args.evaluations), "--concurrency", str(args.concurrency),
               "--platform", args.platform, *[f"--shape={k}={v}" for k, v in args.shape]]
    env = {**os.environ, "OPENAI_API_KEY": "sk-loopback-0123456789", "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    done = subprocess.run(command, env=env, capture_output=True, text=True, cwd=tree, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"the run with {tree} failed:\n{done.stderr[-3000:]}")
    run = json.loads(done.stdout.strip().splitlines()[-1])
    spans = run["spans"]
    first_llm = next(i for i, (operator, _, _) in enumerate(spans) if operator.startswith("llm_"))
    share, window = busy_share(spans, first_llm)
    from_child, _ = busy_share(spans, 1)  # spans[0] is the seed
    operators = [operator for operator, _, _ in spans]
    return {"reason": run["reason"], "evaluations": len(spans), "wall_s": round(run["wall_s"], 1),
            "busy_share": round(share, 3), "window_s": round(window, 1), "busy_from_first_child": round(from_child, 3),
            "llm_children": sum(o.startswith("llm_") for o in operators),
            "mean_evaluation_s": round(sum(e - s for _, s, e in spans) / len(spans), 2)}


@contextlib.contextmanager
def tree_at(revision: str):
    """This repository's tree at ``revision``, in a temporary folder."""
    with tempfile.TemporaryDirectory() as folder:
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", revision], capture_output=True, check=True)
        subprocess.run(["tar", "-x", "-C", folder], input=archive.stdout, check=True)
        yield Path(folder)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--delay", type=float, default=10.0, help="seconds the model takes to answer")
    parser.add_argument("--evaluations", type=int, default=40, help="search.max_evaluations of each run")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[4],
                        help="llm.concurrency of the runs of this tree (the old tree runs with the first)")
    parser.add_argument("--old", metavar="REV", help="also run kevo as it was at this git revision")
    parser.add_argument("--out", type=Path, help="write the figures here as JSON")
    parser.add_argument("--platform", choices=("cpu", "cuda"), default="cpu", help="where candidates run (default cpu)")
    parser.add_argument("--shape", type=_knob, action="append", default=[], metavar="NAME=VALUE",
                        help=f"the problem's shapes (default {SHAPES})")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--tree", type=Path, default=ROOT, help=argparse.SUPPRESS)
    parser.add_argument("--api-base", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        return child(args)
    runs = ([(f"old ({args.old})", args.concurrency[0])] if args.old else []) + \
        [("this tree", c) for c in args.concurrency]
    rows = []
    with loopback_model(args.delay) as server:
        for name, concurrency in runs:
            asked = len(server.requests)
            with (tree_at(args.old) if name.startswith("old") else contextlib.nullcontext(ROOT)) as tree:
                row = measure(tree, server.base_url, argparse.Namespace(**{**vars(args), "concurrency": concurrency}))
            rows.append({"loop": name, "concurrency": concurrency, **row, "requests": len(server.requests) - asked})
    shapes = dict(args.shape) or SHAPES
    print(f"loopback model answering after {args.delay:g} s; platform {args.platform}, shapes {shapes}; "
          f"{args.evaluations} evaluations")
    print(f"{'loop':20} {'llm.conc':>8} {'busy':>6} {'window s':>8} {'from 1st child':>14} {'wall s':>7} "
          f"{'LLM kids':>8} {'requests':>8} {'eval s':>6}")
    for r in rows:
        print(f"{r['loop']:20} {r['concurrency']:>8} {r['busy_share']:>6.0%} {r['window_s']:>8} "
              f"{r['busy_from_first_child']:>14.0%} {r['wall_s']:>7} {r['llm_children']:>8} {r['requests']:>8} "
              f"{r['mean_evaluation_s']:>6}")
    if args.out:
        args.out.write_text(json.dumps({"delay_s": args.delay, "evaluations": args.evaluations,
                                        "platform": args.platform, "shapes": shapes, "runs": rows},
                                       indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
