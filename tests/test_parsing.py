"""Reply parsing (envs/parsing.py)."""

from sopgym.envs.parsing import parse_reply


def test_several_hermes_blocks_in_order_with_text_around():
    r = parse_reply('a <tool_call>{"name": "f", "arguments": {"x": 1}}</tool_call> b <tool_call>{"name": "g", "arguments": {}}</tool_call>')
    assert [(c.name, c.arguments, c.error) for c in r.calls] == [("f", {"x": 1}, None), ("g", {}, None)]


def test_arguments_may_be_a_json_string():
    (c,) = parse_reply('<tool_call>{"name": "f", "arguments": "{\\"x\\": 2}"}</tool_call>').calls
    assert c.arguments == {"x": 2}


def test_bare_json_and_fenced_json():
    assert parse_reply('{"name": "f", "arguments": {}}').calls[0].name == "f"
    assert parse_reply('```json\n{"name": "f", "arguments": {}}\n```').calls[0].name == "f"


def test_plain_text_has_no_calls():
    r = parse_reply("just thinking")
    assert r.calls == [] and r.error is None


def test_openai_message_dict():
    r = parse_reply({"role": "assistant", "content": None, "tool_calls": [{"id": "1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]})
    assert [(c.name, c.arguments) for c in r.calls] == [("f", {})]


def test_unclosed_block_is_a_parse_error():
    (c,) = parse_reply('<tool_call>{"name": "f"').calls
    assert c.error and "unclosed" in c.error


def test_wrong_action_type_is_an_error_not_an_exception():
    assert parse_reply(3.5).error.startswith("expected the reply as a str")
