"""The experiment config (YAML): typed, every default in one block, nothing unknown.

A YAML file is a diff of the defaults below. ``load_config(path)`` reads one, refusing unknown keys,
wrong types, bad values and missing files with one ``ConfigError`` that names the file and the key;
paths in it are relative to the file. ``Config.to_dict()`` is the resolved form (absolute paths,
every default filled in) that a run stores, and ``config_from_dict`` reads it back on resume.

>>> config = load_config("configs/quickstart.yaml")  # doctest: +SKIP
>>> config.search.population_size  # doctest: +SKIP
8
"""

from __future__ import annotations

import dataclasses
import enum
import typing
from pathlib import Path
from typing import Any

import yaml

from evolve.typed import Context, build, plain
from fitness.problems.problem import DTYPES
from operators import CROSSOVER, LLM_CROSSOVER, LLM_MUTATION, MUTATION, SearchSpace, SpaceError
from operators.llm import Price, ReasoningEffort


class ConfigError(ValueError):
    """The config cannot be used; the message names the file, the key and the fix."""


class PlatformName(str, enum.Enum):
    AUTO = "auto"
    CUDA = "cuda"
    ROCM = "rocm"
    CPU = "cpu"


class Baseline(str, enum.Enum):
    """What a speedup is over: eager PyTorch (the reference as written), or torch.compile of it."""

    EAGER = "eager"
    COMPILE = "compile"


class OperatorName(str, enum.Enum):
    PARAMETRIC_MUTATION = MUTATION
    PARAMETRIC_CROSSOVER = CROSSOVER
    LLM_MUTATION = LLM_MUTATION
    LLM_CROSSOVER = LLM_CROSSOVER

    @property
    def needs_llm(self) -> bool:
        return self in (OperatorName.LLM_MUTATION, OperatorName.LLM_CROSSOVER)


#: ``llm.model`` when no LLM is configured: parametric operators only.
OFFLINE = "offline"
COMPILE_SEEDS = "compile"  # problem.seeds: compile -- the seed comes from torch.compile (evolve.seeding.seed)


# --- every key and its default ---------------------------------------------------


@dataclasses.dataclass(frozen=True)
class ProblemConfig:
    reference: Path  # required: the KernelBench-format problem file
    seeds: tuple[Path, ...]  # required: at least one ModelNew file to start from (or: seeds: compile)
    # seeds: compile in YAML: one seed written from torch.compile's Triton on this machine's GPU (evolve.seeding.seed)
    compile_seed: bool = False
    shapes: dict[str, int] = dataclasses.field(default_factory=dict)  # overrides of module-level ints
    held_out_shapes: list[dict[str, int]] | None = None  # None: derived by fitness
    dtype: str | None = None  # float32 | float16 | bfloat16: cast floating inputs and weights; None: as written


@dataclasses.dataclass(frozen=True)
class FitnessConfig:
    max_abs_diff: float | None = None  # None: the problem's MAX_ABS_DIFF
    timeout_s: float = 300.0  # per step of one evaluation (import, a call, a timing window)
    compile_timeout_s: float = 60.0  # per Triton compile of a candidate's kernel
    probes: bool = True  # also check on probe inputs from a wider value domain (fitness.problems.probes)
    # where memory binds, compile a candidate's kernels before it holds memory (fitness.judge.ahead)
    compile_ahead: bool = True


@dataclasses.dataclass(frozen=True)
class SearchConfig:
    population_size: int = 16  # per island; also the offspring made per island and generation
    max_evaluations: int = 400  # candidates evaluated in all, seeds included
    max_generations: int | None = None
    max_wall_time_s: float | None = None  # summed over resumes; at it, what is in flight is left pending
    target_speedup: float | None = None  # stop once the best kernel is this much faster than speedup_over
    speedup_over: Baseline = Baseline.EAGER  # compile: target_speedup and patience against torch.compile (timed once, on a GPU)
    patience: int | None = None  # stop after this many generations without a faster kernel
    stop_at_sol: float | None = None  # stop once the best reaches this share of the speed of light (0 < x <= 1)
    confirm_rounds: int | None = None  # time the top kernels again at the end, interleaved; None: 3 on a GPU, 0 else
    seed: int = 0
    tournament_size: int = 3
    elite: int = 1  # the best of each island always survive
    islands: int = 1
    migration_interval: int = 5  # generations between ring migrations (with islands > 1)
    migrants: int = 1  # best of an island sent to the next one, replacing its worst


#: The default operator weights once ``llm.model`` or ``llm.models`` is set (and
#: ``operators.weights`` is not): the LLM operators first, parametric ones beside them.
LLM_WEIGHTS = {OperatorName.LLM_MUTATION: 0.45, OperatorName.LLM_CROSSOVER: 0.2,
               OperatorName.PARAMETRIC_MUTATION: 0.25, OperatorName.PARAMETRIC_CROSSOVER: 0.1}


@dataclasses.dataclass(frozen=True)
class OperatorsConfig:
    weights: dict[OperatorName, float] = dataclasses.field(
        default_factory=lambda: {OperatorName.PARAMETRIC_MUTATION: 0.7, OperatorName.PARAMETRIC_CROSSOVER: 0.3}
    )
    max_changes: int = 2  # tunables one mutation changes, at most
    space: dict[str, list[int]] = dataclasses.field(default_factory=dict)  # tunable -> allowed values
    # True: a parent's bottleneck class (profiler) biases the operator and LLM focus, and the
    # selector learns what pays off; False: draws follow the weights alone (a uniform baseline).
    bias: bool = True


@dataclasses.dataclass(frozen=True)
class ProfilerConfig:
    enabled: bool = True  # False: parents get the analytic roofline only, never a hardware profiler
    ncu_bin_path: Path | None = None  # None: ncu on PATH, /usr/local/cuda/bin, /opt/nvidia/nsight-compute
    rocprof_bin_path: Path | None = None  # None: rocprofv3, rocprofv2, rocprof on PATH or in /opt/rocm/bin
    timeout_s: float = 300.0  # per profiler call
    max_device_share: float | None = 0.25  # of the search's wall time, the profiled programs on the device (None: no cap)


@dataclasses.dataclass(frozen=True)
class LlmConfig:
    model: str = OFFLINE  # a litellm model string (provider/model), or 'offline': parametric operators only
    models: dict[str, float] = dataclasses.field(default_factory=dict)  # model -> weight; instead of model
    api_base: str | None = None  # a server of your own, e.g. http://localhost:8000/v1 (vLLM)
    api_key_env: str | None = None  # the environment variable holding the key; None: the provider's usual one
    temperature: float = 0.8
    max_tokens: int | None = None  # per reply; None: 8192, or 32768 for a reasoning model (operators.llm)
    reasoning_effort: ReasoningEffort | None = None  # none..xhigh, for reasoning models; None: not sent
    timeout_s: float = 300.0  # per request
    retries: int = 3  # after a rate limit or a provider error, with exponential back-off
    concurrency: int = 4  # requests in flight at once
    max_cost_usd: float | None = None  # stop asking the LLM once this much is spent (resumes included)
    initial_seeds: int = 8  # first kernels the LLM writes when problem.seeds is empty
    repair_turns: int = 2  # times a failed LLM attempt goes back to its model with the verdict; 0: never
    prices: dict[str, Price] = dataclasses.field(default_factory=dict)  # for models litellm has no price for

    @property
    def online(self) -> bool:
        """True when a model is configured (LLM operators can run)."""
        return self.model != OFFLINE or bool(self.models)


@dataclasses.dataclass(frozen=True)
class ClusterConfig:
    address: str | None = None  # an existing Ray cluster to join; None: start a local, loopback-only one
    # Evaluator actors (Ray): None is one per GPU, no Ray at all on platform cpu; 0 evaluates in this process
    actors: int | None = None  # without Ray; n > 0 runs n actors (CPU actors on platform cpu)
    # Candidates an actor evaluates at once; None: 3 on a GPU (two compile and check while one is timed), 1 on CPU
    slots: int | None = None
    node_check_s: float = 5.0  # seconds between looks for nodes that joined (they get actors) or were lost


@dataclasses.dataclass(frozen=True)
class Config:
    problem: ProblemConfig
    fitness: FitnessConfig = dataclasses.field(default_factory=FitnessConfig)
    search: SearchConfig = dataclasses.field(default_factory=SearchConfig)
    operators: OperatorsConfig = dataclasses.field(default_factory=OperatorsConfig)
    llm: LlmConfig = dataclasses.field(default_factory=LlmConfig)
    profiler: ProfilerConfig = dataclasses.field(default_factory=ProfilerConfig)
    platform: PlatformName = PlatformName.AUTO
    cluster: ClusterConfig = dataclasses.field(default_factory=ClusterConfig)

    def to_dict(self) -> dict[str, Any]:
        """The resolved config as plain JSON-ready data (what a run stores)."""
        return plain(self)


# --- reading ------------------------------------------------------------------------


def load_config(path: str | Path) -> Config:
    """Read, check and resolve the YAML config at ``path``; ``ConfigError`` if unusable."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1})" if mark else ""
        problem = getattr(exc, "problem", None) or type(exc).__name__
        raise ConfigError(f"{path}: not valid YAML{where}: {problem}") from None
    config = config_from_dict(data, origin=str(path), base_dir=path.resolve().parent)
    for file in (config.problem.reference, *config.problem.seeds):
        if not file.is_file():
            raise ConfigError(f"{path}: file not found: {file} (paths are relative to the config file)")
    return config


def config_from_dict(data: Any, origin: str, base_dir: Path | None = None) -> Config:
    """A checked ``Config`` from plain data; relative paths are taken from ``base_dir``."""
    if data is None:
        data = {}
    problem = data.get("problem") if isinstance(data, dict) else None
    if isinstance(problem, dict) and problem.get("seeds") == COMPILE_SEEDS:
        data = {**data, "problem": {**problem, "seeds": [], "compile_seed": True}}
    config = build(Config, data, "", Context(origin, base_dir, ConfigError))
    given = data.get("operators") if isinstance(data, dict) else None
    if config.llm.online and not (isinstance(given, dict) and "weights" in given):
        # a model is what the user pays for: with one named and no weights of their own, ask it
        config = dataclasses.replace(config, operators=dataclasses.replace(config.operators,
                                                                           weights=dict(LLM_WEIGHTS)))
    _check_values(config, origin)
    return config


def _check_values(config: Config, origin: str) -> None:
    """Values of the right type that still cannot work."""
    problem, search, ops = config.problem, config.search, config.operators

    def require(ok: bool, key: str, message: str) -> None:
        if not ok:
            raise ConfigError(f"{origin}: {key}: {message}")

    require(problem.dtype is None or problem.dtype in DTYPES, "problem.dtype",
            f"{problem.dtype!r} is not one of {', '.join(DTYPES)} (or leave it out: the problem's own dtypes)")
    require(len(problem.seeds) >= 1 or problem.compile_seed or config.llm.online, "problem.seeds",
            "name at least one seed kernel, write 'seeds: compile' for one from torch.compile, "
            "or set llm.model so that an LLM writes the first kernels")
    require(not (problem.seeds and problem.compile_seed), "problem.compile_seed",
            "seeds from files and from torch.compile do not mix: name the files, or write 'seeds: compile'")
    for key in ("population_size", "max_evaluations", "tournament_size", "islands", "migration_interval"):
        require(getattr(search, key) >= 1, f"search.{key}", "must be at least 1")
    require(search.max_evaluations >= len(problem.seeds), "search.max_evaluations",
            f"must be at least the number of seeds ({len(problem.seeds)})")
    require(0 <= search.elite <= search.population_size, "search.elite", "must be between 0 and population_size")
    require(0 <= search.migrants < search.population_size, "search.migrants",
            "must be at least 0 and below population_size")
    for key in ("max_generations", "patience"):
        require((n := getattr(search, key)) is None or n >= 1, f"search.{key}", "must be at least 1 (or left out)")
    for key in ("search.max_wall_time_s", "search.target_speedup", "fitness.max_abs_diff", "fitness.timeout_s",
                "fitness.compile_timeout_s", "profiler.timeout_s", "cluster.node_check_s"):
        section, name = key.split(".")
        value = getattr(getattr(config, section), name)
        require(value is None or value > 0, key, "must be positive")
    for key, share in (("search.stop_at_sol", search.stop_at_sol),
                       ("profiler.max_device_share", config.profiler.max_device_share)):
        require(share is None or 0 < share <= 1, key, "must be in (0, 1]")
    require(search.confirm_rounds is None or search.confirm_rounds >= 0, "search.confirm_rounds", "must be >= 0")
    require(config.cluster.actors is None or config.cluster.actors >= 0, "cluster.actors",
            "must be 0 (evaluate in this process), a positive number of actors, or left out (one per GPU)")
    require(config.cluster.slots is None or config.cluster.slots >= 1, "cluster.slots",
            "must be at least 1 (or left out: 3 per GPU actor, 1 per CPU actor)")
    require(config.cluster.address is None or config.cluster.address.strip() != "", "cluster.address",
            "must name a Ray cluster (host:port, or 'auto'), or be left out to start a local one")
    require(all(w >= 0 for w in ops.weights.values()) and sum(ops.weights.values()) > 0,
            "operators.weights", "weights must be >= 0 and at least one positive")
    require(ops.max_changes >= 1, "operators.max_changes", "must be at least 1")
    try:
        SearchSpace.from_mapping(ops.space, origin="operators.space")
    except SpaceError as exc:
        raise ConfigError(f"{origin}: {exc}") from None
    _check_llm(config, require)


def _check_llm(config: Config, require: typing.Callable[[bool, str, str], None]) -> None:
    llm = config.llm
    require(not (llm.models and llm.model != OFFLINE), "llm.models",
            "set llm.model (one model) or llm.models (several, with weights), not both")
    require(OFFLINE not in llm.models, "llm.models", f"{OFFLINE!r} is not a model; leave llm.models out")
    require(all(w >= 0 for w in llm.models.values()) and (not llm.models or sum(llm.models.values()) > 0),
            "llm.models", "weights must be >= 0 and at least one positive")
    for name in (llm.model, *llm.models, *llm.prices):
        require(name.strip() == name != "", "llm", f"{name!r} is not a model name")
    require(llm.api_base is None or llm.api_base.startswith(("http://", "https://")), "llm.api_base",
            f"{llm.api_base!r} is not an http(s) URL")
    require(llm.api_key_env is None or llm.api_key_env.replace("_", "").isalnum(), "llm.api_key_env",
            "must name an environment variable (the key itself never goes in the config)")
    # The evaluator's worker drops variables named like secrets; a key in any other would reach kernels.
    require(llm.api_key_env is None or any(w in llm.api_key_env.upper() for w in ("KEY", "TOKEN", "SECRET")),
            "llm.api_key_env", f"{llm.api_key_env!r}: name a variable with KEY, TOKEN or SECRET in its name, "
            "e.g. VLLM_API_KEY, so that the evaluated kernels never see it")
    require(0 <= llm.temperature <= 2, "llm.temperature", "must be between 0 and 2")
    for key in ("concurrency", "initial_seeds"):
        require(getattr(llm, key) >= 1, f"llm.{key}", "must be at least 1")
    require(llm.max_tokens is None or llm.max_tokens >= 1, "llm.max_tokens", "must be at least 1 (or left out)")
    require(llm.retries >= 0, "llm.retries", "must be at least 0")
    require(llm.repair_turns >= 0, "llm.repair_turns", "must be at least 0 (0: a failed attempt is not sent back)")
    require(llm.timeout_s > 0, "llm.timeout_s", "must be positive")
    require(llm.max_cost_usd is None or llm.max_cost_usd > 0, "llm.max_cost_usd", "must be positive (or left out)")
    require(all(p.input >= 0 and p.output >= 0 for p in llm.prices.values()), "llm.prices",
            "prices must be >= 0 (USD per million tokens)")
    uses_llm = [op.value for op, w in config.operators.weights.items() if op.needs_llm and w > 0]
    require(llm.online or not uses_llm, "operators.weights",
            f"{', '.join(uses_llm)} need{'s' if len(uses_llm) == 1 else ''} an LLM, but llm.model is {OFFLINE}")
    seeded = bool(config.problem.seeds) or config.problem.compile_seed
    require(seeded or config.search.max_evaluations >= llm.initial_seeds, "llm.initial_seeds",
            f"must be at most search.max_evaluations ({config.search.max_evaluations}): the first kernels "
            "are evaluated within the budget")
