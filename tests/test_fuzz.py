"""Random and grammar-fuzzed replies never raise and always return contained observations."""

from __future__ import annotations

import json

import gymnasium as gym
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sopgym.envs.registration import registered_env_ids

AUTHORED_ENV_IDS = registered_env_ids("sopgym")

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4),
    max_leaves=10,
)


def _tool_names(env_id):
    env = gym.make(env_id)
    _, info = env.reset(seed=0)
    env.close()
    return [t["function"]["name"] for t in info["tools"]]


NAMES = sorted({n for e in AUTHORED_ENV_IDS for n in _tool_names(e)} | {"", "nope"})

calls = st.builds(
    lambda name, args, wrap: wrap(json.dumps({"name": name, "arguments": args}, default=str)),
    st.sampled_from(NAMES),
    json_values,
    st.sampled_from([
        lambda s: f"<tool_call>{s}</tool_call>",
        lambda s: s,
        lambda s: f"thinking...<tool_call>{s}</tool_call>tail",
        lambda s: f"<tool_call>{s[: len(s) // 2]}",
        lambda s: f"<tool_call>{s}</tool_call><tool_call>{s}</tool_call>",
        lambda s: f"```json\n{s}\n```",
    ]),
)
dict_actions = st.builds(
    lambda content, tcs: {"role": "assistant", "content": content, "tool_calls": tcs},
    st.none() | st.text(max_size=30),
    st.none() | st.lists(st.fixed_dictionaries({"function": st.fixed_dictionaries({"name": st.sampled_from(NAMES), "arguments": st.text(max_size=30) | json_values})}), max_size=3),
)
actions = st.one_of(st.text(max_size=200), calls, dict_actions, json_values)


def _check_env_survives(env_id, action_list):
    env = gym.make(env_id, max_turns=len(action_list) + 1)
    obs, info = env.reset(seed=len(action_list))
    for action in action_list:
        obs, reward, terminated, truncated, info = env.step(action)
        assert env.observation_space.contains(obs)
        assert isinstance(reward, float)
        assert isinstance(info["status"], str)
        if terminated or truncated:
            obs, info = env.reset()
    env.close()


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(AUTHORED_ENV_IDS), st.lists(actions, min_size=1, max_size=20))
def test_fuzzed_replies_never_raise(env_id, action_list):
    """500 examples x up to 20 replies each: about 5,000 steps, plus the random-policy test below."""
    _check_env_survives(env_id, action_list)


def test_ten_thousand_random_space_samples_never_raise():
    for env_id in AUTHORED_ENV_IDS:
        env = gym.make(env_id)
        env.action_space.seed(0)
        env.reset(seed=0)
        for _ in range(10_000 // len(AUTHORED_ENV_IDS) + 1):
            obs, reward, terminated, truncated, info = env.step(env.action_space.sample())
            assert env.observation_space.contains(obs)
            if terminated or truncated:
                env.reset()
        env.close()
