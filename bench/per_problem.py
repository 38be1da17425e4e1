"""A bench over a folder of KernelBench-format problem files, one row per problem
(``bench/sol_bench.py``, ``bench/llm_bench.py``): the options that choose the
problems, the files they choose, and the rows, each appended to ``--out`` (JSON
lines) as soon as it is done, so that the same command run again goes on where
it stopped."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fitness.problems.problem import DTYPES
from platforms import PLATFORM_NAMES

#: KernelBench's level 1: under $KB (as bench/gpu_round.sh says it), else ../shared/kernelbench beside the checkout.
DEFAULT_FOLDER = Path(os.environ.get("KB") or Path(__file__).resolve().parents[2] / "shared" / "kernelbench") / "level1"
#: The error of a problem that was under way when an earlier run of the bench died.
INTERRUPTED = "interrupted: an earlier run stopped during it"


def add_folder_options(parser: argparse.ArgumentParser) -> None:
    """The folder of problem files, ``--out``, ``--only``, ``--limit``, ``--device``, ``--shape`` and ``--dtype``."""
    parser.add_argument("folder", nargs="?", type=Path, default=DEFAULT_FOLDER,
                        help=f"a folder of KernelBench-format problem files (default {DEFAULT_FOLDER})")
    parser.add_argument("--out", type=Path, required=True, help="JSON lines, appended as each problem is done")
    parser.add_argument("--only", help="problems whose file name matches this regex")
    parser.add_argument("--limit", type=int, help="at most this many problems")
    parser.add_argument("--device", default="auto", choices=PLATFORM_NAMES)
    parser.add_argument("--shape", action="append", default=[], metavar="NAME=VALUE",
                        help="override a shape knob of every problem that has it (repeatable)")
    parser.add_argument("--dtype", choices=DTYPES, help="cast inputs and parameters to this")


def chosen_files(tool: str, args: argparse.Namespace) -> list[Path] | None:
    """The problem files of ``args.folder`` that ``--only`` and ``--limit`` choose; None, said on
    stderr as ``tool`` says it, where the folder is missing or none matches."""
    if not args.folder.is_dir():
        print(f"{tool}: no folder {args.folder}", file=sys.stderr)
        return None
    files = problem_files(args.folder, args.only, args.limit)
    if not files:
        print(f"{tool}: no problem file in {args.folder} matches {args.only!r}", file=sys.stderr)
        return None
    return files


def problem_files(folder: Path, only: str | None, limit: int | None) -> list[Path]:
    """The folder's problem files in KernelBench's order (1_, 2_, ..., 100_), those whose
    name matches the regex ``only``, at most ``limit`` of them."""
    def order(path: Path) -> tuple[int, str]:
        number = re.match(r"\d+", path.stem)
        return (int(number[0]) if number else sys.maxsize, path.stem)

    files = sorted((p for p in folder.glob("*.py") if not p.name.startswith("_")), key=order)
    if only:
        files = [p for p in files if re.search(only, p.stem)]
    return files[:limit] if limit else files


def problem_rows(files: list[Path], out: Path, head: Callable[[Path], dict[str, Any]],
                 measure: Callable[[Path, dict[str, Any]], dict[str, Any]], mark_started: bool = True,
                 stop_on: tuple[type[BaseException], ...] = ()) -> list[dict[str, Any]]:
    """Each file's row, appended to ``out`` as soon as it is done, with a progress line on stderr.

    A row is ``head(path)`` (its ``key`` and what names the problem) with ``status`` ``done`` and
    what ``measure(path, head)`` found, or ``error`` and the exception: a failing problem is a row
    and the bench goes on with the next, unless the exception is one of ``stop_on`` (every problem
    would fail alike), which is raised. Either way the row says the ``seconds`` it took.

    A problem whose key ``out`` holds already is not measured again: its row is the last line
    written for it. With ``mark_started``, a ``started`` line is written before a problem begins;
    one found last for its key (the process died during it) becomes an ``interrupted`` error row,
    and the problem is not tried again.
    """
    out.parent.mkdir(parents=True, exist_ok=True)
    done, rows = recorded(out), []
    for i, path in enumerate(files):
        named = head(path)
        earlier = done.get(named["key"])
        if earlier is not None:
            if earlier.get("status") == "started":
                earlier = {**named, "status": "error", "error": INTERRUPTED}
                append(out, earlier)
            print(f"[{i + 1}/{len(files)}] {path.stem}: recorded already", file=sys.stderr, flush=True)
            rows.append(earlier)
            continue
        print(f"[{i + 1}/{len(files)}] {path.stem}", file=sys.stderr, flush=True)
        if mark_started:
            append(out, {**named, "status": "started"})
        started = time.perf_counter()
        try:
            row = {**named, "status": "done", **measure(path, named)}
        except stop_on:
            raise
        except Exception as exc:  # a failing problem is a row; the bench goes on with the next
            row = {**named, "status": "error", "error": f"{type(exc).__name__}: {str(exc)[:500]}"}
        row["seconds"] = round(time.perf_counter() - started, 1)
        append(out, row)
        rows.append(row)
    return rows


def recorded(out: Path) -> dict[str, dict[str, Any]]:
    """The last line written for each key in ``out`` (a ``started`` line: the run died there)."""
    last: dict[str, dict[str, Any]] = {}
    if out.exists():
        for line in out.read_text().splitlines():
            with contextlib.suppress(json.JSONDecodeError):  # a line cut short when the process died
                row = json.loads(line)
                last[row["key"]] = row
    return last


def append(out: Path, row: dict[str, Any]) -> None:
    """``row`` as one more JSON line of ``out``, on disk before this returns."""
    with out.open("a") as f:
        f.write(json.dumps(row) + "\n")
        f.flush()
