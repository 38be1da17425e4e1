"""Where the processes of a kevo benchmark spend their wall time, from a sampling profile.

``py-spy record --subprocesses --idle --threads --format raw`` on a benchmark's
process samples it and every process under it (Ray's raylet and actors, the
evaluators' workers), waiting threads included. This reads that file and
prints, for each kind of process (the driver, Ray actors, kevo's workers),
how many seconds its threads were sampled and which functions held them:
kevo's own (inclusive: the function or anything it called) and the leaves
(where the thread actually was, in stacks that pass through kevo's code:
computing, compiling, or waiting on a lock or a pipe). Line numbers are dropped, so a function is one row.

    py-spy record --pid $(pgrep -f throughput_bench) --subprocesses --idle --threads \\
        --rate 50 --format raw -o spy.txt --duration 60
    python bench/spy_summary.py spy.txt --rate 50 --top 20
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import Counter, defaultdict
from pathlib import Path

#: kevo's own packages: their functions are the rows of the inclusive table.
OWN = ("fitness/", "evolve/", "platforms/", "operators/", "population_store/", "bench/")
_FRAME = re.compile(r"^(?P<func>.*) \((?P<file>[^():]*)(?::\d+)?\)$")


def role(command: str) -> str:
    """The kind of process a py-spy ``process PID:"command"`` frame names."""
    if "fitness.worker" in command:
        return "worker"
    if "ray::" in command or "default_worker.py" in command:
        return "ray actor"
    if "raylet" in command or "gcs_server" in command or "dashboard" in command or "log_monitor" in command:
        return "ray service"
    return "driver"


def short(frame: str) -> str:
    """``func (path/to/file.py:123)`` as ``func (file.py)`` with the package folder kept."""
    match = _FRAME.match(frame)
    if match is None:
        return frame
    parts = match["file"].split("/")
    return f"{match['func']} ({'/'.join(parts[-2:])})"


def own(frame: str) -> bool:
    match = _FRAME.match(frame)
    return match is not None and any(match["file"].startswith(p) or f"/{p}" in match["file"] for p in OWN)


def parse(lines: list[str]) -> list[tuple[str, str, list[str], int]]:
    """(process role, thread name, frames outermost first, samples) for each line of a raw file."""
    rows = []
    for line in lines:
        line = line.rstrip("\n")
        if not line:
            continue
        stack, _, count = line.rpartition(" ")
        if not count.isdigit():
            continue
        frames = stack.split(";")
        kind, thread, body = "driver", "", []
        for frame in frames:
            if frame.startswith("process ") and not body:
                kind = role(frame)
            elif frame.startswith("thread (") and not body:
                thread = frame.split(": ", 1)[-1] if ": " in frame else frame
            else:
                body.append(frame)
        rows.append((kind, thread, body, int(count)))
    return rows


def summarise(rows: list[tuple[str, str, list[str], int]], rate: float, top: int) -> dict:
    """Per role: seconds by thread name, kevo's functions (inclusive) and the leaves, the largest first."""
    out: dict = {}
    by_role: dict[str, list] = defaultdict(list)
    for row in rows:
        by_role[row[0]].append(row)
    for kind, group in sorted(by_role.items()):
        threads: Counter = Counter()
        inclusive: Counter = Counter()
        leaves: Counter = Counter()
        for _, thread, body, count in group:
            threads[thread] += count
            mine = {short(f) for f in body if own(f)}
            for frame in mine:
                inclusive[frame] += count
            # only where kevo's code is on the stack: the rest is Ray's and Python's own threads
            leaves[short(body[-1]) if mine else "(stacks without kevo's code)"] += count
        out[kind] = {
            "sampled_s": round(sum(threads.values()) / rate, 2),
            "threads_s": {t: round(n / rate, 2) for t, n in threads.most_common(top)},
            "own_inclusive_s": {f: round(n / rate, 2) for f, n in inclusive.most_common(top)},
            "leaves_s": {f: round(n / rate, 2) for f, n in leaves.most_common(top)},
        }
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("raw", type=Path, help="py-spy's --format raw output")
    parser.add_argument("--rate", type=float, default=100.0, help="the sampling rate py-spy ran at (--rate)")
    parser.add_argument("--top", type=int, default=20, help="rows per table")
    parser.add_argument("--json", action="store_true", help="the summary as JSON")
    args = parser.parse_args(argv)
    if args.rate <= 0 or args.top < 1:
        parser.error("--rate must be > 0 and --top >= 1")
    try:
        lines = args.raw.read_text().splitlines()
    except OSError as exc:
        parser.error(f"cannot read {args.raw}: {exc.strerror}")
    summary = summarise(parse(lines), args.rate, args.top)
    if not summary:
        print(f"{args.raw}: no samples", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(summary, indent=1))
        return 0
    for kind, part in summary.items():
        print(f"== {kind}: {part['sampled_s']} s of thread time sampled")
        for title, key in (("threads", "threads_s"), ("kevo's functions, inclusive", "own_inclusive_s"),
                           ("where the threads were (leaves)", "leaves_s")):
            print(f"  -- {title}")
            for name, seconds in part[key].items():
                print(f"  {seconds:9.2f}  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
