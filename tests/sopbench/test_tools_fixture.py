"""Running a domain's own tools.py (our fixture domains): exact texts, outcomes, trust, manager choice."""

from __future__ import annotations

import gymnasium as gym
import pytest

from sopgym.sandboxes.base import Outcome
from sopgym.sopbench.runners import InProcessToolRunner, SubprocessToolRunner, make_runner
from sopgym.sopbench.sopbench_toolbox import to_tool_result

UNKNOWN = ("Error: Tool 'nope' not found. Available tools: open_session, get_account, lookup_history, "
           "legacy_flag, draw_ticket_number, decide")

#: (tool, args, exact text the agent sees, outcome)
EXPECTED = [
    ("open_session", {"account_id": "ACC-1"}, '{"account_id": "ACC-1", "session_token": "TOK-1a"}', Outcome.OK),
    # NaN stays NaN (json.dumps default), non-ASCII is escaped (ensure_ascii default).
    ("get_account", {"account_id": "ACC-1", "session_token": "TOK-1a"},
     '{"account_id": "ACC-1", "plan": "gold", "priority_score": 9, "notes": NaN, "region": "north", "city": "Z\\u00fcrich"}', Outcome.OK),
    ("get_account", {"account_id": "ACC-1", "session_token": "TOK-2b"}, "Error: invalid session token for ACC-1", Outcome.TOOL_ERROR),
    ("open_session", {"account_id": "ACC-9"}, "Error: Account not found: ACC-9", Outcome.TOOL_ERROR),
    ("lookup_history", {"account_id": "ACC-1"},
     "Error: HelpdeskManager.lookup_history() missing 1 required positional argument: 'verbose'", Outcome.BAD_ARGUMENTS),
    ("lookup_history", {"account_id": "ACC-1", "verbose": True}, '{"contacts": 3}', Outcome.OK),
    ("open_session", {"account_id": "ACC-1", "extra": 1},
     "Error: HelpdeskManager.open_session() got an unexpected keyword argument 'extra'", Outcome.BAD_ARGUMENTS),
    ("legacy_flag", {"account_id": "ACC-1"}, "null", Outcome.OK),
    ("decide", {"plan": "gold", "priority_score": 9}, '"escalate"', Outcome.OK),
    ("nope", {}, UNKNOWN, Outcome.UNKNOWN_TOOL),
]


@pytest.fixture
def helpdesk(tmp_path):
    """Registers the fixture domains afresh (other tests register modified copies under the same ids)."""
    from sopgym.sopbench import register

    from .helpers import FIXTURES

    return register(FIXTURES, recordings_dir=tmp_path).domains["helpdesk"]


def test_inprocess_runner_gives_exact_texts(helpdesk):
    runner = InProcessToolRunner(helpdesk)
    for name, args, text, outcome in EXPECTED:
        result = to_tool_result(runner.call(name, args))
        assert (result.render(), result.outcome) == (text, outcome), name


def test_subprocess_runner_gives_exact_texts(helpdesk):
    runner = SubprocessToolRunner(helpdesk, timeout_s=60)
    try:
        got = runner.call_many([(n, a) for n, a, _, _ in EXPECTED])
    finally:
        runner.close()
    assert [to_tool_result(r).render() for r in got] == [t for _, _, t, _ in EXPECTED]


def test_tool_prints_never_reach_the_agent(fixture_report):
    runner = SubprocessToolRunner(fixture_report.domains["intake"], timeout_s=60)
    try:
        text = runner.call("inspect_parcel", {"parcel_id": "P2"})["text"]
    finally:
        runner.close()
    assert text == '{"parcel_id": "P2", "damage_code": "D7", "weight": NaN, "status": "rejected"}'


def test_key_error_message_is_str_of_the_exception(fixture_report):
    runner = InProcessToolRunner(fixture_report.domains["intake"])
    assert runner.call("inspect_parcel", {"parcel_id": "P9"})["text"] == "Error: 'P9'"


def test_manager_is_the_first_public_name_ending_in_manager(fixture_report):
    runner = InProcessToolRunner(fixture_report.domains["intake"])
    runner.call("inspect_parcel", {"parcel_id": "P1"})
    assert type(runner._manager).__name__ == "IntakeManager"


@pytest.mark.parametrize("kind", ["subprocess", "inprocess"])
def test_unsandboxed_runners_need_trust(helpdesk, kind):
    with pytest.raises(ValueError, match="trust_tools_code=True"):
        make_runner(kind, helpdesk)
    with pytest.raises(ValueError, match="trust_tools_code=True"):
        gym.make("sopbench/helpdesk-v0", tools_runner=kind)


def test_env_passes_arguments_unvalidated_like_upstream(helpdesk):
    """The toolspec says priority_score is an integer; upstream does not check, nor do we."""
    env = gym.make("sopbench/helpdesk-v0", tools_runner="inprocess", trust_tools_code=True, tool_mode="live")
    env.reset(options={"task_index": 0})
    obs, _, _, _, info = env.step('<tool_call>{"name": "decide", "arguments": {"plan": "gold", "priority_score": "9"}}</tool_call>')
    assert "Error: '>=' not supported between instances of 'str' and 'int'" in obs
    assert info["turn_status"] == "ERROR_BAD_ARGUMENTS"
    env.close()


def test_unknown_tool_is_answered_without_running_code(helpdesk):
    from sopgym.sandboxes.base import SandboxEpisode
    from sopgym.sopbench.sopbench_toolbox import SopBenchToolBox

    def no_runner():
        raise AssertionError("no code may run for an unknown tool")

    box = SopBenchToolBox([], helpdesk.tool_names, recording=None, runner_factory=no_runner, mode="live")
    box.start_episode(SandboxEpisode(key="t"))
    result = box.call("nope", {})
    assert (result.render(), result.outcome) == (UNKNOWN, Outcome.UNKNOWN_TOOL)
