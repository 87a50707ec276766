"""Supervised warm start on demonstration trajectories (e.g. the env's oracle policy), same masking and packing.

Trajectories are collected at the message level first (the offline BPE tokenizer is trained on their
text), then turned into token-space episodes with the chat template: assistant turns get
``loss_mask`` 1 (their text tokenised once, plus the end-of-turn token), everything else 0.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import torch

from sopgym.episodes.runner import PolicyAgent, run_episodes

from .config import SFTConfig
from .distributed import DataParallel
from .episodes import Episode, EpisodeBuilder, check_system_turn, shown_chat
from .optimise import (
    ONE_PROCESS,
    AdamWSettings,
    StepSettings,
    WarmUpDecay,
    build_optimizer,
    optimiser_step,
    scatter_episodes,
)
from .rollout import EnvPool, EpisodeSpec, check_training_allowed, group_spec_list


def default_oracle():
    from sopgym.envs.policies import make_policy

    return make_policy("oracle")


def demonstrator(sft_cfg: SFTConfig, seed: int) -> Callable[[], Any]:
    """The demonstration policy's factory: the envs' oracle, or with ``sft.noise_task_share`` the noisy
    oracle seeded by the run's seed."""
    from sopgym.envs.policies import make_policy

    if not sft_cfg.noise_task_share:
        return default_oracle
    return lambda: make_policy("noisy-oracle", seed=seed, task_share=sft_cfg.noise_task_share,
                               confusion=sft_cfg.noise_confusion)


class _DemonstrationAgent(PolicyAgent):
    """The demonstrator, refusing tasks whose licence forbids training before it acts."""

    def __init__(self, make_oracle: Callable[[], Any], allow_restricted: bool):
        super().__init__(lambda spec: make_oracle())
        self.allow_restricted = allow_restricted

    def start(self, slot: int, spec: EpisodeSpec, observation: str, info: dict[str, Any]) -> None:
        check_training_allowed(spec.env_id, info, self.allow_restricted)
        super().start(slot, spec, observation, info)


def collect_trajectories(
    pool: EnvPool, specs: list[EpisodeSpec], make_oracle: Callable[[], Any], allow_restricted: bool = False
) -> list[dict[str, Any]]:
    """Run the demonstrator on each spec; returns ``{"messages", "tools", "reward", "success", "task_id"}`` per episode.

    Assistant messages hold the demonstrator's reply text (what the env parsed), not structured tool
    calls; ``success`` is the evaluator's verdict on the env's record.
    """
    results = run_episodes(specs, _DemonstrationAgent(make_oracle, allow_restricted), pool, concurrency=1)
    out = []
    for result in results:
        messages = [dict(m) for m in result.reset_info["messages"]]
        for turn in result.turns:
            messages.append({"role": "assistant", "content": turn.action})
            if not (turn.terminated or turn.truncated):
                messages.extend(turn.new_messages)
        out.append({"messages": messages, "tools": result.reset_info.get("tools"), "reward": result.total_reward,
                    "success": result.success, "task_id": str(result.reset_info.get("task_id"))})
    return out


def trajectory_texts(trajectories: list[dict[str, Any]]) -> list[str]:
    """Texts to train the offline BPE on: message contents and tool schemas."""
    import json

    texts: list[str] = []
    for traj in trajectories:
        texts.extend(str(m.get("content") or "") for m in traj["messages"])
        texts.append(json.dumps(traj["tools"]))
    return texts


def episode_from_messages(tokenizer, messages: list[dict[str, Any]], tools, task_id: str = "", group_id: int = 0) -> Episode:
    """A token-space episode from a finished chat (first two messages: system/user prompt)."""
    first_assistant = next(i for i, m in enumerate(messages) if m["role"] == "assistant")
    ep = Episode(task_id=task_id, group_id=group_id, seed=0, env_id="", messages=[dict(m) for m in messages[:first_assistant]], tools=tools)
    builder = EpisodeBuilder(tokenizer, ep)
    i = first_assistant
    while i < len(messages):
        builder.add_assistant_text(messages[i]["content"])
        j = i + 1
        while j < len(messages) and messages[j]["role"] != "assistant":
            j += 1
        if j > i + 1 or j < len(messages):
            builder.add_env_messages([dict(m) for m in messages[i + 1 : j]], expect_more_turns=j < len(messages))
        i = j
    builder.close()
    return ep


def demonstration_specs(env_ids: list[str], split: str, seed: int, num_episodes: int) -> list[EpisodeSpec]:
    """The tasks a run's demonstrations come from: seeds of their own (never a rollout's or an
    evaluation's), at least 32 of them (the offline BPE's texts)."""
    return group_spec_list(env_ids, split, 10_000_000 + seed * 100_000, max(num_episodes, 32), 1)


def without_system_messages(trajectory: dict[str, Any]) -> dict[str, Any]:
    """``trajectory`` without its system message and tool schemas (which the chat template renders
    into the system turn): the chat starts at the case."""
    messages, tools = shown_chat(trajectory["messages"], trajectory["tools"], "drop")
    return {**trajectory, "messages": messages, "tools": tools}


def as_shown(trajectories: list[dict[str, Any]], system_turn: str) -> list[dict[str, Any]]:
    """The demonstrations as the model is shown its episodes (``model.system_turn``): as they are
    (``keep``), or ``without_system_messages`` (``drop``)."""
    check_system_turn(system_turn)
    return trajectories if system_turn == "keep" else [without_system_messages(t) for t in trajectories]


def without_system_turn(tokenizer, trajectory: dict[str, Any]) -> Episode:
    """The short-context curriculum's episode of a demonstration (``without_system_messages``); loss
    mask as in ``episode_from_messages``."""
    short = without_system_messages(trajectory)
    return episode_from_messages(tokenizer, short["messages"], None, task_id=short.get("task_id", ""))


def short_context_episodes(tokenizer, trajectories: list[dict[str, Any]], episodes: list[Episode]) -> list[Episode]:
    """``without_system_turn`` of the demonstrations ``select_demonstrations`` kept (``episodes``,
    whose ``group_id`` indexes ``trajectories``)."""
    return [without_system_turn(tokenizer, trajectories[ep.group_id]) for ep in episodes]


#: Lengths of the random half of a copy sequence (it is followed by itself).
COPY_LENGTHS = (16, 40)


def copy_token_pool(tokenizer, vocab: int) -> torch.Tensor:
    """The ids copy sequences draw from: the tokenizer's first ``vocab`` that are not special tokens."""
    special = set(tokenizer.all_special_ids)
    return torch.tensor([i for i in range(len(tokenizer)) if i not in special][:vocab])


def copy_sequences(
    pool: torch.Tensor, count: int, generator: torch.Generator, lengths: tuple[int, int] = COPY_LENGTHS
) -> list[Episode]:
    """``count`` copy-pretraining sequences: ``n`` random tokens of ``pool`` (``copy_token_pool``; ``n``
    drawn from ``lengths``, inclusive), then the same ``n`` again; the loss is on the repeat's tokens
    after its first, the only ones a model can predict, and only by copying from ``n`` tokens back (an
    induction head).

    A model trained from scratch on the demonstrations alone learns to copy the case's fields, which
    sit at a fixed offset from the call that uses them, but not the identifiers of tool results, which
    move with the lengths of the turns between (docs/measurements.md, "Copy pretraining").
    """
    low, high = lengths
    out = []
    for _ in range(count):
        n = int(torch.randint(low, high + 1, (1,), generator=generator))
        half = pool[torch.randint(len(pool), (n,), generator=generator)].tolist()
        ids = half + half
        out.append(Episode(task_id="copy", group_id=-1, seed=0, env_id="", ids=ids,
                           loss_mask=[0] * (n + 1) + [1] * (n - 1), old_logp=[0.0] * len(ids)))
    return out


def select_demonstrations(
    tokenizer, trajectories: list[dict[str, Any]], num_episodes: int, max_context: int, only_successful: bool = True
) -> tuple[list[Episode], dict[str, float]]:
    """Token-space SFT episodes from the first ``num_episodes`` trajectories, with what was dropped and why.

    Demonstrations are collected without a context budget (the tokenizer that measures it may not exist
    yet), so here each one is measured in tokens: longer than ``max_context`` is dropped, as is (with
    ``only_successful``) one the evaluator does not score as a success. A demonstration cut short by a
    budget is a failure, and training on it teaches the model to stop early.

    Raises:
        ValueError: no demonstration is left to train on (the message says how many were dropped and why).
    """
    episodes: list[Episode] = []
    failed = too_long = used_failed = 0
    for i, traj in enumerate(trajectories[:num_episodes]):
        if only_successful and not traj["success"]:
            failed += 1
            continue
        ep = episode_from_messages(tokenizer, traj["messages"], traj["tools"], task_id=traj.get("task_id", ""), group_id=i)
        if len(ep.ids) > max_context:
            too_long += 1
            continue
        episodes.append(ep)
        used_failed += not traj["success"]
    considered = min(num_episodes, len(trajectories))
    stats = {
        "sft/demos_considered": float(considered),
        "sft/demos_used": float(len(episodes)),
        "sft/demos_failed": float(failed),
        "sft/demos_too_long": float(too_long),
        "sft/demos_used_unsuccessful": float(used_failed),
        "sft/demo_policy_tokens_mean": sum(ep.num_policy_tokens for ep in episodes) / max(1, len(episodes)),
    }
    if considered and not episodes:
        raise ValueError(
            f"no SFT demonstration left: expected at least 1 of {considered}, got 0 "
            f"({failed} not successful, {too_long} longer than env.max_context={max_context} tokens)"
        )
    return episodes, stats


@dataclass(frozen=True)
class CopyPretraining:
    """``train_sft``'s copy pretraining (``copy_sequences``): none by default."""

    tokenizer: Any = None
    steps: int = 0
    batch_sequences: int = 32
    mix_sequences: int = 0
    vocab: int = 512
    lengths: tuple[int, int] = COPY_LENGTHS

    @cached_property
    def pool(self) -> torch.Tensor:
        """``copy_token_pool`` of ``tokenizer``, built once rather than at every step."""
        return copy_token_pool(self.tokenizer, self.vocab)

    @classmethod
    def from_config(cls, sft_cfg, tokenizer) -> CopyPretraining:
        """From an ``SFTConfig``'s ``copy_*`` keys."""
        return cls(tokenizer, sft_cfg.copy_steps, sft_cfg.copy_batch_sequences, sft_cfg.copy_mix_sequences, sft_cfg.copy_vocab)


def train_sft(
    model,
    episodes: list[Episode] | None,
    sft: SFTConfig,
    *,
    settings: StepSettings,
    backend: str,
    generator: torch.Generator,
    tokenizer: Any = None,
    on_step: Callable[[int, dict[str, float]], None] | None = None,
    dp: DataParallel = ONE_PROCESS,
    short_episodes: list[Episode] | None = None,
    copy: CopyPretraining | None = None,
) -> list[dict[str, float]]:
    """Token-mean NLL on the assistant tokens; episodes shuffled each epoch with ``generator``; the
    stages and the optimiser as ``sft`` (the config's ``SFTConfig``) says.

    With ``sft.short_context_steps`` > 0 a first stage of that many optimiser steps of
    ``sft.short_context_batch_episodes`` runs on ``short_episodes`` (the demonstrations without their
    system turn: ``without_system_turn``), drawn in passes of fresh permutations; then ``sft.epochs``
    over ``episodes`` (``sft.batch_episodes`` per step). One optimiser (``optimise.build_optimizer``) and
    one learning-rate schedule (``WarmUpDecay``: linear decay to 20% of ``sft.lr``, after
    ``sft.warmup_steps`` of linear warm-up) span every stage. With ``sft.whole_steps`` > 0 the last stage
    is that many steps of whole demonstrations, drawn in passes of fresh permutations, instead of epochs.

    Copy pretraining (``CopyPretraining.from_config(sft, tokenizer)``; ``copy`` overrides it):
    ``copy.steps`` steps of ``copy.batch_sequences`` copy sequences (``copy_sequences``) come first, and
    ``copy.mix_sequences`` more join every later step.

    Data-parallel (``dp``), ``episodes`` is read on rank 0, which shuffles and splits each batch over
    the ranks by tokens (every rank draws the same permutation, so the generators stay equal).
    """
    if copy is None:  # its token pool is built on first use: never when copy_steps and copy_mix_sequences are 0
        copy = CopyPretraining.from_config(sft, tokenizer)
    epochs, batch_episodes, whole_steps = sft.epochs, sft.batch_episodes, sft.whole_steps
    short_steps, short_batch_episodes = sft.short_context_steps, sft.short_context_batch_episodes
    assert episodes is not None or not dp.is_main, "train_sft: expected the demonstrations on rank 0, got None"
    demos = episodes or []  # read on rank 0 only
    num_episodes = dp.broadcast(len(demos) if dp.is_main else None)
    num_short = dp.broadcast(len(short_episodes or []) if dp.is_main else None) if short_steps else 0
    if short_steps and not num_short:
        raise ValueError(f"sft short-context stage: expected episodes for its {short_steps} steps, got none")
    whole = whole_steps or epochs * ((num_episodes + batch_episodes - 1) // batch_episodes)
    total = copy.steps + short_steps + whole
    optimizer, scheduler = build_optimizer(model, AdamWSettings.from_config(sft), WarmUpDecay(sft.warmup_steps, total))
    model.train()
    history = []

    def batches():
        """``(stage, indices)`` of every optimiser step: the copy stage's, the short stage's, then the
        whole demonstrations'."""
        for _ in range(copy.steps):
            yield "copy", []
        order: list[int] = []

        def draw(count: int, size: int) -> list[int]:
            nonlocal order
            picked: list[int] = []
            while len(picked) < count:
                if not order:
                    order = torch.randperm(size, generator=generator).tolist()
                picked.append(order.pop())
            return picked

        for _ in range(short_steps):
            yield "short", draw(short_batch_episodes, num_short)
        if whole_steps:
            order = []
            for _ in range(whole_steps):
                yield "whole", draw(batch_episodes, num_episodes)
            return
        for _ in range(epochs):
            order = torch.randperm(num_episodes, generator=generator).tolist()
            for start in range(0, len(order), batch_episodes):
                yield "whole", order[start : start + batch_episodes]

    for step, (stage, picked) in enumerate(batches()):
        source = (short_episodes or []) if stage == "short" else demos
        extra = copy.batch_sequences if stage == "copy" else copy.mix_sequences
        # Drawn on every rank, so that the ranks' generators stay equal.
        copies = copy_sequences(copy.pool, extra, generator, copy.lengths) if extra else []
        batch = [source[i] for i in picked] + copies if dp.is_main else None
        (mine,) = scatter_episodes([batch] if batch is not None else None, settings, dp)
        stats = optimiser_step(model, None, optimizer, scheduler, mine, settings, backend, loss_name="sft", dp=dp)
        stats["short_context"] = float(stage == "short")
        stats["copy_stage"] = float(stage == "copy")
        history.append(stats)
        if on_step:
            on_step(step, stats)
    return history
