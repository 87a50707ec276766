"""The SkyRL adapter, run through skyrl_gym itself (``tox -e skyrl``): same tasks, rewards and schemas as sopgym."""

from __future__ import annotations

import json

import pytest

from ..extras import assert_extra_complete
from ..helpers import AUTHORED_ENV_IDS, ENV_KWARGS, as_served, import_or_skip, served, sopgym_run

skyrl_gym = import_or_skip("skyrl_gym", "skyrl")

from sopgym.envs.policies import make_policy  # noqa: E402
from sopgym.integrations.skyrl import register_skyrl_envs, skyrl_rows  # noqa: E402
from sopgym.sandboxes import SandboxError, ToolBox  # noqa: E402

register_skyrl_envs()


CONFIG = {"env_kwargs": ENV_KWARGS}


def _row(env_id, split="train", index=0):
    return skyrl_rows(env_id, split, 1, first_task=index, env_kwargs=ENV_KWARGS)[0]


def _drive(row, policy_name, env_config=None):
    """A scripted policy acting on what SkyRL shows: the chat from ``init`` plus each step's observations."""
    env = skyrl_gym.make(row["env_class"], env_config=env_config or CONFIG, extras=row)
    chat, meta = env.init(row["prompt"])
    policy = make_policy(policy_name)
    info = {"env_id": meta["env_id"], "domain": meta["domain"], "task_id": meta["task_id"], "tools": meta["tools"], "messages": chat}
    policy.reset(info)
    rewards, outs = [], []
    while True:
        action = policy.act("", info)
        out = env.step(action)
        outs.append(out)
        rewards.append(out["reward"])
        info["messages"] = info["messages"] + [{"role": "assistant", "content": action}] + out["observations"]
        if out["done"]:
            break
    metrics = env.get_metrics()
    env.close()
    return env, rewards, outs, metrics


@pytest.mark.parametrize("env_id", AUTHORED_ENV_IDS)
def test_oracle_through_skyrl_gym_make_scores_one(env_id):
    env, rewards, _, metrics = _drive(_row(env_id), "oracle")
    assert sum(rewards) == 1.0
    assert metrics["success"] == 1.0 and env.record["terminated"]


@pytest.mark.parametrize("env_id", AUTHORED_ENV_IDS)
def test_majority_through_skyrl_scores_what_sopgym_scores(env_id):
    row = _row(env_id, index=1)
    env, rewards, _, _ = _drive(row, "majority")
    reference = sopgym_run(row, "majority")
    assert sum(rewards) == reference.total_reward
    assert env.record == reference.record


def test_a_served_env_through_skyrl_gym_make_plays_the_local_episodes():
    """register_skyrl_envs(servers=...): skyrl_gym.make builds sessions of `sopgym serve` (127.0.0.1), whose
    oracle and majority episodes have the local env's rewards and records (without the ground truth the
    server withholds, so no success metric)."""
    env_id = "sopgym/WarehouseReceiving-v0"
    with served(env_id, "skyrl") as servers:
        register_skyrl_envs([env_id], servers=servers)
        try:
            for policy, index in (("oracle", 0), ("majority", 1)):
                row = skyrl_rows(env_id, "train", 1, first_task=index, servers=servers)[0]
                env, rewards, _, metrics = _drive(row, policy, env_config={"env_kwargs": {}})
                reference = sopgym_run(row, policy)
                assert sum(rewards) == reference.total_reward and env.record == as_served(reference.record)
                assert "success" not in metrics and metrics["turns"] == reference.record["turns"]
        finally:
            register_skyrl_envs([env_id])  # the other tests' envs are made here again


def test_row_env_kwargs_reach_the_env_without_a_config():
    """SkyRL's trainer passes no config for ids it does not know: the row carries the env kwargs."""
    row = skyrl_rows("sopgym/WarehouseReceiving-v0", "train", 1, env_kwargs={"invalid_action_penalty": 0.25})[0]
    env = skyrl_gym.make(row["env_class"], env_config={}, extras=row)
    env.init(row["prompt"])
    assert env.step("no tool call here")["reward"] == -0.25
    env.close()


def test_env_config_kwargs_reach_the_env_and_shaping_is_summed_like_sopgym():
    row = _row("sopgym/WarehouseReceiving-v0")
    config = {"env_kwargs": {"invalid_action_penalty": 0.25, "reward": "binary"}}
    env = skyrl_gym.make(row["env_class"], env_config=config, extras=row)
    env.init(row["prompt"])
    out = env.step("no tool call here")
    assert out["reward"] == -0.25 and out["metadata"]["turn_status"] == "NO_TOOL_CALL"
    assert "No tool call found" in out["observations"][0]["content"]  # sopgym's feedback reaches the model
    env.close()


@pytest.mark.parametrize("env_id", AUTHORED_ENV_IDS)
def test_system_message_carries_the_exact_tool_schemas(env_id):
    row = _row(env_id)
    env = skyrl_gym.make(row["env_class"], env_config=CONFIG, extras=row)
    chat, meta = env.init(row["prompt"])
    block = chat[0]["content"].split("<tools>\n", 1)[1].split("\n</tools>", 1)[0]
    assert [json.loads(line) for line in block.splitlines()] == meta["tools"]
    assert chat[0]["content"].startswith(row["prompt"][0]["content"]) and chat[1:] == row["prompt"][1:]
    env.close()


def test_an_episode_skyrl_stops_early_is_ended_through_end_episode():
    row = _row("sopgym/WarehouseReceiving-v0")
    env = skyrl_gym.make(row["env_class"], env_config=CONFIG, extras=row)
    env.init(row["prompt"])
    assert not env.step("thinking...")["done"]
    metrics = env.get_metrics()  # SkyRL calls this after its loop, also when it broke off for length
    assert env.record["truncation_cause"] == "context_budget" and env.record["statuses"] == ["NO_TOOL_CALL"]
    assert metrics["success"] == 0.0 and metrics["turns"] == 1
    env.close()


def test_infrastructure_failure_is_flagged(monkeypatch):
    def broken(self, spec, args):
        raise SandboxError("injected: the replay store is unreachable")

    monkeypatch.setattr(ToolBox, "_replay", broken)
    row = _row("sopgym/WarehouseReceiving-v0")
    _, _, outs, metrics = _drive(row, "oracle")
    assert outs[-1]["done"] and outs[-1]["metadata"]["infrastructure_failure"]
    assert metrics["infrastructure_failure"] == 1.0


def test_a_row_for_another_task_is_refused():
    row = _row("sopgym/WarehouseReceiving-v0")
    other = _row("sopgym/WarehouseReceiving-v0", index=1)
    env = skyrl_gym.make(row["env_class"], env_config=CONFIG, extras=row)
    with pytest.raises(ValueError, match="user message"):
        env.init(other["prompt"])
    env.close()


def test_the_skyrl_extra_declares_everything_the_adapter_imports():
    assert_extra_complete("skyrl", "import sopgym.integrations.skyrl")
