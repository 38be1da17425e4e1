"""Per problem of a sweep whose seeds came from torch.compile (``seeds: compile``): the
seed's time, the best kernel's time, eager PyTorch and torch.compile, and over the
problems the fraction whose best kernel beats torch.compile and the geometric mean
of best / torch.compile.

Every ratio is on the clean clock: the end-of-run rounds that timed the best,
its seed and torch.compile (default mode) interleaved, each with the device to
itself (``vs_compile`` of ``kevo report --json``): "best vs compile" is the
median over the rounds with the lowest and highest, "seed vs compile" the same
for the seed the best descends from. A run without them says why. The times
taken when the seed was captured (``inductor_recording.json``, while other runs
shared the device) are shown as "in-run" and never used for a ratio.

SOL (speed of light, ``fitness.judge.sol``): each time against the problem's floor on
that GPU (the best verdict's ``floor_ms``: compulsory bytes over the measured
bandwidth, FLOPs over the measured matmul rate), 1 at the floor; "left ms" is
what the best leaves on the table (best minus floor). A best that read below
the floor is flagged ("below floor!"), never a plain SOL.

For GEMMs and convolutions, "precision" is how the best kernel's fp32 dots
multiply (``ieee``, ``tf32x3``, ``tf32``; "-" for a kernel with none), and
"seeds by precision" what the judge said of each seed at each precision (the
template's seed and its precision twins, ``operators.seeds.precision``):
which precision passed the cutoff. ``bench/kernelbench_gemm_sweep.yaml`` is
the sweep of level 1's and 2's GEMMs at their own shapes.

    kevo sweep bench/kernelbench_compile_sweep.yaml --run-dir runs/kb-compile     # on a GPU machine
    python bench/compile_sweep_table.py runs/kb-compile [--json table.json]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from evolve.report_sol import versus  # noqa: E402
from evolve.session import COMPILED_SEED_FILE, RECORDING_FILE  # noqa: E402
from evolve.sweep import FAILED_FILE, SKIPPED_FILE  # noqa: E402
from fitness.judge.floor import sol  # noqa: E402
from operators.seeds.precision import dot_precisions  # noqa: E402
from population_store import STORE_FILE, RunStore  # noqa: E402


def precision(source: str) -> str:
    """How the kernel's dots whose precision it fixes multiply: ``ieee``, ``tf32``, ... ("-": none)."""
    try:
        found = set(dot_precisions(source).values())
    except SyntaxError:
        return "-"
    return "+".join(sorted(found)) or "-"


def run_row(run_dir: Path) -> dict:
    row: dict = {"run": run_dir.name}
    for ended in (SKIPPED_FILE, FAILED_FILE):
        if (run_dir / ended).is_file():
            outcome = json.loads((run_dir / ended).read_text())
            return {**row, "status": outcome["status"], "reason": outcome["reason"]}
    recording = run_dir / RECORDING_FILE
    if recording.is_file():
        rec = json.loads(recording.read_text())
        # torch.compile's default configuration where it was captured (a GEMM's seed comes from max-autotune's
        # Triton templates; the default calls cuBLAS): what a user of torch.compile gets
        row.update(compiled_ms=rec.get("default_compiled_ms") or rec.get("compiled_ms"),
                   compiled_protocol_ms=rec.get("default_compiled_protocol_ms") or rec.get("compiled_protocol_ms"),
                   eager_do_bench_ms=rec.get("eager_ms"),
                   static_dims=rec.get("static_dims"), kernels=len(rec.get("kernels") or {}))
    store_path = run_dir / STORE_FILE
    if not store_path.is_file():
        return {**row, "status": "not started"}
    seed_source = (run_dir / COMPILED_SEED_FILE).read_text() if (run_dir / COMPILED_SEED_FILE).is_file() else None
    with RunStore.open(store_path, readonly=True) as store:
        everyone = store.individuals()
        best = store.best(1)
        counts = store.status_counts()
        figures = versus(store, best)["vs_compile"]  # the clean clock's (evolve.report_sol)
    seed = next((i for i in everyone if i.generation == 0 and (seed_source is None or i.source == seed_source)), None)
    row.update(status="finished" if best else "no accepted kernel", evaluations=len(everyone), statuses=counts)
    by_precision: dict[str, list[str]] = {}  # the seeds' verdicts at each precision
    for first in (i for i in everyone if i.generation == 0 and i.status != "pending"):
        by_precision.setdefault(precision(first.source), []).append(first.status)
    row["seeds_by_precision"] = {k: v for k, v in sorted(by_precision.items()) if k != "-"}
    if seed is not None:
        row["seed_status"] = seed.status
        row["seed_ms"] = seed.runtime_ms
        if seed.status != "accepted" and seed.result:
            row["seed_reason"] = seed.result.get("reason", "")[:200]
    if best:
        row["precision"] = precision(best[0].source)
        row["best_ms"] = best[0].runtime_ms
        row["eager_ms"] = best[0].result.get("reference_ms")
    compiled = figures.get("compile_ms")
    if figures.get("ratio"):
        row.update(best_vs_compile=figures["ratio"], best_vs_compile_range=(figures["low"], figures["high"]),
                   clean_compiled_ms=compiled, faster=figures.get("faster"))
        if figures.get("seed"):
            row["seed_vs_compile"] = figures["seed"]["ratio"]
    else:
        row["no_clean_compile"] = figures.get("why")
    floor = (best[0].result or {}).get("floor_ms") if best else None
    if floor:  # every time against the same floor
        result = best[0].result
        row.update(floor_ms=floor, bound=result.get("bound"), below_floor=bool(result.get("below_floor")),
                   left_ms=max(0.0, row["best_ms"] - floor))
        for name, key in (("best", "best_ms"), ("seed", "seed_ms"), ("eager", "eager_ms"), ("compile", None)):
            value = compiled if key is None else row.get(key)
            row[f"sol_{name}"] = sol(floor, value) if value else None
    return row


def _verdicts(by_precision: dict[str, list[str]] | None) -> str:
    """``ieee: accepted x2; tf32: wrong``: the seeds' verdicts at each precision."""
    if not by_precision:
        return "-"
    return "; ".join(f"{p}: " + ", ".join(f"{s} x{n}" if n > 1 else s for s, n in _counted(v))
                     for p, v in by_precision.items())


def _counted(values: list[str]) -> list[tuple[str, int]]:
    return [(v, values.count(v)) for v in dict.fromkeys(values)]


def _summary(ratios: list[float]) -> tuple[int, str, str]:
    """How many of ``ratios`` (compile / best) are above 1, that share, and their geometric mean."""
    faster = sum(1 for x in ratios if x > 1.0)
    geomean = math.exp(sum(math.log(x) for x in ratios) / len(ratios))
    return faster, f"{faster / len(ratios):.0%}", f"{geomean:.3f}x"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sweep_dir", type=Path)
    parser.add_argument("--json", type=Path, help="also write the rows as JSON here")
    args = parser.parse_args()
    # a run set aside to start again alone (.NNN-name.crowded, evolve.sweep) is a row of its own only
    # until it has run again
    runs = sorted(p for p in args.sweep_dir.iterdir() if p.is_dir() and not p.name.startswith("."))
    names = {p.name for p in runs}
    rows = [run_row(p) for p in runs]
    for aside in sorted(args.sweep_dir.glob(".*.crowded")):
        name = aside.name[1:-len(".crowded")]
        if name not in names:
            first = run_row(aside)
            rows.append({"run": name, "status": "set aside",
                         "reason": "ran out of memory beside other runs; not yet run again alone "
                                   f"(first try: {first['status']}: {first.get('reason', '')[:120]})"})
    rows.sort(key=lambda row: row["run"])

    def ms(value: float | None) -> str:
        return "-" if value is None else f"{value:.4g}"

    def ratio(value: float | None) -> str:
        return f"{value:.2f}x" if value else "-"

    def share(value: float | None) -> str:
        return "-" if value is None else f"{value:.2g}"

    def versus(r: dict) -> str:
        if not r.get("best_vs_compile"):
            return "-"
        low, high = r["best_vs_compile_range"]
        return f"{r['best_vs_compile']:.2f}x ({low:.2f}-{high:.2f})"

    print("| run | seed ms | best ms | eager ms | torch.compile ms | best vs compile | seed vs compile "
          "| in-run torch.compile ms (not a ratio) | floor ms | SOL best | SOL seed | SOL eager | SOL compile | left ms "
          "| precision | seeds by precision | seed |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        seed = r.get("seed_status") or r["status"]
        if r.get("seed_reason") or r.get("reason"):
            seed += f": {(r.get('seed_reason') or r.get('reason'))[:90]}"
        best_sol = "below floor!" if r.get("below_floor") else share(r.get("sol_best"))
        print(f"| {r['run']} | {ms(r.get('seed_ms'))} | {ms(r.get('best_ms'))} | {ms(r.get('eager_ms'))} | "
              f"{ms(r.get('clean_compiled_ms'))} | {versus(r)} | {ratio(r.get('seed_vs_compile'))} | "
              f"{ms(r.get('compiled_protocol_ms') or r.get('compiled_ms'))} | {ms(r.get('floor_ms'))} | {best_sol} | "
              f"{share(r.get('sol_seed'))} | {share(r.get('sol_eager'))} | {share(r.get('sol_compile'))} | "
              f"{ms(r.get('left_ms'))} | {r.get('precision', '-')} | {_verdicts(r.get('seeds_by_precision'))} | "
              f"{seed} |")
    ratios = [r["best_vs_compile"] for r in rows if r.get("best_vs_compile")]
    if ratios:
        faster, share_, geomean = _summary(ratios)
        slower = [r["run"] for r in rows if r.get("faster") == "torch.compile"]
        print(f"\n{len(ratios)} of {len(rows)} problems with an accepted kernel and a clean torch.compile time; "
              f"best faster than torch.compile on {faster} ({share_}); geometric mean of torch.compile / best: "
              f"{geomean}" + (f"; torch.compile faster beyond noise on {', '.join(slower)}" if slower else ""))
    seeds = [r["seed_vs_compile"] for r in rows if r.get("seed_vs_compile")]
    if seeds:
        within = sum(1 for x in seeds if x >= 0.98)
        print(f"seed within 2% of torch.compile (or faster) on {within} of {len(seeds)}")
    without = [f"{r['run']} ({r['no_clean_compile']})" for r in rows if r.get("no_clean_compile") and r.get("best_ms")]
    if without:
        print("no clean torch.compile time: " + "; ".join(without))
    sols = [r["sol_best"] for r in rows if r.get("sol_best") and not r.get("below_floor")]
    flagged = [r["run"] for r in rows if r.get("below_floor")]
    if sols or flagged:
        near = sum(1 for x in sols if x >= 0.8)
        print(f"speed of light: the best reaches SOL 0.8 or more on {near} of {len(sols)} problems"
              + (f" (median SOL {sorted(sols)[len(sols) // 2]:.2f})" if sols else "")
              + (f"; flagged below the floor: {', '.join(flagged)}" if flagged else ""))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
