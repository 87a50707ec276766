"""Episodes in token space for adapters whose library generates tokens (TRL's rollout_func, verl's agent loop).

The one token-space agent of the episode runner (:class:`sopgym.trainers.token_agent.TokenAgent`, the
trainer's too) with the library's generator and its budget rule (:class:`~sopgym.trainers.token_agent.CompletionBudget`):
every running episode's next turn comes from the library's generator in one call; sampled ids are kept
exactly as sampled with their log-probs (loss mask 1); the env's messages are rendered by the chat
template (:class:`~sopgym.trainers.episodes.EpisodeBuilder`, loss mask 0). The library's completion
budget counts every token after the prompt: a turn is cut where the budget ends, and an episode with
no budget left is ended through ``end_episode("context_budget")``. A generator that fails for an
episode answers :class:`~sopgym.episodes.specs.EndEpisode` (``inference``) for it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from sopgym.episodes.pools import EnvPool
from sopgym.episodes.runner import EpisodeResult, run_episodes
from sopgym.episodes.specs import EndEpisode, EpisodeSpec
from sopgym.trainers.episodes import Episode
from sopgym.trainers.token_agent import CompletionBudget, TokenAgent, TokenTurn

__all__ = ["TokenEpisode", "run_token_episodes"]


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
    agent = TokenAgent(lambda prompts, rooms: generate(prompts), tokenizer, CompletionBudget(max_completion_tokens))
    run_episodes(list(specs), agent, pool)
    out = []
    for i in range(len(specs)):
        done = agent.finished[i]
        ep = done.episode
        out.append(TokenEpisode(ep.ids, ep.loss_mask, ep.old_logp, done.prompt_len, done.result, ep, done.has_logprobs))
    return out
