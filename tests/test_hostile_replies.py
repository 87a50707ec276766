"""A model's reply never raises out of ``env.step``: one regression test per class of issue 12, each over
every registered env it applies to. (The seeded 10,000-action fuzz is in test_fuzz.py.)"""

from __future__ import annotations

import datetime as dt
import decimal
import json
import math
import time

import numpy as np
import pytest
from hostile_actions import make_env_without_docker, nested, self_referencing_dict

from sopgym.envs.parsing import MAX_INT_DIGITS
from sopgym.envs.policies import format_call
from sopgym.envs.registration import registered_env_ids
from sopgym.envs.wrappers import dumps_line
from sopgym.evaluation import score_record
from sopgym.sop_tasks.pack import SUBMIT_TOOL
from sopgym.sop_tasks.registry import get_pack

make = make_env_without_docker


def _numeric_fields(env_id):
    return [f.name for f in get_pack(env_id.rsplit("-v", 1)[0]).output_fields if f.type in ("integer", "number")]


NUMERIC_ENV_IDS = [e for e in registered_env_ids() if _numeric_fields(e)]


def _submit_text(answer, field, number_text):
    """A submit call whose ``field`` is the raw JSON text ``number_text`` (json.dumps cannot write every number)."""
    text = format_call(SUBMIT_TOOL, {**answer, field: "__N__"})
    return text.replace('"__N__"', number_text)


def test_some_registered_env_has_a_numeric_output_field():
    assert NUMERIC_ENV_IDS, "no env to run the numeric tests on"


@pytest.mark.parametrize("env_id", NUMERIC_ENV_IDS)
@pytest.mark.parametrize("number", ["1" + "0" * 309, "-" + "9" * 400, "9" * MAX_INT_DIGITS], ids=["1e309", "-400 digits", "640 digits"])
def test_submitting_an_integer_beyond_float_range_is_scored_not_raised(env_id, number):
    """`"accepted_pallets": 1` followed by 309 zeros raised OverflowError in scoring."""
    env = make(env_id)
    env.reset(seed=0)
    answer = dict(env.unwrapped._task.answer)
    for field in _numeric_fields(env_id):
        env.reset(seed=0)
        obs, reward, terminated, truncated, info = env.step(_submit_text(answer, field, number))
        assert info["turn_status"] in ("SUBMITTED", "ERROR_BAD_ARGUMENTS"), info["status_message"]
        if terminated:
            assert math.isfinite(reward) and info["reward_components"][f"field/{field}"] == 0.0
            record = info["episode"]
            assert score_record(json.loads(dumps_line(record))).fields[field] is False
    env.close()


@pytest.mark.parametrize("env_id", NUMERIC_ENV_IDS)
@pytest.mark.parametrize("quoted", [False, True], ids=["bare", "quoted"])
def test_submitting_an_integer_beyond_the_digit_bound_is_a_policy_mistake(env_id, quoted):
    """A 4,301-digit number raised ValueError in parsing (bare) and after schema coercion (quoted)."""
    env = make(env_id)
    env.reset(seed=0)
    answer = dict(env.unwrapped._task.answer)
    number = "1" + "0" * 4_300
    for field in _numeric_fields(env_id):
        obs, reward, terminated, truncated, info = env.step(_submit_text(answer, field, f'"{number}"' if quoted else number))
        assert info["turn_status"] == ("ERROR_BAD_ARGUMENTS" if quoted else "ERROR_PARSE")
        assert f"at most {MAX_INT_DIGITS}" in info["messages"][-1]["content"]
        assert not terminated and env.unwrapped._answer is None
        if truncated:
            env.reset(seed=0)
    env.close()


def test_a_huge_integer_in_tool_arguments_is_a_parse_error(env_id):
    env = make(env_id)
    _, info = env.reset(seed=0)
    tool = info["tools"][0]["function"]
    key = next(iter(tool["parameters"].get("properties") or {"x": None}))
    reply = format_call(tool["name"], {key: "__N__"}).replace('"__N__"', "7" * 4_301)
    obs, reward, terminated, truncated, info = env.step(reply)
    assert info["turn_status"] == "ERROR_PARSE" and "4301 digits" in obs
    env.close()


NON_JSON = {
    "numpy int": lambda: np.int64(3), "numpy float": lambda: np.float32(1.5), "numpy array": lambda: np.arange(3),
    "set": lambda: {1, 2}, "bytes": lambda: b"ab", "Decimal": lambda: decimal.Decimal("1.5"),
    "date": lambda: dt.date(2024, 1, 1), "self reference": self_referencing_dict, "5,000 deep": lambda: nested(5_000),
    "tuple key": lambda: {(1, 2): 3}, "huge int": lambda: 10**5_000, "int beyond float range as a dict value": lambda: 10**MAX_INT_DIGITS,
}


def test_dict_actions_holding_values_json_cannot_carry_are_parse_errors(env_id):
    """60 of 126 such actions raised TypeError, ValueError or RecursionError."""
    env = make(env_id, max_turns=100)
    _, info = env.reset(seed=0)
    name = info["tools"][0]["function"]["name"]
    for label, value in NON_JSON.items():
        for action in (
            {"role": "assistant", "content": None, "tool_calls": [{"function": {"name": name, "arguments": {"x": value()}}}]},
            {"role": "assistant", "content": None, "tool_calls": [{"function": {"name": SUBMIT_TOOL, "arguments": value()}}]},
            {"role": "assistant", "content": value()},
            {"role": value(), "content": "hi"},
        ):
            obs, reward, terminated, truncated, info = env.step(action)
            assert info["turn_status"] == "ERROR_PARSE", (label, info["status_message"])
            assert env.observation_space.contains(obs) and not terminated
            json.dumps(info["calls"])
    env.close()


def test_a_reply_longer_than_the_action_space_runs_nothing(env_id):
    """The reply length the parser accepts is the action space's max_length; a longer reply is refused whole,
    even when it holds a valid submission."""
    env = make(env_id, max_observation_length=20_000)
    env.reset(seed=0)
    answer = dict(env.unwrapped._task.answer)
    reply = format_call(SUBMIT_TOOL, answer)
    obs, reward, terminated, truncated, info = env.step(reply + " " * (20_001 - len(reply)))
    assert info["turn_status"] == "ERROR_PARSE" and "too long" in info["status_message"]
    assert not terminated and env.unwrapped._answer is None
    assert not env.action_space.contains(reply + " " * (20_001 - len(reply)))
    obs, reward, terminated, truncated, info = env.step(reply)
    assert terminated and info["turn_status"] == "SUBMITTED"
    env.close()


def test_upstream_final_decision_is_found_in_linear_time():
    from sopgym.sopbench.prompts import final_decision

    assert final_decision("a <final_decision> X </final_decision> b <final_decision>Y</final_decision>") == "Y"
    assert final_decision("<final_decision>a<final_decision>b</final_decision>") == "a<final_decision>b"
    assert final_decision("<final_decision> unclosed") is None
    started = time.process_time()
    assert final_decision("<final_decision>" * 50_000) is None  # quadratic before: ~10 s per step at 8,000
    assert time.process_time() - started < 1.0


@pytest.mark.parametrize("line", ['{"a": ' + "1" * 5000 + "}", "[" * 100_000 + "]" * 100_000])
def test_record_files_with_unreadable_numbers_or_depth_name_the_line(tmp_path, line):
    from sopgym.evaluation import load_records

    path = tmp_path / "r.jsonl"
    path.write_text('{"type": "reset"}\n' + line + "\n")
    with pytest.raises(ValueError, match=r"r\.jsonl:2: expected a JSON object per line"):
        load_records(path)
