"""Group advantages for a batch of episodes, and the rollout metrics logged every step."""

from __future__ import annotations

from collections import Counter, defaultdict

import torch

from sopgym.status import TRUNCATION_CAUSES

from .advantages import ADVANTAGES, normalise_components, zero_variance
from .episodes import Episode


def assign_advantages(
    episodes: list[Episode], estimator: str, passk_k: int = 2, component_norm: bool = False, filter_zero_variance: bool = False
) -> tuple[list[Episode], dict[str, float]]:
    """Set ``ep.advantage`` per group; returns the episodes to train on and zero-variance statistics.

    Infrastructure failures are excluded from their group before the baseline is computed and never
    trained on. The zero-variance signal is the task's outcome (``Episode.outcome``: the reward without
    its shaping): with ``filter_zero_variance``, groups whose outcomes are all equal are dropped (a group
    that varies only through an invalid-reply penalty teaches nothing about the task), and
    ``rollout/zero_variance_group_fraction`` counts them. In a group with shaping, GRPO divides by the
    outcomes' std (``advantages.grpo``); ``component_norm`` normalises every component itself instead.
    The statistics also hold the signs and token mass of the trained advantages (``advantage_metrics``).
    """
    groups: dict[int, list[Episode]] = defaultdict(list)
    for ep in episodes:
        if not ep.infrastructure_failure:
            groups[ep.group_id].append(ep)
    component_names = sorted({k for ep in episodes for k in ep.reward_components})
    trainable: list[Episode] = []
    num_zero = 0
    zero_by_component: Counter[str] = Counter()
    for members in groups.values():
        rewards_G = torch.tensor([ep.reward for ep in members], dtype=torch.float64)
        shaped = any(ep.shaping for ep in members)
        outcome_G = torch.tensor([ep.outcome for ep in members], dtype=torch.float64) if shaped else rewards_G
        is_zero = zero_variance(outcome_G)
        num_zero += int(is_zero)
        for name in component_names:
            values_G = torch.tensor([ep.reward_components.get(name, 0.0) for ep in members], dtype=torch.float64)
            zero_by_component[name] += int(zero_variance(values_G))
        if component_norm and component_names:
            comps_GC = torch.tensor(
                [[ep.reward_components.get(n, 0.0) for n in component_names] for ep in members], dtype=torch.float64
            )
            rewards_G, shaped = normalise_components(comps_GC), False  # every component on its own scale already
        adv_G = ADVANTAGES[estimator](rewards_G, k=passk_k, outcome_G=outcome_G if shaped else None)
        for ep, a in zip(members, adv_G.tolist()):
            ep.advantage = float(a)
        if not (filter_zero_variance and is_zero):
            trainable.extend(members)
    num_groups = max(1, len(groups))
    stats = {"rollout/zero_variance_group_fraction": num_zero / num_groups}
    for name in component_names:
        stats[f"rollout/zero_variance_fraction/{name}"] = zero_by_component[name] / num_groups
    stats.update(advantage_metrics(trainable))
    return trainable, stats


def advantage_metrics(trainable: list[Episode]) -> dict[str, float]:
    """Signs and token mass of the advantages of the episodes trained on (the trainer broadcasts an
    episode's advantage to each of its policy tokens).

    ``advantage/positive_fraction`` and ``negative_fraction``: shares of the trained episodes with
    advantage > 0 and < 0 (the rest are 0). ``advantage/positive_token_mass``: the share of
    ``sum |A| * tokens`` that is positive (0.5: pushes up and down weigh the same per token; below:
    long failures outweigh short successes). ``advantage/token_mean``: ``sum A * tokens / sum tokens``,
    the net advantage per policy token.
    """
    n = max(1, len(trainable))
    pos = sum(max(ep.advantage, 0.0) * ep.num_policy_tokens for ep in trainable)
    neg = sum(max(-ep.advantage, 0.0) * ep.num_policy_tokens for ep in trainable)
    tokens = sum(ep.num_policy_tokens for ep in trainable)
    return {
        "advantage/positive_fraction": sum(ep.advantage > 0 for ep in trainable) / n,
        "advantage/negative_fraction": sum(ep.advantage < 0 for ep in trainable) / n,
        "advantage/positive_token_mass": pos / (pos + neg) if pos + neg > 0 else 0.0,
        "advantage/token_mean": (pos - neg) / max(1, tokens),
    }


def rollout_metrics(episodes: list[Episode]) -> dict[str, float]:
    """Reward, success, lengths, truncations by cause, turns, invalid actions, tool and infra failures."""
    n = max(1, len(episodes))
    valid = [ep for ep in episodes if not ep.infrastructure_failure] or episodes
    response = [ep.num_policy_tokens for ep in episodes] or [0]
    turns = sum(ep.num_turns for ep in episodes)
    m = {
        "rollout/reward/mean": sum(ep.reward for ep in valid) / max(1, len(valid)),
        "rollout/success_rate": sum(ep.success for ep in valid) / max(1, len(valid)),
        "rollout/tokens/response_max": float(max(response)),
        "rollout/tokens/response_mean": sum(response) / n,
        "rollout/tokens/episode_mean": sum(len(ep.ids) for ep in episodes) / n,
        "rollout/turns/mean": turns / n,
        "rollout/invalid_action_rate": sum(ep.invalid_actions for ep in episodes) / max(1, turns),
        "rollout/tool_failure_rate": sum(ep.tool_failures for ep in episodes) / max(1, turns),
        "rollout/infrastructure_failures": float(sum(ep.infrastructure_failure for ep in episodes)),
        "rollout/token_cap_rate": sum(ep.token_cap_hits > 0 for ep in episodes) / n,
        "rollout/truncation_rate/any": sum(ep.truncation_cause is not None for ep in episodes) / n,
    }
    for cause in TRUNCATION_CAUSES:
        m[f"rollout/truncation_rate/{cause}"] = sum(ep.truncation_cause == cause for ep in episodes) / n
    for name in sorted({k for ep in valid for k in ep.reward_components}):
        m[f"rollout/reward/{name}"] = sum(ep.reward_components.get(name, 0.0) for ep in valid) / max(1, len(valid))
    return m


def eval_metrics(episodes: list[Episode]) -> dict[str, float]:
    """Held-out metrics from the independent evaluator (``sopgym.evaluation.evaluate_records``) on the
    env's record of every episode (episodes the trainer's context cap ended have one too)."""
    from sopgym.evaluation import evaluate_records

    n = max(1, len(episodes))
    out: dict[str, float] = {}
    result = evaluate_records([ep.episode_info for ep in episodes], k=1, n_bootstrap=0) if episodes else {}
    for key, value in result.items():
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            out[f"val/{key}"] = float(value)
    out.setdefault("val/task_success_rate", 0.0)
    out["val/reward/mean"] = sum(ep.reward for ep in episodes) / n
    return out
