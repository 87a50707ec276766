"""The RL loop, read top to bottom: rollouts -> advantages -> optimisation -> logging -> eval -> checkpoint.

Honest simplifications:
* Generation and training share one model in one process (no separate inference server); rollouts
  of a step use the weights of the start of the step, so ``ppo_epochs=1, num_minibatches=1`` is
  on-policy up to numerical differences between the KV-cached sampler and the packed forward.
* Behaviour log-probs are taken before the top-p cut (see policy/hf.py).
* Evaluation is greedy on the first ``eval_num_tasks`` seeds of the validation split.
* The trainer-side context cap ends an episode without the env scoring it (reward 0); the env's own
  ``max_context`` (given the same token counter) normally ends it first.
"""

from __future__ import annotations

import copy
import dataclasses
import logging
import random
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from . import attention, checkpoint
from .alarms import Alarms
from .config import RUN_LENGTH_KEYS, ConfigError, TrainConfig, config_to_dict, flatten, runtime_problems
from .episodes import template_overhead
from .modeling import DTYPES, load_model, load_tokenizer, resolve_device
from .optimise import rl_update, sft_settings, step_settings
from .policy.hf import HFPolicy
from .rollout import EnvPool, EpisodeSpec, collect, group_spec_list, gym_env_factory, make_env_pool
from .rollout_metrics import assign_advantages, eval_metrics, rollout_metrics
from .sft import collect_trajectories, default_oracle, select_demonstrations, train_sft, trajectory_texts
from .tracking import Tracker

log = logging.getLogger("sopgym.trainers")


class Killed(BaseException):
    """Raised from the SIGTERM handler so the run ends as KILLED after cleanup."""


@dataclass
class TrainResult:
    run_dir: Path
    run_id: str | None
    history: list[dict[str, float]] = field(default_factory=list)
    val_before: dict[str, float] = field(default_factory=dict)
    val_after: dict[str, float] = field(default_factory=dict)
    demonstrations: dict[str, float] = field(default_factory=dict)
    """What the SFT warm start kept of its demonstrations (``sft/demos_*``); empty without SFT."""
    model: Any = None
    tokenizer: Any = None


def _seed_everything(seed: int) -> torch.Generator:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    return torch.Generator().manual_seed(seed)


def _evaluate(policy, pool, tokenizer, cfg: TrainConfig) -> dict[str, float]:
    specs = group_spec_list(cfg.env.env_ids, cfg.env.val_split, 0, cfg.eval_num_tasks, 1)
    episodes = collect(
        pool, specs, policy, tokenizer,
        max_new_tokens=cfg.rollout.max_new_tokens, max_context=cfg.env.max_context,
        temperature=cfg.rollout.eval_temperature, top_p=1.0, generator=torch.Generator().manual_seed(0),
    )
    return eval_metrics(episodes)


def _plot(history: list[dict[str, float]], val: list[tuple[int, float, float]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = [h["step"] for h in history]
    fig, ax = plt.subplots(figsize=(7, 4))
    rewards = [h["rollout/reward/mean"] for h in history]
    ax.plot(steps, rewards, label="train reward (mean)")
    ax.plot(steps, [h["rollout/success_rate"] for h in history], label="train success rate")
    if val:
        ax.plot([v[0] for v in val], [v[2] for v in val], "s-", label="val reward (mean)")
        ax.plot([v[0] for v in val], [v[1] for v in val], "o-", label="val task success")
    ax.set_xlabel("RL step")
    low = min([0.0] + rewards + [v[2] for v in val])  # dense rewards go negative with shaping penalties
    ax.set_ylim(low - 0.05, 1.05)
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def train(
    cfg: TrainConfig,
    *,
    make_env: Callable[[str], Any] | None = None,
    make_oracle: Callable[[], Any] | None = None,
    make_sampler: Callable[[Any, Any], Any] | None = None,
    resume: bool = True,
    allow_config_change: bool = False,
    stop_after: int | None = None,
) -> TrainResult:
    """Run SFT warm start (if configured) and ``cfg.steps`` RL steps; resumes from ``run_dir`` if a checkpoint exists.

    Args:
        make_env: ``env_id -> env`` (default: ``gymnasium.make`` with the config's env kwargs).
        make_oracle: demonstration policy factory for SFT / tokenizer texts (default: the envs' oracle).
        make_sampler: ``(model, tokenizer) -> sampler`` that generates the rollouts and evaluations
            (``generate(prompts, max_new_tokens, temperature, top_p, generator) -> [Sample]``, see
            ``policy/hf.py``); default: ``HFPolicy`` on the trained model itself.
        resume: continue from ``<run_dir>/checkpoint.pt`` when present.
        allow_config_change: resume even when the config differs from the checkpoint's in more than
            the run-length keys (recorded as the MLflow tag ``override/config_change``).
        stop_after: stop (with a checkpoint) after this many RL steps of this call (tests of resume).

    Raises:
        ConfigError: the machine cannot run ``cfg`` (device, env ids, paths), or a resume with a changed
            config without ``allow_config_change``.
    """
    problems = runtime_problems(cfg, check_env_ids=make_env is None)
    if problems:
        raise ConfigError(problems)
    run_dir = Path(cfg.run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    device = resolve_device(cfg.device)
    backend = attention.select_backend(cfg.model.attention, device, DTYPES[cfg.model.dtype])
    generator = _seed_everything(cfg.seed)
    ckpt = checkpoint.load(run_dir) if resume else None
    changed = checkpoint.config_changes(ckpt["config"], config_to_dict(cfg)) if ckpt else []
    if changed and not allow_config_change:
        raise ConfigError([
            f"resume: the config differs from the checkpoint's in {', '.join(changed)} (only {', '.join(RUN_LENGTH_KEYS)} "
            f"may change); pass --allow-config-change to resume anyway, or use another run_dir"
        ])
    make_oracle = make_oracle or default_oracle

    # ---- environments and the token counter they budget with ----
    tokenizer_box: list[Any] = []

    def length_fn(text: str) -> int:  # used once the tokenizer exists (demonstrations have their own pool)
        return len(tokenizer_box[0](text, add_special_tokens=False)["input_ids"])

    env_kwargs = {
        "max_turns": cfg.env.max_turns, "max_context": cfg.env.max_context,
        "max_tool_output_chars": cfg.env.max_tool_output_chars, **cfg.env.env_kwargs,
    }
    # In-process, or Ray env workers (cfg.env.workers); a Ray pool starts on its first reset, after the
    # tokenizer exists, and ships this factory (with the token counter) to its workers.
    pool = make_env_pool(make_env or gym_env_factory(env_kwargs, length_fn), **dataclasses.asdict(cfg.env.workers))

    # ---- demonstrations (SFT data and tokenizer texts) ----
    # Collected with no context budget: the token counter does not exist before the BPE is trained on
    # these texts, and a character count would cut demonstrations short. select_demonstrations measures
    # them in tokens afterwards.
    trajectories: list[dict[str, Any]] = []
    need_texts = cfg.model.tokenizer == "bpe" and not (run_dir / "tokenizer" / "tokenizer.json").exists()
    if ckpt is None and (cfg.sft.num_episodes > 0 or need_texts):
        n = max(cfg.sft.num_episodes, 32)
        specs = group_spec_list(cfg.env.env_ids, cfg.env.train_split, 10_000_000 + cfg.seed * 100_000, n, 1)
        demo_pool = EnvPool(make_env or gym_env_factory({**env_kwargs, "max_context": None}, None))
        try:
            trajectories = collect_trajectories(demo_pool, specs, make_oracle, cfg.env.allow_restricted_training)
        finally:
            demo_pool.close()

    # ---- tokenizer, model, optimiser ----
    tokenizer = load_tokenizer(cfg.model, run_dir, trajectory_texts(trajectories) if trajectories else None)
    tokenizer_box.append(tokenizer)
    try:
        check_row_fits(cfg, tokenizer, pool)
    except ConfigError:
        pool.close()
        raise
    model = load_model(cfg.model, tokenizer, backend, device, seed=cfg.seed)
    policy = make_sampler(model, tokenizer) if make_sampler is not None else HFPolicy(model, tokenizer)
    settings = step_settings(cfg)
    tracker = Tracker(
        run_dir, cfg.tracking.experiment, cfg.tracking.run_name, cfg.tracking.tracking_uri,
        run_id=ckpt["mlflow_run_id"] if ckpt else None, enabled=cfg.tracking.enabled,
    )
    result = TrainResult(run_dir, tracker.run_id, model=model, tokenizer=tokenizer)
    alarms = Alarms(cfg.alarms, tracker)
    stop = _StopRequest()
    previous_handler = signal.getsignal(signal.SIGTERM)
    try:
        signal.signal(signal.SIGTERM, stop.on_sigterm)
    except ValueError:  # not the main thread
        previous_handler = None
    status = "FAILED"
    try:
        tracker.log_params(flatten(config_to_dict(cfg)))
        if changed:
            tracker.set_tag("override/config_change", ", ".join(changed))
            log.warning("resuming with a changed config (%s): allowed by allow_config_change", ", ".join(changed))
        if cfg.env.allow_restricted_training:
            tracker.set_tag("override/allow_restricted_training", "true")
            log.warning("training on tasks whose licence may not allow it (env.allow_restricted_training)")
        val_curve: list[tuple[int, float, float]] = []  # (step, task success, reward) on the held-out split

        # ---- supervised warm start ----
        if ckpt is None and cfg.sft.num_episodes > 0:
            sft_episodes, demo_stats = select_demonstrations(
                tokenizer, trajectories, cfg.sft.num_episodes, cfg.env.max_context, cfg.sft.only_successful
            )
            result.demonstrations = demo_stats
            tracker.log_eval(demo_stats, 0)
            log.info("SFT demonstrations: %s", demo_stats)
            def on_sft_step(i: int, st: dict[str, float]) -> None:
                tracker.log_eval({"sft/loss": st["loss"], "sft/tokens_per_s": st["tokens_per_s"]}, i)
                log.info("sft step %d: loss %.3f, %.0f tokens/s", i, st["loss"], st["tokens_per_s"])
                if stop.requested:  # SFT has no checkpoint of its own: a resumed run starts it again
                    raise Killed()

            train_sft(
                model, sft_episodes, epochs=cfg.sft.epochs, lr=cfg.sft.lr, batch_episodes=cfg.sft.batch_episodes,
                settings=sft_settings(cfg), backend=backend, generator=generator, on_step=on_sft_step,
            )

        ref_model = None
        if cfg.algo.kl_coef > 0:
            ref_model = copy.deepcopy(model).eval()
            for p in ref_model.parameters():
                p.requires_grad_(False)
        optimizer = torch.optim.AdamW(
            model.parameters(), lr=cfg.optim.lr, betas=(cfg.optim.beta1, cfg.optim.beta2), weight_decay=cfg.optim.weight_decay
        )
        warmup = cfg.optim.warmup_steps
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / warmup) if warmup else 1.0)

        start_step, cursor, history = 0, 0, []
        if ckpt is not None:
            model.load_state_dict(ckpt["model"])
            if ref_model is not None:
                ref_model.load_state_dict(ckpt["ref_model"])
            optimizer.load_state_dict(ckpt["optimizer"])
            scheduler.load_state_dict(ckpt["scheduler"])
            checkpoint.restore_rng(ckpt["rng"], generator)
            start_step, cursor, history = ckpt["step"], ckpt["cursor"], ckpt["history"]
            result.val_before = ckpt.get("val_before", {})
            val_curve = ckpt.get("val_curve", [])
        else:
            result.val_before = _evaluate(policy, pool, tokenizer, cfg) if cfg.eval_num_tasks else {}
            if result.val_before:
                tracker.log_eval(result.val_before, 0)
                val_curve.append((0, result.val_before["val/task_success_rate"], result.val_before["val/reward/mean"]))
                print(f"held-out success before RL: {result.val_before['val/task_success_rate']:.3f}")
        result.history = history

        def save_checkpoint(next_step: int) -> None:
            path = checkpoint.save(
                run_dir, model=model, optimizer=optimizer, scheduler=scheduler, generator=generator,
                step=next_step, cursor=cursor, run_id=tracker.run_id, history=history, config=config_to_dict(cfg),
                extra={
                    "val_before": result.val_before,
                    "val_curve": val_curve,
                    "ref_model": ref_model.state_dict() if ref_model is not None else None,
                },
            )
            log.info("checkpoint %s at step %d", path, next_step)

        bar = None
        if cfg.progress:
            try:
                from tqdm import tqdm

                bar = tqdm(total=cfg.steps, initial=start_step, desc="rl", dynamic_ncols=True)
            except ImportError:
                bar = None
        steps_this_call = 0
        for step in range(start_step, cfg.steps):
            # ---- 1. rollouts: batch_size tasks x group_size episodes, one batched generate per turn ----
            t0 = time.perf_counter()
            specs = group_spec_list(
                cfg.env.env_ids, cfg.env.train_split, cfg.seed * 1_000_003 + cursor, cfg.rollout.batch_size, cfg.rollout.group_size
            )
            cursor += cfg.rollout.batch_size
            episodes = collect(
                pool, specs, policy, tokenizer,
                max_new_tokens=cfg.rollout.max_new_tokens, max_context=cfg.env.max_context,
                temperature=cfg.rollout.temperature, top_p=cfg.rollout.top_p, generator=generator,
                require_training_allowed=True, allow_restricted=cfg.env.allow_restricted_training,
            )
            rollout_s = time.perf_counter() - t0

            # ---- 2. advantages per group (infra failures excluded; optional zero-variance filter) ----
            trainable, zv_stats = assign_advantages(
                episodes, cfg.algo.advantage, cfg.algo.passk_k, cfg.algo.component_norm, cfg.algo.filter_zero_variance
            )
            too_long = [ep for ep in trainable if len(ep.ids) > cfg.optim.row_tokens]
            if too_long:  # check_row_fits makes this rare; never a crash mid-run
                log.warning("%d episodes longer than optim.row_tokens=%d left out of step %d (longest %d tokens)",
                            len(too_long), cfg.optim.row_tokens, step, max(len(ep.ids) for ep in too_long))
                trainable = [ep for ep in trainable if len(ep.ids) <= cfg.optim.row_tokens]

            # ---- 3. optimisation: behaviour log-probs, then ppo_epochs x num_minibatches optimiser steps ----
            opt_stats: list[dict[str, float]] = []
            mismatch: dict[str, float] = {}
            if trainable and any(ep.num_policy_tokens for ep in trainable):
                opt_stats, mismatch = rl_update(
                    model, ref_model, optimizer, scheduler, trainable, settings, backend,
                    ppo_epochs=cfg.algo.ppo_epochs, num_minibatches=cfg.algo.num_minibatches,
                )
            train_s = time.perf_counter() - t0 - rollout_s

            # ---- 4. logging and alarms ----
            metrics = {"step": step, **rollout_metrics(episodes), **zv_stats, **mismatch}
            metrics["train/dropped_too_long"] = float(len(too_long))
            metrics.update(alarms.after_rollouts(step, episodes, zv_stats))
            if opt_stats:
                last = opt_stats[-1]
                for key in ("loss", "kl", "entropy", "clip_fraction", "grad_norm", "lr", "ratio_mean", "is_weight_mean", "is_changed_fraction"):
                    if key in last:
                        metrics[f"train/{key}"] = sum(s[key] for s in opt_stats) / len(opt_stats) if key != "lr" else last[key]
                metrics["perf/packing_efficiency"] = last["packing_efficiency"]
                metrics["perf/train_tokens_per_s"] = sum(s["num_tokens"] for s in opt_stats) / max(train_s, 1e-9)
            metrics["perf/rollout_tokens_per_s"] = sum(ep.num_policy_tokens for ep in episodes) / max(rollout_s, 1e-9)
            metrics["perf/episodes_per_s"] = len(episodes) / max(rollout_s + train_s, 1e-9)
            metrics["train/trained_episodes"] = float(len(trainable))
            history.append(metrics)

            # ---- 5. held-out evaluation every eval_every steps ----
            if cfg.eval_every and (step + 1) % cfg.eval_every == 0 and step + 1 < cfg.steps and cfg.eval_num_tasks:
                val = _evaluate(policy, pool, tokenizer, cfg)
                val_curve.append((step + 1, val["val/task_success_rate"], val["val/reward/mean"]))
                val.update(alarms.after_evaluation(step + 1, history, val_curve))
                tracker.log_eval(val, step + 1)
            tracker.log_metrics(metrics, step)
            if bar is not None:
                bar.update(1)
                bar.set_postfix(
                    reward=f"{metrics['rollout/reward/mean']:.2f}", success=f"{metrics['rollout/success_rate']:.2f}",
                    tok_s=f"{metrics.get('perf/train_tokens_per_s', 0):.0f}",
                )

            # ---- 6. checkpoint ----
            steps_this_call += 1
            if (cfg.checkpoint_every and (step + 1) % cfg.checkpoint_every == 0) or (stop_after and steps_this_call >= stop_after) or stop.requested:
                save_checkpoint(step + 1)
            if stop.requested:
                raise Killed()
            if stop_after and steps_this_call >= stop_after and step + 1 < cfg.steps:
                status = "RUNNING"
                return result
        if bar is not None:
            bar.close()

        # ---- end: held-out evaluation, plot, final checkpoint ----
        if cfg.eval_num_tasks:
            result.val_after = _evaluate(policy, pool, tokenizer, cfg)
            val_curve.append((cfg.steps, result.val_after["val/task_success_rate"], result.val_after["val/reward/mean"]))
            result.val_after.update(alarms.after_evaluation(cfg.steps, history, val_curve))
            tracker.log_eval(result.val_after, cfg.steps)
            print(
                f"held-out success before RL: {result.val_before.get('val/task_success_rate', float('nan')):.3f}  "
                f"after RL: {result.val_after['val/task_success_rate']:.3f}"
            )
        if cfg.plot and history:
            _plot(history, val_curve, run_dir / "curves.png")
            tracker.log_artifact(run_dir / "curves.png")
        save_checkpoint(cfg.steps)
        status = "FINISHED"
        return result
    except (Killed, KeyboardInterrupt):
        status = "KILLED"
        raise
    finally:
        if previous_handler is not None:
            signal.signal(signal.SIGTERM, previous_handler)
        pool.close()
        if status != "RUNNING":
            tracker.end(status)


def check_row_fits(cfg: TrainConfig, tokenizer, pool: EnvPool) -> None:
    """``optim.row_tokens`` must hold the longest episode: ``env.max_context`` + one turn + the chat
    template's overhead (tool schemas and scaffolding, measured on each env's first prompt).

    Raises:
        ConfigError: a row too short, naming the numbers and the row length needed.
    """
    problems = []
    for env_id in dict.fromkeys(cfg.env.env_ids):
        ((_, info),) = pool.reset([(0, EpisodeSpec(env_id, cfg.seed, {"split": cfg.env.train_split}))])
        overhead = template_overhead(tokenizer, info["messages"], info.get("tools"), cfg.env.max_turns)
        need = cfg.env.max_context + cfg.rollout.max_new_tokens + overhead
        if cfg.optim.row_tokens < need:
            problems.append(
                f"optim.row_tokens: expected >= {need} for {env_id} (env.max_context {cfg.env.max_context} + "
                f"rollout.max_new_tokens {cfg.rollout.max_new_tokens} + {overhead} tokens of chat template and tool "
                f"schemas over {cfg.env.max_turns} turns), got {cfg.optim.row_tokens}"
            )
    if problems:
        raise ConfigError(problems)


class _StopRequest:
    """SIGTERM asks the run to stop: the current RL step finishes, a checkpoint is saved, and the run
    ends as KILLED. A second SIGTERM stops at once (no checkpoint)."""

    def __init__(self) -> None:
        self.requested = False

    def on_sigterm(self, signum, frame) -> None:
        if self.requested:
            raise Killed()
        self.requested = True
        log.warning("SIGTERM: finishing this step, saving a checkpoint, then stopping (send it again to stop now)")
