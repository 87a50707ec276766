"""Stateful tools of CustomerServiceTroubleshooting through the env: writes are read back within an
episode, nothing survives ``reset``, two envs never share state, a failing write changes nothing,
and the program's errors say what went wrong. Each test checks one property."""

from __future__ import annotations

import ast
import importlib.util
import json
import sys
from pathlib import Path

import gymnasium as gym
import pytest

import sopgym  # noqa: F401  (registers the envs)
from sopgym.envs.policies import format_call
from sopgym.sop_tasks.registry import get_pack

PACK = get_pack("CustomerServiceTroubleshooting")


class Episode:
    """One env driven by explicit tool calls; ``call`` returns (status, decoded content or error text)."""

    def __init__(self, task_index: int = 0, split: str = "val") -> None:
        self.env = gym.make(PACK.env_id, max_turns=60)
        self.reset(task_index, split)

    def reset(self, task_index: int = 0, split: str = "val") -> None:
        self.task = PACK.task(split, task_index)
        _, self.info = self.env.reset(options={"split": split, "task_index": task_index})
        self.token = None

    def call(self, name: str, **arguments):
        _, _, _, _, info = self.env.step(format_call(name, arguments))
        self.info = info
        text = info["messages"][-1]["content"]
        status = info["calls"][-1]["status"]
        return status, (json.loads(text) if status == "OK" else text)

    def login(self) -> dict:
        status, auth = self.call(
            "authenticate",
            customer_id=self.task.inputs["customer_id"],
            verification_code=self.task.inputs["verification_code"],
        )
        assert status == "OK", auth
        self.token = auth["session_token"]
        status, account = self.call("get_account", session_token=self.token)
        assert status == "OK", account
        return account

    def broadband(self) -> str:
        account = self.login()
        return next(s["service_id"] for s in account["services"] if s["type"] == "broadband")

    def open_ticket(self, service_id: str, category: str = "LINE_FAULT") -> str:
        status, opened = self.call("open_ticket", session_token=self.token, service_id=service_id, category=category)
        assert status == "OK", opened
        return opened["ticket_id"]

    def ticket(self, ticket_id: str):
        return self.call("get_ticket", session_token=self.token, ticket_id=ticket_id)

    def final_state(self) -> dict:
        answer = {"resolution_status": "ESCALATED", "ticket_priority": "P1", "escalation_tier": "NONE", "sla_hours": 0}
        _, _, terminated, _, info = self.env.step(format_call("submit_answer", answer))
        assert terminated
        return info["episode"]["final_state"]

    def close(self) -> None:
        self.env.close()


@pytest.fixture
def episode():
    ep = Episode()
    yield ep
    ep.close()


def _task_index_with_errored_port() -> int:
    return next(i for i in range(PACK.num_tasks("val")) if PACK.task("val", i).meta["variant"] == "resolved_remote")


def test_findings_written_are_read_back_with_a_new_priority(episode):
    ticket_id = episode.open_ticket(episode.broadband())
    _, before = episode.ticket(ticket_id)
    episode.call("add_findings", session_token=episode.token, ticket_id=ticket_id, codes=["NO_SYNC", "REPEAT_FAULT"])
    _, after = episode.ticket(ticket_id)
    assert before["findings"] == [] and after["findings"] == ["NO_SYNC", "REPEAT_FAULT"]
    assert (before["priority"], after["priority"]) in (("P4", "P2"), ("P4", "P1")), (before, after)


def test_port_reset_changes_the_next_line_test():
    ep = Episode(_task_index_with_errored_port())
    try:
        service_id = ep.broadband()
        _, first = ep.call("run_line_test", session_token=ep.token, service_id=service_id)
        status, _ = ep.call("reset_port", session_token=ep.token, service_id=service_id)
        _, second = ep.call("run_line_test", session_token=ep.token, service_id=service_id)
    finally:
        ep.close()
    assert status == "OK"
    assert (first["port_state"], second["port_state"]) == ("errored", "ok")


def test_nothing_survives_reset(episode):
    service_id = episode.broadband()
    old_token, ticket_id = episode.token, episode.open_ticket(service_id)
    episode.call("add_findings", session_token=old_token, ticket_id=ticket_id, codes=["LOW_SNR"])
    episode.reset()
    stale_status, stale = episode.call("get_account", session_token=old_token)
    episode.login()
    missing_status, missing = episode.ticket(ticket_id)
    reopened = episode.open_ticket(service_id)
    assert stale_status == "ERROR_TOOL" and "invalid session token" in stale
    assert missing_status == "ERROR_TOOL" and "not found" in missing
    assert reopened == ticket_id  # the ticket counter restarted from the task's initial state
    assert episode.final_state()["tickets"][0]["findings"] == []


def test_two_envs_stepping_interleaved_share_no_state():
    a, b = Episode(), Episode()
    try:
        service_a, service_b = a.broadband(), b.broadband()
        ticket_a = a.open_ticket(service_a)
        a.call("add_findings", session_token=a.token, ticket_id=ticket_a, codes=["NO_SYNC"])
        status_b, seen_by_b = b.ticket(ticket_a)
        ticket_b = b.open_ticket(service_b, category="NO_FAULT")
        _, seen_by_a = a.ticket(ticket_a)
        state_a, state_b = a.final_state(), b.final_state()
    finally:
        a.close()
        b.close()
    assert status_b == "ERROR_TOOL" and "not found" in seen_by_b
    assert ticket_b == ticket_a  # each env numbers tickets from its own initial state
    assert seen_by_a["findings"] == ["NO_SYNC"] and seen_by_a["category"] == "LINE_FAULT"
    assert [t["category"] for t in state_a["tickets"]] == ["LINE_FAULT"]
    assert [(t["category"], t["findings"]) for t in state_b["tickets"]] == [("NO_FAULT", [])]


def test_failing_write_leaves_state_unchanged(episode):
    ticket_id = episode.open_ticket(episode.broadband())
    episode.call("add_findings", session_token=episode.token, ticket_id=ticket_id, codes=["NO_SYNC"])
    # LOW_SNR is inserted before the duplicate NO_SYNC fails: the whole call must be rolled back.
    status, error = episode.call(
        "add_findings", session_token=episode.token, ticket_id=ticket_id, codes=["LOW_SNR", "NO_SYNC"]
    )
    _, ticket = episode.ticket(ticket_id)
    assert status == "ERROR_TOOL" and "already attached" in error
    assert ticket["findings"] == ["NO_SYNC"]


def test_refused_second_ticket_leaves_one_ticket(episode):
    service_id = episode.broadband()
    first = episode.open_ticket(service_id)
    status, error = episode.call("open_ticket", session_token=episode.token, service_id=service_id, category="BILLING")
    assert status == "ERROR_TOOL" and first in error
    assert [t["category"] for t in episode.final_state()["tickets"]] == ["LINE_FAULT"]


def test_invalid_session_token_error_names_the_fix(episode):
    status, error = episode.call("get_account", session_token="SESS-NOT-ISSUED")
    assert status == "ERROR_TOOL"
    assert "invalid session token 'SESS-NOT-ISSUED'" in error and "authenticate" in error


def test_unknown_ticket_error_names_the_ticket(episode):
    episode.login()
    status, error = episode.ticket("TCK-1")
    assert status == "ERROR_TOOL" and "ticket 'TCK-1' not found" in error


def test_wrong_verification_code_is_refused(episode):
    code = episode.task.inputs["verification_code"]
    wrong = f"{(int(code) + 1) % 1_000_000:06d}"
    status, error = episode.call(
        "authenticate", customer_id=episode.task.inputs["customer_id"], verification_code=wrong
    )
    assert status == "ERROR_TOOL" and "verification failed" in error


def test_state_program_imports_only_the_standard_library():
    source = Path(importlib.util.find_spec(PACK.program.module).origin).read_text(encoding="utf-8")
    imported = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            imported |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            imported.add("." if node.level else node.module.split(".")[0])
    assert imported <= set(sys.stdlib_module_names), (
        f"non-standard imports: {sorted(imported - set(sys.stdlib_module_names))}"
    )
