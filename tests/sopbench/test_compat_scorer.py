"""sopbench-compat (upstream's lenient rule) vs our strict scorer on a corpus of answers."""

from __future__ import annotations

import pytest

from sopgym.scoring import values_equal
from sopgym.sopbench.compat import compat_correct, compat_value_equal, parse_upstream_output

FIELD = {"name": "decision", "type": "string", "nullable": False}

#: (answer, expected, compat verdict, strict verdict)
CORPUS = [
    ("Account Closure", "Account Closure", True, True),
    ("  account closure ", "Account Closure", True, True),
    ("account_closure", "Account Closure", True, False),
    ("Account-Closure", "Account Closure", True, False),
    ("Closure", "Account Closure", True, False),
    ("Account Closure immediately, then review", "Account Closure", True, False),
    ("d", "Resolved", True, False),
    ("e", "Returned to Vendor", True, False),
    ("No Action", "Account Closure", False, False),
    ("", "Account Closure", False, False),
    ("unknown", "nan", True, False),
    ("N/A", "None", True, False),
]


@pytest.mark.parametrize("answer,expected,compat,strict", CORPUS)
def test_compat_and_strict_verdicts(answer, expected, compat, strict):
    assert compat_value_equal(answer, expected) is compat
    assert values_equal(answer, expected, FIELD) is strict


def test_strict_never_accepts_what_compat_rejects():
    for answer, expected, compat, strict in CORPUS:
        assert not (strict and not compat), (answer, expected)


def test_one_character_answer_passes_compat_on_real_labels(real_report):
    """The docs' claim, measured: a constant one-character answer and its compat pass rate per domain."""
    rates = {}
    for name, d in real_report.domains.items():
        col = d.output_columns[0]
        labels = [d.labels(i)[col] for i in range(d.num_tasks)]
        best = max("abcdefghijklmnopqrstuvwxyz", key=lambda ch: sum(compat_value_equal(ch, v) for v in labels))
        rates[name] = sum(compat_value_equal(best, v) for v in labels) / len(labels)
        assert all(not values_equal(best, v, FIELD) for v in labels)
    assert max(rates.values()) == 1.0, rates


def test_multi_field_compat_needs_every_key():
    expected = {"a": "yes", "b": "Low risk"}
    assert compat_correct({"a": "YES", "b": "low"}, expected)
    assert not compat_correct({"a": "yes"}, expected)


def test_upstream_parser_fallback_chain():
    assert parse_upstream_output('<final_output>{"a": 1}</final_output>', ["a", "b"]) == {"a": 1}
    assert parse_upstream_output("thinking... <final_decision> Approve </final_decision>", ["x"]) == "Approve"
    assert parse_upstream_output("<verdict>Reject</verdict>", ["x"]) == "Reject"
    assert parse_upstream_output("{'a': 'b'}", ["a", "c"]) == {"a": "b"}
    assert parse_upstream_output("x" * 101, ["a"]) == "unknown"
