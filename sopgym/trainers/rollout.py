"""Rollouts in token space: the trainer's policy as an agent of the one episode runner.

A group is ``group_size`` episodes of the same task: the same env id, split and seed, so the env
starts from the identical state. The episode runner (:mod:`sopgym.episodes.runner`) drives the
envs; :class:`TokenAgent` answers every running episode with one batched ``policy.generate`` per
round and keeps each episode in token space (:class:`~.episodes.EpisodeBuilder`). What an episode
counts (success, invalid actions, tool failures, truncation) is read from the env's episode record
as the evaluator scores it, never recounted here.
"""

from __future__ import annotations

from typing import Any

import torch

from sopgym.envs.reward import SHAPING_PREFIX
from sopgym.episodes.pools import EnvPool
from sopgym.episodes.runner import EpisodeResult, Turn, make_env_pool, run_episodes
from sopgym.episodes.specs import EndEpisode, EpisodeSpec
from sopgym.status import TOOL_FAILURE_VALUES

from .episodes import Episode, EpisodeBuilder, check_system_turn, shown_chat

__all__ = ["TrainingNotAllowed", "TokenAgent", "EnvPool", "EpisodeSpec", "collect", "finish_episode",
           "group_spec_list", "make_env_pool"]


class TrainingNotAllowed(RuntimeError):
    """The task's licence does not allow training on it (``info['training_allowed']`` is False)."""


def check_training_allowed(env_id: str, info: dict[str, Any], allow_restricted: bool) -> None:
    """Raise :class:`TrainingNotAllowed` for a task whose licence forbids training, unless overridden."""
    if not info.get("training_allowed", False) and not allow_restricted:
        raise TrainingNotAllowed(
            f"{env_id} task {info.get('task_id')} has training_allowed=False "
            f"(licence {info.get('license')!r}); set env.allow_restricted_training to override"
        )


def shaping_reward(info: dict[str, Any]) -> float:
    """The shaping part of a step's reward: its ``shaping/*`` reward components, summed."""
    return sum(float(v) for k, v in (info.get("reward_components") or {}).items() if k.startswith(SHAPING_PREFIX))


def finish_episode(ep: Episode, result: EpisodeResult) -> None:
    """Fill an episode's outcome from the runner's result: the env's record as the evaluator scores it."""
    record, score = result.record, result.score
    ep.done = True
    ep.reward = float(result.total_reward)
    ep.reward_components = {k: float(v) for k, v in (result.final_info.get("reward_components") or {}).items()}
    ep.episode_info = dict(record)
    ep.success = score.success
    ep.status = str(result.final_info.get("status", "OK"))
    ep.truncation_cause = score.truncation_cause
    ep.infrastructure_failure = score.infrastructure_failure
    ep.invalid_actions = score.invalid_actions
    ep.tool_failures = sum(s in TOOL_FAILURE_VALUES for s in record.get("statuses") or ())


class TokenAgent:
    """The trainer's sampler as a batched agent: every running episode generates its next turn in one
    ``policy.generate`` call; sampled ids and log-probs are kept exactly as sampled.

    An episode whose next turn has no room left in ``max_context`` tokens is ended with
    ``EndEpisode("context_budget")`` (the env scores it like an unanswered episode).

    Args:
        policy: ``generate(prompts, max_new_tokens, temperature=, top_p=, generator=) -> [Sample]``.
        tokenizer: the chat-template tokenizer of the episodes.
        require_training_allowed: refuse tasks whose licence forbids training, unless ``allow_restricted``.
        system_turn: ``keep`` (the env's first messages as they are) or ``drop`` (without the system
            message and the tool schemas: the episode starts at the case; ``model.system_turn``).
    """

    def __init__(self, policy, tokenizer, *, max_new_tokens: int, max_context: int, temperature: float,
                 top_p: float = 1.0, generator: torch.Generator | None = None,
                 require_training_allowed: bool = False, allow_restricted: bool = False, system_turn: str = "keep"):
        check_system_turn(system_turn)
        self.policy, self.tokenizer = policy, tokenizer
        self.max_new_tokens, self.max_context = max_new_tokens, max_context
        self.temperature, self.top_p, self.generator = temperature, top_p, generator
        self.require_training_allowed, self.allow_restricted = require_training_allowed, allow_restricted
        self.system_turn = system_turn
        self._running: dict[int, tuple[Episode, EpisodeBuilder]] = {}
        self.finished: dict[int, Episode] = {}
        """Finished episodes by spec index."""

    def start(self, slot: int, spec: EpisodeSpec, observation: str, info: dict[str, Any]) -> None:
        if self.require_training_allowed:
            check_training_allowed(spec.env_id, info, self.allow_restricted)
        messages, tools = shown_chat(info["messages"], info.get("tools"), self.system_turn)
        ep = Episode(task_id=str(info.get("task_id")), group_id=spec.group_id, seed=spec.seed, env_id=spec.env_id,
                     messages=messages, tools=tools)
        self._running[slot] = (ep, EpisodeBuilder(self.tokenizer, ep))

    def act(self, slots: list[int], observations: list[str], infos: list[dict[str, Any]]) -> list[Any]:
        replies: dict[int, Any] = {}
        caps = {s: min(self.max_new_tokens, self.max_context - len(self._running[s][0].ids)) for s in slots}
        for s in slots:
            if caps[s] <= 0:  # trainer-side context budget: no room left for even one token
                replies[s] = EndEpisode("context_budget", f"no room for another turn in max_context={self.max_context} tokens")
        live = [s for s in slots if s not in replies]
        if live:
            samples = self.policy.generate(
                [self._running[s][0].ids for s in live], [caps[s] for s in live],
                temperature=self.temperature, top_p=self.top_p, generator=self.generator,
            )
            for s, sample in zip(live, samples):
                ep, builder = self._running[s]
                replies[s] = builder.add_assistant(sample.ids, sample.logps)
                ep.token_cap_hits += int(sample.hit_cap)
        return [replies[s] for s in slots]

    def observe(self, slot: int, turn: Turn | None, info: dict[str, Any], result: EpisodeResult | None) -> None:
        ep, builder = self._running[slot]
        ep.shaping += shaping_reward(info)
        if result is None:
            builder.add_env_messages(turn.new_messages)
            return
        builder.close()
        finish_episode(ep, result)
        self.finished[result.index] = ep
        del self._running[slot]


def collect(
    pool: EnvPool,
    specs: list[EpisodeSpec],
    policy,
    tokenizer,
    *,
    max_new_tokens: int,
    max_context: int,
    temperature: float,
    top_p: float = 1.0,
    generator: torch.Generator | None = None,
    require_training_allowed: bool = False,
    allow_restricted: bool = False,
    system_turn: str = "keep",
) -> list[Episode]:
    """Run every spec to the end of its episode (all at once, one batched generate per turn).

    Returns:
        Token-space episodes in spec order.

    Raises:
        TrainingNotAllowed: ``require_training_allowed`` and a task says ``training_allowed: False``
            while ``allow_restricted`` is not set.
    """
    agent = TokenAgent(
        policy, tokenizer, max_new_tokens=max_new_tokens, max_context=max_context, temperature=temperature,
        top_p=top_p, generator=generator, require_training_allowed=require_training_allowed,
        allow_restricted=allow_restricted, system_turn=system_turn,
    )
    run_episodes(specs, agent, pool)
    return [agent.finished[i] for i in range(len(specs))]


def group_spec_list(env_ids: list[str], split: str, first_seed: int, num_tasks: int, group_size: int) -> list[EpisodeSpec]:
    """``num_tasks`` tasks from consecutive seeds (env ids alternate), each repeated ``group_size`` times."""
    specs = []
    for t in range(num_tasks):
        seed = first_seed + t
        env_id = env_ids[seed % len(env_ids)]
        specs.extend(EpisodeSpec(env_id, seed, {"split": split}, group_id=t, sample=j) for j in range(group_size))
    return specs
