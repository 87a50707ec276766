"""Reply parsing (sopgym/envs/parsing.py)."""

import datetime as dt
import decimal
import json
import time

import numpy as np
import pytest
from hostile_actions import nested, self_referencing_dict, self_referencing_list, self_sharing

from sopgym.envs.parsing import MAX_INT_DIGITS, MAX_JSON_DEPTH, MAX_JSON_VALUES, parse_reply


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


# -- Hostile replies (issue 12): every class is an error on the reply or a call, never an exception ------


def _call_text(args_text):
    return '<tool_call>{"name": "f", "arguments": ' + args_text + "}</tool_call>"


def test_unclosed_tags_parse_in_linear_time():
    """99 KB of unclosed tags took about 4 s with a regex (quadratic); a megabyte never finished. A code
    fence followed by 2,000 spaces took 8 s (the fence regex was worse than quadratic). The bound is
    generous (CPU time, 1 s for what now takes well under a millisecond)."""
    for reply in ("<tool_call>" * 9_000, "<tool_call>{" * 8_000 + "</tool_call>" * 2, "```" + " " * 1_500 + "x",
                  "```json" + "\n" * 1_500 + "{"):
        start = time.process_time()
        parse_reply(reply)
        assert time.process_time() - start < 1.0


def test_a_reply_longer_than_the_bound_is_refused_and_nothing_in_it_is_read():
    call = _call_text("{}")
    r = parse_reply(call + "x" * 1_000, max_chars=1_000)
    assert r.calls == [] and "too long" in r.error and "1000" in r.error
    assert parse_reply(call, max_chars=len(call)).calls[0].name == "f"
    d = parse_reply({"role": "assistant", "content": "x" * 1_001, "tool_calls": [{"function": {"name": "f", "arguments": {}}}]}, max_chars=1_000)
    assert d.calls == [] and "too long" in d.error
    big = parse_reply({"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": {"x": "y" * 2_000}}}]}, max_chars=1_000)
    assert big.calls == [] and "too large" in big.error


@pytest.mark.parametrize("digits", [MAX_INT_DIGITS + 1, 4_301, 50_000])
def test_integers_beyond_the_digit_bound_are_parse_errors(digits):
    number = "1" + "0" * (digits - 1)
    for reply in (_call_text('{"n": ' + number + "}"), _call_text('{"n": -' + number + "}"), '{"name": "f", "arguments": {"n": ' + number + "}}",
                  {"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": '{"n": ' + number + "}"}}]}):
        (c,) = parse_reply(reply).calls
        assert c.error and f"at most {MAX_INT_DIGITS}" in c.error and c.arguments is None


def test_integers_within_the_digit_bound_and_beyond_float_range_are_read():
    number = "9" * MAX_INT_DIGITS
    (c,) = parse_reply(_call_text('{"n": ' + number + ', "m": ' + "1" + "0" * 309 + "}")).calls
    assert c.error is None and c.arguments == {"n": int(number), "m": 10**309}


HOSTILE_VALUES = {
    "numpy int": np.int64(3), "numpy float": np.float32(1.5), "numpy bool": np.bool_(True), "numpy array": np.arange(3),
    "set": {1, 2}, "frozenset": frozenset({1}), "bytes": b"ab", "bytearray": bytearray(b"a"), "Decimal": decimal.Decimal("1.5"),
    "date": dt.date(2024, 1, 1), "datetime": dt.datetime(2024, 1, 1), "complex": 1j, "object": object(), "function": print,
    "huge int": 10**5000, "int beyond the digit bound": 10**MAX_INT_DIGITS,
}


STRUCTURES = {
    "contains itself (dict)": self_referencing_dict, "contains itself (list)": self_referencing_list,
    "5,000 deep": lambda: nested(5_000),
    f"{MAX_JSON_DEPTH + 1} deep": lambda: nested(MAX_JSON_DEPTH + 1), "tuple key": lambda: {(1, 2): 3},
    "int key": lambda: {1: "a"}, "None key": lambda: {None: 1}, "2**22 values sharing themselves": lambda: self_sharing(22),
    f"{MAX_JSON_VALUES + 1} values": lambda: list(range(MAX_JSON_VALUES + 1)),
}


@pytest.mark.parametrize("label", sorted(HOSTILE_VALUES))
def test_dict_arguments_holding_values_json_cannot_carry_are_call_errors(label):
    value = HOSTILE_VALUES[label]
    for args in ({"x": value}, {"x": [1, {"y": value}]}, value):
        (c,) = parse_reply({"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": args}}]}).calls
        assert c.error and c.arguments is None, (label, args)


@pytest.mark.parametrize("label", sorted(STRUCTURES))
def test_dict_arguments_that_are_too_deep_too_big_or_not_json_are_call_errors(label):
    (c,) = parse_reply({"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": {"x": STRUCTURES[label]()}}}]}).calls
    assert c.error and c.arguments is None


@pytest.mark.parametrize("label", sorted(HOSTILE_VALUES))
def test_hostile_values_anywhere_in_a_message_dict_never_raise(label):
    value = HOSTILE_VALUES[label]
    for action in ({"role": value}, {"role": "assistant", "content": value}, {"role": "assistant", "tool_calls": value},
                   {"role": "assistant", "tool_calls": [value]}, {"role": "assistant", "tool_calls": [{"function": {"name": value}}]},
                   {"role": "assistant", "tool_calls": [{"name": "f", "arguments": {}, (1, 2): value}]}):
        r = parse_reply(action)
        assert r.error or all(c.error for c in r.calls), action


def test_arguments_read_from_a_dict_are_a_plain_json_copy():
    args = {"x": (1, 2), "y": {"z": [True, None, 1.5]}}
    (c,) = parse_reply({"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": args}}]}).calls
    assert c.error is None and c.arguments == {"x": [1, 2], "y": {"z": [True, None, 1.5]}}
    args["y"]["z"].append("later")
    assert c.arguments["y"]["z"] == [True, None, 1.5]
    json.dumps(c.arguments)


def test_arguments_nested_up_to_the_depth_bound_are_read():
    (c,) = parse_reply({"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": nested(MAX_JSON_DEPTH - 1)}}]}).calls
    assert c.error is None
    (c,) = parse_reply(_call_text("[" * 900 + "]" * 900)).calls  # json reads 900 levels; the env reads 64
    assert c.error and "nested" in c.error
