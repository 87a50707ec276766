"""Episodes in token space for adapters whose library generates tokens (TRL's rollout_func, verl's agent loop).

An agent of the one episode runner (:func:`sopgym.episodes.runner.run_episodes`): every running
episode's next turn comes from the library's generator in one call; sampled ids are kept exactly as
sampled with their log-probs (loss mask 1); the env's messages are rendered by the chat template
(:class:`~sopgym.trainers.episodes.EpisodeBuilder`, loss mask 0). The library's completion budget
counts every token after the prompt: a turn is cut where the budget ends, and an episode with no
budget left is ended through ``end_episode("context_budget")``. A generator that fails for an
episode answers :class:`~sopgym.episodes.specs.EndEpisode` (``inference``) for it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from sopgym.episodes.pools import EnvPool
from sopgym.episodes.runner import EpisodeResult, Turn, run_episodes
from sopgym.episodes.specs import EndEpisode, EpisodeSpec
from sopgym.trainers.episodes import Episode, EpisodeBuilder

__all__ = ["TokenTurn", "TokenEpisode", "run_token_episodes"]


@dataclass
class TokenTurn:
    """What a generator sampled for one episode's turn."""

    ids: list[int]
    logps: list[float] | None = None
    """Sampling log-probs of ``ids`` (None: the backend gave none)."""


@dataclass
class TokenEpisode:
    """A finished episode: ``ids[:prompt_len]`` is the prompt, the rest the completion."""

    ids: list[int]
    loss_mask: list[int]
    """1 on sampled tokens, 0 on the prompt and on env tokens."""
    logps: list[float]
    """Sampling log-prob per token (0.0 off the sampled tokens, and where the backend gave none)."""
    prompt_len: int
    result: EpisodeResult
    """The runner's result: the env's record, the return, the evaluator's success."""
    episode: Episode
    has_logprobs: bool


#: ``prompts -> one TokenTurn or EndEpisode per prompt``.
Generate = Callable[[list[list[int]]], Sequence[TokenTurn | EndEpisode]]


class _Agent:
    def __init__(self, generate: Generate, tokenizer, max_completion_tokens: int):
        self.generate, self.tokenizer, self.budget = generate, tokenizer, max_completion_tokens
        self.running: dict[int, tuple[Episode, EpisodeBuilder, int, list[bool]]] = {}
        self.finished: dict[int, TokenEpisode] = {}

    def start(self, slot: int, spec: EpisodeSpec, observation: str, info: dict[str, Any]) -> None:
        ep = Episode(task_id=str(info["task_id"]), group_id=spec.group_id, seed=spec.seed, env_id=spec.env_id,
                     messages=[dict(m) for m in info["messages"]], tools=info.get("tools"))
        builder = EpisodeBuilder(self.tokenizer, ep)
        self.running[slot] = (ep, builder, len(ep.ids), [True])

    def room(self, slot: int) -> int:
        ep, _, prompt_len, _ = self.running[slot]
        return self.budget - (len(ep.ids) - prompt_len)

    def act(self, slots: list[int], observations: list[str], infos: list[dict[str, Any]]) -> list[Any]:
        replies: dict[int, Any] = {}
        for s in slots:
            if self.room(s) <= 0:
                replies[s] = EndEpisode("context_budget", f"no room left in the completion budget of {self.budget} tokens")
        live = [s for s in slots if s not in replies]
        if live:
            turns = self.generate([list(self.running[s][0].ids) for s in live])
            if len(turns) != len(live):
                raise ValueError(f"the generator answered {len(turns)} prompts, expected {len(live)}")
            for s, turn in zip(live, turns):
                if isinstance(turn, EndEpisode):
                    replies[s] = turn
                    continue
                _, builder, _, has_logprobs = self.running[s]
                cut = self.room(s)  # a turn past the budget is truncated (as the libraries' own tool loops do)
                ids = [int(t) for t in turn.ids][:cut]
                if turn.logps is None:
                    has_logprobs[0] = False
                logps = [float(x) for x in turn.logps][:cut] if turn.logps is not None else [0.0] * len(ids)
                replies[s] = builder.add_assistant(ids, logps)
        return [replies[s] for s in slots]

    def observe(self, slot: int, turn: Turn | None, info: dict[str, Any], result: EpisodeResult | None) -> None:
        ep, builder, prompt_len, has_logprobs = self.running[slot]
        if result is None:
            builder.add_env_messages(turn.new_messages)
            return
        builder.close()  # the env's answer to the last reply is not appended: nothing follows it to train on
        self.finished[result.index] = TokenEpisode(ep.ids, ep.loss_mask, ep.old_logp, prompt_len, result, ep, has_logprobs[0])
        del self.running[slot]


def run_token_episodes(specs: Sequence[EpisodeSpec], pool: EnvPool, generate: Generate, tokenizer,
                       max_completion_tokens: int) -> list[TokenEpisode]:
    """Run every spec to its end (all at once, one ``generate`` call per round). Returns them in spec order.

    Args:
        specs: the episodes.
        pool: the env pool that steps them.
        generate: the library's generation for a batch of token prompts.
        tokenizer: the chat-template tokenizer of the policy.
        max_completion_tokens: the budget of every token after each episode's prompt.
    """
    if max_completion_tokens < 1:
        raise ValueError(f"max_completion_tokens must be >= 1, got {max_completion_tokens}")
    agent = _Agent(generate, tokenizer, max_completion_tokens)
    run_episodes(list(specs), agent, pool)
    return [agent.finished[i] for i in range(len(specs))]
