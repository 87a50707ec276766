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
