"""Domain-specific properties of BusinessVerificationKYB, OrderFulfilment and SellerEmailTriage: their
stateful writes and decoys matter. The generic checks of every domain are in tests/test_domains.py.
"""

from __future__ import annotations

from sopgym.sandboxes import ToolBox
from sopgym.sandboxes.factory import make_stateful_backend
from sopgym.sop_tasks.pack import ToolCall, ToolError
from sopgym.sop_tasks.registry import get_pack


def _box(pack, task) -> ToolBox:
    box = ToolBox(pack.tools, stateful=make_stateful_backend("inprocess") if pack.program else None)
    box.start_episode(pack.sandbox_episode(task))
    return box


def _run(pack, task, solver):
    """Run ``solver`` on one task through a ToolBox; returns (answer, final state)."""
    box = _box(pack, task)
    gen = solver(dict(task.inputs))
    try:
        call = next(gen)
        while True:
            result = box.call(call.name, dict(call.arguments))
            call = gen.send(result.content if result.ok else ToolError(result.error))
    except StopIteration as stop:
        answer = stop.value
    except ToolError:
        answer = None
    state = box.snapshot()
    box.close()
    return answer, state


def _solved(task, answer, state) -> bool:
    return answer == dict(task.answer) and all(state.get(k) == v for k, v in (task.expected_state or {}).items())


def test_kyb_same_findings_can_give_different_tiers():
    """The case system's hidden jurisdiction rating makes reading the case back necessary."""
    pack = get_pack("BusinessVerificationKYB")
    tiers_by_results: dict[tuple, set] = {}
    for i in range(200):
        task = pack.task("test", i)
        results = tuple(sorted((f[1], f[3]) for f in task.expected_state["findings"]))
        tiers_by_results.setdefault(results, set()).add(task.answer["risk_tier"])
    ambiguous = [r for r, tiers in tiers_by_results.items() if len(tiers) > 1]
    assert ambiguous, "expected some finding patterns to map to more than one risk tier on the test split, found none"


def test_kyb_get_case_reports_findings_attached_in_the_episode():
    pack = get_pack("BusinessVerificationKYB")
    task = pack.task("test", 0)
    box = _box(pack, task)
    case_id = box.call("open_case", {"application_id": task.inputs["application_id"]}).content["case_id"]
    before = box.call("get_case", {"case_id": case_id}).content
    box.call("attach_finding", {"case_id": case_id, "check": "REGISTRY", "subject_id": "ENT-000001", "result": "FLAG"})
    after = box.call("get_case", {"case_id": case_id}).content
    box.close()
    assert before["findings"] == [] and after["findings"] == [{"check": "REGISTRY", "subject_id": "ENT-000001", "result": "FLAG"}], (
        f"expected the attached finding to be read back, got before={before['findings']} after={after['findings']}"
    )


def test_kyb_decided_case_rejects_further_findings():
    pack = get_pack("BusinessVerificationKYB")
    task = pack.task("test", 1)
    box = _box(pack, task)
    case_id = box.call("open_case", {"application_id": task.inputs["application_id"]}).content["case_id"]
    box.call("attach_finding", {"case_id": case_id, "check": "REGISTRY", "subject_id": "ENT-000001", "result": "PASS"})
    box.call("record_decision", {"case_id": case_id, "decision": "APPROVE"})
    late = box.call("attach_finding", {"case_id": case_id, "check": "OWNERSHIP", "subject_id": "ENT-000001", "result": "PASS"})
    box.close()
    assert not late.ok and "accepts no more findings" in late.error, f"expected a closed-case error, got {late}"


# -- OrderFulfilment ---------------------------------------------------------------------------------------
def _stale_solver(pack):
    """The reference solver, but every availability check after the first answers from a cache (stale reads)."""

    def solver(inputs):
        cache: dict = {}
        gen = pack.solver(inputs)
        result = None
        call = next(gen)
        try:
            while True:
                if call.name == "check_availability" and call.arguments["sku"] in cache:
                    call = gen.send(cache[call.arguments["sku"]])
                    continue
                result = yield call
                if call.name == "check_availability" and not isinstance(result, ToolError):
                    cache[call.arguments["sku"]] = result
                call = gen.send(result)
        except StopIteration as stop:
            return stop.value

    return solver


def test_fulfilment_stale_availability_reads_fail_some_tasks():
    """Reservations for earlier lines change availability; a solver that reuses old reads must fail somewhere."""
    pack = get_pack("OrderFulfilment")
    stale = _stale_solver(pack)
    failed = sum(not _solved(t, *_run(pack, t, stale)) for t in (pack.task("test", i) for i in range(200)))
    assert failed > 0, "expected the stale-read solver to fail on some test tasks, it solved all 200"


def test_fulfilment_reservation_lowers_availability():
    pack = get_pack("OrderFulfilment")
    task = next(t for t in (pack.task("test", i) for i in range(50)) if t.answer["decision"] == "SHIP_SINGLE")
    box = _box(pack, task)
    line = task.initial_state["order_lines"][0]
    before = {w["warehouse_id"]: w["available"] for w in box.call("check_availability", {"sku": line["sku"]}).content["warehouses"]}
    wh = max(before, key=before.get)
    reserved = box.call("reserve_stock", {"order_id": line["order_id"], "line_no": line["line_no"], "warehouse_id": wh, "quantity": 1})
    after = {w["warehouse_id"]: w["available"] for w in box.call("check_availability", {"sku": line["sku"]}).content["warehouses"]}
    box.close()
    assert reserved.ok and after[wh] == before[wh] - 1, f"expected availability at {wh} to drop by 1, got {before[wh]} -> {after[wh]} ({reserved})"


def test_fulfilment_over_reservation_fails_and_reserves_nothing():
    pack = get_pack("OrderFulfilment")
    task = pack.task("test", 0)
    box = _box(pack, task)
    line = task.initial_state["order_lines"][0]
    state_before = box.snapshot()
    result = box.call("reserve_stock", {"order_id": line["order_id"], "line_no": line["line_no"], "warehouse_id": "FC-ATL1", "quantity": 1000})
    state_after = box.snapshot()
    box.close()
    assert not result.ok and state_after == state_before, f"expected an error and unchanged state, got {result}"


def test_fulfilment_backorder_tasks_include_released_reservations():
    """Some backorders need reservations made and then released (the release-on-failure path)."""
    pack = get_pack("OrderFulfilment")
    released = [i for i in range(200) if "released" in pack.task("test", i).meta["features"]]
    assert released, "expected test tasks whose oracle path releases reservations, found none"


# -- SellerEmailTriage -----------------------------------------------------------------------------------
def test_triage_wrong_mailbox_table_fails_some_tasks():
    """Routing tables differ per mailbox: reading another mailbox's table must give wrong answers somewhere."""
    pack = get_pack("SellerEmailTriage")
    mailboxes = pack.tools[5].parameters["properties"]["mailbox"]["enum"]

    def wrong_mailbox(inputs):
        gen = pack.solver(inputs)
        call = next(gen)
        try:
            while True:
                if call.name == "get_routing_table":
                    own = call.arguments["mailbox"]
                    call = ToolCall(call.name, {"mailbox": mailboxes[(mailboxes.index(own) + 1) % len(mailboxes)]})
                result = yield call
                call = gen.send(result)
        except StopIteration as stop:
            return stop.value

    failed = sum(not _solved(t, *_run(pack, t, wrong_mailbox)) for t in (pack.task("test", i) for i in range(200)))
    assert failed > 0, "expected the wrong-mailbox solver to fail on some test tasks, it solved all 200"


def test_triage_ml_suggested_queue_is_not_a_shortcut():
    pack = get_pack("SellerEmailTriage")
    hits = 0
    for i in range(200):
        task = pack.task("test", i)
        email = next(iter(task.replay["get_email"].values()))
        hits += email["ml_suggested_queue"] == task.answer["queue"]
    assert hits / 200 <= 0.6, f"ml_suggested_queue matches the label on {hits}/200 test tasks, expected <= 60%"
