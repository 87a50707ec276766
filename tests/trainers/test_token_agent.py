"""The one token-space agent (sopgym/trainers/token_agent.py) under both budget rules: the trainer's
(``ContextBudget``: at most ``max_context`` tokens per episode, ``max_new_tokens`` per turn) and the RL
libraries' (``CompletionBudget``: every token after the prompt counts). Each rule is set so that the
first turn has a room of ``ROOM`` tokens; the generator answers longer turns than asked for."""

from __future__ import annotations

import gymnasium as gym
import pytest

from sopgym.episodes.pools import EnvPool
from sopgym.episodes.runner import run_episodes
from sopgym.episodes.specs import EpisodeSpec
from sopgym.trainers.episodes import Episode, EpisodeBuilder
from sopgym.trainers.token_agent import CompletionBudget, ContextBudget, TokenAgent, TokenTurn

from .scripted import ENV, OPTIONS, tokenizer

ROOM = 5


def _prompt_len(tok) -> int:
    env = gym.make(ENV)
    _, info = env.reset(seed=0, options=OPTIONS)
    env.close()
    ep = Episode("t", 0, 0, ENV, messages=[dict(m) for m in info["messages"]], tools=info.get("tools"))
    EpisodeBuilder(tok, ep)
    return len(ep.ids)


BUDGETS = {
    "trainer": lambda prompt_len: ContextBudget(max_context=prompt_len + ROOM, max_new_tokens=512),
    "adapters": lambda prompt_len: CompletionBudget(max_completion_tokens=ROOM),
}


def _run(budget_name: str, room_at_start: int = ROOM):
    """One episode whose generator answers 40 ids a turn, whatever room it is given; the rooms asked."""
    tok = tokenizer()
    prompt_len = _prompt_len(tok)
    budget = BUDGETS[budget_name](prompt_len - (ROOM - room_at_start))
    rooms = []
    long_turn = (tok("hello there " * 20, add_special_tokens=False)["input_ids"] * 4)[:40]

    def generate(prompts, asked):
        rooms.extend(asked)
        return [TokenTurn(list(long_turn), [-0.5] * len(long_turn)) for _ in prompts]

    agent = TokenAgent(generate, tok, budget)
    pool = EnvPool(lambda env_id: gym.make(ENV))
    try:
        run_episodes([EpisodeSpec(ENV, 0, OPTIONS)], agent, pool)
    finally:
        pool.close()
    return agent.finished[0], rooms


@pytest.mark.parametrize("budget_name", sorted(BUDGETS))
def test_a_turn_longer_than_its_room_is_cut_to_it(budget_name):
    done, rooms = _run(budget_name)
    assert rooms == [ROOM]  # the generator was told the room, and asked once: after the turn there is none
    assert done.episode.num_turns == 1 and sum(done.episode.loss_mask) == ROOM
    assert len(done.episode.ids) >= done.prompt_len + ROOM


@pytest.mark.parametrize("budget_name", sorted(BUDGETS))
def test_no_room_left_ends_the_episode_as_a_context_budget_truncation(budget_name):
    done, _ = _run(budget_name)
    assert done.result.score.truncation_cause == "context_budget"
    assert done.result.record["truncation_cause"] == "context_budget"


def test_no_room_for_the_first_turn_ends_the_episode_before_any_generation():
    """The trainer's rule can leave no room at all (an env's first prompt longer than ``max_context``)."""
    done, rooms = _run("trainer", room_at_start=0)
    assert rooms == [] and done.episode.num_turns == 0
    assert done.result.score.truncation_cause == "context_budget"
