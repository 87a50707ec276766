"""The wall-time budgets with the Docker code runner: endless agent code in one reply, or over the
turns of an episode, ends within the budget (container start included) and truncates with its cause."""

from __future__ import annotations

import sys
from pathlib import Path

import gymnasium as gym
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: the budget test helpers
from budget_helpers import (  # noqa: E402
    CODE_TOOLS,
    check_endless_reply_ends_within_the_turn_budget,
    check_endless_turns_end_within_the_episode_budget,
)

import sopgym.envs  # noqa: E402,F401 - registration

pytestmark = pytest.mark.docker


@pytest.mark.parametrize("env_id,tool,language", CODE_TOOLS)
def test_endless_code_in_one_reply_ends_within_the_turn_budget(docker_client, env_id, tool, language):
    env = gym.make(env_id, code_runner="docker", max_turn_seconds=3.0)
    check_endless_reply_ends_within_the_turn_budget(env, tool, language, 3.0)


@pytest.mark.parametrize("env_id,tool,language", CODE_TOOLS)
def test_endless_code_over_turns_ends_within_the_episode_budget(docker_client, env_id, tool, language):
    env = gym.make(env_id, code_runner="docker", max_turn_seconds=None, max_episode_seconds=4.0, max_turns=10)
    check_endless_turns_end_within_the_episode_budget(env, tool, language, 4.0)
