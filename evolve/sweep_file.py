"""Sweep files, read into the runs they describe; nothing runs here (``evolve.sweep`` runs them).

A sweep file names problems and the settings they share::

    side_by_side: 4                # runs that share the evaluators at once (default 1: one after another)
    spend_saved: true              # what runs at the speed of light save goes to the others (evolve.budget)
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

``load_sweep`` turns it into ``Entry``s: one per problem and variant, each a
name (``NNN-name``) and a full experiment config as plain data with absolute
paths, checked as ``kevo run`` would check it. docs/CONFIG.md lists the keys.

>>> [e.name for e in load_sweep("configs/sweep_suite.yaml")][:2]  # doctest: +SKIP
['000-elementwise', '001-softmax']
"""

from __future__ import annotations

import copy
import dataclasses
import json
import re
from pathlib import Path
from typing import Any

import yaml

from evolve.config import COMPILE_SEEDS, ConfigError, config_from_dict

ENTRY_KEYS = {"config", "reference", "seeds", "shapes", "held_out_shapes", "variants", "folder",
              "seeds_folder", "name"}
TOP_KEYS = {"defaults", "problems", "side_by_side", "spend_saved"}
#: Runs of a sweep that share the evaluators at once, unless the sweep file says ``side_by_side``.
DEFAULT_SIDE_BY_SIDE = 1
#: Whether a second pass spends the evaluations that runs at the speed of light saved (``spend_saved``):
#: a sweep that sets ``search.stop_at_sol`` means its budget to go where the headroom is; nothing
#: is saved, and nothing happens, without it.
DEFAULT_SPEND_SAVED = True


@dataclasses.dataclass
class Entry:
    """One run of the sweep: a name and the full experiment config (plain data, absolute paths)."""

    name: str
    config: dict[str, Any]
    skip: str = ""  # why the run cannot happen (a problem without kernels and no LLM), or ""
    side_by_side: int = DEFAULT_SIDE_BY_SIDE  # the sweep's: runs that share the evaluators at once
    spend_saved: bool = DEFAULT_SPEND_SAVED  # the sweep's: a second pass spends what stop_at_sol saved


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
        raise ConfigError(f"{path}: unknown key '{unknown[0]}' (known keys: {', '.join(sorted(TOP_KEYS))})")
    side_by_side = data.get("side_by_side", DEFAULT_SIDE_BY_SIDE)
    if isinstance(side_by_side, bool) or not isinstance(side_by_side, int) or side_by_side < 1:
        raise ConfigError(f"{path}: side_by_side: expected an integer >= 1 (runs that share the evaluators at once), "
                          f"got {side_by_side!r}")
    spend_saved = data.get("spend_saved", DEFAULT_SPEND_SAVED)
    if not isinstance(spend_saved, bool):
        raise ConfigError(f"{path}: spend_saved: expected true or false (whether a second pass spends the "
                          f"evaluations runs at the speed of light saved), got {spend_saved!r}")
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
        entry.name, entry.side_by_side, entry.spend_saved = f"{i:03d}-{entry.name}", side_by_side, spend_saved
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


SWEEP_FILE = "sweep.json"  # the resolved entries, written into a sweep's directory when it starts
MAY_CHANGE = {"side_by_side": DEFAULT_SIDE_BY_SIDE, "spend_saved": DEFAULT_SPEND_SAVED}  # from one go to the next


def check_same_sweep(sweep_dir: Path, entries: list[Entry]) -> list[dict] | None:
    """The plan to write into ``SWEEP_FILE`` for a new sweep; None when ``sweep_dir`` holds this same
    sweep already; ``ConfigError`` when it holds another."""
    plan = [{"name": e.name, "config": e.config, "skip": e.skip, "side_by_side": e.side_by_side,
             "spend_saved": e.spend_saved} for e in entries]
    path = sweep_dir / SWEEP_FILE
    if not path.exists():
        return plan
    stored = json.loads(path.read_text(encoding="utf-8"))
    what = [{k: v for k, v in e.items() if k not in MAY_CHANGE} for e in json.loads(json.dumps(plan))]
    if [e["name"] for e in stored] != [e["name"] for e in plan] or [
            {k: v for k, v in e.items() if k not in MAY_CHANGE} for e in stored] != what:
        raise ConfigError(f"{sweep_dir} holds a different sweep ({SWEEP_FILE} differs); "
                          "choose another --run-dir, or run the sweep file it was started from")
    # the same sweep; how many runs go side by side, and whether saved evaluations are spent, may change
    settings = [[e.get(k, default) for k, default in MAY_CHANGE.items()] for e in stored]
    return plan if settings != [[p[k] for k in MAY_CHANGE] for p in plan] else None


def stored_entries(sweep_dir: Path) -> list[Entry] | None:
    """The entries of the sweep in ``sweep_dir``, or None when it holds no sweep."""
    path = Path(sweep_dir) / SWEEP_FILE
    if not path.is_file():
        return None
    return [Entry(e["name"], e["config"], e.get("skip", ""), e.get("side_by_side", DEFAULT_SIDE_BY_SIDE),
                  e.get("spend_saved", DEFAULT_SPEND_SAVED)) for e in json.loads(path.read_text(encoding="utf-8"))]
