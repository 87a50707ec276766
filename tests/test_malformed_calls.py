"""A corpus of malformed replies: each gets the right status, and nothing in the episode's state changes."""

from __future__ import annotations

import json

import gymnasium as gym
import pytest

from sopgym.sop_tasks.registry import get_pack

TASK = get_pack("WarehouseReceiving").task("test", 3)
SID = TASK.inputs["shipment_id"]


def call(name, args):
    return "<tool_call>" + json.dumps({"name": name, "arguments": args}) + "</tool_call>"


# (reply, expected step status)
CORPUS = [
    ("", "NO_TOOL_CALL"),
    ("   \n\t", "NO_TOOL_CALL"),
    ("I think the answer is ACCEPT.", "NO_TOOL_CALL"),
    ('{"disposition": "ACCEPT"}', "NO_TOOL_CALL"),
    ("[1, 2, 3]", "NO_TOOL_CALL"),
    ("<tool_call></tool_call>", "ERROR_PARSE"),
    ("<tool_call>not json</tool_call>", "ERROR_PARSE"),
    ('<tool_call>{"name": "get_shipment", "arguments": {"shipment_id": "SHP-000001"}', "ERROR_PARSE"),
    ('<tool_call>{"name": "get_shipment"', "ERROR_PARSE"),
    ('<tool_call>["get_shipment"]</tool_call>', "ERROR_PARSE"),
    ('<tool_call>{"arguments": {}}</tool_call>', "ERROR_PARSE"),
    ('<tool_call>{"name": 42, "arguments": {}}</tool_call>', "ERROR_PARSE"),
    ('<tool_call>{"name": "", "arguments": {}}</tool_call>', "ERROR_PARSE"),
    ('<tool_call>{"name": "get_shipment", "arguments": "{bad json"}</tool_call>', "ERROR_PARSE"),
    ('<tool_call>{"name": "get_shipment", "arguments": {}, "extra": 1}</tool_call>', "ERROR_PARSE"),
    ("<tool_call>{'name': 'get_shipment'}</tool_call>", "ERROR_PARSE"),
    ('</tool_call>' + call("get_shipment", {"shipment_id": SID}), "ERROR_PARSE"),
    ('{"name": "get_shipment", "arguments": {"shipment_id": ', "NO_TOOL_CALL"),
    ('{"name": "get_shipment", "arguments": {"shipment_id": }', "ERROR_PARSE"),
    (call("get_shipmentt", {"shipment_id": SID}), "ERROR_UNKNOWN_TOOL"),
    (call("GET_SHIPMENT", {"shipment_id": SID}), "ERROR_UNKNOWN_TOOL"),
    (call("os.system", {"cmd": "ls"}), "ERROR_UNKNOWN_TOOL"),
    (call("get_shipment", {}), "ERROR_BAD_ARGUMENTS"),
    (call("get_shipment", {"shipment_id": 123456}), "ERROR_BAD_ARGUMENTS"),
    (call("get_shipment", {"shipment_id": "shp-000001"}), "ERROR_BAD_ARGUMENTS"),
    (call("get_shipment", {"shipment_id": SID, "verbose": True}), "ERROR_BAD_ARGUMENTS"),
    (call("get_shipment", {"shipment": SID}), "ERROR_BAD_ARGUMENTS"),
    (call("get_shipment", [SID]), "ERROR_BAD_ARGUMENTS"),
    (call("get_shipment", None), "ERROR_BAD_ARGUMENTS"),
    (call("get_storage_capacity", {"zone": "Z"}), "ERROR_BAD_ARGUMENTS"),
    (call("get_shipment", {"shipment_id": "SHP-999999" if SID != "SHP-999999" else "SHP-000000"}), "ERROR_TOOL"),
    (call("submit_answer", {}), "ERROR_BAD_ARGUMENTS"),
    (call("submit_answer", {"disposition": "ACCEPT"}), "ERROR_BAD_ARGUMENTS"),
    (call("submit_answer", {"disposition": "accept it", "reason_code": "NONE"}), "ERROR_BAD_ARGUMENTS"),
    (call("submit_answer", {"disposition": "ACCEPT", "reason_code": "NONE", "confidence": 1}), "ERROR_BAD_ARGUMENTS"),
    (call("submit_answer", {"disposition": ["ACCEPT", "REJECT"], "reason_code": "NONE"}), "ERROR_BAD_ARGUMENTS"),
    (call("submit_answer", {"disposition": None, "reason_code": "NONE"}), "ERROR_BAD_ARGUMENTS"),
    (call("submit_answer", "ACCEPT"), "ERROR_PARSE"),  # string arguments are read as JSON text
    (call("submit_answer", 7), "ERROR_BAD_ARGUMENTS"),
    ({"role": "user", "content": "hi"}, "ERROR_PARSE"),
    ({"role": "assistant", "content": 5}, "ERROR_PARSE"),
    ({"role": "assistant", "content": None, "tool_calls": "get_shipment"}, "ERROR_PARSE"),
    ({"role": "assistant", "content": None, "tool_calls": [{"function": {"name": "get_shipment", "arguments": "{"}}]}, "ERROR_PARSE"),
    (42, "ERROR_PARSE"),
    (None, "ERROR_PARSE"),
    (b"<tool_call>{}</tool_call>", "ERROR_PARSE"),
    (call("get_shipment", {"shipment_id": SID}) * 17, "ERROR_PARSE"),
]


def test_corpus_is_large_enough():
    assert len(CORPUS) >= 30


@pytest.mark.parametrize("reply,expected", CORPUS, ids=[f"case{i}" for i in range(len(CORPUS))])
def test_malformed_reply_gets_its_status_and_changes_no_state(reply, expected):
    env = gym.make("sopgym/WarehouseReceiving-v0").unwrapped
    env.reset(options={"task_id": TASK.task_id})
    obs, reward, terminated, truncated, info = env.step(reply)
    assert info["turn_status"] == expected, info["status_message"]
    assert (terminated, truncated, reward) == (False, False, 0.0)
    assert env._answer is None  # no answer was stored
    assert env.observation_space.contains(obs)
    assert info["status_message"]


def test_malformed_replies_leave_stateful_state_unchanged():
    packs = [p for p in __import__("sopgym").sop_tasks.all_packs("sopgym") if p.program is not None]
    if not packs:
        pytest.fail("no stateful authored domain is registered; the foundation requires at least one")
    for pack in packs:
        env = gym.make(pack.env_id).unwrapped
        env.reset(options={"split": "test", "task_index": 0})
        before = env._toolbox.snapshot()
        for reply, _ in CORPUS:
            env.step(reply) if not env._done else None
        assert env._toolbox.snapshot() == before, pack.name
        env.close()
