"""Rollouts in token space: the trainer's policy as an agent of the one episode runner.

A group is ``group_size`` episodes of the same task: the same env id, split and seed, so the env
starts from the identical state. The episode runner (:mod:`sopgym.episodes.runner`) drives the
envs; the token-space agent (:class:`~.token_agent.TokenAgent`, the one the RL-library adapters use
too) answers every running episode with one batched ``policy.generate`` per round, within the
trainer's :class:`~.token_agent.ContextBudget`, and keeps each episode in token space. What an
episode counts (success, invalid actions, tool failures, truncation) is read from the env's episode
record as the evaluator scores it, never recounted here.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from sopgym.episodes.pools import EnvPool
from sopgym.episodes.runner import EpisodeResult, make_env_pool, run_episodes
from sopgym.episodes.specs import EpisodeSpec
from sopgym.status import TOOL_FAILURE_VALUES

from .episodes import Episode
from .token_agent import ContextBudget, TokenAgent

if TYPE_CHECKING:
    from .config import TrainConfig

__all__ = ["TrainingNotAllowed", "RolloutSettings", "EnvPool", "EpisodeSpec", "collect", "finish_episode",
           "group_spec_list", "make_env_pool", "rollout_settings"]


class TrainingNotAllowed(RuntimeError):
    """The task's licence does not allow training on it (``info['training_allowed']`` is False)."""


def check_training_allowed(env_id: str, info: dict[str, Any], allow_restricted: bool) -> None:
    """Raise :class:`TrainingNotAllowed` for a task whose licence forbids training, unless overridden."""
    if not info.get("training_allowed", False) and not allow_restricted:
        raise TrainingNotAllowed(
            f"{env_id} task {info.get('task_id')} has training_allowed=False "
            f"(licence {info.get('license')!r}); set env.allow_restricted_training to override"
        )


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


@dataclass(frozen=True)
class RolloutSettings:
    """How :func:`collect` samples: built once from the config (:func:`rollout_settings`), passed whole."""

    max_new_tokens: int
    """Cap of one turn."""
    max_context: int
    """Cap of a whole episode: a turn gets what is left of it, at most ``max_new_tokens``."""
    temperature: float
    top_p: float = 1.0
    require_training_allowed: bool = False
    """Refuse tasks whose licence forbids training (``TrainingNotAllowed``), unless ``allow_restricted``."""
    allow_restricted: bool = False
    system_turn: str = "keep"
    """``keep`` or ``drop`` the env's system turn (``model.system_turn``; sopgym/trainers/episodes.py)."""

    def held_out(self, temperature: float) -> RolloutSettings:
        """The settings of held-out evaluations: at ``temperature``, no top-p cut, no licence check
        (nothing is trained on them)."""
        return dataclasses.replace(self, temperature=temperature, top_p=1.0, require_training_allowed=False,
                                   allow_restricted=False)


def rollout_settings(cfg: TrainConfig) -> RolloutSettings:
    """The training rollouts' settings, from the config: the one place they are mapped."""
    return RolloutSettings(
        max_new_tokens=cfg.rollout.max_new_tokens, max_context=cfg.env.max_context,
        temperature=cfg.rollout.temperature, top_p=cfg.rollout.top_p, require_training_allowed=True,
        allow_restricted=cfg.env.allow_restricted_training, system_turn=cfg.model.system_turn,
    )


def collect(pool: EnvPool, specs: list[EpisodeSpec], policy, tokenizer, settings: RolloutSettings,
            generator: torch.Generator | None = None) -> list[Episode]:
    """Run every spec to the end of its episode (all at once, one batched generate per turn).

    An episode whose next turn has no room left in ``settings.max_context`` tokens is ended with
    ``EndEpisode("context_budget")`` (the env scores it like an unanswered episode).

    Args:
        policy: ``generate(prompts, max_new_tokens, temperature=, top_p=, generator=) -> [Sample]``
            (sopgym/policy/engine.py).
        tokenizer: the chat-template tokenizer of the episodes.
        settings: the sampling settings and budgets.
        generator: the CPU generator sampling advances.

    Returns:
        Token-space episodes in spec order, their outcome filled from the env's record.

    Raises:
        TrainingNotAllowed: ``settings.require_training_allowed`` and a task says ``training_allowed: False``
            while ``settings.allow_restricted`` is not set.
    """
    s = settings

    def generate(prompts: list[list[int]], rooms: list[int]):
        return policy.generate(prompts, rooms, temperature=s.temperature, top_p=s.top_p, generator=generator)

    def check_licence(spec: EpisodeSpec, info: dict[str, Any]) -> None:
        check_training_allowed(spec.env_id, info, s.allow_restricted)

    agent = TokenAgent(generate, tokenizer, ContextBudget(s.max_context, s.max_new_tokens), system_turn=s.system_turn,
                       check_start=check_licence if s.require_training_allowed else None)
    run_episodes(specs, agent, pool)
    episodes = []
    for i in range(len(specs)):
        done = agent.finished[i]
        done.episode.shaping = done.shaping
        finish_episode(done.episode, done.result)
        episodes.append(done.episode)
    return episodes


def group_spec_list(env_ids: list[str], split: str, first_seed: int, num_tasks: int, group_size: int) -> list[EpisodeSpec]:
    """``num_tasks`` tasks from consecutive seeds (env ids alternate), each repeated ``group_size`` times."""
    specs: list[EpisodeSpec] = []
    for t in range(num_tasks):
        seed = first_seed + t
        env_id = env_ids[seed % len(env_ids)]
        specs.extend(EpisodeSpec(env_id, seed, {"split": split}, group_id=t, sample=j) for j in range(group_size))
    return specs
