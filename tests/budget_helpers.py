"""Helpers of the wall-time budget tests (tests/test_wall_time_budgets.py, tests/docker/test_docker_budgets.py)."""

from __future__ import annotations

import time

from sopgym.envs.policies import format_call
from sopgym.sop_tasks.registry import all_packs

#: Agent code that never ends, per language of the verifiable tier.
ENDLESS = {
    "python": "while True: pass",
    "sql": "WITH RECURSIVE n(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM n) SELECT count(*) FROM n",
}

#: (env id, code tool name, language) of every registered authored env with a code tool.
CODE_TOOLS = sorted(
    (pack.env_id, name, tool.language)
    for pack in all_packs("sopgym") if pack.verifiable is not None
    for name, tool in pack.verifiable.tools.items()
)

#: What a cut run may take past the budget: the runner's kill and the env's bookkeeping.
SLACK_S = 2.0


def endless_reply(tool: str, language: str, num_calls: int = 16) -> str:
    argument = "query" if language == "sql" else "code"
    return "".join(format_call(tool, {argument: ENDLESS[language]}) for _ in range(num_calls))


def check_endless_reply_ends_within_the_turn_budget(env, tool: str, language: str, budget_s: float) -> None:
    """16 endless calls in one reply (``env`` made with ``max_turn_seconds=budget_s``): the step ends
    within the budget, the first call was stopped by it, the others were not run, the episode truncated."""
    try:
        env.reset(seed=0)
        started = time.monotonic()
        *_, truncated, info = env.step(endless_reply(tool, language))
        seconds = time.monotonic() - started
    finally:
        env.close()
    assert truncated and seconds < budget_s + SLACK_S, seconds
    assert info["truncation_cause"] == "turn_time" and info["status"] == "TRUNCATED_TURN_TIME", info["status_message"]
    results = [m["content"] for m in info["messages"] if m["role"] == "tool"]
    assert len(results) == 16 and "was stopped: the wall time left for tools ran out" in results[0], results[0]
    assert all(r.startswith("Not run: the turn's wall-time budget") for r in results[1:]), results[1]
    assert info["episode"]["truncation_cause"] == "turn_time" and info["episode"]["num_tool_calls"] == 1


def check_endless_turns_end_within_the_episode_budget(env, tool: str, language: str, budget_s: float) -> None:
    """One endless call per reply (``env`` made with ``max_episode_seconds=budget_s`` and no turn
    budget): the episode's steps end within the budget, truncated with cause ``episode_time``."""
    try:
        env.reset(seed=0)
        started = time.monotonic()
        for _ in range(env.unwrapped.max_turns):
            *_, truncated, info = env.step(endless_reply(tool, language, 1))
            if truncated:
                break
        seconds = time.monotonic() - started
    finally:
        env.close()
    assert info["truncation_cause"] == "episode_time" and info["status"] == "TRUNCATED_EPISODE_TIME", info["status_message"]
    assert seconds < budget_s + SLACK_S, seconds
