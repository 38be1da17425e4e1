"""The device's busy share over a section of ``bench/gpu_round.sh``, from ``nvidia-smi``'s samples.

Each line of the CSV is ``timestamp, utilization.gpu, utilization.memory, memory.used``
(``--format=csv,noheader,nounits``): the share of the last sample period in which a
kernel ran, the share in which device memory was read or written, and MiB in use. The
summary counts only the samples taken while the device held more than ``--busy-mib``
(the section's work, not its start-up), and prints the mean and the quartiles of each:

    python bench/util_summary.py runs/gpu-round/real-size.util.csv
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path


def summary(path: Path, busy_mib: float) -> str:
    rows = []
    for line in path.read_text().splitlines():
        parts = [p.strip() for p in line.split(",")]
        try:
            rows.append((float(parts[1]), float(parts[2]), float(parts[3])))
        except (IndexError, ValueError):
            continue  # a header, or a sample nvidia-smi could not take
    working = [r for r in rows if r[2] > busy_mib]
    if len(working) < 2:
        return f"{path.name}: {len(rows)} samples, too few with more than {busy_mib:g} MiB in use"

    def figures(values: list[float]) -> str:
        q = statistics.quantiles(values, n=4)
        return f"mean {statistics.mean(values):.0f}%, quartiles {q[0]:.0f}/{q[1]:.0f}/{q[2]:.0f}%"

    return (f"{path.name}: {len(working)} of {len(rows)} samples with more than {busy_mib:g} MiB in use: "
            f"kernel running {figures([r[0] for r in working])}; memory busy {figures([r[1] for r in working])}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("csv", type=Path)
    parser.add_argument("--busy-mib", type=float, default=8192.0, help="samples with less memory in use are left out")
    args = parser.parse_args()
    if not args.csv.exists():
        sys.exit(f"{args.csv}: no samples")
    print(summary(args.csv, args.busy_mib))


if __name__ == "__main__":
    main()
