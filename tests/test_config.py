"""The experiment config: defaults, the resolved form a run stores, and clear errors."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from evolve.config import (
    Config,
    ConfigError,
    OperatorName,
    PlatformName,
    SearchConfig,
    config_from_dict,
    load_config,
)
from evolve.session import search_space
from tests.conftest import PROBLEMS, ROOT

CONFIGS = ROOT / "configs"
SUITE = ["elementwise", "softmax", "rmsnorm", "sum_middle", "matmul", "matvec"]

MINIMAL = f"""\
problem:
  reference: {PROBLEMS}/softmax/reference.py
  seeds: [{PROBLEMS}/softmax/seed.py]
"""


def write(tmp_path: Path, text: str, name: str = "exp.yaml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def test_a_minimal_config_gets_every_default(tmp_path):
    config = load_config(write(tmp_path, MINIMAL))
    assert config.search == SearchConfig()
    assert config.platform is PlatformName.AUTO
    assert config.llm.model == "offline"
    assert config.fitness.max_abs_diff is None  # the problem's own cutoff
    assert config.problem.held_out_shapes is None  # derived by fitness
    assert config.operators.weights == {OperatorName.PARAMETRIC_MUTATION: 0.7,
                                        OperatorName.PARAMETRIC_CROSSOVER: 0.3}


def test_paths_are_relative_to_the_config_file_and_stored_absolute(tmp_path, monkeypatch):
    problem = tmp_path / "problems" / "softmax"
    problem.mkdir(parents=True)
    for name in ("reference.py", "seed.py"):
        (problem / name).write_text((PROBLEMS / "softmax" / name).read_text())
    (tmp_path / "exp").mkdir()
    path = write(tmp_path, """\
        problem:
          reference: ../problems/softmax/reference.py
          seeds: [../problems/softmax/seed.py]
        """, "exp/exp.yaml")
    monkeypatch.chdir(ROOT)  # not the config's directory
    config = load_config(path)
    assert config.problem.reference == (problem / "reference.py").resolve()
    stored = config.to_dict()
    assert stored["problem"]["reference"] == str(config.problem.reference)
    assert stored["problem"]["seeds"] == [str((problem / "seed.py").resolve())]


def test_the_resolved_config_reads_back_unchanged(tmp_path):
    path = write(tmp_path, MINIMAL + textwrap.dedent("""\
          shapes: {batch_size: 4, dim: 100}
          held_out_shapes: [{batch_size: 3, dim: 37}]
        fitness:
          max_abs_diff: 1e-6
        search: {population_size: 4, max_evaluations: 9, islands: 2, patience: 3}
        operators:
          weights: {parametric_mutation: 1.0, parametric_crossover: 0}
          space: {softmax_kernel.num_warps: [1, 2]}
        platform: cpu
        """))
    config = load_config(path)
    assert config.fitness.max_abs_diff == 1e-6  # YAML reads "1e-6" as text; it is a number here
    again = config_from_dict(config.to_dict(), origin="run.sqlite")
    assert again == config
    assert isinstance(again, Config) and again.platform is PlatformName.CPU


@pytest.mark.parametrize("extra, message", [
    ("search:\n  popsize: 8\n", "unknown key 'search.popsize'"),
    ("serch:\n  population_size: 8\n", "unknown key 'serch'"),
    ("problem:\n  reference: x.py\n  seeds: [y.py]\n  shape: {}\n", "unknown key 'problem.shape'"),
    ("search:\n  population_size: '16'\n", "search.population_size: expected an integer, got '16'"),
    ("search:\n  max_evaluations: 1.5\n", "search.max_evaluations: expected an integer"),
    ("search:\n  seed: yes\n", "search.seed: expected an integer, got True"),
    ("platform: gpu\n", "platform: 'gpu' is not one of auto, cuda, rocm, cpu"),
    ("operators:\n  weights: {llm_mutation: 1.0}\n", "operators.weights: llm_mutation needs an LLM, but llm.model is offline"),
    ("operators:\n  weights: {llm_mutant: 1.0}\n", "'llm_mutant' is not one of parametric_mutation, parametric_crossover, llm_mutation, llm_crossover"),
    ("operators:\n  bias: 1\n", "operators.bias: expected true or false, got 1"),
    ("profiler:\n  timeout_s: 0\n", "profiler.timeout_s: must be positive"),
    ("profiler:\n  max_device_share: 1.5\n", "profiler.max_device_share: must be in (0, 1]"),
    ("profiler:\n  ncu: /usr/bin/ncu\n", "unknown key 'profiler.ncu'"),
    ("operators:\n  weights: {parametric_mutation: 0}\n", "operators.weights"),
    ("operators:\n  space: {softmax_kernel.num_warps: 4}\n", "operators.space.softmax_kernel.num_warps: expected a list, got 4"),
    ("fitness:\n  max_abs_diff: small\n", "fitness.max_abs_diff: expected a number, got 'small'"),
    ("fitness:\n  max_abs_diff: -1.0\n", "fitness.max_abs_diff: must be positive"),
    ("cluster:\n  node_check_s: 0\n", "cluster.node_check_s: must be positive"),
    ("search:\n  population_size: 0\n", "search.population_size: must be at least 1"),
    ("search:\n  elite: 20\n", "search.elite"),
    ("llm:\n  model: anthropic/claude-sonnet-4\n  models: {openai/gpt-4o: 1.0}\n", "llm.models: set llm.model"),
])
def test_a_bad_key_or_value_is_one_clear_error_naming_the_file(tmp_path, extra, message):
    base = MINIMAL if not extra.startswith("problem:") else ""
    path = write(tmp_path, base + extra)
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    text = str(caught.value)
    assert message in text
    assert str(path) in text and "\n" not in text


def test_missing_files_and_keys_are_errors(tmp_path):
    with pytest.raises(ConfigError, match="cannot read config file .*nope.yaml"):
        load_config(tmp_path / "nope.yaml")
    missing_seed = write(tmp_path, MINIMAL.replace("softmax/seed.py", "softmax/seeed.py"))
    with pytest.raises(ConfigError, match="file not found: .*seeed.py"):
        load_config(missing_seed)
    with pytest.raises(ConfigError, match="problem.seeds is required"):
        load_config(write(tmp_path, f"problem:\n  reference: {PROBLEMS}/softmax/reference.py\n"))
    with pytest.raises(ConfigError, match="problem is required"):
        load_config(write(tmp_path, "search: {seed: 1}\n"))
    with pytest.raises(ConfigError, match=r"not valid YAML \(line 3\)"):
        load_config(write(tmp_path, "problem:\n  seeds: [a\n  x: 1\n"))


def test_a_misspelt_tunable_in_the_space_is_an_error(tmp_path):
    config = load_config(write(tmp_path, MINIMAL + "operators:\n  space: {softmax_kernel.BLOCK: [512]}\n"))
    seeds = [p.read_text() for p in config.problem.seeds]
    with pytest.raises(ConfigError, match="softmax_kernel.BLOCK.*softmax_kernel.BLOCK_SIZE"):
        search_space(config, seeds)


def test_the_space_is_resolved_once_from_the_seed_with_the_config_winning(tmp_path):
    config = load_config(write(tmp_path, MINIMAL + "operators:\n  space: {softmax_kernel.num_warps: [2, 8]}\n"))
    space = search_space(config, [p.read_text() for p in config.problem.seeds])
    assert space["softmax_kernel.num_warps"] == (2, 8)
    assert 1024 in space["softmax_kernel.BLOCK_SIZE"]


def test_shipped_configs_load_and_cover_the_suite():
    quickstart = load_config(CONFIGS / "quickstart.yaml")
    assert quickstart.platform is PlatformName.CPU
    assert quickstart.problem.shapes  # tiny shapes, not the GPU defaults
    for name in SUITE:
        config = load_config(CONFIGS / f"{name}.yaml")
        assert config.platform is PlatformName.CUDA
        assert config.problem.shapes == {}  # the problem's default shapes
        assert config.problem.reference == (PROBLEMS / name / "reference.py").resolve()
        seeds = [p.read_text() for p in config.problem.seeds]
        space = search_space(config, seeds)  # every space name is a tunable of the seed
        assert set(config.operators.space) <= set(space)


def test_cli_config_errors_exit_2_with_one_line(tmp_path):
    bad = write(tmp_path, MINIMAL + "search:\n  populaton_size: 8\n")
    done = subprocess.run([sys.executable, "-m", "evolve.cli", "run", str(bad), "--run-dir", str(tmp_path / "r")],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert done.stderr.strip() == (f"kevo run: {bad}: unknown key 'search.populaton_size' (known keys of search: "
                                   + ", ".join(SearchConfig.__dataclass_fields__) + ")")
    assert done.stdout == ""
    assert not (tmp_path / "r").exists()  # nothing is created for a config that cannot run


def test_profiles_hold_the_device_a_quarter_of_the_time_unless_told_otherwise(tmp_path):
    assert load_config(write(tmp_path, MINIMAL)).profiler.max_device_share == 0.25
    uncapped = load_config(write(tmp_path, MINIMAL + "profiler:\n  max_device_share: null\n"))
    assert uncapped.profiler.max_device_share is None
