"""Every SOPEnv constructor argument is checked at ``gymnasium.make`` (sopgym/envs/env_kwargs.py), and
``code_runner="inprocess"`` warns that it is for trusted code only."""

from __future__ import annotations

import math
import warnings

import gymnasium as gym
import numpy as np
import pytest

from sopgym.envs.env_kwargs import InProcessCodeRunnerWarning
from sopgym.sop_tasks.registry import all_packs, get_pack

# (kwargs, words the message must contain: the argument, the expected type or range, the value given)
BAD_KWARGS = [
    ({"max_turns": 1.5}, ["max_turns", "integer >= 1", "1.5"]),
    ({"max_turns": True}, ["max_turns", "integer >= 1", "bool"]),
    ({"max_turns": 0}, ["max_turns", "integer >= 1", "0"]),
    ({"max_turns": "4"}, ["max_turns", "integer >= 1", "str"]),
    ({"max_context": -3}, ["max_context", "integer >= 1", "-3"]),
    ({"max_context": 1e9}, ["max_context", "integer >= 1", "float"]),
    ({"turn_cost": math.nan}, ["turn_cost", "finite number >= 0", "nan"]),
    ({"turn_cost": math.inf}, ["turn_cost", "finite number >= 0", "inf"]),
    ({"turn_cost": -0.1}, ["turn_cost", "finite number >= 0", "-0.1"]),
    ({"turn_cost": "0.1"}, ["turn_cost", "finite number >= 0", "str"]),
    ({"invalid_action_penalty": True}, ["invalid_action_penalty", "finite number >= 0", "bool"]),
    ({"invalid_action_penalty": math.nan}, ["invalid_action_penalty", "finite number >= 0", "nan"]),
    ({"reward": "sparse"}, ["reward", "'dense'", "'sparse'"]),
    ({"reward": ["dense"]}, ["reward", "'dense'", "list"]),
    ({"split": "dev"}, ["split", "'test'", "'dev'"]),
    ({"max_tool_output_chars": 8}, ["max_tool_output_chars", "integer >= 16", "8"]),
    ({"max_tool_output_chars": 100.0}, ["max_tool_output_chars", "integer >= 16", "float"]),
    ({"max_observation_length": 0}, ["max_observation_length", "integer >= 1", "0"]),
    ({"length_fn": "len"}, ["length_fn", "callable", "str"]),
    ({"sandbox": "dcoker"}, ["sandbox", "'docker'", "'dcoker'"]),
    ({"sandbox_options": ["x"]}, ["sandbox_options", "mapping", "list"]),
    ({"code_runner": "local"}, ["code_runner", "'inprocess'", "'local'"]),
    ({"render_mode": "rgb_array"}, ["render_mode", "'ansi'", "'rgb_array'"]),
    ({"max_turn_seconds": 0}, ["max_turn_seconds", "finite number > 0 or None", "0"]),
    ({"max_turn_seconds": -1.0}, ["max_turn_seconds", "finite number > 0 or None", "-1.0"]),
    ({"max_turn_seconds": math.inf}, ["max_turn_seconds", "finite number > 0 or None", "inf"]),
    ({"max_turn_seconds": "60"}, ["max_turn_seconds", "finite number > 0 or None", "str"]),
    ({"max_episode_seconds": math.nan}, ["max_episode_seconds", "finite number > 0 or None", "nan"]),
    ({"max_episode_seconds": True}, ["max_episode_seconds", "finite number > 0 or None", "bool"]),
]


@pytest.mark.parametrize("kwargs,words", BAD_KWARGS, ids=[next(iter(k)) + "=" + repr(next(iter(k.values()))) for k, _ in BAD_KWARGS])
def test_make_refuses_a_bad_kwarg_naming_the_expected_type_and_range(env_id, kwargs, words):
    with pytest.raises(ValueError) as err, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # gymnasium's own warning about an unknown render mode
        gym.make(env_id, **kwargs)
    for word in words:
        assert word in str(err.value), (word, str(err.value))


@pytest.mark.parametrize("kwargs", [
    {"max_turns": np.int64(3)}, {"max_turns": 1}, {"turn_cost": 0}, {"turn_cost": 0.05}, {"max_context": 10_000},
    {"invalid_action_penalty": np.float64(0.1)}, {"length_fn": lambda s: len(s.split())}, {"render_mode": "ansi"},
    {"max_turn_seconds": None}, {"max_turn_seconds": 1}, {"max_episode_seconds": np.float64(0.5)},
    {"max_episode_seconds": None},
])
def test_make_accepts_valid_values_of_every_numeric_type(env_id, kwargs):
    env = gym.make(env_id, **kwargs)
    env.close()


VERIFIABLE_ENV_IDS = sorted(p.env_id for p in all_packs("sopgym") if p.verifiable is not None)


def test_some_authored_env_runs_agent_code():
    assert VERIFIABLE_ENV_IDS, "no verifiable domain to test the in-process runner's warning on"


@pytest.mark.parametrize("env_id", VERIFIABLE_ENV_IDS)
def test_inprocess_code_runner_warns_that_it_is_for_trusted_code_only(env_id):
    with pytest.warns(InProcessCodeRunnerWarning, match="trusted code only") as caught:
        gym.make(env_id, code_runner="inprocess").close()
    assert "import sopgym" in str(caught[0].message)


@pytest.mark.parametrize("env_id", VERIFIABLE_ENV_IDS)
def test_the_default_code_runner_does_not_warn(env_id):
    with warnings.catch_warnings():
        warnings.simplefilter("error", InProcessCodeRunnerWarning)
        gym.make(env_id).close()


def test_inprocess_code_runner_does_not_warn_where_no_code_runs():
    """Domains without a verifiable tier never start a code runner: the option is inert there."""
    pack = next(p for p in all_packs("sopgym") if p.verifiable is None)
    with warnings.catch_warnings():
        warnings.simplefilter("error", InProcessCodeRunnerWarning)
        gym.make(pack.env_id, code_runner="inprocess").close()
    assert get_pack(pack.name).verifiable is None
