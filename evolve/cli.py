"""The ``kevo`` command line (see DESIGN.md, "Command line")."""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import signal
import sys
from pathlib import Path
from typing import Any

from rich.console import Console

from evolve.errors import USER_ERRORS, UsageError
from evolve.progress import Progress, SweepProgress
from evolve.report import PLOT_FILE, build_report, format_counts, print_report, write_plot
from evolve.report_sweep import format_sweep_summary, sweep_summary
from evolve.session import default_run_dir, open_store, resume_run, start_run
from evolve.stopping import leave_nothing_behind, stop_on_sigterm
from evolve.sweep import run_sweep, sweep_status
from evolve.sweep_file import Entry, load_sweep, stored_entries
from fitness import EvalSettings, Evaluator
from fitness.problems.problem import DTYPES
from platforms import PLATFORM_NAMES

EXIT_ACCEPTED, EXIT_REJECTED, EXIT_UNUSABLE = 0, 1, 2


def _parse_shape(text: str) -> tuple[str, int]:
    name, sep, value = text.partition("=")
    if not sep or not name.isidentifier():
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE, got {text!r}")
    try:
        return name, int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{name}: shape values are integers, got {value!r}") from None


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {text}")
    return value


def _read(path: str, what: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"cannot read {what} {path}: {exc.strerror}") from None


def cmd_verify(args: argparse.Namespace) -> int:
    source = _read(args.candidate, "candidate file")
    _read(args.reference, "reference file")
    settings = EvalSettings(probes=not args.no_probes)
    if args.timeout:
        settings = dataclasses.replace(settings, timeout_s=args.timeout)
    with Evaluator(args.reference, platform=args.device, shapes=dict(args.shape or []),
                   max_abs_diff=args.max_abs_diff, settings=settings, dtype=args.dtype) as evaluator:
        result = evaluator.evaluate(source)
        record = {**result.to_dict(), "cutoff": evaluator.cutoff, "cutoff_rule": evaluator.cutoff_rule,
                  "shapes": evaluator.main.shapes,
                  "held_out_shapes": [v.shapes for v in evaluator.held_out],
                  "probes": [p.describe() for p in evaluator.prepared.probes], "notes": evaluator.prepared.notes}
    if args.json:
        print(json.dumps(record))
    else:
        _print_verdict(record)
    return EXIT_ACCEPTED if result.accepted else EXIT_REJECTED


def _print_verdict(r: dict) -> None:
    print(f"status        {r['status']}")
    if r["reason"]:
        print(f"reason        {r['reason']}")
    if r["max_abs_diff"] is not None:
        print(f"max_abs_diff  {r['max_abs_diff']:.3g} (cutoff {r['cutoff']:.3g}, {r['checks']} checks)")
    print(f"cutoff        {r['cutoff']:.3g}: {r['cutoff_rule']}")
    print(f"probes        {'; '.join(r['probes']) if r['probes'] else 'none'}")
    for note in r["notes"]:
        print(f"note          {note}")
    if r["runtime_ms"] is not None:
        print(f"runtime       {r['runtime_ms']:.4g} ms (spread {100 * r['runtime_spread']:.1f}%)")
        print(f"reference     {r['reference_ms']:.4g} ms")
        print(f"speedup       {r['speedup']:.3f}x")
    if r.get("floor_ms") is not None:  # fitness.judge.sol: the speed of light
        flag = f"; FLAGGED: {r['below_floor_reason']}" if r["below_floor"] else ""
        print(f"sol           {r['sol']:.2f} (floor {r['floor_ms']:.4g} ms, {r['bound']} bound, {r['floor']['source']} "
              f"peaks; eager {min(1.0, r['floor_ms'] / r['reference_ms']):.2f}){flag}")
    print(f"platform      {r['platform']} ({r['device_name']})")


def cmd_run(args: argparse.Namespace) -> int:
    return _search(args, lambda progress: start_run(args.config, args.run_dir, progress))


def cmd_resume(args: argparse.Namespace) -> int:
    entries = stored_entries(Path(args.run_dir))
    if entries is not None:  # a sweep's directory: go on with the sweep
        return _sweep(args, entries, Path(args.run_dir))
    return _search(args, lambda progress: resume_run(args.run_dir, progress))


def cmd_sweep(args: argparse.Namespace) -> int:
    entries = load_sweep(args.sweep)
    sweep_dir = Path(args.run_dir) if args.run_dir else default_run_dir(args.sweep)
    return _sweep(args, entries, sweep_dir)


def _sweep(args: argparse.Namespace, entries: list[Entry], sweep_dir: Path) -> int:
    """Every run of the sweep in turn, each with its progress line; the summary on stdout."""
    console = Console(stderr=True, soft_wrap=True)
    _log_through(console, args.verbose)
    try:
        outcomes = run_sweep(entries, sweep_dir, observer=SweepProgress(console))
    except KeyboardInterrupt:
        print(f"kevo sweep: interrupted; continue with 'kevo resume {sweep_dir}'", file=sys.stderr)
        return 130
    summary = sweep_summary(outcomes)
    print(json.dumps(summary) if args.json else format_sweep_summary(summary))
    failed = [o.name for o in outcomes if o.status == "failed"]
    if failed:
        print(f"kevo sweep: {len(failed)} run(s) failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


def _search(args: argparse.Namespace, drive) -> int:
    """Drive a run with the progress line on stderr; stdout gets the run directory only."""
    console = Console(stderr=True, soft_wrap=True)
    _log_through(console, args.verbose)
    progress = Progress(console)
    try:
        reason = drive(progress)
    except KeyboardInterrupt:
        progress.close()  # the line stays above the message
        print(f"kevo {args.command}: interrupted; continue with 'kevo resume {progress.run_dir or 'RUN_DIR'}'",
              file=sys.stderr)
        return 130
    finally:
        progress.close()
    console.print(f"kevo: stopped: {reason}; see 'kevo report {progress.run_dir}'", highlight=False)
    print(progress.run_dir)
    return 0


def _log_through(console: Console, verbose: bool) -> None:
    """Log lines go through the progress console, so they print above the live line."""

    class ConsoleHandler(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            console.print(f"kevo: {self.format(record)}", highlight=False, markup=False)

    root = logging.getLogger()
    root.handlers[:] = [ConsoleHandler()]
    root.setLevel(logging.INFO if verbose else logging.WARNING)
    logging.getLogger("evolve").setLevel(logging.INFO)


def cmd_report(args: argparse.Namespace) -> int:
    entries = stored_entries(Path(args.run_dir))
    if entries is not None:  # a sweep's directory: where each of its runs stands
        summary = sweep_summary(sweep_status(entries, Path(args.run_dir)))
        print(json.dumps(summary) if args.json else format_sweep_summary(summary))
        return 0
    with open_store(args.run_dir, readonly=True) as store:
        report = build_report(store, Path(args.run_dir))
        try:
            report["plot"] = str(write_plot(store, Path(args.run_dir) / PLOT_FILE))
        except OSError as exc:
            raise UsageError(f"cannot write the plot into {args.run_dir}: {exc.strerror}") from None
    if args.json:
        print(json.dumps(report))
    else:
        # Off a terminal (a pipe, a file) tables get room instead of the default 80 columns.
        print_report(report, Console(width=None if sys.stdout.isatty() else 160))
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    from evolve.export import export_text

    with open_store(args.run_dir, readonly=True) as store:
        best = store.best(1)
        counts = store.status_counts()
        if not best:
            raise UsageError(f"{args.run_dir} has no accepted kernel to export ({format_counts(counts)})")
        kernel = best[0]
        text, versus = export_text(store, kernel)
    if args.output is None:
        sys.stdout.write(text)
        return 0
    try:
        Path(args.output).write_text(text, encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"cannot write {args.output}: {exc.strerror}") from None
    speedup = kernel.result.get("speedup")
    print(f"kevo export: wrote kernel {kernel.id} ({kernel.runtime_ms:.4g} ms"
          + (f", {speedup:.3g}x eager" if speedup else "") + f") to {args.output}; "
          + versus, file=sys.stderr)
    return 0


def cmd_seed(args: argparse.Namespace) -> int:
    from evolve.seeding.seed import SeedError, compile_seed, describe, write_seeds

    _read(args.problem, "problem file")
    try:
        if args.all:  # one file per distinct program of Inductor's configurations, in the folder -o names
            print("\n".join(f"kevo seed: {line}" for line in write_seeds(args.problem, args.output)), file=sys.stderr)
            return 0
        seed = compile_seed(args.problem)
    except SeedError as exc:
        raise UsageError(str(exc)) from None
    if args.output is None:
        sys.stdout.write(seed.source)
        print(f"kevo seed: {describe(seed, 'stdout')}", file=sys.stderr)
        return 0
    try:
        Path(args.output).write_text(seed.source, encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"cannot write {args.output}: {exc.strerror}") from None
    print(f"kevo seed: {describe(seed, args.output)}", file=sys.stderr)
    return 0


def _share(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a share between 0 and 1, got {text!r}") from None
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"a share of the model's time is above 0 and at most 1, got {text}")
    return value


def cmd_extract(args: argparse.Namespace) -> int:
    from evolve.models.extract import extract
    from evolve.models.manifest import MANIFEST_FILE, SWEEP_FILE

    _read(args.model, "model file")
    manifest = extract(args.model, args.output, dict(args.shape or []), args.device, args.cover,
                       compiled=not args.no_compile)
    if args.json:
        print(json.dumps(manifest.to_dict()))
        return 0
    print(f"model      {manifest.model} ({manifest.total_ms:.4g} ms of {manifest.device} time per forward)")
    for r in manifest.regions:
        compiled = f"{r.compiled_ms:.4g}" if r.compiled_ms is not None else "-"
        print(f"  {r.share:6.1%}  x{r.count:<3d} {r.problem:48s} eager {r.eager_ms:.4g} ms, compiled {compiled} ms")
    for s in manifest.skipped:
        print(f"  {s['share']:6.1%}  not written: {s['region']}: {s['reason']}")
    print(f"covered    {manifest.covered:.1%} of the model's time (asked {manifest.cover:.0%}; all regions "
          f"{manifest.in_regions:.1%})")
    print(f"wrote      {Path(args.output) / MANIFEST_FILE}, {Path(args.output) / SWEEP_FILE}")
    return 0


def cmd_apply(args: argparse.Namespace) -> int:
    from evolve.models.apply import apply

    _read(args.model, "model file")
    report = apply(args.model, args.sweep_dir, args.device, args.max_abs_diff, checks=args.checks,
                   keep_slower=args.keep_slower, module=args.module)
    if args.json:
        print(json.dumps(report.to_dict()))
    else:
        from evolve.report_apply import applied_lines
        print("\n".join(applied_lines(report)))
    return EXIT_REJECTED if report.status == "refused" else EXIT_ACCEPTED  # unchanged: nothing faster, nothing wrong


def _shape_and_device(parser: argparse.ArgumentParser, what: str) -> None:
    """``--shape NAME=VALUE`` (repeatable) and ``--device``, as ``verify`` and ``extract`` take them."""
    parser.add_argument("--shape", type=_parse_shape, action="append", metavar="NAME=VALUE",
                        help=f"override a module-level integer of the {what} (repeatable)")
    parser.add_argument("--device", choices=PLATFORM_NAMES, default="auto")


def _json_output(parser: argparse.ArgumentParser, func: Any, help_text: str) -> None:
    """A command's ``--json`` switch (``help_text`` says what it prints) and the function it runs."""
    parser.add_argument("--json", action="store_true", help=help_text)
    parser.set_defaults(func=func)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kevo", description="Evolve faster Triton kernels you can trust.")
    parser.add_argument("-v", "--verbose", action="store_true", help="log progress to stderr")
    sub = parser.add_subparsers(dest="command", required=True)

    verify = sub.add_parser("verify", help="judge one candidate kernel against a reference problem")
    verify.add_argument("reference", metavar="REFERENCE.py")
    verify.add_argument("candidate", metavar="CANDIDATE.py")
    verify.add_argument("--max-abs-diff", type=_positive_float, default=None,
                        help="cutoff on max |out - ref| (default: the problem's MAX_ABS_DIFF, else 1e-2)")
    _shape_and_device(verify, "problem")
    verify.add_argument("--dtype", choices=DTYPES, default=None,
                        help="cast the floating-point inputs and weights to this precision (default: as the problem makes them)")
    verify.add_argument("--timeout", type=_positive_float, default=None, metavar="SECONDS",
                        help="time limit per step of the evaluation (default 300)")
    verify.add_argument("--no-probes", action="store_true",
                        help="check on the problem's own input draws only, not on probe inputs from a wider domain")
    _json_output(verify, cmd_verify, "print one JSON object on stdout")

    run = sub.add_parser("run", help="start an evolutionary search described by a YAML config")
    run.add_argument("config", metavar="CONFIG.yaml")
    run.add_argument("--run-dir", metavar="DIR", default=None,
                     help="where the run is stored (default: runs/<config stem>-<timestamp>)")
    run.set_defaults(func=cmd_run)

    resume = sub.add_parser("resume", help="continue a stopped or killed run (or sweep) to its budget")
    resume.add_argument("run_dir", metavar="RUN_DIR")
    _json_output(resume, cmd_resume, "a sweep's summary as one JSON object on stdout")

    report = sub.add_parser("report", help="what a run found: top kernels, statuses, a plot, the best lineage")
    report.add_argument("run_dir", metavar="RUN_DIR")
    _json_output(report, cmd_report, "print one JSON object on stdout")

    sweep = sub.add_parser("sweep", help="many problems (x shape variants) as one resumable job")
    sweep.add_argument("sweep", metavar="SWEEP.yaml")
    sweep.add_argument("--run-dir", metavar="DIR", default=None,
                       help="where the sweep's runs are stored (default: runs/<sweep stem>-<timestamp>); "
                            "the same sweep into the same directory goes on where it stopped")
    _json_output(sweep, cmd_sweep, "print the summary as one JSON object on stdout")

    export = sub.add_parser("export", help="the source of a run's best accepted kernel")
    export.add_argument("run_dir", metavar="RUN_DIR")
    export.add_argument("-o", "--output", metavar="BEST.py", default=None,
                        help="write it to this file (default: stdout)")
    export.set_defaults(func=cmd_export)

    seed = sub.add_parser("seed", help="write a seed kernel from the Triton that torch.compile generates (GPU)")
    seed.add_argument("problem", metavar="PROBLEM.py")
    seed.add_argument("-o", "--output", metavar="SEED.py", default=None,
                      help="write the candidate file here (default: stdout); with --all, a folder")
    seed.add_argument("--all", action="store_true", help="a seed per Inductor configuration, into the folder -o names")
    seed.set_defaults(func=cmd_seed)

    extract = sub.add_parser("extract", help="a whole model's hot regions as problem files, a sweep and a manifest")
    extract.add_argument("model", metavar="MODEL.py")
    extract.add_argument("-o", "--output", metavar="DIR", required=True,
                         help="where the problem files, sweep.yaml and manifest.json go")
    _shape_and_device(extract, "model file")
    extract.add_argument("--cover", type=_share, default=0.8,
                         help="write the hottest regions until they cover this share of the model's time (default 0.8)")
    extract.add_argument("--no-compile", action="store_true",
                         help="do not time the regions and the model under torch.compile")
    _json_output(extract, cmd_extract, "print the manifest as one JSON object on stdout")

    apply = sub.add_parser("apply", help="a sweep's best kernels back in the model: checked and timed end to end")
    apply.add_argument("model", metavar="MODEL.py")
    apply.add_argument("sweep_dir", metavar="SWEEP_DIR", help="the sweep's run directory (kevo sweep --run-dir)")
    apply.add_argument("--device", choices=PLATFORM_NAMES, default="auto")
    apply.add_argument("--max-abs-diff", type=_positive_float, default=None,
                       help="cutoff on the model's max |out - ref| (default: its MAX_ABS_DIFF, else derived "
                            "from its outputs as verify derives one)")
    apply.add_argument("--checks", type=int, default=3, help="fresh input sets the model is checked on (default 3)")
    apply.add_argument("--keep-slower", action="store_true",
                       help="put in every region's best kernel, also those slower than the region's own code or "
                            "than torch.compile's")
    apply.add_argument("--module", metavar="DIR", default=None,
                       help="write a package kevo_<model> into DIR: the chosen kernels and patch(model), for your "
                            "own code (docs/MODELS.md)")
    _json_output(apply, cmd_apply, "print one JSON object on stdout")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="kevo: %(message)s", stream=sys.stderr)
    terminated = stop_on_sigterm()
    try:
        code = args.func(args)
        return 128 + signal.SIGTERM if terminated and code == 130 else code
    except USER_ERRORS as exc:
        print(f"kevo {args.command}: {exc}", file=sys.stderr)
        return EXIT_UNUSABLE
    except KeyboardInterrupt:
        print(f"kevo {args.command}: " + ("terminated (SIGTERM)" if terminated else "interrupted"), file=sys.stderr)
        return 128 + signal.SIGTERM if terminated else 130
    except BrokenPipeError:
        # the reader of our stdout went away (kevo ... | head): not an error of ours
        sys.stdout = None
        return EXIT_ACCEPTED
    finally:
        if argv is None:  # kevo's own process, about to exit
            leave_nothing_behind()


if __name__ == "__main__":
    sys.exit(main())
