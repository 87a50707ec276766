"""The one token-space agent of the episode runner: a generate callable and a budget rule.

Every running episode's next turn comes from one ``generate(prompts, rooms)`` call per round (a
prompt is the episode so far as token ids; its room, what the budget leaves for the next turn). The
sampled ids are kept exactly as sampled, with their log-probs (loss mask 1); the env's messages are
rendered by the chat template (:class:`~sopgym.trainers.episodes.EpisodeBuilder`, loss mask 0). An
episode with no room left is ended with ``EndEpisode("context_budget")`` (the env scores it like an
unanswered episode); a turn longer than its room is cut to it; a generator that cannot answer for an
episode answers :class:`~sopgym.episodes.specs.EndEpisode` for it.

Its two users differ only in the generate callable and the budget rule:

* the trainer's rollouts and held-out evaluations (:func:`sopgym.trainers.rollout.collect`): the rollout
  engine's ``generate`` at the run's sampling settings, and :class:`ContextBudget` (an episode holds at
  most ``max_context`` tokens, a turn at most ``max_new_tokens``);
* the RL-library adapters (:func:`sopgym.integrations._tokens.run_token_episodes`): the library's
  generator, and :class:`CompletionBudget` (every token after the prompt counts against the library's
  completion budget).

Imports no torch: the adapters load it without the trainer's numerics.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from sopgym.envs.reward import SHAPING_PREFIX
from sopgym.episodes.runner import EpisodeResult, Turn
from sopgym.episodes.specs import EndEpisode, EpisodeSpec

from .episodes import Episode, EpisodeBuilder, check_system_turn, shown_chat

__all__ = ["Budget", "CompletionBudget", "ContextBudget", "FinishedEpisode", "Generate", "TokenAgent", "TokenTurn",
           "shaping_reward"]


@dataclass
class TokenTurn:
    """What a generator sampled for one episode's turn (the trainer's engines answer ``Sample``, which has
    the same fields)."""

    ids: list[int]
    logps: list[float] | None = None
    """Sampling log-probs of ``ids`` (None: the backend gave none)."""
    hit_cap: bool = False
    """Stopped by the turn's room rather than by an end-of-turn id (counted in ``Episode.token_cap_hits``)."""
    weights_version: int | None = None
    """The weight version that sampled it (appended to ``Episode.turn_versions``); None: not named."""


#: ``(prompts, rooms) -> one TokenTurn (or Sample) or EndEpisode per prompt``; ``rooms[i] >= 1`` tokens.
Generate = Callable[[list[list[int]], list[int]], Sequence[Any]]


class Budget(Protocol):
    """A budget rule: the room left for an episode's next turn."""

    def room(self, num_tokens: int, prompt_len: int) -> int:
        """Tokens the next turn may have, for an episode of ``num_tokens`` whose prompt was ``prompt_len``
        (0 or less: no room, the episode ends)."""
        ...

    def no_room(self) -> str:
        """The detail of the ``context_budget`` end of an episode with no room left."""
        ...


@dataclass(frozen=True)
class ContextBudget:
    """The trainer's rule: an episode holds at most ``max_context`` tokens, a turn at most ``max_new_tokens``."""

    max_context: int
    max_new_tokens: int

    def room(self, num_tokens: int, prompt_len: int) -> int:
        return min(self.max_new_tokens, self.max_context - num_tokens)

    def no_room(self) -> str:
        return f"no room for another turn in max_context={self.max_context} tokens"


@dataclass(frozen=True)
class CompletionBudget:
    """The RL libraries' rule: every token after the prompt (sampled or the env's) counts against
    ``max_completion_tokens``."""

    max_completion_tokens: int

    def room(self, num_tokens: int, prompt_len: int) -> int:
        return self.max_completion_tokens - (num_tokens - prompt_len)

    def no_room(self) -> str:
        return f"no room left in the completion budget of {self.max_completion_tokens} tokens"


def shaping_reward(info: dict[str, Any]) -> float:
    """The shaping part of a step's reward: its ``shaping/*`` reward components, summed."""
    return sum(float(v) for k, v in (info.get("reward_components") or {}).items() if k.startswith(SHAPING_PREFIX))


@dataclass
class FinishedEpisode:
    """A finished episode in token space, with the runner's result."""

    episode: Episode
    """Ids, loss mask and log-probs; the outcome fields (reward, success, ...) are left to the user."""
    result: EpisodeResult
    prompt_len: int
    """``episode.ids[:prompt_len]`` is the first prompt."""
    has_logprobs: bool
    """False when the generator gave no log-probs for some turn (they are 0.0 there)."""
    shaping: float
    """Every step's ``shaping/*`` reward components, summed."""


@dataclass
class _Running:
    episode: Episode
    builder: EpisodeBuilder
    prompt_len: int
    has_logprobs: bool = True
    shaping: float = 0.0


class TokenAgent:
    """A batched agent of the runner in token space (see the module docstring).

    Args:
        generate: ``(prompts, rooms) -> [TokenTurn | EndEpisode]``, one per prompt.
        tokenizer: the chat-template tokenizer of the episodes.
        budget: the budget rule (:class:`ContextBudget`, :class:`CompletionBudget`).
        system_turn: ``keep`` (the env's first messages as they are) or ``drop`` (without the system
            message and the tool schemas: the episode starts at the case; ``model.system_turn``).
        check_start: called with an episode's spec and reset info before it starts (the trainer's
            licence check raises there).

    ``finished`` holds the finished episodes by spec index.
    """

    def __init__(self, generate: Generate, tokenizer, budget: Budget, *, system_turn: str = "keep",
                 check_start: Callable[[EpisodeSpec, dict[str, Any]], None] | None = None):
        check_system_turn(system_turn)
        self.generate, self.tokenizer, self.budget = generate, tokenizer, budget
        self.system_turn, self.check_start = system_turn, check_start
        self._running: dict[int, _Running] = {}
        self.finished: dict[int, FinishedEpisode] = {}

    def start(self, slot: int, spec: EpisodeSpec, observation: str, info: dict[str, Any]) -> None:
        if self.check_start is not None:
            self.check_start(spec, info)
        messages, tools = shown_chat(info["messages"], info.get("tools"), self.system_turn)
        assert spec.seed is not None, f"{spec.env_id}: a token episode is seeded (Episode.seed poses its task again)"
        ep = Episode(task_id=str(info.get("task_id")), group_id=spec.group_id, seed=spec.seed, env_id=spec.env_id,
                     messages=messages, tools=tools)
        builder = EpisodeBuilder(self.tokenizer, ep)
        self._running[slot] = _Running(ep, builder, len(ep.ids))

    def _room(self, slot: int) -> int:
        run = self._running[slot]
        return self.budget.room(len(run.episode.ids), run.prompt_len)

    def act(self, slots: list[int], observations: list[str], infos: list[dict[str, Any]]) -> list[Any]:
        rooms = {s: self._room(s) for s in slots}
        replies: dict[int, Any] = {s: EndEpisode("context_budget", self.budget.no_room()) for s in slots if rooms[s] <= 0}
        live = [s for s in slots if s not in replies]
        if live:
            turns = self.generate([list(self._running[s].episode.ids) for s in live], [rooms[s] for s in live])
            if len(turns) != len(live):
                raise ValueError(f"the generator answered {len(turns)} prompts, expected {len(live)}")
            for s, turn in zip(live, turns):
                replies[s] = turn if isinstance(turn, EndEpisode) else self._add_turn(s, turn, rooms[s])
        return [replies[s] for s in slots]

    def _add_turn(self, slot: int, turn: Any, room: int) -> str:
        """Append a sampled turn, cut to its room (as the libraries' own tool loops cut it); its content."""
        run = self._running[slot]
        ids = [int(t) for t in turn.ids][:room]
        if turn.logps is None:
            run.has_logprobs = False
        logps = [float(x) for x in turn.logps][:room] if turn.logps is not None else [0.0] * len(ids)
        run.episode.token_cap_hits += int(getattr(turn, "hit_cap", False))
        if (version := getattr(turn, "weights_version", None)) is not None:
            run.episode.turn_versions.append(int(version))
        return run.builder.add_assistant(ids, logps)

    def observe(self, slot: int, turn: Turn | None, info: dict[str, Any], result: EpisodeResult | None) -> None:
        run = self._running[slot]
        run.shaping += shaping_reward(info)
        if result is None:
            assert turn is not None  # the runner passes the step's turn with every episode that goes on
            run.builder.add_env_messages(turn.new_messages)
            return
        run.builder.close()  # the env's answer to the last reply is not appended: nothing follows it to train on
        self.finished[result.index] = FinishedEpisode(run.episode, result, run.prompt_len, run.has_logprobs, run.shaping)
        del self._running[slot]
