"""Pinned test-split hashes and solver/label agreement for AircraftPreflightInspection,
ContentModeration and DangerousGoodsClassification (issue 4).

The generic domain tests (tests/test_domains.py) were not in the repository when these domains
landed, so their pins live here. Each test checks one property of one pack.
"""

from __future__ import annotations

import pytest
from sopgym.sandboxes import ToolBox
from sopgym.sandboxes.factory import make_stateful_backend
from sopgym.sop_tasks.pack import ToolError
from sopgym.sop_tasks.registry import get_pack

PINNED_TEST_HASHES = {
    "AircraftPreflightInspection": "11c8912488b0e856a711cb5940e7ea2827bc812994306e98fff11ad4aa970155",
    "ContentModeration": "c0db8f0808b069466f327dea11ea784927db5846c90bff088a8be10229832dcb",
    "DangerousGoodsClassification": "ae807ab5fcc5691ca1450b0b031a09a7eaf631a67a6f0c06f9086d142898f0b7",
}


def _solve(pack, task):
    """Run the reference solver on one task through a ToolBox; returns (answer, final state, calls)."""
    box = ToolBox(pack.tools, stateful=make_stateful_backend("inprocess") if pack.program else None)
    box.start_episode(pack.episode_spec(task))
    gen = pack.solver(dict(task.inputs))
    calls = 0
    try:
        call = next(gen)
        while True:
            calls += 1
            result = box.call(call.name, dict(call.arguments))
            call = gen.send(result.content if result.ok else ToolError(result.error))
    except StopIteration as stop:
        answer = stop.value
    state = box.snapshot()
    box.close()
    return answer, state, calls


@pytest.mark.parametrize("name", sorted(PINNED_TEST_HASHES))
def test_test_split_hash_is_pinned(name):
    got = get_pack(name).split_hash("test")
    assert got == PINNED_TEST_HASHES[name], f"{name}: test split hash changed: expected {PINNED_TEST_HASHES[name]}, got {got}"


@pytest.mark.parametrize("name", sorted(PINNED_TEST_HASHES))
def test_reference_solver_agrees_with_labels_on_test_split(name):
    pack = get_pack(name)
    wrong = []
    for i in range(pack.num_tasks("test")):
        task = pack.task("test", i)
        answer, state, _ = _solve(pack, task)
        if answer != dict(task.answer) or any(state.get(k) != v for k, v in (task.expected_state or {}).items()):
            wrong.append((i, answer, dict(task.answer)))
    assert not wrong, f"{name}: solver disagrees with the label on {len(wrong)} test tasks, first: {wrong[0]}"


@pytest.mark.parametrize("name", sorted(PINNED_TEST_HASHES))
def test_no_label_above_40_percent_on_test_split(name):
    pack = get_pack(name)
    first = pack.output_fields[0].name
    labels = [pack.task("test", i).answer[first] for i in range(pack.num_tasks("test"))]
    top = max(labels.count(v) for v in set(labels)) / len(labels)
    assert top <= 0.40, f"{name}: most common {first} label has share {top:.2f}, expected <= 0.40"


@pytest.mark.parametrize("name", sorted(PINNED_TEST_HASHES))
def test_solver_makes_at_least_four_tool_calls_on_average(name):
    pack = get_pack(name)
    calls = [_solve(pack, pack.task("val", i))[2] for i in range(100)]
    assert sum(calls) / len(calls) >= 4, f"{name}: mean solver tool calls {sum(calls) / len(calls):.2f}, expected >= 4"


# -- AircraftPreflightInspection: the technical log's own rules (state.py) -------------------------
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
