"""A run from the outside: start one from a config, resume one from its directory, raise its budget.

This is the composition root: it reads the config, resolves the search space
from the seeds, builds the dispatcher (``evolve.dispatch.pool.make_dispatcher``,
or the pool a sweep hands it), opens the run store, builds the LLM proposer
when a model is configured, and hands them to the loop. A run directory holds
``population_store.STORE_FILE`` (``run.sqlite``: everything the run knows) and, once reported,
``progress.png``. A run's stored config is what a resume goes on with; the one
change made to it afterwards is a budget raised on purpose (``raise_budget``,
a sweep's second pass), recorded as an event beside the new config.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from evolve.config import Config, ConfigError, config_from_dict, load_config
from evolve.dispatch.base import Dispatcher
# The dispatcher factory lives beside the sweep's shared pool; its other names stay importable
# from here for the scripts in bench/ and the tests that import them so.
from evolve.dispatch.pool import (  # noqa: F401
    Dispatchers,
    eval_settings,
    evaluator_spec,
    make_dispatcher,
    make_evaluator,
    uses_ray,
)
from evolve.search.loop import Search, run_search
from evolve.search.population import Candidate
from evolve.search.variation import seed_space
from fitness import screen, shape_knobs
from operators import (
    OFFLINE_MESSAGE,
    LlmProposer,
    LlmSettings,
    LlmSetupError,
    ProblemContext,
    SpaceError,
    check_space,
    resolve_space,
)
from operators.llm import client as llm_client
from platforms.guidance import guidance
from population_store import STORE_FILE, RunStore, StoreError

log = logging.getLogger(__name__)

LOCK_FILE = "run.lock"
SETUP_KEY = "setup"
BUDGET_EVENT = "budget_raised"  # search.max_evaluations raised on purpose (raise_budget): by whom, how much


class RunError(Exception):
    """A run directory cannot be used as asked; the message says what to do."""


class Observer:
    """Told when a run starts and of every result as it is committed (the CLI's progress display)."""

    def started(self, run_dir: Path, store: RunStore, config: Config) -> None:
        """The run in ``run_dir`` is about to search (fresh or resumed)."""

    def result(self, candidate: Candidate, store: RunStore) -> None:
        """``candidate``'s result was just committed to ``store``."""


def default_run_dir(config_path: str | Path) -> Path:
    """``runs/<config stem>-<timestamp>`` under the current directory, not yet taken."""
    base = Path("runs") / f"{Path(config_path).stem}-{time.strftime('%Y%m%d-%H%M%S')}"
    candidate, n = base, 1
    while candidate.exists():
        n += 1
        candidate = base.with_name(f"{base.name}-{n}")
    return candidate


def start_run(config_path: str | Path, run_dir: str | Path | None = None,
              observer: Observer | None = None, dispatchers: Dispatchers | None = None) -> str:
    """Start the run described by the YAML at ``config_path``; return why it stopped."""
    began = time.time()  # the whole run's pace counts from here (evolve.report_time.pace)
    config = load_config(config_path)
    run_dir = Path(run_dir) if run_dir is not None else default_run_dir(config_path)
    if (run_dir / STORE_FILE).exists():  # before the seeds and the evaluator, which can take a while
        raise _taken(run_dir)
    seeds = _read_seeds(config, run_dir)
    space = search_space(config, seeds)
    check_llm(config)  # a missing key stops the run before anything is made
    with (dispatchers or make_dispatcher)(config) as (dispatcher, where):
        run_dir.mkdir(parents=True, exist_ok=True)
        with _locked(run_dir):
            try:
                store = RunStore.create(run_dir / STORE_FILE, config.to_dict())
            except FileExistsError:
                raise _taken(run_dir) from None
            with store:
                _put_setup(store, seeds, space)
                return _search("started", run_dir, store, dispatcher, {**where, "began_at": began}, config,
                               seeds, space, observer or Observer())


def resume_run(run_dir: str | Path, observer: Observer | None = None,
               dispatchers: Dispatchers | None = None) -> str:
    """Continue the run in ``run_dir`` with its stored config and state; return why it stopped."""
    began = time.time()
    run_dir = Path(run_dir)
    with open_store(run_dir) as store, _locked(run_dir):
        config = config_from_dict(store.config(), origin=str(run_dir / STORE_FILE))
        setup = store.get_state(SETUP_KEY)
        if setup is None:  # killed between creating the store and writing its setup
            seeds = _read_seeds(config, run_dir)
            space = search_space(config, seeds)
            _put_setup(store, seeds, space)
        else:
            seeds, space = setup["seeds"], {k: tuple(v) for k, v in setup["space"].items()}
        check_llm(config)
        with (dispatchers or make_dispatcher)(config) as (dispatcher, where):
            return _search("resumed", run_dir, store, dispatcher, {**where, "began_at": began}, config, seeds,
                           space, observer or Observer())


def raise_budget(run_dir: str | Path, extra: int, grant: str) -> bool:
    """Raise the stored ``search.max_evaluations`` of the run in ``run_dir`` by ``extra``, once per ``grant``.

    The one way a run's budget changes once it has started (editing its YAML
    changes nothing): the new config and a ``BUDGET_EVENT`` (``grant``,
    ``extra``, the budget before and after, and the evaluations and best
    runtime then) are committed in one transaction. A resume (``resume_run``,
    ``kevo resume``, a sweep started again) then goes on to the raised budget.
    A grant already recorded is not given again: the call changes nothing and
    returns False (a sweep started again after a kill asks once more).
    """
    if isinstance(extra, bool) or not isinstance(extra, int) or extra < 1:
        raise ValueError(f"extra evaluations: expected an integer >= 1, got {extra!r}")
    run_dir = Path(run_dir)
    with open_store(run_dir) as store, _locked(run_dir):
        if any(event["data"].get("grant") == grant for event in store.events(BUDGET_EVENT)):
            return False
        config = store.config()
        before = config["search"]["max_evaluations"]
        config["search"]["max_evaluations"] = before + extra
        config_from_dict(json.loads(json.dumps(config)), origin=str(run_dir / STORE_FILE))  # still a valid config
        best = store.best(1)
        store.set_config(config, (BUDGET_EVENT, {
            "grant": grant, "extra": extra, "from": before, "to": before + extra, "evaluations": store.count(),
            "best_ms": best[0].runtime_ms if best else None}))
    log.info("%s: search.max_evaluations raised from %d to %d (%s)", run_dir.name, before, before + extra, grant)
    return True


def open_store(run_dir: str | Path, readonly: bool = False) -> RunStore:
    """The store of the run in ``run_dir``; ``RunError`` when there is none."""
    path = Path(run_dir) / STORE_FILE
    try:
        return RunStore.open(path, readonly=readonly)
    except FileNotFoundError:
        raise RunError(f"{run_dir} holds no kevo run (no {STORE_FILE}); start one with 'kevo run CONFIG.yaml'") from None
    except StoreError as exc:
        raise RunError(str(exc)) from None


def search_space(config: Config, seeds: list[str]) -> dict[str, tuple[int, ...]]:
    """The space every operator call uses, resolved once from the seeds.

    Each seed is checked against the config's space first, so a misspelt
    tunable name is an error rather than a space that does nothing. Where
    seeds share a tunable, the first seed's space holds.
    """
    space: dict[str, tuple[int, ...]] = {}
    labels = config.problem.seeds or ["the seed from torch.compile"] * len(seeds)
    for path, source in zip(labels, seeds):
        try:
            check_space(source, config.operators.space)
            for name, values in resolve_space(source, config.operators.space).items():
                space.setdefault(name, values)
        except SpaceError as exc:
            raise ConfigError(f"operators.space against seed {path}: {exc}") from None
        except SyntaxError as exc:
            raise ConfigError(f"seed {path} does not parse: line {exc.lineno}: {exc.msg}") from None
    return space


def check_llm(config: Config) -> None:
    """``RunError`` when the configured LLM cannot be used at all (no key, unknown provider); no request is sent."""
    if not config.llm.online:
        return
    try:
        llm_client.check_setup(LlmSettings.from_config(config.llm))
    except LlmSetupError as exc:
        raise RunError(f"{exc} (llm section of the config)") from None


@contextlib.contextmanager
def make_proposer(config: Config, store: RunStore, where: dict[str, Any]) -> Iterator[LlmProposer | None]:
    """The LLM proposer of the run (its cache and spending are the store's), or None without a model.

    Without a model it says so, once. Raises ``RunError`` for an LLM that cannot be used.
    """
    if not config.llm.online:
        log.info(OFFLINE_MESSAGE)
        yield None
        return
    reference = config.problem.reference
    shapes = {**{knob.name: knob.value for knob in shape_knobs(reference)}, **config.problem.shapes}
    context = ProblemContext(reference.read_text(encoding="utf-8"), where["cutoff"], guidance(where["platform"]),
                             screen=screen, shapes=shapes)
    try:
        proposer = LlmProposer(LlmSettings.from_config(config.llm), store, context,
                               spent_usd=store.llm_usage().cost_usd)
    except LlmSetupError as exc:
        raise RunError(f"{exc} (llm section of the config)") from None
    weighted = [op.value for op, w in config.operators.weights.items() if op.needs_llm and w > 0]
    if not weighted:
        log.info("llm: operators.weights gives no LLM operator a weight, so the LLM only writes first kernels "
                 "(when problem.seeds is empty)")
    with proposer:
        yield proposer


class NoSeed(RunError):
    """``seeds: compile`` gave no seed (no GPU, Inductor's code is not Triton alone, compiling failed)."""


COMPILED_SEED_FILE = "seed_from_compile.py"  # the seed torch.compile gave, kept in the run directory
RECORDING_FILE = "inductor_recording.json"  # what Inductor wrote for it, with its eager and compiled times


def _ms(value: float | None) -> str:
    return "?" if value is None else f"{value:.4g}"


def _read_seeds(config: Config, run_dir: Path | None = None) -> list[str]:
    """The seeds' sources; for ``seeds: compile``, written from torch.compile's Triton now (and,
    with ``run_dir``, kept there with what Inductor wrote)."""
    if config.problem.compile_seed:
        from evolve.seeding import apart
        from evolve.seeding.seed import SeedError, compile_seeds

        problem = config.problem
        # a sweep's runs start in threads: their captures go to processes of their own (evolve.seeding.apart)
        capture = apart.compile_seeds_apart if apart.wanted() else compile_seeds
        try:  # one seed per distinct program of Inductor's configurations; the first is compile_seed's
            seeds = capture(problem.reference, shapes=dict(problem.shapes), dtype=problem.dtype,
                            limit=config.search.max_evaluations)
        except SeedError as exc:
            raise NoSeed(f"seeds: compile: {exc}") from None
        budget = config.search.max_evaluations  # the seeds are evaluated within it
        if len(seeds) > budget:
            log.warning("seeds: compile: %d distinct seeds, but search.max_evaluations is %d: the seeds of %s are "
                        "left out", len(seeds), budget, ", ".join(seed.variant for seed in seeds[budget:]))
            seeds = seeds[:budget]
        for seed in seeds:
            log.info("seed (Inductor configuration %s): %d Triton kernel(s) from torch.compile (%s ms; eager %s ms): "
                     "%s", seed.variant, len(seed.kernels), _ms(seed.compiled_ms), _ms(seed.eager_ms),
                     ", ".join(seed.kernels))
        if run_dir is not None:
            run_dir.mkdir(parents=True, exist_ok=True)
            (run_dir / COMPILED_SEED_FILE).write_text(seeds[0].source, encoding="utf-8")
            # what Inductor wrote for the first seed, and why the other configurations (and its fast path) gave none
            recording = {**seeds[0].recording, "skipped": dict(seeds[0].skipped)}
            (run_dir / RECORDING_FILE).write_text(json.dumps(recording), encoding="utf-8")
            for seed in seeds[1:]:  # seed_from_compile.looped_reductions.py, ...
                (run_dir / COMPILED_SEED_FILE.replace(".py", f".{seed.variant}.py")).write_text(seed.source,
                                                                                                 encoding="utf-8")
        return [seed.source for seed in seeds]
    try:
        return [path.read_text(encoding="utf-8") for path in config.problem.seeds]
    except OSError as exc:
        raise ConfigError(f"cannot read seed {exc.filename}: {exc.strerror}") from None


def _put_setup(store: RunStore, seeds: list[str], space: dict[str, tuple[int, ...]]) -> None:
    """Keep what the run was started from, so a resume needs neither the seed files nor a new space."""
    store.put_state(SETUP_KEY, {"seeds": seeds, "space": {name: list(v) for name, v in space.items()}})


def _taken(run_dir: Path) -> RunError:
    return RunError(f"{run_dir} already holds a run; continue it with 'kevo resume {run_dir}' "
                    "or choose another --run-dir")


def _search(how: str, run_dir: Path, store: RunStore, dispatcher: Dispatcher, where: dict[str, Any],
            config: Config, seeds: list[str], space: dict[str, tuple[int, ...]], observer: Observer) -> str:
    with make_proposer(config, store, where) as proposer:
        models = list(config.llm.models) or [config.llm.model]
        store.record_event(how, {**where, "llm": models if config.llm.online else config.llm.model,
                                 "operators": [op.value for op, w in config.operators.weights.items() if w > 0],
                                 "bias": config.operators.bias})
        observer.started(run_dir, store, config)

        def settle_space(sources: list[str]) -> dict[str, tuple[int, ...]]:
            """The space of a run whose first kernels the LLM wrote, kept for a resume."""
            resolved = seed_space(sources, config.operators.space)
            _put_setup(store, seeds, resolved)
            return resolved

        search = Search(store, dispatcher, config, seeds, space, lambda c: observer.result(c, store),
                        proposer=proposer, on_llm_seeds=settle_space)
        try:
            return run_search(search)
        except LlmSetupError as exc:  # a key the provider refuses shows at the first request
            raise RunError(f"{exc} (llm section of the config); fix it and continue with "
                           f"'kevo resume {run_dir}'") from None


@contextlib.contextmanager
def _locked(run_dir: Path) -> Iterator[None]:
    """Hold the run's lock: two processes never drive one run (the OS frees it on any death)."""
    with open(run_dir / LOCK_FILE, "a") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise RunError(f"{run_dir} is being run by another kevo process right now") from None
        yield
