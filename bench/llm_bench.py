"""What a model writes for each problem of a KernelBench folder: how often it is right, and how often faster.

Any litellm model (your own key, or a server of your own with --api-base).
For every problem file, at its own shapes (or --shape overrides): the model
is asked for --samples first kernels from the reference alone, with kevo's
prompt (platform guidance, the run's one cutoff); each is judged by kevo's
evaluator, the full protocol (held-out shapes, fresh inputs, probes, the
timer); a kernel that fails goes back to the model with its verdict for up
to --repair-turns turns (kevo's repair prompt; 0: one shot). Per problem:

- ``correct_first``, ``correct``: the fraction of samples accepted at the
  first try, and after the repair turns;
- ``fast_1_eager``: the fraction correct and faster than eager PyTorch (the
  evaluator's own reference time); ``fast_1_compiled``: correct and faster
  than torch.compile, where that time is known (``--compiled``: the JSON
  lines of bench/sol_bench.py at the same shapes; or ``--measure-compile``:
  timed here with kevo's protocol), else null;
- the requests, prompt and completion tokens and the dollars they cost
  (litellm's price table, or ``--price IN OUT`` in USD per million tokens).

Each problem's row is appended to ``--out`` (JSON lines) when it is done;
run the same command again and problems with a row are skipped.

    OPENAI_API_KEY=... python bench/llm_bench.py ../shared/kernelbench/level1 --model openai/gpt-4o \\
        --samples 4 --repair-turns 2 --compiled sol_level1.jsonl --out llm_level1.jsonl
    python bench/llm_bench.py problems_folder --model hosted_vllm/Qwen/Qwen2.5-Coder-32B-Instruct \\
        --api-base http://localhost:8000/v1 --device cpu --shape batch_size=4 --shape dim=100 --out llm.jsonl
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.per_problem import add_folder_options, chosen_files, problem_rows, recorded  # noqa: E402
from bench.shapes import apply_shapes  # noqa: E402
from bench.sol_bench import time_forward  # noqa: E402
from fitness import Evaluator, screen, shape_knobs  # noqa: E402
from operators.llm import (  # noqa: E402
    NO_KERNEL,
    Findings,
    LlmProposer,
    LlmSettings,
    LlmSetupError,
    Price,
    ProblemContext,
    Proposal,
    Repair,
    Request,
    seed_requests,
)
from platforms.guidance import guidance  # noqa: E402


@dataclasses.dataclass
class Sample:
    """One sample of a problem: its attempts' verdicts, and the request for its next turn."""

    request: Request | None
    verdicts: list[dict[str, Any]] = dataclasses.field(default_factory=list)

    @property
    def accepted(self) -> dict[str, Any] | None:
        return next((v for v in self.verdicts if v["status"] == "accepted"), None)


def bench_problem(path: Path, shapes: dict[str, int], args: argparse.Namespace, settings: LlmSettings,
                  compiled_ms: float | None) -> dict[str, Any]:
    """One problem's row: its samples judged, turn by turn, and what they cost."""
    usage = collections.Counter()
    with Evaluator(path, platform=args.device, shapes=shapes, dtype=args.dtype) as evaluator:
        knobs = {**{k.name: k.value for k in shape_knobs(path)}, **shapes}
        context = ProblemContext(path.read_text(encoding="utf-8"), evaluator.cutoff,
                                 guidance(evaluator.platform.name), screen, knobs)
        if args.measure_compile:
            compiled_ms = measure_compiled(path, shapes, args.dtype, evaluator.platform)
        with LlmProposer(settings, None, context) as proposer:
            findings = Findings(dtype=args.dtype)
            samples = [Sample(dataclasses.replace(r, findings=findings)) for r in seed_requests(args.samples)]
            for turn in range(args.repair_turns + 1):
                asking = [s for s in samples if s.request is not None]
                if not asking:
                    break
                proposals = proposer.propose([s.request for s in asking])
                for sample, proposal in zip(asking, proposals):
                    usage.update(requests=int(not proposal.usage.cached), prompt_tokens=proposal.usage.prompt_tokens,
                                 completion_tokens=proposal.usage.completion_tokens)
                    usage["cost_usd"] += proposal.usage.cost_usd
                    judge(sample, proposal, evaluator, turn, args)
    return summary(samples, usage, compiled_ms)


def judge(sample: Sample, proposal: Proposal, evaluator: Evaluator, turn: int, args: argparse.Namespace) -> None:
    """Judge a sample's proposal; a failure the model can fix becomes the sample's next request (while turns last)."""
    request, sample.request = sample.request, None
    assert request is not None
    if proposal.source is None:
        sample.verdicts.append({"turn": turn, "status": NO_KERNEL, "reason": proposal.reason})
        last = request.repair.source if request.repair is not None else None
        repair = Repair(turn + 1, args.repair_turns, NO_KERNEL, proposal.reason,
                        proposal.draft if proposal.draft is not None else last, proposal.reply)
        repairable = proposal.repairable
    else:
        result = evaluator.evaluate(proposal.source)
        sample.verdicts.append({"turn": turn, "status": result.status.value, "reason": result.reason[:300],
                                "runtime_ms": result.runtime_ms, "reference_ms": result.reference_ms})
        repair = Repair(turn + 1, args.repair_turns, result.status.value, result.reason, proposal.source)
        repairable = not result.accepted and not result.harness_failure
    if repairable and turn < args.repair_turns:
        sample.request = dataclasses.replace(request, sample=request.sample + args.samples, repair=repair)


def summary(samples: list[Sample], usage: collections.Counter, compiled_ms: float | None) -> dict[str, Any]:
    """A problem's row from its samples."""
    n = len(samples)
    accepted = [s.accepted for s in samples if s.accepted is not None]
    eager = [v["reference_ms"] / v["runtime_ms"] for v in accepted if v["runtime_ms"] and v["reference_ms"]]
    row = {"samples": n, "correct_first": sum(s.verdicts[0]["status"] == "accepted" for s in samples) / n,
           "correct": len(accepted) / n, "fast_1_eager": sum(x > 1 for x in eager) / n,
           "best_speedup_eager": max(eager, default=None), "compiled_ms": compiled_ms, "fast_1_compiled": None,
           "best_speedup_compiled": None,
           "statuses": dict(collections.Counter(v["status"] for s in samples for v in s.verdicts)),
           "turns_to_correct": [v["turn"] for v in accepted], **usage}
    row["cost_usd"] = round(usage["cost_usd"], 6)
    if compiled_ms:
        compiled = [compiled_ms / v["runtime_ms"] for v in accepted if v["runtime_ms"]]
        row["fast_1_compiled"] = sum(x > 1 for x in compiled) / n
        row["best_speedup_compiled"] = max(compiled, default=None)
    row["verdicts"] = [s.verdicts for s in samples]
    return row


def measure_compiled(path: Path, shapes: dict[str, int], dtype: str | None, platform: Any) -> float:
    """torch.compile's time for the reference, under kevo's protocol (compiled before it is timed)."""
    import torch

    from fitness.problems.problem import build_model, load_problem, make_inputs
    from fitness.settings import EvalSettings

    problem = load_problem(path, shapes, dtype)
    compiled = torch.compile(build_model(problem.Model, problem, EvalSettings().init_seed, platform.device()))
    with torch.no_grad():
        compiled(*make_inputs(problem, EvalSettings().fixed_seeds[0], platform.device()))
    try:
        return time_forward(compiled, problem, platform)
    finally:
        torch._dynamo.reset()


def known_compiled(path: Path | None) -> dict[str, dict[str, Any]]:
    """torch.compile's times by problem, from bench/sol_bench.py's JSON lines (with the shapes they were taken at)."""
    if path is None:
        return {}
    rows = [row for row in recorded(path).values() if row.get("compiled_ms")]
    return {row["problem"]: row for row in rows}


def table(rows: list[dict[str, Any]]) -> str:
    def share(value: float | None) -> str:
        return "-" if value is None else f"{value:.0%}"

    lines = [f"{'problem':40} {'correct':>7} {'1st try':>7} {'fast_1':>6} {'vs compile':>10} {'tokens':>9} "
             f"{'USD':>8}"]
    for r in rows:
        if "error" in r:
            lines.append(f"{r['problem'][:40]:40} error: {r['error'][:100]}")
            continue
        tokens = r.get("prompt_tokens", 0) + r.get("completion_tokens", 0)
        lines.append(f"{r['problem'][:40]:40} {share(r['correct']):>7} {share(r['correct_first']):>7} "
                     f"{share(r['fast_1_eager']):>6} {share(r['fast_1_compiled']):>10} {tokens:>9} "
                     f"{r['cost_usd']:>8.4f}")
    done = [r for r in rows if "error" not in r]
    if done:
        mean = {k: sum(r[k] for r in done) / len(done) for k in ("correct", "correct_first", "fast_1_eager")}
        lines.append(f"{'mean over ' + str(len(done)) + ' problems':40} {share(mean['correct']):>7} "
                     f"{share(mean['correct_first']):>7} {share(mean['fast_1_eager']):>6} {'':>10} "
                     f"{sum(r.get('prompt_tokens', 0) + r.get('completion_tokens', 0) for r in done):>9} "
                     f"{sum(r['cost_usd'] for r in done):>8.4f}")
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_folder_options(parser)
    parser.add_argument("--model", required=True, help="a litellm model string, e.g. openai/gpt-4o")
    parser.add_argument("--api-base", help="a server of your own, e.g. http://localhost:8000/v1")
    parser.add_argument("--api-key-env", help="the environment variable that holds the key (default: litellm's)")
    parser.add_argument("--price", nargs=2, type=float, metavar=("IN", "OUT"),
                        help="USD per million prompt and completion tokens, for a model litellm has no price for")
    parser.add_argument("--samples", type=int, default=4, help="first kernels asked for per problem")
    parser.add_argument("--repair-turns", type=int, default=2, help="times a failed kernel goes back (0: none)")
    parser.add_argument("--concurrency", type=int, default=4, help="requests in flight at once")
    parser.add_argument("--temperature", type=float, default=0.8)
    parser.add_argument("--max-tokens", type=int, help="per reply (default: kevo's for the kind of model)")
    parser.add_argument("--timeout-s", type=float, default=300.0, help="per request")
    compiled = parser.add_mutually_exclusive_group()
    compiled.add_argument("--compiled", type=Path, help="bench/sol_bench.py's JSON lines: torch.compile's times")
    compiled.add_argument("--measure-compile", action="store_true", help="time torch.compile here")
    args = parser.parse_args(argv)
    if args.samples < 1 or args.repair_turns < 0:
        parser.error("--samples must be at least 1 and --repair-turns at least 0")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    files = chosen_files("llm_bench", args)
    if files is None:
        return 2
    prices = {args.model: Price(*args.price)} if args.price else {}
    settings = LlmSettings({args.model: 1.0}, api_base=args.api_base, api_key_env=args.api_key_env,
                           temperature=args.temperature, max_tokens=args.max_tokens, timeout_s=args.timeout_s,
                           concurrency=args.concurrency, prices=prices)
    compiled = known_compiled(args.compiled)

    def head(path: Path) -> dict[str, Any]:
        shapes = apply_shapes(path, args.shape)
        key = json.dumps([path.stem, shapes, args.dtype, args.model, args.samples, args.repair_turns, args.device])
        return {"key": key, "problem": path.stem, "shapes": shapes, "model": args.model}

    def measure(path: Path, named: dict[str, Any]) -> dict[str, Any]:
        known = compiled.get(path.stem)
        compiled_ms = known["compiled_ms"] if known and known.get("shapes") == named["shapes"] else None
        return bench_problem(path, named["shapes"], args, settings, compiled_ms)

    try:  # no key, a rejected key, an unknown model: every problem would fail alike
        rows = problem_rows(files, args.out, head, measure, mark_started=False, stop_on=(LlmSetupError,))
    except LlmSetupError as exc:
        print(f"llm_bench: {exc}", file=sys.stderr)
        return 2
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
