"""The gymnasium contract, checked on every registered env."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import warnings

import gymnasium as gym
import pytest
from gymnasium.error import ResetNeeded
from gymnasium.utils.env_checker import check_env

from sopgym.envs.policies import make_policy
from sopgym.sop_tasks.registry import get_pack

# Warnings check_env may raise on a correct text env, and why they are acceptable.
ALLOWED_WARNINGS = (
    # check_env on the make()-wrapped env: we pass the unwrapped env, as gymnasium recommends.
    "is different from the unwrapped version",
    # make() below runs verifiable domains with code_runner="inprocess" (unit tests need no Docker; the
    # code is the oracle's), and check_env rebuilds the env from its spec: the trusted-code warning.
    "code_runner='inprocess' runs the agent's code on this host",
)

NO_CALL = "I will think about this case first."


def make(env_id, **kwargs):
    return gym.make(env_id, code_runner="inprocess", **kwargs) if _verifiable(env_id) else gym.make(env_id, **kwargs)


def _verifiable(env_id):
    return get_pack(env_id.rsplit("-v", 1)[0]).verifiable is not None


def run_policy(env, policy, *, seed=None, options=None):
    obs, info = env.reset(seed=seed, options=options)
    policy.reset(info)
    steps = [(obs, info)]
    done = False
    while not done:
        obs, reward, terminated, truncated, info = env.step(policy.act(obs, info))
        steps.append((obs, reward, terminated, truncated, info))
        done = terminated or truncated
    return steps


def test_check_env_passes_without_unexpected_warnings(env_id):
    env = make(env_id)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        check_env(env.unwrapped)
    unexpected = [str(w.message) for w in caught if not any(a in str(w.message) for a in ALLOWED_WARNINGS)]
    assert unexpected == []
    env.close()


def test_make_with_module_prefix_needs_no_import(authored_env_id):
    code = f"import gymnasium as gym; e = gym.make('sopgym:{authored_env_id}'); print(e.reset(seed=0)[1]['task_id'])"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().startswith(get_pack(authored_env_id.rsplit("-v", 1)[0]).name + "/")


def test_reset_info_has_the_contract_keys(env_id):
    env = make(env_id)
    obs, info = env.reset(seed=3)
    for key in ("task_id", "domain", "split", "messages", "tools", "max_turns", "license", "training_allowed"):
        assert key in info, key
    assert [m["role"] for m in info["messages"]] == ["system", "user"]
    assert obs == info["messages"][1]["content"]
    assert "submit_answer" in [t["function"]["name"] for t in info["tools"]]
    env.close()


def test_submit_schema_lists_fields_types_and_allowed_values(env_id):
    pack = get_pack(env_id.rsplit("-v", 1)[0])
    env = make(env_id)
    _, info = env.reset(seed=0)
    submit = next(t for t in info["tools"] if t["function"]["name"] == "submit_answer")["function"]["parameters"]
    assert submit["required"] == [f.name for f in pack.output_fields]
    for f in pack.output_fields:
        prop = submit["properties"][f.name]
        assert f.type in (prop["type"] if isinstance(prop["type"], list) else [prop["type"]])
        if f.enum is not None:
            assert set(f.enum) <= set(prop["enum"])
    env.close()


def test_default_max_turns_is_ceil_one_and_a_half_human_steps(env_id):
    pack = get_pack(env_id.rsplit("-v", 1)[0])
    env = make(env_id)
    assert env.reset(seed=0)[1]["max_turns"] == math.ceil(1.5 * pack.human_steps)
    env.close()


def test_same_seed_gives_identical_trajectories_and_infos(env_id):
    a, b = make(env_id), make(env_id)
    policies = ("oracle", "random") if env_id.startswith("sopgym/") else ("random", "majority")
    for policy_name in policies:
        kwargs = {"seed": 7} if policy_name == "random" else {}
        run_a = run_policy(a, make_policy(policy_name, **kwargs), seed=11)
        run_b = run_policy(b, make_policy(policy_name, **kwargs), seed=11)
        assert json.dumps(run_a, sort_keys=True, default=str) == json.dumps(run_b, sort_keys=True, default=str)
    a.close()
    b.close()


def test_different_seeds_give_different_tasks(env_id):
    env = make(env_id)
    ids = {env.reset(seed=s)[1]["task_id"] for s in range(5)}
    assert len(ids) > 1
    env.close()


def test_options_select_split_and_task(env_id):
    env = make(env_id)
    pack = get_pack(env_id.rsplit("-v", 1)[0])
    split = next(s for s in ("test", "val", "train") if pack.num_tasks(s) != 0)
    _, info = env.reset(options={"split": split, "task_index": 0})
    assert info["task_id"] == f"{pack.name}/{split}/0"
    _, info2 = env.reset(options={"task_id": info["task_id"]})
    assert info2["messages"] == info["messages"]
    env.close()


def test_close_twice_and_before_reset(env_id):
    never = make(env_id)
    never.close()
    never.close()
    used = make(env_id)
    used.reset(seed=0)
    used.close()
    used.close()


def test_step_before_reset_raises_reset_needed(env_id):
    env = make(env_id).unwrapped
    with pytest.raises(ResetNeeded):
        env.step(NO_CALL)


def test_step_after_episode_end_raises_reset_needed(env_id):
    env = make(env_id).unwrapped
    run_policy(env, make_policy("majority"), seed=0)
    with pytest.raises(ResetNeeded):
        env.step(NO_CALL)


def test_oracle_episode_ends_submitted_with_full_reward(authored_env_id):
    env_id = authored_env_id
    env = make(env_id)
    pack = get_pack(env_id.rsplit("-v", 1)[0])
    split = next(s for s in ("test", "val", "train") if pack.num_tasks(s) != 0)
    steps = run_policy(env, make_policy("oracle"), options={"split": split, "task_index": 0})
    _, reward, terminated, truncated, info = steps[-1]
    assert (terminated, truncated, info["status"]) == (True, False, "SUBMITTED")
    assert reward == 1.0
    assert all(v == 1.0 for v in info["reward_components"].values())
    env.close()


def test_messages_grow_by_assistant_and_one_tool_message_per_call(env_id):
    env = make(env_id)
    _, info = env.reset(seed=1)
    names = [t["function"]["name"] for t in info["tools"] if t["function"]["name"] != "submit_answer"]
    action = "".join('<tool_call>{"name": "%s", "arguments": {}}</tool_call>' % n for n in names[:2])
    _, _, _, _, info2 = env.step(action)
    new = info2["messages"][len(info["messages"]):]
    assert new[0]["role"] == "assistant"
    assert [m["role"] for m in new[1:]] == ["tool", "tool"]
    assert [m["tool_call_id"] for m in new[1:]] == [tc["id"] for tc in new[0]["tool_calls"]]
    env.close()


def test_no_tool_call_is_a_status_not_an_exception_and_does_not_truncate(env_id):
    env = make(env_id)
    env.reset(seed=0)
    obs, reward, terminated, truncated, info = env.step(NO_CALL)
    assert (info["status"], terminated, truncated) == ("NO_TOOL_CALL", False, False)
    assert "No tool call" in obs
    env.close()


def test_max_turns_truncates_with_its_cause(env_id):
    env = make(env_id, max_turns=3)
    env.reset(seed=0)
    results = [env.step(NO_CALL) for _ in range(3)]
    assert [r[3] for r in results] == [False, False, True]
    info = results[-1][4]
    assert (info["status"], info["truncation_cause"]) == ("TRUNCATED_MAX_TURNS", "max_turns")
    assert info["episode"]["truncation_cause"] == "max_turns"
    assert results[-1][1] == 0.0
    env.close()


def test_context_budget_truncates_with_its_cause(env_id):
    env = make(env_id)
    _, info = env.reset(seed=0)
    used = sum(len(m["content"]) for m in info["messages"])
    env.close()
    env = make(env_id, max_context=used + 50)
    env.reset(seed=0)
    _, _, terminated, truncated, info = env.step("x" * 60)
    assert (terminated, truncated, info["status"], info["truncation_cause"]) == (False, True, "TRUNCATED_BUDGET", "context_budget")
    env.close()


def test_length_fn_is_pluggable(env_id):
    calls = []

    def words(text):
        calls.append(text)
        return len(text.split())

    env = make(env_id, length_fn=words)
    _, info = env.reset(seed=0)
    assert calls
    _, _, _, _, info = env.step(NO_CALL)
    assert info["context_used"] == sum(len((m["content"] or "").split()) for m in info["messages"])
    env.close()


def test_tool_output_is_capped(env_id):
    env = make(env_id, max_tool_output_chars=20)
    _, info = env.reset(seed=0)
    name = next(t["function"]["name"] for t in info["tools"])
    _, _, _, _, info = env.step('<tool_call>{"name": "%s", "arguments": {}}</tool_call>' % name)
    assert all(len(m["content"]) <= 20 for m in info["messages"] if m["role"] == "tool")
    env.close()


def test_binary_reward_is_all_or_nothing_and_dense_is_fractional():
    env_d = gym.make("sopgym/WarehouseReceiving-v0")
    env_b = gym.make("sopgym/WarehouseReceiving-v0", reward="binary")
    pack = get_pack("WarehouseReceiving")
    task = pack.task("test", 0)
    wrong = dict(task.answer)
    wrong["reason_code"] = next(v for v in pack.output_fields[1].enum if v != task.answer["reason_code"])
    rewards = []
    for env in (env_d, env_b):
        env.reset(options={"task_id": task.task_id})
        rewards.append(env.step('<tool_call>' + json.dumps({"name": "submit_answer", "arguments": wrong}) + '</tool_call>')[1])
    n = len(pack.output_fields)
    assert rewards == [pytest.approx((n - 1) / n), 0.0]


def test_shaping_components_are_reported_separately_and_off_by_default():
    plain = gym.make("sopgym/WarehouseReceiving-v0")
    plain.reset(seed=0)
    assert plain.step(NO_CALL)[4]["reward_components"] == {}
    shaped = gym.make("sopgym/WarehouseReceiving-v0", turn_cost=0.01, invalid_action_penalty=0.1)
    shaped.reset(seed=0)
    _, reward, _, _, info = shaped.step(NO_CALL)
    assert info["reward_components"] == {"shaping/turn_cost": -0.01, "shaping/invalid_action": -0.1}
    assert reward == pytest.approx(-0.11)


def test_dict_action_with_tool_calls_is_accepted():
    env = gym.make("sopgym/WarehouseReceiving-v0")
    _, info = env.reset(options={"split": "test", "task_index": 0})
    shipment = get_pack("WarehouseReceiving").task("test", 0).inputs["shipment_id"]
    action = {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "get_shipment", "arguments": json.dumps({"shipment_id": shipment})}}]}
    obs, _, _, _, info = env.step(action)
    assert info["status"] == "OK" and shipment in obs


def test_bare_json_call_is_accepted():
    env = gym.make("sopgym/WarehouseReceiving-v0")
    env.reset(options={"split": "test", "task_index": 0})
    shipment = get_pack("WarehouseReceiving").task("test", 0).inputs["shipment_id"]
    _, _, _, _, info = env.step(json.dumps({"name": "get_shipment", "arguments": {"shipment_id": shipment}}))
    assert info["status"] == "OK"


def test_vector_envs_run(authored_env_id):
    from gymnasium.vector import AsyncVectorEnv, SyncVectorEnv

    fns = [lambda: make(authored_env_id)] * 2
    for vec in (SyncVectorEnv(fns), AsyncVectorEnv(fns, shared_memory=False)):
        obs, infos = vec.reset(seed=5)
        assert len(obs) == 2 and all(isinstance(o, str) for o in obs)
        obs, rewards, terminated, truncated, infos = vec.step([NO_CALL, NO_CALL])
        assert list(infos["status"]) == ["NO_TOOL_CALL", "NO_TOOL_CALL"]
        vec.close()
