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
