"""Drive batches of sopgym envs with a token-level policy and assemble ``Episode`` objects.

A group is ``group_size`` episodes of the same task: the same env id, split and seed, so the env
starts from the identical state. All active episodes of all groups generate their next turn in one
batched ``policy.generate`` call.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from .episodes import Episode, EpisodeBuilder

INVALID_ACTION = {"NO_TOOL_CALL", "ERROR_PARSE", "ERROR_UNKNOWN_TOOL", "ERROR_BAD_ARGUMENTS"}
TOOL_FAILURE = {"ERROR_TOOL", "ERROR_TIMEOUT"}


class TrainingNotAllowed(RuntimeError):
    """The task's licence does not allow training on it (``info['training_allowed']`` is False)."""


@dataclass(frozen=True)
class EpisodeSpec:
    env_id: str
    seed: int
    split: str
    group_id: int
    options: dict[str, Any] | None = None


class EnvPool:
    """Reusable env instances per env id (one per concurrently running episode)."""

    def __init__(self, make_env: Callable[[str], Any]):
        self.make_env = make_env
        self._envs: dict[str, list[Any]] = {}

    def get(self, env_id: str, slot: int):
        envs = self._envs.setdefault(env_id, [])
        while len(envs) <= slot:
            envs.append(self.make_env(env_id))
        return envs[slot]

    def close(self) -> None:
        for envs in self._envs.values():
            for env in envs:
                env.close()
        self._envs.clear()


def gym_env_factory(env_kwargs: dict[str, Any], length_fn: Callable[[str], int] | None) -> Callable[[str], Any]:
    """``env_id -> gymnasium.make(env_id, **env_kwargs, length_fn=...)``."""
    import gymnasium

    import sopgym  # noqa: F401  (registers the sopgym/* ids)

    try:
        import sopgym.envs  # noqa: F401
    except ImportError:  # envs not installed yet: ids may be registered elsewhere
        pass

    def make(env_id: str):
        kwargs = dict(env_kwargs)
        if length_fn is not None:
            kwargs["length_fn"] = length_fn
        return gymnasium.make(env_id, **kwargs)

    return make


def episode_success(reward: float, components: dict[str, float], episode_info: dict[str, Any]) -> bool:
    """Task success as the independent evaluator judges the env's episode record (fallbacks for other envs)."""
    try:
        from sopgym.evaluation import score_record

        return bool(score_record(episode_info).success)
    except (ImportError, ValueError):
        pass
    for source in (episode_info, components):
        for key in ("success", "task_success"):
            if key in source and source[key] is not None:
                return bool(source[key])
    return reward >= 1.0 - 1e-9


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
) -> list[Episode]:
    """Run every spec to the end of its episode; returns episodes in spec order.

    Raises:
        TrainingNotAllowed: ``require_training_allowed`` and a task says ``training_allowed: False``
            while ``allow_restricted`` is not set.
    """
    episodes: list[Episode] = []
    builders: list[EpisodeBuilder] = []
    envs: list[Any] = []
    seen: list[int] = []  # number of env messages already mirrored, per episode
    slots: dict[str, int] = {}
    for spec in specs:
        slot = slots.get(spec.env_id, 0)
        slots[spec.env_id] = slot + 1
        env = pool.get(spec.env_id, slot)
        options = {"split": spec.split, **(spec.options or {})}
        _, info = env.reset(seed=spec.seed, options=options)
        if require_training_allowed and not info.get("training_allowed", False) and not allow_restricted:
            raise TrainingNotAllowed(
                f"{spec.env_id} task {info.get('task_id')} has training_allowed=False "
                f"(licence {info.get('license')!r}); set env.allow_restricted_training to override"
            )
        ep = Episode(
            task_id=str(info.get("task_id")),
            group_id=spec.group_id,
            seed=spec.seed,
            env_id=spec.env_id,
            messages=[dict(m) for m in info["messages"]],
            tools=info.get("tools"),
        )
        episodes.append(ep)
        builders.append(EpisodeBuilder(tokenizer, ep))
        envs.append(env)
        seen.append(len(info["messages"]))

    while True:
        active = [i for i, ep in enumerate(episodes) if not ep.done]
        if not active:
            break
        # ---- trainer-side context budget: no room left for even one token ----
        caps = {i: min(max_new_tokens, max_context - len(episodes[i].ids)) for i in active}
        for i in [i for i in active if caps[i] <= 0]:
            episodes[i].done = True
            episodes[i].truncation_cause = "context_budget"
            episodes[i].status = "TRUNCATED_BUDGET"
            builders[i].close()
        active = [i for i in active if caps[i] > 0]
        if not active:
            break
        samples = policy.generate(
            [episodes[i].ids for i in active],
            [caps[i] for i in active],
            temperature=temperature,
            top_p=top_p,
            generator=generator,
        )
        for i, sample in zip(active, samples):
            ep, builder = episodes[i], builders[i]
            content = builder.add_assistant(sample.ids, sample.logps)
            ep.token_cap_hits += int(sample.hit_cap)
            _, reward, terminated, truncated, info = envs[i].step(content)
            ep.reward += float(reward)
            ep.status = str(info.get("status", "OK"))
            ep.invalid_actions += int(ep.status in INVALID_ACTION)
            ep.tool_failures += int(ep.status in TOOL_FAILURE)
            ep.infrastructure_failure |= bool(info.get("infrastructure_failure", False))
            if terminated or truncated:
                ep.done = True
                ep.truncation_cause = info.get("truncation_cause") or (None if terminated else "unknown")
                ep.reward_components = {k: float(v) for k, v in (info.get("reward_components") or {}).items()}
                ep.episode_info = dict(info.get("episode") or {})
                ep.success = episode_success(ep.reward, ep.reward_components, ep.episode_info)
                builder.close()
                continue
            messages = info["messages"]
            builder.add_env_messages([dict(m) for m in messages[seen[i] + 1 :]])
            seen[i] = len(messages)
            if len(ep.ids) >= max_context:
                ep.done = True
                ep.truncation_cause = "context_budget"
                ep.status = "TRUNCATED_BUDGET"
    return episodes


def group_spec_list(env_ids: list[str], split: str, first_seed: int, num_tasks: int, group_size: int) -> list[EpisodeSpec]:
    """``num_tasks`` tasks from consecutive seeds (env ids alternate), each repeated ``group_size`` times."""
    specs = []
    for t in range(num_tasks):
        seed = first_seed + t
        env_id = env_ids[seed % len(env_ids)]
        specs.extend(EpisodeSpec(env_id, seed, split, group_id=t) for _ in range(group_size))
    return specs
