"""How a chat model sees an env's chat: the history forms and the tools written into the system
message, on real episodes of every authored env (the oracle's first turns, as text and as native tool
calls; SOP-Bench envs build their messages with the same code) and on every registered env's tools."""

from __future__ import annotations

import json

import gymnasium as gym
import pytest

from sopgym.agents.chat import ChatAgent, hermes_text, history_messages, reply_action
from sopgym.agents.tool_prompt import render_tools, with_tools_in_system
from sopgym.envs.parsing import parse_reply
from sopgym.envs.policies import make_policy


def _native(text: str) -> dict:
    """The oracle's text reply as the assistant message a server with native tool calling returns."""
    calls = parse_reply(text).calls
    return {"role": "assistant", "content": None, "tool_calls": [
        {"id": f"srv_{i}", "type": "function", "function": {"name": c.name, "arguments": json.dumps(c.arguments)}}
        for i, c in enumerate(calls)]}


def _episode(env_id: str, native: bool, turns: int = 2) -> tuple[list[dict], list[dict]]:
    env = gym.make(env_id, split="test")
    policy = make_policy("oracle")
    obs, info = env.reset(seed=0, options={"task_index": 0})
    tools = info["tools"]
    policy.reset(info)
    for _ in range(turns):
        text = policy.act(obs, info)
        obs, _, terminated, truncated, info = env.step(reply_action(_native(text)) if native else text)
        if terminated or truncated:
            break
    env.close()
    return info["messages"], tools


@pytest.mark.parametrize("native", [False, True], ids=["text replies", "native replies"])
def test_native_history_sends_each_call_once_as_structured_calls(authored_env_id, native):
    messages, _ = _episode(authored_env_id, native)
    sent = history_messages(messages, "native")
    env_calls = [c for m in messages if m["role"] == "assistant" for c in m.get("tool_calls") or []]
    sent_calls = [c for m in sent if m["role"] == "assistant" for c in m.get("tool_calls") or []]
    assert env_calls and sent_calls == env_calls
    assert not any("<tool_call>" in (m.get("content") or "") for m in sent if m["role"] == "assistant")
    ids = {c["id"] for c in sent_calls}
    assert all(m["tool_call_id"] in ids for m in sent if m["role"] == "tool")


@pytest.mark.parametrize("native", [False, True], ids=["text replies", "native replies"])
def test_text_history_writes_each_call_once_as_text(authored_env_id, native):
    messages, _ = _episode(authored_env_id, native)
    sent = history_messages(messages, "text")
    assert all(set(m) == {"role", "content"} and m["role"] in ("system", "user", "assistant") for m in sent)
    for env_msg, sent_msg in zip([m for m in messages if m["role"] == "assistant"], [m for m in sent if m["role"] == "assistant"]):
        calls = parse_reply(sent_msg["content"]).calls
        assert [(c.name, c.arguments) for c in calls] == [
            (c["function"]["name"], json.loads(c["function"]["arguments"])) for c in env_msg.get("tool_calls") or []]
    results = [m["content"] for m in messages if m["role"] == "tool"]
    assert all(any(r in m["content"] for m in sent if m["role"] == "user") for r in results)


def test_text_history_sends_one_user_message_per_turn_of_results():
    messages = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"},
                {"role": "assistant", "content": "<tool_call>{\"name\": \"a\", \"arguments\": {}}</tool_call>"
                                                 "<tool_call>{\"name\": \"b\", \"arguments\": {}}</tool_call>",
                 "tool_calls": [{"id": "1", "type": "function", "function": {"name": "a", "arguments": "{}"}},
                                {"id": "2", "type": "function", "function": {"name": "b", "arguments": "{}"}}]},
                {"role": "tool", "tool_call_id": "1", "name": "a", "content": "A"},
                {"role": "tool", "tool_call_id": "2", "name": "b", "content": "B"},
                {"role": "assistant", "content": "no call"},
                {"role": "user", "content": "No tool call found"}]
    sent = history_messages(messages, "text")
    assert [m["role"] for m in sent] == ["system", "user", "assistant", "user", "assistant", "user"]
    assert sent[3]["content"] == "<tool_response>\nA\n</tool_response>\n<tool_response>\nB\n</tool_response>"


def test_tools_in_the_system_message_list_every_schema_in_the_documented_format(env_id):
    env = gym.make(env_id, split="test")
    _, info = env.reset(seed=0, options={"task_index": 0})
    env.close()
    messages = with_tools_in_system(info["messages"], info["tools"])
    system = messages[0]["content"]
    assert system.startswith(info["messages"][0]["content"]) and messages[1:] == info["messages"][1:]
    block = system.split("<tools>\n", 1)[1].split("\n</tools>", 1)[0]
    assert [json.loads(line) for line in block.splitlines()] == info["tools"]
    assert system.endswith('<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>')


def test_tools_get_a_system_message_of_their_own_when_the_chat_has_none():
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    messages = with_tools_in_system([{"role": "user", "content": "u"}], tools)
    assert messages[0] == {"role": "system", "content": render_tools(tools)} and messages[1]["role"] == "user"


def test_render_tools_rejects_a_tool_without_a_function_name():
    with pytest.raises(ValueError, match="expected tools as"):
        render_tools([{"type": "function", "function": {}}])


def test_hermes_text_is_what_the_env_parses_back():
    calls = [{"id": "1", "type": "function", "function": {"name": "get", "arguments": '{"id": "é"}'}}]
    parsed = parse_reply(hermes_text(calls)).calls
    assert [(c.name, c.arguments) for c in parsed] == [("get", {"id": "é"})]


def test_native_history_with_tools_in_the_prompt_is_refused():
    with pytest.raises(ValueError, match="needs tools_mode='native'"):
        ChatAgent(model=None, tools_mode="prompt", history="native")  # type: ignore[arg-type]
