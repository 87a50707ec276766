"""JSON Schema validation and coercion (sopgym/sandboxes/schema.py)."""

import pytest

from sopgym.sandboxes.schema import MAX_INT_DIGITS, SchemaError, check_schema, validate

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


# -- the compiled fast path agrees with the reference validator -------------------------------------
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from sopgym.sandboxes.schema import _validate  # noqa: E402

FAST_SCHEMAS = [
    {"type": "object", "properties": {"id": {"type": "string", "pattern": "^A-[0-9]+$"}}, "required": ["id"]},
    {"type": "object", "properties": {"k": {"type": "string", "enum": ["a", "b"]}, "n": {"type": "integer", "minimum": 0, "maximum": 9},
                                      "x": {"type": "number", "maximum": 1.5}, "f": {"type": "boolean"},
                                      "s": {"type": "string", "minLength": 2, "maxLength": 4}}, "required": ["k"], "additionalProperties": False},
    {"type": "object", "properties": {"e": {"type": "integer", "enum": [1, 2, 3]}}, "required": []},
]
scalars = st.one_of(st.none(), st.booleans(), st.integers(-3, 12), st.floats(allow_nan=True, allow_infinity=True),
                    st.sampled_from(["a", "b", "c", "A-1", "A-", "1", "7", "true", "ab", "abcde", "2.5"]))


def _reference(args, schema):
    try:
        return ("ok", _validate(args, schema, ""))
    except SchemaError as exc:
        return ("error", str(exc))


def _fast(args, schema):
    try:
        return ("ok", validate(args, schema))
    except SchemaError as exc:
        return ("error", str(exc))


@settings(max_examples=600, deadline=None)
@given(st.sampled_from(range(len(FAST_SCHEMAS))), st.dictionaries(st.sampled_from(["id", "k", "n", "x", "f", "s", "e", "zz"]), scalars, max_size=5))
def test_fast_path_agrees_with_the_reference_validator(which, args):
    schema = FAST_SCHEMAS[which]
    fast, ref = _fast(args, schema), _reference(args, schema)
    assert fast == ref
    if fast[0] == "ok":
        assert [type(v) for v in fast[1].values()] == [type(v) for v in ref[1].values()]


# -- Numbers of any size never raise (issue 12) ---------------------------------------------------------
INT_SCHEMA = {"type": "object", "properties": {"n": {"type": "integer"}, "x": {"type": "number"}, "s": {"type": "string"}}}


@pytest.mark.parametrize("digits", [MAX_INT_DIGITS + 1, 4_301, 20_000])
def test_a_quoted_integer_beyond_the_digit_bound_is_a_schema_error(digits):
    text = "1" + "0" * (digits - 1)
    with pytest.raises(SchemaError, match=f"at most {MAX_INT_DIGITS} digits"):
        validate({"n": text}, INT_SCHEMA)
    with pytest.raises(SchemaError, match="expected integer or null"):
        validate({"n": text}, {"type": "object", "properties": {"n": {"type": ["integer", "null"]}}})


def test_a_quoted_integer_beyond_float_range_is_read_exactly():
    assert validate({"n": "1" + "0" * 309}, INT_SCHEMA) == {"n": 10**309}
    with pytest.raises(SchemaError, match="expected number"):
        validate({"x": "1" + "0" * 400}, INT_SCHEMA)  # a number beyond float range is not a finite number


@pytest.mark.parametrize("value", [10**309, 10**5000, -(10**5000), "x" * 100_000], ids=["1e309", "1e5000", "-1e5000", "long string"])
def test_messages_about_huge_values_never_raise(value):
    with pytest.raises(SchemaError) as err:
        validate({"s": value} if not isinstance(value, str) else {"n": value}, INT_SCHEMA)
    assert len(str(err.value)) < 300
    bounded = {"type": "object", "properties": {"n": {"type": "integer", "maximum": 10}}}
    if isinstance(value, int):
        with pytest.raises(SchemaError, match="expected a value <= 10"):
            validate({"n": abs(value)}, bounded)
