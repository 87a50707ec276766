"""RecordTrajectory: JSONL of every step and episode, readable back by the evaluator."""

import json
import math

import gymnasium as gym
import numpy as np
import pytest
from hostile_actions import nested, self_referencing_dict, self_sharing

from sopgym.envs import SOPEnv
from sopgym.envs.policies import format_call, make_policy
from sopgym.envs.wrappers import RecordTrajectory, to_jsonable
from sopgym.evaluation import evaluate_records, load_records

WR = "sopgym/WarehouseReceiving-v0"
STEP_KEYS = {"type", "episode_index", "turn", "observation", "action", "calls", "tool_results", "reward", "status",
             "terminated", "truncated"}


def play(env, policy_name, task_indices, samples=1, seed=0):
    """Run episodes through ``env``; returns the live ``info["episode"]`` records."""
    records = []
    for t in task_indices:
        for s in range(samples):
            policy = make_policy(policy_name, seed=seed + 100 * t + s) if policy_name == "random" else make_policy(policy_name)
            obs, info = env.reset(seed=seed + s, options={"split": "test", "task_index": t})
            policy.reset(info)
            done = False
            while not done:
                obs, _, term, trunc, info = env.step(policy.act(obs, info))
                done = term or trunc
            records.append(info["episode"])
    return records


def lines(path):
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_one_episode_line_per_episode(tmp_path):
    path = tmp_path / "t.jsonl"
    env = RecordTrajectory(gym.make(WR), path)
    play(env, "oracle", range(4))
    play(env, "random", range(3))
    env.close()
    episodes = [x for x in lines(path) if x["type"] == "episode"]
    assert [e["episode_index"] for e in episodes] == list(range(7))


def test_metrics_from_the_jsonl_equal_metrics_from_live_records(tmp_path):
    path = tmp_path / "t.jsonl"
    env = RecordTrajectory(gym.make(WR), path)
    live = play(env, "random", range(8), samples=3) + play(env, "oracle", range(8, 12), samples=3)
    env.close()
    assert evaluate_records(load_records(path), k=2, n_bootstrap=200) == evaluate_records(live, k=2, n_bootstrap=200)


def test_episode_lines_read_back_as_the_live_records(tmp_path):
    path = tmp_path / "t.jsonl"
    env = RecordTrajectory(gym.make(WR), path)
    live = play(env, "oracle", range(3))
    env.close()
    assert load_records(path) == json.loads(json.dumps(live))


def test_step_lines_hold_the_documented_keys_one_per_turn(tmp_path):
    path = tmp_path / "t.jsonl"
    env = RecordTrajectory(gym.make(WR), path)
    live = play(env, "oracle", range(3))
    env.close()
    steps = [x for x in lines(path) if x["type"] == "step"]
    assert len(steps) == sum(r["turns"] for r in live)
    assert all(set(s) == STEP_KEYS for s in steps)
    assert [s["turn"] for s in steps if s["episode_index"] == 0] == list(range(1, live[0]["turns"] + 1))
    assert steps[len(live[0]["statuses"]) - 1]["terminated"] is True


def test_tool_results_are_this_steps_tool_messages_matching_the_calls(tmp_path):
    path = tmp_path / "t.jsonl"
    env = RecordTrajectory(gym.make(WR), path)
    env.reset(seed=0, options={"task_index": 0})
    calls = format_call("get_yard_weather", {"date": "2026-01-01"}) + format_call("get_storage_capacity", {"zone": "A"})
    env.step(calls)
    env.step("no call here")
    env.close()
    first, second = [x for x in lines(path) if x["type"] == "step"]
    assert [m["role"] for m in first["tool_results"]] == ["tool", "tool"]
    assert [m["tool_call_id"] for m in first["tool_results"]] == [c["id"] for c in first["calls"]]
    assert [c["name"] for c in first["calls"]] == ["get_yard_weather", "get_storage_capacity"]
    assert second["tool_results"] == [] and second["status"] == "NO_TOOL_CALL"
    assert "No tool call found" in second["observation"]


def test_reset_line_records_the_task_and_its_input(tmp_path):
    path = tmp_path / "t.jsonl"
    env = RecordTrajectory(gym.make(WR), path)
    obs, info = env.reset(seed=3, options={"task_index": 5, "split": "test"})
    env.close()
    (reset,) = lines(path)
    assert (reset["type"], reset["task_id"], reset["observation"], reset["seed"]) == ("reset", info["task_id"], obs, 3)


def test_the_file_is_flushed_when_an_episode_ends(tmp_path):
    path = tmp_path / "t.jsonl"
    env = RecordTrajectory(gym.make(WR), path)
    play(env, "majority", [0])
    assert [x["type"] for x in lines(path)] == ["reset", "step", "episode"]  # before close()
    env.close()


def test_dict_actions_and_odd_text_are_recorded_as_valid_json(tmp_path):
    path = tmp_path / "t.jsonl"
    env = RecordTrajectory(gym.make(WR), path)
    env.reset(seed=0, options={"task_index": 0})
    action = {"role": "assistant", "content": "lookup \ud800 \u00e9\u4e2d",
              "tool_calls": [{"id": "x", "type": "function",
                              "function": {"name": "get_storage_capacity", "arguments": {"zone": "B"}}}]}
    env.step(action)
    env.step("\U0001f600 \udc00 <tool_call>{broken</tool_call> \x00")
    env.close()
    steps = [x for x in lines(path) if x["type"] == "step"]
    assert steps[0]["action"] == action
    assert steps[0]["calls"][0]["name"] == "get_storage_capacity"
    assert steps[1]["action"] == "\U0001f600 \udc00 <tool_call>{broken</tool_call> \x00"
    assert steps[1]["status"] == "ERROR_PARSE"


def test_to_jsonable_converts_what_json_cannot_hold():
    cyclic = []
    cyclic.append(cyclic)
    value = {
        "np": np.float32(0.5), "arr": np.arange(3), "tuple": (1, 2), "set": {"b", "a"}, 3: "int key",
        ("t", 1): "tuple key", "nan": math.nan, "inf": -math.inf, "bytes": b"\xffok", "obj": object,
        "cycle": cyclic,
    }
    out = to_jsonable(value)
    assert json.loads(json.dumps(out, allow_nan=False)) == out
    assert out["np"] == 0.5 and out["arr"] == [0, 1, 2] and out["tuple"] == [1, 2] and out["set"] == ["a", "b"]
    assert out["3"] == "int key" and out["['t', 1]"] == "tuple key"
    assert (out["nan"], out["inf"], out["bytes"]) == ("nan", "-inf", "\ufffdok")
    assert out["cycle"] == ["<cycle>"]


def test_works_on_a_bare_env_and_under_gymnasium_make(tmp_path):
    bare = RecordTrajectory(SOPEnv("WarehouseReceiving", split="test"), tmp_path / "a.jsonl")
    made = RecordTrajectory(gym.make(WR, split="test"), tmp_path / "b.jsonl")
    assert play(bare, "oracle", [7]) == play(made, "oracle", [7])
    assert isinstance(made.unwrapped, SOPEnv)
    bare.close()
    made.close()


def test_close_twice_and_close_without_reset(tmp_path):
    env = RecordTrajectory(gym.make(WR), tmp_path / "t.jsonl")
    env.close()
    env.close()
    assert (tmp_path / "t.jsonl").read_text() == ""


def test_recording_after_close_raises_a_clear_error(tmp_path):
    env = RecordTrajectory(SOPEnv("WarehouseReceiving"), tmp_path / "t.jsonl")
    env.close()
    with pytest.raises(gym.error.Error, match="is closed"):
        env.reset(seed=0)


def test_append_mode_keeps_earlier_lines(tmp_path):
    path = tmp_path / "t.jsonl"
    for _ in range(2):
        env = RecordTrajectory(gym.make(WR), path, append=True)
        play(env, "majority", [0])
        env.close()
    assert len(load_records(path)) == 2


# -- Recording whatever a policy gave never raises nor stalls (issue 12) ----------------------------------
HOSTILE_ACTIONS = {
    "huge int": {"role": "assistant", "tool_calls": [{"function": {"name": "get_shipment", "arguments": {"shipment_id": 10**5000}}}]},
    "5,000 deep": {"role": "assistant", "tool_calls": [{"function": {"name": "get_shipment", "arguments": nested(5000, "list")}}]},
    "self reference": {"role": "assistant", "tool_calls": [self_referencing_dict()]},
    "tuple keys and sets": {"role": "assistant", "content": None, (1, 2): {3, 4}},
    "numpy and Decimal": {"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": {"a": np.int64(2), "b": __import__("decimal").Decimal(1)}}}]},
    "2**20 values sharing themselves": {"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": self_sharing(20)}}]},
}


@pytest.mark.parametrize("label", sorted(HOSTILE_ACTIONS))
def test_recording_a_hostile_action_writes_a_readable_line(tmp_path, label):
    path = tmp_path / "t.jsonl"
    env = RecordTrajectory(gym.make(WR), path)
    env.reset(seed=0)
    env.step(HOSTILE_ACTIONS[label])
    env.close()
    (step,) = [x for x in lines(path) if x["type"] == "step"]
    assert step["status"] in ("ERROR_PARSE", "NO_TOOL_CALL") and step["turn"] == 1 and step["action"]


def test_to_jsonable_bounds_depth_size_and_digits():
    from sopgym.envs.wrappers import MAX_DEPTH, MAX_VALUES

    def count(value):
        return 1 + sum(count(v) for v in value) if isinstance(value, list) else 1

    deep, shared = json.dumps(to_jsonable(nested(5000, "list"))), to_jsonable(self_sharing(20))  # 2**21 values when expanded
    assert f"<nested deeper than {MAX_DEPTH} levels>" in deep and deep.count("[") == MAX_DEPTH
    assert f"<more than {MAX_VALUES} values" in json.dumps(shared) and count(shared) <= 2 * MAX_VALUES  # values + markers
    assert to_jsonable(10**5000).startswith("<integer of about 5001 digits") and to_jsonable(10**300) == 10**300
