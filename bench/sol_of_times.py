"""Speed of light of times measured earlier: floors counted here, at the shapes the times were taken at.

A sweep file names the problems and their shapes; a JSON file maps each run's
problem name to the times measured for it (any keys ending in ``_ms``); a
peaks file (``platforms.peaks``'s cache, measured on the device the times come
from) gives the device's achievable bandwidth and rates. The floors are counted
on this machine with fake tensors (nothing is allocated, nothing runs), so a
GPU's times can be put beside its floors anywhere::

    python bench/sol_of_times.py bench/kernelbench_compile_sweep.yaml \\
        docs/data/compile_sweep_times.json docs/data/peaks_h200.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from evolve.sweep_file import load_sweep  # noqa: E402
from fitness.floor import count_work, floor_of, sol  # noqa: E402
from fitness.problem import load_problem  # noqa: E402
from platforms.peaks import Peaks  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("sweep", help="the sweep file the times were measured with")
    parser.add_argument("times", help="JSON: {problem name: {NAME_ms: time, ...}}")
    parser.add_argument("peaks", help="JSON: platforms.peaks' cache file from the device (one entry)")
    args = parser.parse_args(argv)
    entries = json.loads(Path(args.peaks).read_text())
    if len(entries) != 1:
        parser.error(f"{args.peaks}: expected the peaks of one device, found {len(entries)}")
    peaks = Peaks.from_dict(next(iter(entries.values())))
    times = json.loads(Path(args.times).read_text())
    names = sorted({k for row in times.values() for k in row if k.endswith("_ms")})
    print(f"| problem | bound | MB moved | floor ms | {' | '.join(f'{n} (SOL)' for n in names)} |")
    print("|---|---|---|---|" + "---|" * len(names))
    for entry in load_sweep(args.sweep):
        # keyed by the problem file's name or by the run's (the sweep's NNN- prefix dropped)
        name = next((n for n in (Path(entry.config["problem"]["reference"]).stem, entry.name.split("-", 1)[-1])
                     if n in times), None)
        if name is None:
            continue
        problem = load_problem(entry.config["problem"]["reference"], entry.config["problem"].get("shapes") or {})
        floor = floor_of(count_work(problem, "cpu"), peaks)
        cells = [f"{times[name][n]:.4g} ({sol(floor.floor_ms, times[name][n]):.2f})" if times[name].get(n) else "-"
                 for n in names]
        print(f"| {name} | {floor.bound} | {floor.bytes / 1e6:.4g} | {floor.floor_ms:.4g} | {' | '.join(cells)} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
