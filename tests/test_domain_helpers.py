"""The helpers every domain pack is written with: sopgym/sop_tasks/toolkit.py, sopgym/sop_tasks/generation.py, pack.expect.

The pack-wide checks (layout, hashes, oracle) are in tests/test_domains.py.
"""

from __future__ import annotations

import random

import pytest

import sopgym  # noqa: F401  (registers the envs)
from sopgym.sandboxes import ExecResult, Outcome, SandboxEpisode, Tier, ToolBox, canonical_args
from sopgym.sandboxes.local_runner import LocalCodeRunner
from sopgym.sop_tasks.generation import balanced_target, draw_until, record, recorded_error, records
from sopgym.sop_tasks.pack import ToolError, expect
from sopgym.sop_tasks.registry import all_packs
from sopgym.sop_tasks.toolkit import CodeTools, exec_tool_result, lookup, python_tool, sql_tool, stateful

CODE_PACKS = sorted((p for p in all_packs("sopgym") if p.verifiable is not None), key=lambda p: p.name)


# -- tool declarations -----------------------------------------------------------------------------
def test_lookup_declares_a_closed_schema_with_every_argument_required():
    spec = lookup("get_x", "X by id.", {"x_id": {"type": "string"}, "day": {"type": "string"}}, not_found="{x_id} gone")
    assert (spec.tier, spec.parameters["required"], spec.parameters["additionalProperties"], spec.not_found) == (
        Tier.REPLAY, ["x_id", "day"], False, "{x_id} gone"
    )


def test_stateful_declares_a_stateful_tool():
    spec = stateful("open_case", "Open a case.", {"case_id": {"type": "string"}}, writes=True)
    assert (spec.tier, spec.writes, spec.parameters["required"]) == (Tier.STATEFUL, True, ["case_id"])


def test_code_tools_carry_their_code_in_query_or_code():
    assert (sql_tool("q").spec.parameters["required"], python_tool("p").spec.parameters["required"]) == (["query"], ["code"])


# -- the one conversion of a run into a tool result -----------------------------------------------
def _run(exit_code=0, stdout="", stderr="", timed_out=False, truncated=False):
    result = ExecResult(exit_code=exit_code, stdout=stdout, stderr=stderr, timed_out=timed_out, truncated=truncated)
    return exec_tool_result(result, subject="program", timeout_s=2.5, error_lines=2)


def test_a_run_past_its_deadline_is_a_timeout():
    got = _run(exit_code=None, timed_out=True)
    assert (got.outcome, got.error) == (Outcome.TIMEOUT, "program ran past the 2.5 s limit and was stopped")


def test_a_failed_run_reports_its_exit_code_and_the_end_of_stderr():
    got = _run(exit_code=3, stderr="Traceback\n  line 1\n\nValueError: bad\n")
    assert (got.outcome, got.error) == (Outcome.TOOL_ERROR, "program failed (exit code 3):\n  line 1\nValueError: bad")


def test_a_successful_run_returns_stdout_and_says_when_it_was_cut():
    assert (_run(stdout="42\n").content, _run(stdout="x", truncated=True).content) == (
        "42\n", "x\n[output truncated at the size cap: return less output]"
    )


def test_code_tools_answer_an_unknown_name_as_an_unknown_tool():
    got = CodeTools(sql_tool("q"))(LocalCodeRunner(), "run_python", {"code": "1"}, SandboxEpisode(key="k"))
    assert got.outcome is Outcome.UNKNOWN_TOOL, got


@pytest.mark.parametrize("pack", CODE_PACKS, ids=lambda p: p.name)
def test_every_code_tool_reports_a_failure_in_the_same_words(pack):
    """SQL and Python tools of every verifiable pack, run for real by the local runner."""
    task = pack.task("test", 0)
    runner = LocalCodeRunner()
    bad = {"sql": "SELECT no_such_column FROM no_such_table", "python": "raise ValueError('bad input')"}
    for tool in pack.verifiable.tools.values():
        got = pack.verifiable(runner, tool.name, {tool.argument: bad[tool.language]}, pack.sandbox_episode(task))
        subject = {"sql": "query", "python": "program"}[tool.language]
        assert got.outcome is Outcome.TOOL_ERROR and got.error.startswith(f"{subject} failed (exit code 1):\n"), (
            f"{pack.name}.{tool.name}: expected a TOOL_ERROR '{subject} failed (exit code 1): ...', got {got}"
        )


# -- replay records --------------------------------------------------------------------------------
def test_records_are_keyed_by_the_canonical_arguments():
    got = records([({"b": 1, "a": "x"}, {"v": 1}), ({"a": "y"}, {"v": 2})])
    assert got == {canonical_args({"a": "x", "b": 1}): {"v": 1}, canonical_args({"a": "y"}): {"v": 2}}


def test_a_recorded_error_reaches_the_agent_as_the_tools_error():
    spec = lookup("get_x", "X.", {"x_id": {"type": "string"}})
    box = ToolBox([spec])
    box.start_episode(SandboxEpisode(key="k", replay={"get_x": record({"x_id": "A"}, recorded_error("x service down"))}))
    got = box.call("get_x", {"x_id": "A"})
    assert (got.outcome, got.error) == (Outcome.TOOL_ERROR, "x service down")


# -- generation ------------------------------------------------------------------------------------
def test_balanced_target_cycles_through_the_labels_on_fixed_splits():
    rng = random.Random(0)
    assert [balanced_target(rng, "test", i, "ABC") for i in range(5)] == ["A", "B", "C", "A", "B"]


def test_balanced_target_draws_from_the_rng_on_train():
    assert balanced_target(random.Random(7), "train", 0, "ABC") == random.Random(7).choice("ABC")


def test_draw_until_returns_the_first_accepted_draw():
    draws = iter(range(10))
    assert draw_until(lambda: next(draws), lambda d: d % 4 == 3, attempts=10, target="x") == 3


def test_draw_until_raises_when_no_draw_is_accepted():
    with pytest.raises(RuntimeError, match="no draw reached the target 'x' in 5 attempts"):
        draw_until(lambda: 0, lambda d: False, attempts=5, target="x")


# -- solvers ---------------------------------------------------------------------------------------
def test_expect_raises_the_tool_error_a_solver_received():
    with pytest.raises(ToolError, match="not found"):
        expect(ToolError("not found"))


def test_expect_passes_a_result_through():
    assert expect({"ok": 1}) == {"ok": 1}
