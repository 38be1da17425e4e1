"""Sweeps: many problems (× shape variants) as one resumable job on one pool of evaluators.

A sweep file names problems and the settings they share::

    defaults:                      # any experiment keys, under every problem's own
      search: {population_size: 8, max_evaluations: 60}
      platform: cuda
    problems:
      - config: configs/softmax.yaml           # an experiment config as it is
      - reference: problems/rmsnorm/reference.py
        seeds: [problems/rmsnorm/seed.py]
        variants: [{batch_size: 512}, {batch_size: 8192},   # one run per variant: shape overrides,
                   {dtype: bfloat16, max_abs_diff: 0.05}]   # or a precision with its cutoff
      - folder: KernelBench/level1             # every problem file in it, KernelBench's format
        seeds_folder: my_kernels/level1        # ModelNew files with the same names (or an LLM writes them)
        seeds: compile                         # for the rest, a seed from torch.compile's Triton (a GPU)

Each problem (and variant) is a run of its own, with its own store, in
``SWEEP_DIR/NNN-name/`` next to the config it was started from; the runs go
one after another on one pool of Ray actors (each actor keeps the evaluators
of the current problem warm, see ``evolve.dispatch.ray``). Running the same
sweep again into the same directory (or ``kevo resume SWEEP_DIR``) skips the
runs that finished, resumes the one that was cut short and starts the rest.
The summary speaks the field's language: the fraction of problems with a
correct kernel, the fractions faster than eager PyTorch (fast_1) and by more
than 1.5× and 2×, and the geometric-mean speedup over problems with a
correct kernel.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import json
import logging
import math
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import yaml

from evolve.config import COMPILE_SEEDS, ConfigError, config_from_dict
from evolve.dispatch.base import Dispatcher

log = logging.getLogger(__name__)

SWEEP_FILE = "sweep.json"  # the resolved entries, written when the sweep starts
SUMMARY_FILE = "summary.json"
CONFIG_FILE = "config.yaml"
FAILED_FILE = "failed.json"  # a run that could not go on, with the reason
SKIPPED_FILE = "skipped.json"  # a run that got no seed from torch.compile, with the reason
ENTRY_KEYS = {"config", "reference", "seeds", "shapes", "held_out_shapes", "variants", "folder",
              "seeds_folder", "name"}
TOP_KEYS = {"defaults", "problems"}


@dataclasses.dataclass
class Entry:
    """One run of the sweep: a name and the full experiment config (plain data, absolute paths)."""

    name: str
    config: dict[str, Any]
    skip: str = ""  # why the run cannot happen (a problem without kernels and no LLM), or ""


@dataclasses.dataclass
class Outcome:
    """What one run of the sweep came to."""

    name: str
    status: str  # finished | failed | skipped
    reason: str = ""
    evaluations: int = 0
    best_ms: float | None = None
    reference_ms: float | None = None
    speedup: float | None = None

    @property
    def correct(self) -> bool:
        return self.best_ms is not None


# --- reading the sweep file ----------------------------------------------------------


def load_sweep(path: str | Path) -> list[Entry]:
    """The runs a sweep file describes; ``ConfigError`` naming the file and key otherwise."""
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"cannot read sweep file {path}: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {getattr(exc, 'problem', None) or exc}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping with 'problems' (and 'defaults')")
    unknown = sorted(set(data) - TOP_KEYS)
    if unknown:
        raise ConfigError(f"{path}: unknown key '{unknown[0]}' (known keys: defaults, problems)")
    defaults = data.get("defaults") or {}
    if not isinstance(defaults, dict):
        raise ConfigError(f"{path}: defaults: expected a mapping of experiment keys")
    if "problem" in defaults:
        raise ConfigError(f"{path}: defaults.problem: problems are listed under 'problems', not in defaults")
    problems = data.get("problems")
    if not isinstance(problems, list) or not problems:
        raise ConfigError(f"{path}: problems: list at least one problem")
    base = path.resolve().parent
    entries: list[Entry] = []
    for i, item in enumerate(problems):
        entries.extend(_expand(item, defaults, base, f"{path}: problems[{i}]"))
    names = [e.name for e in entries]
    for i, entry in enumerate(entries):
        entry.name = f"{i:03d}-{entry.name}"
        if not entry.config["problem"].get("seeds") and not _llm_online(entry.config):
            entry.skip = ("no seed kernel, and no LLM to write one (set llm.model, give seeds_folder, "
                          "or write 'seeds: compile')")
            continue
        config_from_dict(copy.deepcopy(entry.config), origin=f"{path}: {names[i]}")  # checked now, not mid-sweep
    return entries


def _llm_online(config: dict) -> bool:
    llm = config.get("llm") or {}
    return llm.get("model", "offline") != "offline" or bool(llm.get("models"))


def _expand(item: Any, defaults: dict, base: Path, where: str) -> list[Entry]:
    if not isinstance(item, dict):
        raise ConfigError(f"{where}: expected a mapping (config, reference or folder)")
    unknown = sorted(set(item) - ENTRY_KEYS)
    if unknown:
        raise ConfigError(f"{where}: unknown key '{unknown[0]}' (known keys: {', '.join(sorted(ENTRY_KEYS))})")
    kinds = [k for k in ("config", "reference", "folder") if k in item]
    if len(kinds) != 1:
        raise ConfigError(f"{where}: give exactly one of config, reference or folder")
    variants = item.get("variants") or [{}]
    if not isinstance(variants, list) or not all(isinstance(v, dict) for v in variants):
        raise ConfigError(f"{where}: variants: expected a list of shape overrides ({{name: value}})")
    if kinds[0] == "config":
        config_path = _path(item["config"], base, where, "config")
        try:
            own = yaml.safe_load(config_path.read_text(encoding="utf-8")) or {}
        except (OSError, yaml.YAMLError) as exc:
            raise ConfigError(f"{where}: cannot read config {config_path}: {exc}") from None
        own = _absolute_problem(own, config_path.parent, where)
        problems = [(item.get("name") or config_path.stem, _merge(defaults, own))]
    elif kinds[0] == "reference":
        seeds = item.get("seeds") or []
        problem = {"reference": str(_path(item["reference"], base, where, "reference")),
                   "seeds": seeds if seeds == COMPILE_SEEDS else [str(_path(s, base, where, "seeds")) for s in seeds]}
        for key in ("shapes", "held_out_shapes"):
            if key in item:
                problem[key] = item[key]
        name = item.get("name") or _problem_name(Path(item["reference"]))
        problems = [(name, _merge(defaults, {"problem": problem}))]
    else:
        problems = [(n, _merge(defaults, {"problem": p})) for n, p in _folder(item, base, where)]
    entries = []
    for name, config in problems:
        for variant in variants:
            data = copy.deepcopy(config)
            variant = dict(variant)
            if "dtype" in variant:
                data["problem"]["dtype"] = variant["dtype"]
            if "max_abs_diff" in variant:
                data.setdefault("fitness", {})["max_abs_diff"] = variant.pop("max_abs_diff")
            shapes = {k: v for k, v in variant.items() if k != "dtype"}
            if shapes:
                data["problem"]["shapes"] = {**data["problem"].get("shapes", {}), **shapes}
            suffix = "".join(f"-{v}" if k == "dtype" else f"-{k}{v}" for k, v in variant.items())
            entries.append(Entry(_slug(name) + suffix, data))
    return entries


def _folder(item: dict, base: Path, where: str) -> list[tuple[str, dict]]:
    """KernelBench-format problem files in a folder, with same-named seeds from ``seeds_folder``."""
    folder = _path(item["folder"], base, where, "folder", directory=True)
    seeds = _path(item["seeds_folder"], base, where, "seeds_folder", directory=True) if "seeds_folder" in item else None
    compile_missing = item.get("seeds") == COMPILE_SEEDS
    if "seeds" in item and not compile_missing:
        raise ConfigError(f"{where}: seeds: a folder takes 'seeds: compile' (seed files go in seeds_folder)")
    files = sorted((p for p in folder.glob("*.py") if _defines_model(p)), key=_natural)
    if not files:
        raise ConfigError(f"{where}: folder {folder} holds no problem file (a .py defining class Model)")
    out = []
    for file in files:
        problem: dict[str, Any] = {"reference": str(file), "seeds": []}
        if seeds is not None and (seeds / file.name).is_file():
            problem["seeds"] = [str(seeds / file.name)]
        elif compile_missing:
            problem["seeds"] = COMPILE_SEEDS
        if "shapes" in item:
            problem["shapes"] = item["shapes"]
        out.append((file.stem, problem))
    return out


def _defines_model(path: Path) -> bool:
    try:
        return re.search(r"^class Model\b", path.read_text(encoding="utf-8"), re.MULTILINE) is not None
    except (OSError, UnicodeDecodeError):
        return False


def _natural(path: Path) -> list:
    """``2_x.py`` before ``10_x.py`` (KernelBench numbers its problems)."""
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", path.name)]


def _path(value: Any, base: Path, where: str, key: str, directory: bool = False) -> Path:
    if not isinstance(value, str) or not value:
        raise ConfigError(f"{where}: {key}: expected a path")
    path = Path(value).expanduser()
    path = (path if path.is_absolute() else base / path).resolve()
    if not (path.is_dir() if directory else path.is_file()):
        raise ConfigError(f"{where}: {key}: {'folder' if directory else 'file'} not found: {path}")
    return path


def _absolute_problem(data: dict, base: Path, where: str) -> dict:
    problem = dict(data.get("problem") or {})
    for key in ("reference",):
        if isinstance(problem.get(key), str):
            problem[key] = str((base / problem[key]).resolve())
    if isinstance(problem.get("seeds"), list):
        problem["seeds"] = [str((base / s).resolve()) if isinstance(s, str) else s for s in problem["seeds"]]
    return {**data, "problem": problem}


def _merge(defaults: dict, own: dict) -> dict:
    """``own`` over ``defaults``, mapping by mapping."""
    merged = copy.deepcopy(defaults)
    for key, value in own.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def _problem_name(reference: Path) -> str:
    """A run's name for a problem file: its stem (``26_GELU_``), or for the suite's
    ``NAME/reference.py`` layout the folder's name."""
    return reference.parent.name if reference.stem == "reference" and reference.parent.name else reference.stem


def _slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.=-]+", "_", name).strip("_") or "problem"


# --- running -------------------------------------------------------------------------

#: start(config_path, run_dir) and resume(run_dir): drive one run, return why it stopped.
Starter = Callable[[Path, Path], str]
Resumer = Callable[[Path], str]


def run_sweep(entries: list[Entry], sweep_dir: Path, start: Starter, resume: Resumer,
              on_outcome: Callable[[Outcome], None] = lambda o: None) -> list[Outcome]:
    """Run every entry not finished yet; return (and store) every entry's outcome.

    A run that cannot go on is a ``failed`` outcome, stored in its directory,
    and the sweep goes on with the next: a problem that cannot run (its
    reference fails, it does not fit in memory, no seed is accepted) and a
    failure of kevo's alike (its traceback is logged, its reason names it as
    kevo's). Only an interruption stops the sweep.
    """
    sweep_dir.mkdir(parents=True, exist_ok=True)
    _claim(sweep_dir, entries)
    outcomes = []
    for entry in entries:
        run_dir = sweep_dir / entry.name
        outcome = _previous(entry, run_dir)
        if outcome is None:
            try:
                if (run_dir / "run.sqlite").exists():
                    log.info("sweep: resuming %s", entry.name)
                    reason = resume(run_dir)
                else:
                    run_dir.mkdir(parents=True, exist_ok=True)
                    config_path = run_dir / CONFIG_FILE
                    config_path.write_text(yaml.safe_dump(entry.config, sort_keys=False), encoding="utf-8")
                    log.info("sweep: starting %s", entry.name)
                    reason = start(config_path, run_dir)
                outcome = _outcome(entry, run_dir, "finished", reason)
            except KeyboardInterrupt:
                raise
            except Exception as exc:  # recorded, and the sweep goes on with the next problem
                outcome = _skipped(entry, run_dir, exc) if _no_seed(exc) else _failed(entry, run_dir, exc)
        outcomes.append(outcome)
        on_outcome(outcome)
    (sweep_dir / SUMMARY_FILE).write_text(json.dumps(summary_dict(outcomes), indent=1), encoding="utf-8")
    return outcomes


def _failed(entry: Entry, run_dir: Path, exc: Exception) -> Outcome:
    if _is_users(exc):
        reason = f"{type(exc).__name__}: {exc}"
    else:
        log.error("sweep: %s failed in kevo itself", entry.name, exc_info=exc)
        first = (str(exc).strip().splitlines() or [""])[0][:300]
        reason = f"kevo failed ({type(exc).__name__}: {first}); the traceback is in the log"
    return _ended(run_dir, FAILED_FILE, Outcome(entry.name, "failed", reason))


def _no_seed(exc: Exception) -> bool:
    from evolve.session import NoSeed

    return isinstance(exc, NoSeed)


def _skipped(entry: Entry, run_dir: Path, exc: Exception) -> Outcome:
    """A run ``seeds: compile`` gave no seed: skipped, with the reason, and not tried again on resume."""
    return _ended(run_dir, SKIPPED_FILE, Outcome(entry.name, "skipped", str(exc)))


def _ended(run_dir: Path, file: str, outcome: Outcome) -> Outcome:
    """``outcome``, kept in ``run_dir`` so that a resumed sweep does not run it again (``_previous``)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / file).write_text(json.dumps(dataclasses.asdict(outcome)), encoding="utf-8")
    return outcome


def _is_users(exc: Exception) -> bool:
    """Errors that belong to one problem (its files, its reference, its seeds), not to kevo."""
    from evolve.search.loop import SearchError
    from evolve.session import RunError
    from fitness import CutoffError, ProblemError

    return isinstance(exc, (ConfigError, ProblemError, CutoffError, SearchError, RunError))


def _claim(sweep_dir: Path, entries: list[Entry]) -> None:
    """Write the resolved entries, or check that the directory holds this same sweep."""
    plan = [{"name": e.name, "config": e.config, "skip": e.skip} for e in entries]
    path = sweep_dir / SWEEP_FILE
    if path.exists():
        stored = json.loads(path.read_text(encoding="utf-8"))
        if [e["name"] for e in stored] != [e["name"] for e in plan] or stored != json.loads(json.dumps(plan)):
            raise ConfigError(f"{sweep_dir} holds a different sweep ({SWEEP_FILE} differs); "
                              "choose another --run-dir, or run the sweep file it was started from")
        return
    path.write_text(json.dumps(plan, indent=1), encoding="utf-8")


def stored_entries(sweep_dir: Path) -> list[Entry] | None:
    """The entries of the sweep in ``sweep_dir``, or None when it holds no sweep."""
    path = Path(sweep_dir) / SWEEP_FILE
    if not path.is_file():
        return None
    return [Entry(e["name"], e["config"], e.get("skip", "")) for e in json.loads(path.read_text(encoding="utf-8"))]


def sweep_status(entries: list[Entry], sweep_dir: Path) -> list[Outcome]:
    """Where every run of the sweep in ``sweep_dir`` stands (``kevo report`` on a sweep)."""
    outcomes = []
    for entry in entries:
        run_dir = sweep_dir / entry.name
        outcome = _previous(entry, run_dir)
        if outcome is None:
            started = (run_dir / "run.sqlite").is_file()
            outcome = _outcome(entry, run_dir, "cut short", "") if started else Outcome(entry.name, "not started")
        outcomes.append(outcome)
    return outcomes


def _previous(entry: Entry, run_dir: Path) -> Outcome | None:
    """The outcome of a run that already ended (skipped, stopped, or failed), else None."""
    if entry.skip:
        return Outcome(entry.name, "skipped", entry.skip)
    for ended in (run_dir / FAILED_FILE, run_dir / SKIPPED_FILE):
        if ended.is_file():
            return Outcome(**json.loads(ended.read_text(encoding="utf-8")))
    if not (run_dir / "run.sqlite").is_file():
        return None
    from population_store import RunStore

    with RunStore.open(run_dir / "run.sqlite", readonly=True) as store:
        stops = store.events("stopped")
    if not stops:
        return None
    return _outcome(entry, run_dir, "finished", stops[-1]["data"].get("reason", ""))


def _outcome(entry: Entry, run_dir: Path, status: str, reason: str) -> Outcome:
    from population_store import RunStore

    with RunStore.open(run_dir / "run.sqlite", readonly=True) as store:
        best = store.best(1)
        count = store.count()
    outcome = Outcome(entry.name, status, reason, evaluations=count)
    if best:
        result = best[0].result
        outcome.best_ms, outcome.reference_ms = result["runtime_ms"], result.get("reference_ms")
        outcome.speedup = result.get("speedup")
    return outcome


# --- the summary ---------------------------------------------------------------------


def summary_dict(outcomes: list[Outcome]) -> dict[str, Any]:
    """The field's figures over the sweep's problems (KernelBench's fast_p)."""
    n = len(outcomes)
    correct = [o for o in outcomes if o.correct]
    speedups = [o.speedup for o in correct if o.speedup]

    def fast(p: float) -> float:
        return sum(1 for s in speedups if s > p) / n if n else 0.0

    geomean = math.exp(sum(math.log(s) for s in speedups) / len(speedups)) if speedups else None
    return {"problems": n, "correct": len(correct), "fraction_correct": len(correct) / n if n else 0.0,
            "fast_1": fast(1.0), "fast_1.5": fast(1.5), "fast_2": fast(2.0),
            "geomean_speedup_correct": geomean,
            "runs": [dataclasses.asdict(o) for o in outcomes]}


def format_summary(summary: dict[str, Any]) -> str:
    lines = ["| run | status | evaluations | best ms | eager ms | speedup |", "|---|---|---|---|---|---|"]
    for r in summary["runs"]:
        lines.append(f"| {r['name']} | {r['status']} | {r['evaluations']} | {_fmt(r['best_ms'])} "
                     f"| {_fmt(r['reference_ms'])} | {_fmt(r['speedup'], 'x')} |")
    g = summary["geomean_speedup_correct"]
    lines.append("")
    lines.append(f"{summary['correct']}/{summary['problems']} correct ({100 * summary['fraction_correct']:.0f}%); "
                 f"fast_1 {100 * summary['fast_1']:.0f}%, fast_1.5 {100 * summary['fast_1.5']:.0f}%, "
                 f"fast_2 {100 * summary['fast_2']:.0f}%; geometric-mean speedup over correct: "
                 + (f"{g:.3g}x" if g else "-"))
    return "\n".join(lines)


def _fmt(value: float | None, unit: str = "") -> str:
    return "-" if value is None else f"{value:.4g}{unit}"


# --- one pool of evaluators for the whole sweep ---------------------------------------


class SharedPool:
    """Hands every run of a sweep the same Ray actors, pointed at the run's problem.

    Called like ``session.make_dispatcher(config)``. Runs that evaluate in
    process (no Ray) get their own evaluator each, as usual.
    """

    def __init__(self) -> None:
        self.dispatcher: Any = None

    @contextlib.contextmanager
    def __call__(self, config: Any) -> Iterator[tuple[Dispatcher, dict[str, Any]]]:
        from evolve.dispatch.ray import RayDispatcher
        from evolve.session import evaluator_spec, make_dispatcher, uses_ray

        if not uses_ray(config):
            with make_dispatcher(config) as made:
                yield made
            return
        spec, cluster = evaluator_spec(config), config.cluster
        if self.dispatcher is None:
            self.dispatcher = RayDispatcher(spec, num_actors=cluster.actors, address=cluster.address,
                                            slots=cluster.slots)
        else:
            self.dispatcher.retarget(spec)
        try:
            yield self.dispatcher, dict(self.dispatcher.info)
        finally:
            for _ in self.dispatcher.results():  # a run that raised may leave work in flight:
                pass  # its keys would mean other individuals in the next run's store

    def close(self) -> None:
        if self.dispatcher is not None:
            self.dispatcher.close()
            self.dispatcher = None
