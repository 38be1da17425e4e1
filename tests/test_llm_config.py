"""The llm section of the config, and the settings the LLM operators are built from."""

from __future__ import annotations

import textwrap

import pytest

from evolve.config import ConfigError, LlmConfig, config_from_dict, load_config
from operators.llm import OFFLINE_MESSAGE, LlmSettings, Price, ReasoningEffort
from tests.conftest import PROBLEMS

REFERENCE = f"problem:\n  reference: {PROBLEMS}/elementwise/reference.py\n"
SEEDED = REFERENCE + f"  seeds: [{PROBLEMS}/elementwise/seed.py]\n"
UNSEEDED = REFERENCE + "  seeds: []\n"

FULL = """\
llm:
  models: {anthropic/claude-sonnet-4-5: 3, openai/gpt-4o-mini: 1}
  api_base: http://localhost:8000/v1
  api_key_env: VLLM_API_KEY
  temperature: 0.5
  max_tokens: 4096
  reasoning_effort: high
  timeout_s: 90
  retries: 5
  concurrency: 8
  max_cost_usd: 2.5
  initial_seeds: 4
  prices: {openai/gpt-4o-mini: {input: 0.15, output: 0.6}}
"""


def load(tmp_path, text):
    path = tmp_path / "exp.yaml"
    path.write_text(textwrap.dedent(text))
    return load_config(path)


def test_the_default_is_offline_and_says_what_runs():
    llm = LlmConfig()
    assert (llm.model, llm.online, llm.max_cost_usd) == ("offline", False, None)
    assert (llm.max_tokens, llm.reasoning_effort) == (None, None)  # the model's kind decides; nothing sent
    assert OFFLINE_MESSAGE == "llm.model is offline: only parametric operators run"


def test_every_key_is_read_stored_and_read_back(tmp_path):
    config = load(tmp_path, SEEDED + FULL)
    llm = config.llm
    assert llm.online and llm.model == "offline"  # several models instead of one
    assert llm.models == {"anthropic/claude-sonnet-4-5": 3.0, "openai/gpt-4o-mini": 1.0}
    assert llm.prices == {"openai/gpt-4o-mini": Price(0.15, 0.6)}
    assert (llm.timeout_s, llm.retries, llm.concurrency, llm.initial_seeds) == (90.0, 5, 8, 4)
    assert (llm.max_tokens, llm.reasoning_effort) == (4096, ReasoningEffort.HIGH)
    assert config.to_dict()["llm"]["reasoning_effort"] == "high"
    assert config_from_dict(config.to_dict(), origin="run.sqlite") == config

    settings = LlmSettings.from_config(llm)
    assert settings.models == llm.models and settings.prices == {"openai/gpt-4o-mini": Price(0.15, 0.6)}
    assert (settings.api_base, settings.api_key_env, settings.max_cost_usd) == (
        "http://localhost:8000/v1", "VLLM_API_KEY", 2.5)
    assert (settings.max_tokens, settings.reasoning_effort) == (4096, ReasoningEffort.HIGH)


def test_a_run_stored_before_the_reasoning_keys_reads_back_as_it_ran(tmp_path):
    stored = load(tmp_path, SEEDED + "llm:\n  model: openai/gpt-4o\n").to_dict()
    del stored["llm"]["reasoning_effort"]
    stored["llm"]["max_tokens"] = 8192
    llm = config_from_dict(stored, origin="run.sqlite").llm
    assert (llm.max_tokens, llm.reasoning_effort) == (8192, None)


def test_one_model_becomes_settings_with_weight_one(tmp_path):
    config = load(tmp_path, SEEDED + "llm:\n  model: ollama_chat/qwen2.5-coder\n")
    assert LlmSettings.from_config(config.llm).models == {"ollama_chat/qwen2.5-coder": 1.0}


def test_a_problem_without_seeds_needs_a_model(tmp_path):
    with pytest.raises(ConfigError, match="problem.seeds: name at least one seed kernel, write .seeds: compile. for one from torch.compile, or set llm.model"):
        load(tmp_path, UNSEEDED)
    config = load(tmp_path, UNSEEDED + "llm:\n  model: openai/gpt-4o\n  initial_seeds: 3\n")
    assert config.problem.seeds == () and config.llm.initial_seeds == 3


@pytest.mark.parametrize("llm, message", [
    ("  model: openai/gpt-4o\n  models: {openai/gpt-4o-mini: 1}\n", "llm.models: set llm.model (one model) or"),
    ("  models: {offline: 1}\n", "'offline' is not a model"),
    ("  models: {openai/gpt-4o: 0}\n", "llm.models: weights must be >= 0 and at least one positive"),
    ("  model: ''\n", "is not a model name"),
    ("  model: openai/gpt-4o\n  api_base: localhost:8000\n", "llm.api_base: 'localhost:8000' is not an http(s) URL"),
    ("  model: openai/gpt-4o\n  api_key_env: sk-abc123\n", "llm.api_key_env: must name an environment variable"),
    ("  model: openai/gpt-4o\n  api_key_env: MY_LLM_CRED\n", "name a variable with KEY, TOKEN or SECRET in its name"),
    ("  model: openai/gpt-4o\n  temperature: 3\n", "llm.temperature: must be between 0 and 2"),
    ("  model: openai/gpt-4o\n  concurrency: 0\n", "llm.concurrency: must be at least 1"),
    ("  model: openai/gpt-4o\n  max_tokens: 0\n", "llm.max_tokens: must be at least 1"),
    ("  model: openai/gpt-4o\n  max_tokens: 2.5\n", "llm.max_tokens: expected an integer"),
    ("  model: openai/o3\n  reasoning_effort: extreme\n",
     "llm.reasoning_effort: 'extreme' is not one of none, minimal, low, medium, high, xhigh"),
    ("  model: openai/gpt-4o\n  retries: -1\n", "llm.retries: must be at least 0"),
    ("  model: openai/gpt-4o\n  timeout_s: 0\n", "llm.timeout_s: must be positive"),
    ("  model: openai/gpt-4o\n  max_cost_usd: 0\n", "llm.max_cost_usd: must be positive"),
    ("  model: openai/gpt-4o\n  prices: {openai/gpt-4o: {input: 1}}\n", "llm.prices.openai/gpt-4o.output is required"),
    ("  model: openai/gpt-4o\n  prices: {openai/gpt-4o: {input: 1, output: -2}}\n", "llm.prices: prices must be >= 0"),
    ("  model: openai/gpt-4o\n  api_key: sk-secret\n", "unknown key 'llm.api_key'"),
])
def test_bad_llm_settings_are_one_clear_error(tmp_path, llm, message):
    with pytest.raises(ConfigError) as caught:
        load(tmp_path, SEEDED + "llm:\n" + llm)
    assert message in str(caught.value) and "\n" not in str(caught.value)
