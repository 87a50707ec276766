"""Strict answer normalisation shared by reward and evaluator (sopgym/scoring.py)."""

import pytest

from sopgym.scoring import field_scores, normalize_text, values_equal
from sopgym.sop_tasks.pack import OutputField

S = OutputField("s", enum=("Approve", "Reject"))
FREE = OutputField("f")
N = OutputField("n", type="number")
INT = OutputField("i", type="integer")
B = OutputField("b", type="boolean")
NULLABLE = OutputField("z", nullable=True)


def test_text_normal_form():
    assert normalize_text("  Cafe\u0301   Noir \n") == "café noir"


@pytest.mark.parametrize("got,want,field,ok", [
    ("approve", "Approve", S, True),
    (" APPROVE ", "Approve", S, True),
    ("Approv", "Approve", S, False),
    ("Approve, Reject", "Approve", S, False),
    ("Аpprove", "Approve", S, False),  # Cyrillic A
    ("not in enum", "not in enum", S, False),
    (3, 3.0, N, True),
    (0.1 + 0.2, 0.3, N, True),
    ("3", 3, N, False),
    (True, 1, INT, False),
    (2.5, 2, INT, False),
    (True, True, B, True),
    ("true", True, B, False),
    (None, None, NULLABLE, True),
    ("null", None, NULLABLE, False),
    (None, "x", NULLABLE, False),
    (None, None, FREE, False),
])
def test_values_equal(got, want, field, ok):
    assert values_equal(got, want, field) is ok


def test_malformed_answer_scores_zero_everywhere():
    fields = [S, N]
    assert field_scores({"s": "Approve", "n": 1, "extra": 0}, {"s": "Approve", "n": 1}, fields) == {"s": False, "n": False}
    assert field_scores("Approve", {"s": "Approve", "n": 1}, fields) == {"s": False, "n": False}
    assert field_scores({"s": "Approve", "n": 1}, {"s": "Approve", "n": 1}, fields) == {"s": True, "n": True}


# -- Any submitted value, any size: never an exception (issue 12) ------------------------------------------
@pytest.mark.parametrize("huge", [10**309, -(10**309), 10**4000], ids=["1e309", "-1e309", "1e4000"])
@pytest.mark.parametrize("field", [INT, N], ids=["integer", "number"])
def test_integers_beyond_float_range_are_compared_exactly(huge, field):
    assert values_equal(huge, 3, field) is False
    assert values_equal(3, huge, field) is False
    assert values_equal(huge, huge, field) is True
    assert values_equal(huge + 1, huge, field) is False
    assert field_scores({"i": huge}, {"i": 7}, [INT]) == {"i": False}


def test_an_enum_of_numbers_rejects_a_huge_integer_without_raising():
    assert values_equal(10**309, 1, OutputField("e", type="integer", enum=(1, 2))) is False


@pytest.mark.parametrize("field", [
    {"name": "x", "type": "string", "enum": [{"a": 1}, "A"]},  # an unhashable allowed value
    {"name": "x", "type": "integer", "enum": [[1], 2]},
])
def test_odd_allowed_values_in_a_record_never_raise(field):
    assert values_equal("A", "A", field) in (True, False)
    assert values_equal(2, 2, field) in (True, False)


@pytest.mark.parametrize("fields,expected", [
    ([{"name": "x", "type": "string", "enum": 5}], {"x": "a"}),
    ([{"name": ["x"], "type": "string"}], {"x": "a"}),
    ([{"name": "x", "type": ["string"]}], {"x": "a"}),
    ([{"name": "x", "type": "string"}], {"y": "a"}),
    ([{"name": "x", "type": "string"}], ["a"]),
])
def test_a_malformed_field_or_expected_answer_is_a_value_error_naming_it(fields, expected):
    with pytest.raises(ValueError):
        field_scores({"x": "a"}, expected, fields)
