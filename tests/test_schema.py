"""JSON Schema validation and coercion (sandboxes/schema.py)."""

import pytest

from sopgym.sandboxes.schema import SchemaError, check_schema, validate

S = {
    "type": "object",
    "properties": {
        "id": {"type": "string", "pattern": "^A-[0-9]+$"},
        "n": {"type": "integer", "minimum": 0, "maximum": 10},
        "x": {"type": "number"},
        "flag": {"type": "boolean"},
        "kind": {"type": "string", "enum": ["a", "b"]},
        "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 2},
        "maybe": {"type": ["string", "null"]},
    },
    "required": ["id"],
}


def test_valid_arguments_pass_unchanged():
    args = {"id": "A-1", "n": 3, "x": 1.5, "flag": True, "kind": "a", "tags": ["t"], "maybe": None}
    assert validate(args, S) == args


@pytest.mark.parametrize("given,expected", [({"n": "7"}, 7), ({"n": 7.0}, 7), ({"x": "2.5"}, 2.5), ({"x": "3"}, 3), ({"flag": "true"}, True), ({"flag": "False"}, False)])
def test_lossless_coercions(given, expected):
    out = validate({"id": "A-1", **given}, S)
    (key,) = given
    assert out[key] == expected and type(out[key]) is type(expected)


@pytest.mark.parametrize("args,fragment", [
    ({}, "missing required field(s) ['id']"),
    ({"id": 5}, "expected string, got integer 5"),
    ({"id": "B-1"}, "expected a string matching"),
    ({"id": "A-1", "n": 7.5}, "expected integer, got number 7.5"),
    ({"id": "A-1", "n": 11}, "expected a value <= 10, got 11"),
    ({"id": "A-1", "n": True}, "expected integer, got boolean True"),
    ({"id": "A-1", "kind": "c"}, "expected one of ['a', 'b'], got 'c'"),
    ({"id": "A-1", "tags": ["a", "b", "c"]}, "expected at most 2 items, got 3"),
    ({"id": "A-1", "tags": [1]}, "tags[0]: expected string, got integer 1"),
    ({"id": "A-1", "other": 1}, "unexpected field(s) ['other']"),
    ({"id": "A-1", "x": "nan"}, "expected number"),
])
def test_errors_say_expected_and_actual(args, fragment):
    with pytest.raises(SchemaError) as err:
        validate(args, S)
    assert fragment in str(err.value)


def test_non_object_arguments_are_rejected():
    with pytest.raises(SchemaError, match="expected a JSON object, got array"):
        validate(["A-1"], S)


def test_nothing_is_coerced_to_string():
    with pytest.raises(SchemaError):
        validate({"id": "A-1", "maybe": 5}, S)


def test_check_schema_rejects_unknown_keywords():
    with pytest.raises(ValueError, match="unsupported JSON Schema keyword"):
        check_schema({"type": "object", "properties": {"a": {"type": "string", "format": "date"}}})
