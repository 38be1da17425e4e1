"""``seeds: compile`` on the CPU, before a GPU sees a problem: capture, convert, judge.

    python bench/seeds_on_cpu.py 57 61 89 97 [--kb ../shared/kernelbench/level1] [--out results.jsonl]

For each KernelBench level-1 problem named by its number, at small shapes
(``SHAPES`` below): ``compile_seeds`` on the CPU (Inductor's Triton backend
for the CPU, its kernels and template benchmarks run by Triton's interpreter),
then every distinct seed judged by the evaluator on the CPU, held-out shapes
and probes included. One JSON line a problem: the seeds' verdicts, or why it
got none. The CPU's Inductor is not a GPU's (it splits and tiles for two
"SMs"), so a problem that passes here can still fail on a GPU; one that fails
here for a reason of the conversion or the judge (a grid type not handled, a
size baked in) fails there too.

A problem whose sizes are a tuple the ``--shape`` overrides cannot reach (the
scans' ``input_shape = (32768,)``) is judged from a copy with those lines
replaced (``EDITS``), written to a temporary folder.

``--auto-shapes`` (KernelBench level 2: ``--kb ../shared/kernelbench/level2``)
derives small shapes for a problem with no ``SHAPES`` entry (``auto_shapes``):
from a copy whose chained and unpacking size assignments (``height = width =
128``, ``D, H, W = 16, 32, 32``, which no override reaches) are split into one
assignment a name, batch sizes set to 2, model settings (kernel, stride,
padding, dilation, groups, scale, pool) kept, spatial sizes capped at 16 (8 in
3-D) and other sizes at 16, multiples of the groups, each cap doubled until the
problem's own model runs on the CPU.
"""

from __future__ import annotations

import os

os.environ["TRITON_INTERPRET"] = "1"  # before anything imports Triton

import argparse  # noqa: E402
import ast  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

#: Small shapes a problem is captured and judged at (its module-level integers).
SHAPES: dict[str, dict[str, int]] = {
    "34": dict(batch_size=2, features=3, dim1=8, dim2=8),
    "35": dict(batch_size=2, features=8, num_groups=2, dim1=8, dim2=8),
    "38": dict(batch_size=4, dim=100),
    "41": dict(batch_size=2, features=3, sequence_length=64, kernel_size=8),
    "57": dict(batch_size=2, in_channels=4, out_channels=4, height=9, width=9),
    "61": dict(batch_size=2, in_channels=4, out_channels=4, depth=6, height=6, width=6),
    "64": dict(batch_size=2, in_channels=4, out_channels=4, length=40),
    "67": dict(batch_size=2, in_channels=4, out_channels=6, length=40),
    "73": dict(batch_size=2, in_channels=8, out_channels=8, depth=4, height=5, width=6),
    "74": dict(batch_size=2, in_channels=4, out_channels=6, length=40),
    "75": dict(batch_size=2, in_channels=8, out_channels=8, height=9, width=10),
    "76": dict(batch_size=2, in_channels=4, out_channels=6, length=60),
    "79": dict(batch_size=2, in_channels=4, out_channels=6, length=40),
    "80": dict(batch_size=2, in_channels=3, out_channels=4, width=30, height=28),
    "81": dict(batch_size=2, in_channels=4, out_channels=6, height_in=6, width_in=7),
    "84": dict(batch_size=2, in_channels=4, out_channels=4, width_in=9, height_in=7),
    "85": dict(batch_size=2, in_channels=4, out_channels=4, width=12, height=9),
    "86": dict(batch_size=2, in_channels=4, out_channels=8, width=9, height=9),
    "87": dict(batch_size=2, in_channels=4, out_channels=8, width=9, height=9),
    **{n: dict(batch_size=8) for n in ("89", "90", "91", "92", "93")},
    "95": dict(batch_size=4, num_classes=16),
    "96": dict(batch_size=2),
    "97": dict(batch_size=2, num_heads=2, sequence_length=16, embedding_dimension=8),
    "98": dict(batch_size=2),
    "99": dict(batch_size=2),
}
#: Lines of a problem replaced in its scratch copy (sizes no override reaches).
EDITS: dict[str, tuple[str, str]] = {n: ("input_shape = (32768,)", "input_shape = (64,)")
                                     for n in ("89", "90", "91", "92", "93")}


#: ``auto_shapes``: module-level integers named with one of these are the model's settings, kept.
KEPT = ("kernel", "stride", "pad", "dilation", "groups", "scale", "pool")
#: ... these are batch sizes, set to 2; these spatial sizes, capped at ``SPATIAL_CAP``.
BATCH = ("batch",)
SPATIAL = ("height", "width", "depth", "length", "seq", "len")
SPATIAL_SHORT = ("D", "H", "W", "L")
SPATIAL_CAP, SPATIAL_CAP_3D, SIZE_CAP = 16, 8, 16
#: ``auto_problem``: sizes whose reference outputs all stay below this are refused (a group of one).
DEGENERATE = 1e-4


def split_assignments(text: str) -> tuple[str, list[str]]:
    """``text`` with its module-level chained (``a = b = 1``) and unpacking (``a, b = 1, 2``)
    assignments written one name to an assignment (the statements sharing their lines too), and the
    names so split: ``fitness.problem``'s overrides reach only ``name = <integer>``."""
    tree = ast.parse(text)
    lines = text.splitlines(keepends=True)
    split: list[str] = []
    replace: dict[int, tuple[int, list[str]]] = {}  # first line -> (last line, new lines)

    def parts(node: ast.stmt) -> list[str] | None:
        if not isinstance(node, ast.Assign):
            return None
        if len(node.targets) > 1 and all(isinstance(t, ast.Name) for t in node.targets):
            return [f"{t.id} = {ast.unparse(node.value)}" for t in node.targets]
        target = node.targets[0]
        if len(node.targets) == 1 and isinstance(target, ast.Tuple) and isinstance(node.value, ast.Tuple) \
                and len(target.elts) == len(node.value.elts) and all(isinstance(t, ast.Name) for t in target.elts):
            return [f"{t.id} = {ast.unparse(v)}" for t, v in zip(target.elts, node.value.elts)]
        return None

    for node in tree.body:
        made = parts(node)
        if made is None:
            continue
        split += [line.split(" = ")[0] for line in made]
        first, last = node.lineno, node.end_lineno
        # every module-level statement on these lines (``depth = 32; height = width = 128``)
        for other in tree.body:
            if other.lineno <= last and other.end_lineno >= first:
                first, last = min(first, other.lineno), max(last, other.end_lineno)
        new = []
        for other in tree.body:
            if other.lineno >= first and other.end_lineno <= last:
                new += parts(other) or [ast.unparse(other)]
        replace[first] = (last, new)
    out, n = [], 1
    while n <= len(lines):
        if n in replace:
            last, new = replace[n]
            out += [line + "\n" for line in new]
            n = last + 1
        else:
            out.append(lines[n - 1])
            n += 1
    return "".join(out), split


def auto_shapes(knobs: dict[str, int], scale: int = 1, batch: int = 2) -> dict[str, int]:
    """Small sizes for a problem's module-level integers ``knobs`` (``scale`` multiplies the caps):
    batch sizes ``batch``, the model's settings (``KEPT``) as they are, spatial sizes at most
    ``SPATIAL_CAP`` (``SPATIAL_CAP_3D`` with three of them) but room for the kernels and pools,
    other sizes at most ``SIZE_CAP``, kept multiples of the groups (four groups' worth at least).
    Only the values that change."""
    kept = {n: v for n, v in knobs.items() if any(k in n.lower() for k in KEPT)}
    groups = [v for n, v in kept.items() if "groups" in n.lower() and v > 0]
    multiple = math.lcm(*groups) if groups else 1
    spatial = [n for n in knobs if n not in kept and (n in SPATIAL_SHORT or any(k in n.lower() for k in SPATIAL))]
    windows = sum(v for n, v in kept.items() if any(k in n.lower() for k in ("kernel", "pool")) and v > 0)
    cap_spatial = (SPATIAL_CAP_3D if len(spatial) >= 3 else SPATIAL_CAP) * scale
    out: dict[str, int] = {}
    for name, value in knobs.items():
        if name in kept or value <= 0:
            continue
        if any(k in name.lower() for k in BATCH):
            new = min(value, batch)
        elif name in spatial:
            new = min(value, max(cap_spatial, windows + 4))
        else:
            cap = SIZE_CAP * scale
            new = min(value, cap)
            if multiple > 1 and value % multiple == 0 and value > cap:
                # four or more a group where it had them (a norm over one element a group is 0)
                new = min(value, max(4 * multiple, cap // multiple * multiple))
        if new != value:
            out[name] = new
    return out


def _runs(path: Path, shapes: dict[str, int]) -> str:
    """Why the problem's own model fails at ``shapes`` on the CPU ("" if it runs)."""
    import torch

    from fitness.problem import build_model, load_problem, make_inputs

    try:
        with torch.no_grad():
            problem = load_problem(path, shapes)
            out = build_model(problem.Model, problem, 0, "cpu")(*make_inputs(problem, 1, "cpu"))
    except Exception as exc:  # the problem's own failure at these sizes
        return f"{type(exc).__name__}: {str(exc).strip()[:200]}"
    outs = [o for o in (out if isinstance(out, (tuple, list)) else [out]) if isinstance(o, torch.Tensor)]
    if outs and max(float(o.abs().max()) if o.numel() else 0.0 for o in outs) < DEGENERATE:
        return f"degenerate: every output below {DEGENERATE} (rounding noise: the sizes leave nothing to compute)"
    return ""


def auto_problem(path: Path, scratch: Path, batch: int = 2) -> tuple[Path, dict[str, int], dict]:
    """The problem to judge (a copy with its size assignments split, if it has any), its small
    shapes (``auto_shapes`` at the first scale its model runs at) and what was done, for the row."""
    from fitness.problem import shape_knobs

    text, split = split_assignments(path.read_text(encoding="utf-8"))
    if split:
        path = scratch / path.name
        path.write_text(text, encoding="utf-8")
    knobs = {k.name: k.value for k in shape_knobs(path)}
    tried = []
    for scale in (1, 2, 4):
        shapes = auto_shapes(knobs, scale, batch)
        why = _runs(path, shapes)
        if not why:
            # a size made a multiple of the groups above its cap that needs not be (a GEMM's input
            # features beside a group norm's): back to the cap, where the model still runs
            cap = SIZE_CAP * scale
            for name, value in list(shapes.items()):
                if value > cap and knobs[name] > cap and not _runs(path, {**shapes, name: cap}):
                    shapes[name] = cap
            return path, shapes, {"split": split, "scale": scale, "failed": tried}
        tried.append({"shapes": shapes, "error": why})
    for attempt in tried:  # outputs of rounding noise at every scale: the problem's own (a mean of a norm)
        if attempt["error"].startswith("degenerate"):
            return path, attempt["shapes"], {"split": split, "scale": None, "failed": tried}
    raise RuntimeError(f"no small shapes its model runs at: {tried}")


def check(number: str, kb: Path, scratch: Path, auto: bool = False, batch: int = 2) -> dict:
    from evolve.capture.seed import compile_seeds
    from fitness import Evaluator

    path = next(kb.glob(f"{number}_*.py"))
    if number in EDITS:
        old, new = EDITS[number]
        text = path.read_text(encoding="utf-8")
        if old not in text:
            raise SystemExit(f"{path.name}: no line {old!r} to replace")
        path = scratch / path.name
        path.write_text(text.replace(old, new), encoding="utf-8")
    started = time.monotonic()
    made = None
    if not auto or (number in SHAPES and kb.name == "level1"):  # SHAPES: level 1's numbers
        shapes = SHAPES[number]
    else:
        try:
            path, shapes, made = auto_problem(path, scratch, batch)
        except Exception as exc:
            return {"problem": path.stem, "no_seed": f"auto shapes: {type(exc).__name__}: {exc}",
                    "seconds": round(time.monotonic() - started, 1)}
    row: dict = {"problem": path.stem, "shapes": shapes, "edit": EDITS.get(number)}
    if made is not None:
        row["auto"] = made
    started = time.monotonic()
    try:
        seeds = compile_seeds(path, device="cpu", shapes=shapes)
    except Exception as exc:  # the problem's own failure, reported as it is
        row["no_seed"] = f"{type(exc).__name__}: {exc}"
    else:
        row["skipped"] = dict(seeds[0].skipped)
        row["seeds"] = {}
        for seed in seeds:
            with Evaluator(path, platform="cpu", shapes=shapes) as evaluator:
                result = evaluator.evaluate(seed.source)
            row["seeds"][seed.variant] = {"status": result.status.value, "reason": result.reason[:500]}
    row["seconds"] = round(time.monotonic() - started, 1)
    return row


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("problems", nargs="+", help="level-1 problem numbers, of: " + " ".join(SHAPES))
    ap.add_argument("--kb", type=Path, default=ROOT.parent / "shared" / "kernelbench" / "level1")
    ap.add_argument("--out", type=Path, default=None, help="append the JSON lines here too")
    ap.add_argument("--auto-shapes", action="store_true",
                    help="derive small shapes for a problem with no SHAPES entry (auto_shapes; level 2)")
    ap.add_argument("--batch", type=int, default=2, help="--auto-shapes: the batch size (8 or more varies it "
                    "in the held-out shapes)")
    args = ap.parse_args()
    unknown = [n for n in args.problems if n not in SHAPES]
    if unknown and not args.auto_shapes:
        ap.error(f"no small shapes for problem(s) {', '.join(unknown)}: add them to SHAPES, or --auto-shapes")
    if not args.kb.is_dir():
        ap.error(f"no KernelBench folder at {args.kb} (--kb)")
    with tempfile.TemporaryDirectory(prefix="seeds-on-cpu-") as scratch:
        for number in args.problems:
            row = check(number, args.kb, Path(scratch), args.auto_shapes, args.batch)
            line = json.dumps(row)
            if args.out:
                with args.out.open("a", encoding="utf-8") as fh:
                    fh.write(line + "\n")
            verdicts = {v: s["status"] for v, s in row.get("seeds", {}).items()} or row.get("no_seed", "")[:300]
            print(f"{row['problem']}  {row['seconds']} s  {verdicts}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
