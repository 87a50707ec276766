"""AircraftPreflightInspection's technical-log program (state.py): the repeat-defect and deferral rules.

The generic checks of every domain (oracle, hashes, balance) are in tests/test_domains.py.
"""

from __future__ import annotations


def _log(defects=()):
    from sopgym.sandboxes import StatefulProgram
    from sopgym.sandboxes.inprocess import InProcessBackend

    backend = InProcessBackend()
    state = {
        "log_meta": [{"key": "today", "value": "2026-03-31"}],
        "aircraft": [{"tail_number": "G-ABCD"}],
        "defects": [
            {"defect_id": f"TL-9{i:04d}", "tail_number": "G-ABCD", "finding_id": f"INS-000000-F{i}", "ata_code": ata,
             "category": "C", "restrictions": "[]", "raised_on": raised, "due_on": due, "state": state}
            for i, (ata, raised, due, state) in enumerate(defects)
        ],
    }
    backend.start_episode(StatefulProgram("sopgym.sop_tasks.aircraft_preflight.state"), state)
    return backend


def _record(backend, ata="21-51", finding="INS-123456-F1", category="C"):
    args = {"tail_number": "G-ABCD", "finding_id": finding, "ata_code": ata, "mel_category": category, "restrictions": []}
    return backend.call("record_defect", args)


def test_log_grounds_a_third_defect_on_one_ata_code_within_30_days():
    backend = _log([("21-51", "2026-03-01", None, "CLOSED"), ("21-51", "2026-03-20", None, "CLOSED")])
    result = _record(backend)
    assert (result.content["state"], result.content["grounding_reason"]) == ("GROUNDING", "REPEAT_DEFECT"), result


def test_log_ignores_a_raise_31_days_before_departure_for_repeats():
    backend = _log([("21-51", "2026-02-28", None, "CLOSED"), ("21-51", "2026-03-20", None, "CLOSED")])
    result = _record(backend)
    assert result.content["state"] == "DEFERRED", result


def test_log_keeps_a_deferral_due_on_the_departure_date_and_flags_one_due_before():
    backend = _log([("33-41", "2026-03-21", "2026-03-31", "DEFERRED"), ("49-11", "2026-03-20", "2026-03-30", "DEFERRED")])
    states = [item["state"] for item in backend.call("get_airworthiness_status", {"tail_number": "G-ABCD"}).content["open_items"]]
    assert states == ["DEFERRED", "OVERDUE"], states


def test_log_refuses_recording_a_finding_twice_and_leaves_state_unchanged():
    backend = _log()
    _record(backend)
    before = backend.snapshot()
    again = _record(backend)
    assert not again.ok and "already recorded" in again.error and backend.snapshot() == before, again


def test_log_refuses_an_unknown_tail_with_the_expected_tails():
    backend = _log()
    result = backend.call("get_airworthiness_status", {"tail_number": "G-ZZZZ"})
    assert not result.ok and "G-ABCD" in result.error, result
