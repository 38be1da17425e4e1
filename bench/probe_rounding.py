"""How far a problem's reference rounds on kevo's probes, and how far a candidate lands from it.

For each probe (random signs; random signs scaled by ``--factor``; that
scale alone: ``fitness.probes``) and each of ``--draws`` draws, one JSON line:
the reference's outputs' scale there, ``e`` = max |reference - reference in
float64| (``fitness.probe_rounding.own_rounding``: what a probe's cutoff
covers, ``ROUNDING_MARGIN`` times), the cutoff that follows the reference's
scale alone, and, with ``--candidate``, max |candidate - reference|. The
draws are this script's own (seeds 0, 1, ...), not the secret ones an
evaluation makes; the factor is given, not drawn.

    python bench/probe_rounding.py $KB/level1/97_ScaledDotProductAttention.py \\
        --candidate bench/candidates/attention_math.py --factor 167 --draws 3
    python bench/probe_rounding.py problems/softmax/reference.py --device cpu --shape batch_size=8 --shape dim=64
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from fitness.cutoff import output_scale  # noqa: E402
from fitness.probe_rounding import ROUNDING_MARGIN, own_rounding, scaled_cutoff  # noqa: E402
from fitness.probes import Probe  # noqa: E402
from fitness.problem import build_model, load_problem, make_inputs  # noqa: E402
from platforms import get_platform  # noqa: E402

PROBES = (("signs", True, False), ("signs, scaled", True, True), ("scaled", False, True))


def _outputs(out) -> list:
    return [o.detach() for o in (out if isinstance(out, (tuple, list)) else [out])]


def main(argv: list[str] | None = None) -> int:
    import torch

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("reference", help="a problem file (KernelBench's format)")
    parser.add_argument("--candidate", default=None, help="a file with a ModelNew to measure against the reference")
    parser.add_argument("--shape", action="append", default=[], metavar="NAME=N")
    parser.add_argument("--factor", type=float, default=167.0)
    parser.add_argument("--draws", type=int, default=3)
    parser.add_argument("--cutoff", type=float, default=0.01, help="the problem's own cutoff (KernelBench's 1e-2)")
    parser.add_argument("--device", default="auto")
    args = parser.parse_args(argv)
    shapes = {k: int(v) for k, v in (s.split("=", 1) for s in args.shape)}
    platform = get_platform(args.device)
    problem = load_problem(args.reference, shapes or None)
    model = build_model(problem.Model, problem, 0, platform.device())
    candidate = None
    if args.candidate:
        cand_problem = load_problem(args.reference, shapes or None)
        namespace: dict = {}
        exec(compile(Path(args.candidate).read_text(encoding="utf-8"), args.candidate, "exec"), namespace)
        candidate = build_model(namespace["ModelNew"], cand_problem, 0, platform.device())
    with torch.no_grad():
        main_scale = output_scale(_outputs(model(*make_inputs(problem, 0, platform.device()))))
    for draw in range(args.draws):
        for name, signs, scaled in PROBES:
            started = time.monotonic()
            probe = Probe(signs=signs, factor=args.factor if scaled else 1.0)
            with torch.no_grad():
                refs = _outputs(model(*make_inputs(problem, draw, platform.device(), probe)))
            scale = output_scale(refs)
            e = own_rounding(model, lambda: make_inputs(problem, draw, platform.device(), probe), refs, platform)
            from_scale = scaled_cutoff(args.cutoff, scale, main_scale)
            row = {"probe": name, "draw": draw, "factor": probe.factor, "scale": scale, "e": e,
                   "margin": ROUNDING_MARGIN, "cutoff_from_scale": from_scale,
                   "cutoff": max(from_scale, ROUNDING_MARGIN * e)}
            if candidate is not None:
                with torch.no_grad():
                    outs = _outputs(candidate(*make_inputs(problem, draw, platform.device(), probe)))
                row["candidate_vs_reference"] = max(float((o.double() - r.double()).abs().max())
                                                    for o, r in zip(outs, refs))
                del outs
            del refs
            platform.release_memory()
            row["seconds"] = round(time.monotonic() - started, 2)
            print(json.dumps(row), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
