"""The RL loop, read top to bottom: ``train`` = ``setup``, then ``rl_step`` until ``cfg.steps``, then ``finish``.

``setup`` builds the run (checks, demonstrations, tokenizer, the envs budgeted in its tokens, model,
rollout engine, tracking, SFT, optimiser, resume); ``rl_step`` is one step (rollouts -> advantages ->
optimisation -> new weights to the engine -> logging and alarms -> evaluation -> checkpoint);
``finish`` evaluates, plots and checkpoints. A ``Run`` holds the state between them.

The loop samples through the rollout-engine interface only (policy/engine.py). Under torchrun it is
data-parallel (distributed.py): every rank runs the same loop; rank 0 alone runs the envs, the
engine, evaluation and MLflow, and the optimiser steps are split over the ranks by tokens.

Honest simplifications:
* By default generation runs in the training process, on the trained model itself (one process) or
  on rank 0's full copy of the weights (torchrun); ``rollout.engine.backend: ray`` samples in a Ray
  actor instead. Rollouts of a step use the weights of the start of the step, so ``ppo_epochs=1,
  num_minibatches=1`` is on-policy up to numerical differences between the KV-cached sampler and the
  packed forward. ``rollout.mode: async`` samples them ahead, with weights ``rollout.max_staleness``
  steps old, while the learner trains (rollout_stream.py).
* Under torchrun the other ranks wait while rank 0 generates and evaluates.
* Behaviour log-probs are taken before the top-p cut (see policy/hf.py).
* Evaluation is greedy on the first ``eval_num_tasks`` seeds of the validation split.
* The trainer-side context cap ends an episode without the env scoring it (reward 0); the env's own
  ``max_context`` (given the same token counter) normally ends it first.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import logging
import os
import random
import signal
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from sopgym.episodes.factory import EnvFactory
from sopgym.policy.engine import RolloutEngine
from sopgym.policy.hf import HFPolicy

from . import attention, checkpoint
from .alarms import Alarms
from .config import RUN_LENGTH_KEYS, ConfigError, TrainConfig, config_to_dict, flatten, runtime_problems
from .distributed import DataParallel, device_for_rank, world_size_from_environment
from .episodes import Episode, template_overhead
from .heldout import greedy_metrics, paired_difference, sampled_metrics
from .modeling import Precision, load_model, load_tokenizer, resolve_device
from .optimise import (
    AdamWSettings,
    StepSettings,
    WarmUp,
    apply_settings,
    build_optimizer,
    rl_update,
    sft_settings,
    step_settings,
)
from .rollout import EnvPool, EpisodeSpec, RolloutSettings, collect, group_spec_list, make_env_pool, rollout_settings
from .rollout_metrics import assign_advantages, eval_metrics, rollout_metrics
from .rollout_stream import RolloutState, RolloutStream, within_staleness
from .sampling import Curriculum, TaskSuccess, group_metrics, informative_groups, missing_groups
from .sft import (
    as_shown,
    collect_trajectories,
    demonstration_specs,
    demonstrator,
    select_demonstrations,
    short_context_episodes,
    train_sft,
    trajectory_texts,
)
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
    paired: dict[str, float] = field(default_factory=dict)
    """Held-out task success after RL minus before, over the same tasks, with its paired 95% interval
    (``heldout.paired_difference``); empty when either evaluation is missing."""
    demonstrations: dict[str, float] = field(default_factory=dict)
    """What the SFT warm start kept of its demonstrations (``sft/demos_*``); empty without SFT."""
    model: Any = None
    tokenizer: Any = None


def _seed_everything(seed: int) -> torch.Generator:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    return torch.Generator().manual_seed(seed)


@contextlib.contextmanager
def _progress_bar(cfg: TrainConfig | None, start: int) -> Iterator[Callable[[dict[str, float]], None]]:
    """A tqdm bar over the RL steps (``cfg.progress``; none for ``cfg`` None) with reward, success and
    tokens/s; yields its update."""
    bar = None
    if cfg is not None and cfg.progress:
        try:
            from tqdm import tqdm

            bar = tqdm(total=cfg.steps, initial=start, desc="rl", dynamic_ncols=True)
        except ImportError:
            pass

    def update(metrics: dict[str, float]) -> None:
        if bar is not None:
            bar.update(1)
            bar.set_postfix(
                reward=f"{metrics['rollout/reward/mean']:.2f}", success=f"{metrics['rollout/success_rate']:.2f}",
                tok_s=f"{metrics.get('perf/train_tokens_per_s', 0):.0f}",
            )

    try:
        yield update
    finally:
        if bar is not None:
            bar.close()


#: The held-out figures of one evaluation the plot draws (``val_points``), from its logged metrics.
PLOT_KEYS = ("val/task_success_rate", "val/task_success_rate/ci_low", "val/task_success_rate/ci_high",
             "val/sampled/samples_per_task")


def plot_point(step: int, val: dict[str, float]) -> dict[str, float]:
    """What the plot keeps of an evaluation: greedy success and its interval, and with sampled episodes
    pass@1 and pass@k (k = samples per task) with theirs."""
    point = {"step": float(step), **{k: float(val[k]) for k in PLOT_KEYS if k in val}}
    k = int(val.get("val/sampled/samples_per_task", 0))
    for name in ("pass_at_1", f"pass_at_{k}") if k else ():
        for suffix in ("", "/ci_low", "/ci_high"):
            key = f"val/sampled/{name}{suffix}"
            if key in val:
                point[key] = float(val[key])
    return point


def _errorbar(ax, points: list[dict[str, float]], key: str, dx: float, fmt: str, label: str) -> None:
    shown = [p for p in points if key in p]
    if not shown:
        return
    ys = [p[key] for p in shown]
    low = [max(0.0, y - p.get(f"{key}/ci_low", y)) for y, p in zip(ys, shown)]
    high = [max(0.0, p.get(f"{key}/ci_high", y) - y) for y, p in zip(ys, shown)]
    ax.errorbar([p["step"] + dx for p in shown], ys, yerr=[low, high], fmt=fmt, capsize=3, label=label)


def plot_figure(history: list[dict[str, float]], val: list[tuple[int, float, float]],
                points: list[dict[str, float]]):
    """The run's curves: training reward and success per RL step, held-out reward, and held-out greedy
    task success with its 95% interval at every evaluation; where the evaluation sampled (before and
    after RL with ``eval_samples``), pass@1 and pass@k with theirs. Returns the matplotlib figure."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = [h["step"] for h in history]
    fig, ax = plt.subplots(figsize=(9, 4))
    rewards = [h["rollout/reward/mean"] for h in history]
    ax.plot(steps, rewards, label="train reward (mean)")
    ax.plot(steps, [h["rollout/success_rate"] for h in history], label="train success rate")
    if val:
        ax.plot([v[0] for v in val], [v[2] for v in val], "s-", label="val reward (mean)")
    if points:
        ax.plot([p["step"] for p in points], [p["val/task_success_rate"] for p in points], "-", color="C3")
        _errorbar(ax, points, "val/task_success_rate", 0.0, "o", "val task success (greedy, 95% CI)")
        k = max(int(p.get("val/sampled/samples_per_task", 0)) for p in points)
        if k:
            _errorbar(ax, points, "val/sampled/pass_at_1", 0.3, "^", "val pass@1 (sampled, 95% CI)")
            if k > 1:
                _errorbar(ax, points, f"val/sampled/pass_at_{k}", 0.6, "v", f"val pass@{k} (sampled, 95% CI)")
    elif val:
        ax.plot([v[0] for v in val], [v[1] for v in val], "o-", label="val task success")
    ax.set_xlabel("RL step")
    low = min([0.0] + rewards + [v[2] for v in val])  # dense rewards go negative with shaping penalties
    ax.set_ylim(low - 0.05, 1.05)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small")  # outside: it covered the curves
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


def _plot(history: list[dict[str, float]], val: list[tuple[int, float, float]], points: list[dict[str, float]],
          path: Path) -> None:
    import matplotlib.pyplot as plt

    fig = plot_figure(history, val, points)
    fig.savefig(path, dpi=100)
    plt.close(fig)


class TokenCounter:
    """``text -> number of tokens``: the budget the envs count their context in (``length_fn``)."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer

    def __call__(self, text: str) -> int:
        return len(self.tokenizer(text, add_special_tokens=False)["input_ids"])


@dataclass
class Run:
    """What a training run holds between its phases: built by ``setup``, advanced by ``rl_step``,
    completed by ``finish``, released by ``close``.

    The fields without a default (``init=False``: ``device``, ``generator``, ``settings``, ``alarms``,
    ``task_success``, ``result``) are set by ``setup``'s builders before any phase reads them; ``pool``
    and ``policy`` stay None on the ranks other than 0."""

    cfg: TrainConfig
    run_dir: Path
    stop: _StopRequest
    dp: DataParallel = field(default_factory=DataParallel)
    """This process's place in a data-parallel learner (one process by default)."""
    started: float = field(default_factory=time.time)
    device: torch.device = field(init=False)
    backend: str = ""
    generator: torch.Generator = field(init=False)
    tokenizer: Any = None
    pool: EnvPool | None = None
    """The envs (rank 0 only)."""
    lm: Any = None
    """The causal LM being trained (its parameters are FSDP shards under torchrun)."""
    model: Any = None
    """The trained module: ``LogProbModel`` around ``lm``, FSDP-sharded under torchrun."""
    ref_model: Any = None
    policy: RolloutEngine | None = None
    """The rollout engine that generates rollouts and evaluations (rank 0 only; ``HFPolicy`` by default)."""
    stream: RolloutStream | None = None
    """The RL steps' batches (rank 0, from the end of setup): drawn in step, or ahead by a producer
    thread (``rollout.mode: async``), which then owns the engine, the envs and the rollout state
    (``generator``, ``cursor``, ``task_success``, ``curriculum``) until ``close``."""
    optimizer: Any = None
    scheduler: Any = None
    settings: StepSettings = field(init=False)
    rollouts: RolloutSettings = field(init=False)
    """How rollouts sample (``rollout.rollout_settings``; held-out evaluations: ``rollouts.held_out``)."""
    tracker: Tracker = field(default_factory=lambda: Tracker(".", enabled=False))
    """MLflow (rank 0's; a disabled one, whose calls do nothing, on the other ranks and until ``start_tracking``)."""
    alarms: Alarms = field(init=False)
    step: int = 0
    """The next RL step to run."""
    cursor: int = 0
    """Training tasks consumed so far (the seed of the next group is derived from it)."""
    task_success: TaskSuccess = field(init=False)
    """The running success estimate of every training task seen (rank 0 logs it; ``tasks/*``)."""
    curriculum: Curriculum | None = None
    """Which tasks the draws repeat (``algo.curriculum``; None when off); rank 0's is the one used."""
    val_curve: list[tuple[int, float, float]] = field(default_factory=list)
    """``(step, held-out task success, held-out reward)`` of every evaluation."""
    val_points: list[dict[str, float]] = field(default_factory=list)
    """What the plot draws of every evaluation, intervals included (``plot_point``)."""
    val_before_records: list[dict[str, Any]] = field(default_factory=list)
    """The evaluator's records of the greedy evaluation before RL: the after-RL one is paired with them."""
    val_records: list[dict[str, Any]] = field(default_factory=list)
    """The evaluator's records of the last greedy evaluation."""
    result: TrainResult = field(init=False)

    def __post_init__(self) -> None:
        self.rollouts = rollout_settings(self.cfg)

    @property
    def history(self) -> list[dict[str, float]]:
        return self.result.history

    def close(self, status: str) -> None:
        if self.stream is not None:  # first: its producer uses the pool and the engine
            self.stream.close()
        if self.pool is not None:
            self.pool.close()
        if self.policy is not None:
            self.policy.close()
        if status == "FAILED" and self.tracker.enabled:  # rank 0's tracker (the others' are off)
            _log_failures(self)
        self.tracker.end(status)
        if status != "FAILED":  # after a failure a collective could wait for a dead rank: just exit
            self.dp.close()

    def record_failure(self, exc: BaseException) -> None:
        """Write this rank's traceback to ``<run_dir>/failures/rank<k>.txt`` (rank 0 reports the first one)."""
        folder = self.run_dir / "failures"
        try:
            folder.mkdir(parents=True, exist_ok=True)
            text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
            (folder / f"rank{self.dp.rank}.txt").write_text(f"{time.time():.6f}\n{text}")
        except OSError as err:  # never hide the run's own failure behind this one
            log.warning("could not write the traceback of rank %d to %s: %s", self.dp.rank, folder, err)


def _log_failures(run: Run) -> None:
    """On rank 0 of a failed run: the tracebacks the ranks wrote during this run, the earliest first,
    as MLflow artifacts, and the tag ``failure`` naming the rank that raised first and its error."""
    found = []
    for path in sorted((run.run_dir / "failures").glob("rank*.txt")):
        try:
            stamp, text = path.read_text().split("\n", 1)
            if float(stamp) >= run.started - 1.0:  # not a file left by an earlier attempt
                found.append((float(stamp), path, text))
        except (OSError, ValueError):
            continue
    if not found:
        return
    found.sort(key=lambda item: item[0])
    _, first, text = found[0]
    error = text.strip().splitlines()[-1] if text.strip() else "?"
    run.tracker.set_tag("failure", f"{first.stem}: {error}"[:5000])
    for _, path, _ in found:
        run.tracker.log_artifact(path)


def train(
    cfg: TrainConfig,
    *,
    make_env: Callable[[str], Any] | None = None,
    make_oracle: Callable[[], Any] | None = None,
    make_sampler: Callable[[Any, Any], Any] | None = None,
    resume: bool = True,
    allow_config_change: bool = False,
) -> TrainResult:
    """Run SFT warm start (if configured) and ``cfg.steps`` RL steps; resumes from ``run_dir`` if a checkpoint exists.

    Args:
        make_env: ``env_id -> env`` (default: ``gymnasium.make`` with the config's env kwargs).
        make_oracle: demonstration policy factory for SFT / tokenizer texts (default: the envs' oracle).
        make_sampler: ``(model, tokenizer) -> engine``: the rollout engine that generates the rollouts
            and evaluations (``policy/engine.py``), given the causal LM to sample from (under torchrun
            a full copy on rank 0); default: by ``rollout.engine.backend``, ``HFPolicy`` in this
            process or ``RayRolloutEngine``.
        resume: continue from ``<run_dir>/checkpoint.pt`` when present.
        allow_config_change: resume even when the config differs from the checkpoint's in more than
            the run-length keys (recorded as the MLflow tag ``override/config_change``).

    Under torchrun (``WORLD_SIZE`` > 1) every rank calls it with the same config; ``make_env`` and
    ``make_oracle`` are used on rank 0 only, and ``make_sampler`` there.

    Raises:
        ConfigError: the machine cannot run ``cfg`` (device, env ids, paths, a row too short for the
            template), or a resume with a changed config without ``allow_config_change``, or on
            another number of processes than the checkpoint's.
        Killed: SIGTERM (after the step in flight and a checkpoint) or Ctrl-C.
    """
    run = Run(cfg, Path(cfg.run_dir), _StopRequest())
    status = "FAILED"
    with run.stop.installed():
        try:
            setup(run, make_env, make_oracle or demonstrator(cfg.sft, cfg.seed), make_sampler, resume, allow_config_change)
            with _progress_bar(cfg if run.dp.is_main else None, run.step) as bar:
                while run.step < cfg.steps:
                    metrics = rl_step(run)
                    bar(metrics)
                    if run.dp.any(run.stop.requested):  # every rank stops after the same step
                        save_checkpoint(run)
                        raise Killed()
            finish(run)
            status = "FINISHED"
            return run.result
        except (Killed, KeyboardInterrupt):
            status = "KILLED"
            raise
        except ConfigError:
            raise
        except BaseException as exc:
            run.record_failure(exc)
            raise
        finally:
            run.close(status)


# ---------------------------------------------------------------------------------------------------
# setup: checks, demonstrations, tokenizer, envs, model, tracking, SFT, optimiser, resume or evaluate
# ---------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Start:
    """Where a run starts from (``find_start``): its own checkpoint (a resume), an earlier run's SFT-only
    checkpoint (``sft.from_checkpoint``), or neither (SFT, if configured, then RL from scratch)."""

    checkpoint: dict[str, Any] | None = None
    warm: dict[str, Any] | None = None
    """The SFT-only checkpoint: it replaces SFT and the demonstrations."""
    changed: list[str] = field(default_factory=list)
    """Config keys that differ from the checkpoint's (allowed by ``allow_config_change``)."""

    @property
    def runs_sft(self) -> bool:
        return self.checkpoint is None and self.warm is None


def setup(run: Run, make_env, make_oracle, make_sampler, resume: bool, allow_config_change: bool) -> None:
    """Everything before the first RL step, builder by builder. Configuration problems are raised before
    the tracker exists (no MLflow run is started for a config that cannot run), on every rank."""
    check_machine(run, check_env_ids=make_env is None)
    start = find_start(run, resume, allow_config_change)
    trajectories = build_tokenizer(run, start, make_env, make_oracle)
    build_envs(run, make_env)
    build_model_and_engine(run, start, make_sampler)
    start_tracking(run, start)
    warm_start(run, start, trajectories)
    build_optimiser(run, start)
    weights = sync_weights(run)
    if start.checkpoint is None and run.cfg.eval_num_tasks and run.dp.is_main:
        run.result.val_before = evaluate(run, 0, sampled=True)
        run.val_before_records = run.val_records
        print(f"held-out success before RL: {run.result.val_before['val/task_success_rate']:.3f}")
    start_rollouts(run, start, weights)


def start_rollouts(run: Run, start: Start, weights) -> None:
    """The stream of the RL steps' batches (rank 0), from the run's step on; async: its producer starts
    drawing now. On a resume, the batches the checkpointed run had drawn ahead are counted as discarded
    (``async/discarded_batches``)."""
    cfg = run.cfg
    if start.checkpoint is not None and start.checkpoint.get("discarded_batches"):
        run.tracker.log_metrics({"async/discarded_batches": float(start.checkpoint["discarded_batches"])}, run.step)
    if not run.dp.is_main:
        return
    assert run.policy is not None  # rank 0's
    run.stream = RolloutStream(
        lambda engine: draw_batch(run, engine), run.policy, lambda: rollout_state(run), mode=cfg.rollout.mode,
        max_staleness=cfg.rollout.max_staleness, first=run.step, last=cfg.steps - 1, initial_state=weights,
    )


def rollout_state(run: Run) -> RolloutState:
    """The rollout state now (rank 0's: the sampling generator, the task cursor, the task success
    estimates, the curriculum)."""
    return RolloutState(run.generator.get_state(), run.cursor, copy.deepcopy(run.task_success.state_dict()),
                        copy.deepcopy(run.curriculum.state_dict()) if run.curriculum is not None else None)


def check_machine(run: Run, check_env_ids: bool) -> None:
    """The config's runtime checks (the env ids' too unless the caller makes the envs) and the device,
    then the data-parallel group, the attention backend and the seeded generator."""
    cfg = run.cfg
    problems = runtime_problems(cfg, check_env_ids=check_env_ids)
    world = world_size_from_environment()
    try:
        run.device = device_for_rank(resolve_device(cfg.device), int(os.environ.get("LOCAL_RANK", "0")), world)
    except ValueError as exc:
        problems.append(str(exc))
    if problems:
        raise ConfigError(problems)
    run.dp = DataParallel.from_environment(run.device, cfg.distributed.timeout_s)
    run.run_dir.mkdir(parents=True, exist_ok=True)
    run.backend = attention.select_backend(cfg.model.attention, run.device, Precision.from_config(cfg.model).compute)
    run.generator = _seed_everything(cfg.seed)


def find_start(run: Run, resume: bool, allow_config_change: bool) -> Start:
    """The run's checkpoint (``resume``) and its config changes, else the SFT-only checkpoint to warm-start from."""
    cfg = run.cfg
    ckpt = checkpoint.load_meta(run.run_dir, run.dp.world_size) if resume else None
    changed = checkpoint.config_changes(ckpt["config"], config_to_dict(cfg)) if ckpt else []
    if changed and not allow_config_change:
        raise ConfigError([
            f"resume: the config differs from the checkpoint's in {', '.join(changed)} (only {', '.join(RUN_LENGTH_KEYS)} "
            f"may change); pass --allow-config-change to resume anyway, or use another run_dir"
        ])
    # An earlier run's SFT-only checkpoint replaces SFT (and the demonstrations): sft.from_checkpoint
    warm = checkpoint.load_sft(cfg.sft.from_checkpoint, config_to_dict(cfg)) if ckpt is None and cfg.sft.from_checkpoint else None
    return Start(ckpt, warm, changed)


def _env_kwargs(cfg: TrainConfig) -> dict[str, Any]:
    return {
        "max_turns": cfg.env.max_turns, "max_context": cfg.env.max_context,
        "max_tool_output_chars": cfg.env.max_tool_output_chars, **cfg.env.env_kwargs,
    }


def build_tokenizer(run: Run, start: Start, make_env, make_oracle) -> list[dict[str, Any]]:
    """The demonstrations (SFT data and the BPE's texts; rank 0), then the tokenizer (broadcast);
    returns the demonstrations. They are collected with no context budget: the token counter does not
    exist before the BPE is trained on these texts (``select_demonstrations`` measures them in tokens
    afterwards)."""
    cfg, dp = run.cfg, run.dp
    trajectories: list[dict[str, Any]] = []
    if dp.is_main:
        need_texts = cfg.model.tokenizer == "bpe" and not (run.run_dir / "tokenizer" / "tokenizer.json").exists()
        if start.runs_sft and (cfg.sft.num_episodes > 0 or need_texts):
            specs = demonstration_specs(cfg.env.env_ids, cfg.env.train_split, cfg.seed, cfg.sft.num_episodes)
            demo_pool = EnvPool(make_env or EnvFactory({**_env_kwargs(cfg), "max_context": None}))
            try:
                trajectories = collect_trajectories(demo_pool, specs, make_oracle, cfg.env.allow_restricted_training)
            finally:
                demo_pool.close()
        run.tokenizer = load_tokenizer(cfg.model, run.run_dir, trajectory_texts(trajectories) if trajectories else None,
                                       saved=start.warm["tokenizer"] if start.warm else None)
    run.tokenizer = dp.broadcast(run.tokenizer)
    return trajectories


def build_envs(run: Run, make_env) -> None:
    """The envs (rank 0), budgeted in the tokenizer's tokens; rows must hold their longest episode.
    In-process, or Ray env workers (``env.workers``); a Ray pool starts on its first reset and ships
    this factory (with the token counter) to its workers."""
    cfg, dp = run.cfg, run.dp
    problems = []
    if dp.is_main:
        factory = make_env or EnvFactory({**_env_kwargs(cfg), "length_fn": TokenCounter(run.tokenizer)})
        run.pool = make_env_pool(factory, **dataclasses.asdict(cfg.env.workers))
        try:
            check_row_fits(cfg, run.tokenizer, run.pool)
        except ConfigError as exc:
            problems = exc.problems
    problems = dp.broadcast(problems)
    if problems:
        raise ConfigError(problems)


def build_model_and_engine(run: Run, start: Start, make_sampler) -> None:
    """The model (sharded under torchrun; the SFT-only checkpoint's weights on a warm start), the KL
    reference, the rollout engine (rank 0) and the optimiser step's settings."""
    cfg, dp = run.cfg, run.dp
    precision = Precision.from_config(cfg.model)
    lm = load_model(cfg.model, run.tokenizer, run.backend, run.device, seed=cfg.seed)
    if start.warm is not None:
        lm.load_state_dict(start.warm["model"])
    ref_lm = copy.deepcopy(lm).eval() if cfg.algo.kl_coef > 0 else None
    if dp.is_main:
        # Under torchrun the engine samples from a full copy of the weights: the learner's are shards.
        # In async mode too: the learner's weights change while the engine samples.
        run.policy = build_engine(cfg, lm, run.tokenizer, make_sampler, shared=not dp.enabled and cfg.rollout.mode == "sync")
    run.lm, run.model = lm, dp.wrap(lm, precision)
    if ref_lm is not None:
        for p in ref_lm.parameters():
            p.requires_grad_(False)
        run.ref_model = dp.wrap(ref_lm, precision)
    run.settings = step_settings(cfg)


def start_tracking(run: Run, start: Start) -> None:
    """MLflow (rank 0; the checkpoint's run on a resume), the alarms, the result, the params and the override tags."""
    cfg, dp = run.cfg, run.dp
    run.tracker = Tracker(
        run.run_dir, cfg.tracking.experiment, cfg.tracking.run_name, cfg.tracking.tracking_uri,
        run_id=start.checkpoint["mlflow_run_id"] if start.checkpoint else None, enabled=cfg.tracking.enabled and dp.is_main,
    )
    run.alarms = Alarms(cfg.alarms, run.tracker)
    run.result = TrainResult(run.run_dir, run.tracker.run_id, model=run.lm, tokenizer=run.tokenizer)
    run.tracker.log_params(flatten(config_to_dict(cfg)))
    if dp.enabled:
        run.tracker.set_tag("distributed/world_size", dp.world_size)
    if start.changed:
        run.tracker.set_tag("override/config_change", ", ".join(start.changed))
        log.warning("resuming with a changed config (%s): allowed by allow_config_change", ", ".join(start.changed))
    if cfg.env.allow_restricted_training:
        run.tracker.set_tag("override/allow_restricted_training", "true")
        log.warning("training on tasks whose licence may not allow it (env.allow_restricted_training)")


def warm_start(run: Run, start: Start, trajectories: list[dict[str, Any]]) -> None:
    """The supervised warm start (demonstrations selected on rank 0, the steps split over the ranks),
    then the SFT-only checkpoint; or where SFT ended in the run that wrote ``sft.from_checkpoint``."""
    cfg, dp = run.cfg, run.dp
    if start.runs_sft and cfg.sft.num_episodes > 0:
        sft_episodes = short_episodes = None
        if dp.is_main:
            sft_episodes, demo_stats = select_demonstrations(
                run.tokenizer, as_shown(trajectories, cfg.model.system_turn), cfg.sft.num_episodes, cfg.env.max_context,
                cfg.sft.only_successful,
            )
            if cfg.sft.short_context_steps:  # the same demonstrations, from the case on
                short_episodes = short_context_episodes(run.tokenizer, trajectories, sft_episodes)
            run.result.demonstrations = demo_stats
            run.tracker.log_eval(demo_stats, 0)
            log.info("SFT demonstrations: %s", demo_stats)
        train_sft(
            run.model, sft_episodes, cfg.sft, settings=sft_settings(cfg), backend=run.backend, generator=run.generator,
            tokenizer=run.tokenizer, on_step=SFTStepLog(run), dp=dp, short_episodes=short_episodes,
        )
        if run.ref_model is not None:  # the reference is the policy RL starts from
            with torch.no_grad():
                for p, q in zip(run.model.parameters(), run.ref_model.parameters()):
                    q.copy_(p)
        save_sft_checkpoint(run)
    if start.warm is not None:
        checkpoint.restore_rng(start.warm["rng"], run.generator)
        run.result.demonstrations = dict(start.warm["demonstrations"])
        run.tracker.log_eval(run.result.demonstrations, 0)
        run.tracker.set_tag("warm_start/sft_checkpoint", str(cfg.sft.from_checkpoint))


def build_optimiser(run: Run, start: Start) -> None:
    """RL's optimiser and schedule (``optimise.build_optimizer``, as SFT's); on a resume, the checkpoint's
    state under the config's settings (``apply_settings``), its step, cursor and history."""
    cfg, dp, ckpt = run.cfg, run.dp, start.checkpoint
    hp = AdamWSettings.from_config(cfg.optim)
    run.optimizer, run.scheduler = build_optimizer(run.model, hp, WarmUp(cfg.optim.warmup_steps))
    run.task_success = TaskSuccess(cfg.algo.task_success_ema)
    if cfg.algo.curriculum:
        run.curriculum = Curriculum(cfg.algo.curriculum_explore, cfg.algo.curriculum_pool, cfg.rollout.group_size, cfg.seed)
    if ckpt is None:
        return
    if ckpt.get("sharded"):
        checkpoint.load_sharded(run.run_dir, dp, model=run.model, optimizer=run.optimizer, ref_model=run.ref_model,
                                generator=run.generator)
    else:
        run.lm.load_state_dict(ckpt["model"])
        if run.ref_model is not None:
            run.ref_model.lm.load_state_dict(ckpt["ref_model"])
        run.optimizer.load_state_dict(ckpt["optimizer"])
        checkpoint.restore_rng(ckpt["rng"], run.generator)
    run.scheduler.load_state_dict(ckpt["scheduler"])
    apply_settings(run.optimizer, run.scheduler, hp)
    run.step, run.cursor, run.result.history = ckpt["step"], ckpt["cursor"], ckpt["history"]
    run.result.val_before = ckpt.get("val_before", {})
    run.val_curve = ckpt.get("val_curve", [])
    run.val_points = ckpt.get("val_points", [])
    run.val_before_records = ckpt.get("val_before_records", [])
    run.task_success.load_state_dict(ckpt.get("task_success", {}))
    if run.curriculum is not None and ckpt.get("curriculum") is not None:
        run.curriculum.load_state_dict(ckpt["curriculum"])


def build_engine(cfg: TrainConfig, lm, tokenizer, make_sampler=None, shared: bool = True) -> RolloutEngine:
    """The rollout engine sampling from ``lm``: ``make_sampler(lm, tokenizer)`` when given, else by
    ``rollout.engine.backend``: ``HFPolicy`` in this process, or ``RayRolloutEngine`` (a Ray actor with its
    own copy of ``lm``).

    The sampler computes as the trainer does (``model.dtype``, ``modeling.Precision``): ``HFPolicy`` on
    the trained model itself (``shared``: one process) generates under the trainer's autocast; an
    engine with weights of its own (a Ray actor, or rank 0's full copy under torchrun when not
    ``shared``) holds them in the compute dtype, as FSDP2's mixed precision gathers the learner's.
    ``make_sampler`` gets the master weights (a copy of them when not ``shared``).
    """
    precision = Precision.from_config(cfg.model)
    if make_sampler is not None:
        return make_sampler(lm if shared else copy.deepcopy(lm), tokenizer)
    engine = cfg.rollout.engine
    if engine.backend == "ray":  # serialised at once: the actor's copy
        from .ray_engine import RayRolloutEngine

        own = copy.deepcopy(lm).to(precision.compute) if precision.mixed else lm
        return RayRolloutEngine(own, tokenizer, num_gpus=engine.num_gpus, num_cpus=engine.num_cpus, address=engine.address)
    if shared:
        return HFPolicy(lm, tokenizer, autocast_dtype=precision.autocast_dtype)
    return HFPolicy(copy.deepcopy(lm).to(precision.compute), tokenizer)


def sync_weights(run: Run) -> dict[str, torch.Tensor] | None:
    """The learner's weights to the rollout engine, before the RL steps (a collective under torchrun:
    the full state dict is gathered from the shards onto rank 0, which gets it back). A one-process
    engine on the trained model itself gets its own tensors back: nothing is copied."""
    state = run.dp.full_state_dict(run.model)
    if run.policy is not None:
        assert state is not None  # the engine is rank 0's, where the full state is gathered
        run.policy.load_weights(state)
    return state


def publish_weights(run: Run, version: int, changed: bool) -> None:
    """The weights after ``version`` RL steps to the rollout stream (gathered onto rank 0 under
    torchrun, a collective), or, when the step did not change them, only their new version."""
    state = run.dp.full_state_dict(run.model) if changed else None
    if run.stream is not None:
        run.stream.publish(version, state)


class SFTStepLog:
    """``train_sft``'s per-step callback: logs the step; a SIGTERM during SFT stops at the next step
    (SFT has no checkpoint of its own: a resumed run starts it again)."""

    def __init__(self, run: Run):
        self.run = run

    def __call__(self, i: int, stats: dict[str, float]) -> None:
        self.run.tracker.log_eval(
            {"sft/loss": stats["loss"], "sft/tokens_per_s": stats["tokens_per_s"], "sft/short_context": stats["short_context"],
             "sft/copy_stage": stats["copy_stage"]}, i
        )
        if self.run.dp.is_main:
            stage = " (copy pretraining)" if stats["copy_stage"] else (" (short context)" if stats["short_context"] else "")
            log.info("sft step %d%s: loss %.3f, %.0f tokens/s", i, stage, stats["loss"], stats["tokens_per_s"])
        if self.run.dp.any(self.run.stop.requested):
            raise Killed()


# ---------------------------------------------------------------------------------------------------
# one RL step: rollouts -> advantages -> optimisation -> logging and alarms -> evaluation -> checkpoint
# ---------------------------------------------------------------------------------------------------
def rl_step(run: Run) -> dict[str, float]:
    """Run RL step ``run.step`` and advance it; returns the step's metrics (also in ``run.history``).

    Under torchrun every rank calls it: rank 0 takes the step's rollouts from the stream and computes
    the advantages, the optimisation runs on every rank, rank 0 logs; on the other ranks the metrics
    hold the optimisation's only."""
    cfg, step, dp = run.cfg, run.step, run.dp

    # ---- 1. rollouts (rank 0): batch_size tasks x group_size episodes, one batched generate per turn ----
    # (with dynamic sampling, more groups until batch_size are informative): drawn now with this step's
    # weights (sync), or drawn ahead with weights at most max_staleness steps old (async), then checked
    # against the bound sample by sample: a group beyond it is dropped and counted
    episodes: list[Episode] = []
    batch = None
    stale: dict[str, float] = {}
    if dp.is_main:
        assert run.stream is not None  # rank 0's
        batch = run.stream.batch(step)
        episodes, _, stale = within_staleness(batch.episodes, step, run.stream.max_staleness)
    cursor = batch.cursor if batch is not None else run.cursor + cfg.rollout.batch_size
    if cfg.algo.dynamic_sampling or cfg.algo.curriculum:  # only rank 0 knows how many fresh groups it drew
        cursor = dp.broadcast(cursor)
    if not dp.is_main:  # rank 0's cursor is the stream's (its producer's, in async mode)
        run.cursor = cursor

    # ---- 2. advantages per group (infra failures excluded; optional zero-variance filter, implied by ----
    # dynamic sampling: groups all right or all wrong are not trained on)
    trainable: list[Episode] = []
    zv_stats: dict[str, float] = {}
    too_long: list[Episode] = []
    if dp.is_main:
        trainable, zv_stats = assign_advantages(
            episodes, cfg.algo.advantage, cfg.algo.passk_k, cfg.algo.component_norm,
            cfg.algo.filter_zero_variance or cfg.algo.dynamic_sampling,
        )
        too_long = [ep for ep in trainable if len(ep.ids) > cfg.optim.row_tokens]
        if too_long:  # check_row_fits makes this rare; never a crash mid-run
            log.warning("%d episodes longer than optim.row_tokens=%d left out of step %d (longest %d tokens)",
                        len(too_long), cfg.optim.row_tokens, step, max(len(ep.ids) for ep in too_long))
            trainable = [ep for ep in trainable if len(ep.ids) <= cfg.optim.row_tokens]

    # ---- 3. optimisation: behaviour log-probs, then ppo_epochs x num_minibatches optimiser steps ----
    # (split over the ranks by tokens under torchrun), then the new weights (version step + 1) to the stream
    t1 = time.perf_counter()
    opt_stats: list[dict[str, float]] = []
    mismatch: dict[str, float] = {}
    trains = dp.broadcast(bool(trainable) and any(ep.num_policy_tokens for ep in trainable))
    if trains:
        opt_stats, mismatch = rl_update(
            run.model, run.ref_model, run.optimizer, run.scheduler, trainable, run.settings, run.backend,
            ppo_epochs=cfg.algo.ppo_epochs, num_minibatches=cfg.algo.num_minibatches, dp=dp,
        )
    publish_weights(run, step + 1, changed=trains)
    train_s = time.perf_counter() - t1

    # ---- 4. logging and alarms (rank 0) ----
    metrics: dict[str, float] = {"step": step, **_optimisation_metrics(opt_stats, train_s)}
    if dp.enabled and opt_stats:  # each rank's own throughput: its tokens over its optimiser steps' time
        rates = dp.gather(sum(st["rank_num_tokens"] for st in opt_stats) / max(sum(st["seconds"] for st in opt_stats), 1e-9))
        if rates is not None:  # rank 0's: every rank's rate
            metrics.update({f"perf/rank{k}/train_tokens_per_s": r for k, r in enumerate(rates)})
    metrics["perf/optimisation_seconds"] = train_s
    if batch is not None:  # rank 0's
        drawn = batch.episodes
        metrics.update({**rollout_metrics(drawn), **zv_stats, **mismatch, **stale})
        metrics.update(run.alarms.after_rollouts(step, drawn, zv_stats))
        metrics["perf/rollout_seconds"] = batch.seconds
        metrics["perf/rollout_tokens_per_s"] = sum(ep.num_policy_tokens for ep in drawn) / max(batch.seconds, 1e-9)
        metrics["perf/episodes_per_s"] = len(drawn) / max(batch.seconds + train_s, 1e-9)
        metrics["perf/learner_idle_seconds"] = batch.learner_idle_s
        metrics["perf/engine_idle_seconds"] = batch.engine_idle_s
        metrics["async/batch_version"] = float(batch.version)
        metrics["train/trained_episodes"] = float(len(trainable))
        metrics["train/dropped_too_long"] = float(len(too_long))
        metrics.update(group_metrics(episodes, trainable))
        metrics["sampling/extra_groups"] = float(batch.extra_groups)
        metrics.update(batch.metrics)
    run.history.append(metrics)
    run.step = step + 1

    # ---- 5. held-out evaluation every eval_every steps (rank 0; the last one is finish's) ----
    if cfg.eval_every and run.step % cfg.eval_every == 0 and run.step < cfg.steps and cfg.eval_num_tasks and dp.is_main:
        assert run.stream is not None
        with run.stream.exclusive():
            evaluate(run, run.step)
    run.tracker.log_metrics(metrics, step)

    # ---- 6. checkpoint ----
    if cfg.checkpoint_every and run.step % cfg.checkpoint_every == 0:
        save_checkpoint(run)
    return metrics


def draw_batch(run: Run, engine) -> tuple[list[Episode], int, dict[str, float], int]:
    """One step's rollouts with ``engine`` (rank 0; in async mode in the stream's producer thread):
    ``rollout.batch_size`` groups, and with dynamic sampling further groups until that many are
    informative (within ``algo.max_extra_draws``); then what they show is recorded in the task success
    estimates and the curriculum. Returns the episodes, the extra groups, the ``tasks/*`` and
    ``curriculum/*`` metrics after them, and the task cursor after them."""
    cfg = run.cfg
    if run.curriculum is not None:
        run.curriculum.begin_step(run.task_success.estimates)
    episodes = draw_groups(run, engine, cfg.rollout.batch_size, first_group_id=0)
    extra = 0
    while cfg.algo.dynamic_sampling and (more := missing_groups(
        len(informative_groups(episodes)), cfg.rollout.batch_size, extra, cfg.algo.max_extra_draws
    )):
        episodes += draw_groups(run, engine, more, first_group_id=cfg.rollout.batch_size + extra)
        extra += more
    run.task_success.update(episodes)
    metrics = run.task_success.metrics()
    if run.curriculum is not None:
        run.curriculum.record(episodes)
        metrics.update(run.curriculum.metrics())
    return episodes, extra, metrics, run.cursor


def draw_groups(run: Run, engine, num_groups: int, first_group_id: int) -> list:
    """``num_groups`` training tasks, ``group_size`` episodes each, numbered from ``first_group_id``; one
    batched generate of ``engine`` per turn (rank 0). With ``algo.curriculum`` some are tasks drawn before,
    posed again by their seed on the training split (``sampling.Curriculum``), the others, like every task
    without it, fresh from the cursor on (which moves past them)."""
    cfg = run.cfg
    again = run.curriculum.choose(num_groups, run.task_success.estimates) if run.curriculum is not None else []
    fresh = num_groups - len(again)
    specs = group_spec_list(
        cfg.env.env_ids, cfg.env.train_split, cfg.seed * 1_000_003 + run.cursor, fresh, cfg.rollout.group_size
    )
    specs += [EpisodeSpec(env_id, seed, {"split": cfg.env.train_split}, group_id=fresh + i, sample=j)
              for i, (env_id, seed) in enumerate(again) for j in range(cfg.rollout.group_size)]
    if first_group_id:
        specs = [dataclasses.replace(spec, group_id=spec.group_id + first_group_id) for spec in specs]
    run.cursor += fresh
    assert run.pool is not None  # rank 0's
    return collect(run.pool, specs, engine, run.tokenizer, run.rollouts, generator=run.generator)


def _optimisation_metrics(opt_stats: list[dict[str, float]], train_s: float) -> dict[str, float]:
    """``train/*`` means over the step's optimiser steps (the last learning rate), and throughput."""
    if not opt_stats:
        return {}
    last = opt_stats[-1]
    out = {}
    for key in ("loss", "kl", "entropy", "clip_fraction", "grad_norm", "ratio_mean", "is_weight_mean", "is_changed_fraction"):
        if key in last:
            out[f"train/{key}"] = sum(s[key] for s in opt_stats) / len(opt_stats)
    out["train/lr"] = last["lr"]
    out["perf/packing_efficiency"] = last["packing_efficiency"]
    out["perf/train_tokens_per_s"] = sum(s["num_tokens"] for s in opt_stats) / max(train_s, 1e-9)
    return out


def _held_out(run: Run, samples: int, temperature: float, seed: int) -> list[Episode]:
    """``samples`` episodes of each of the first ``eval_num_tasks`` held-out tasks at ``temperature``."""
    cfg = run.cfg
    specs = group_spec_list(cfg.env.env_ids, cfg.env.val_split, 0, cfg.eval_num_tasks, samples)
    assert run.pool is not None  # rank 0's
    return collect(run.pool, specs, run.policy, run.tokenizer, run.rollouts.held_out(temperature),
                   generator=torch.Generator().manual_seed(seed))


def evaluate(run: Run, step: int, *, sampled: bool = False) -> dict[str, float]:
    """Greedy episodes on the first ``eval_num_tasks`` held-out tasks, scored by the evaluator (success
    and field accuracy with their intervals, per field, per outcome class: ``heldout.greedy_metrics``);
    with ``sampled`` (the evaluations before and after RL) and ``eval_samples``, also that many sampled
    episodes per task at the rollout temperature (pass@1, pass@k: ``heldout.sampled_metrics``). Logged at
    ``step`` with the divergence alarm, which every evaluation checks."""
    cfg = run.cfg
    episodes = _held_out(run, 1, cfg.rollout.eval_temperature, seed=0)
    records = [ep.episode_info for ep in episodes]
    val = eval_metrics(episodes)
    if records:
        val.update(greedy_metrics(records, n_bootstrap=cfg.eval_bootstrap))
    run.val_records = records
    if sampled and cfg.eval_samples:
        draws = _held_out(run, cfg.eval_samples, cfg.rollout.temperature, seed=1)
        val.update(sampled_metrics([ep.episode_info for ep in draws], cfg.eval_samples, n_bootstrap=cfg.eval_bootstrap))
    run.val_curve.append((step, val["val/task_success_rate"], val["val/reward/mean"]))
    run.val_points.append(plot_point(step, val))
    val.update(run.alarms.after_evaluation(step, run.history, run.val_curve))
    run.tracker.log_eval(val, step)
    return val


def _interval(metrics: dict[str, float], key: str) -> str:
    low, high = metrics.get(f"{key}/ci_low"), metrics.get(f"{key}/ci_high")
    return f" [{low:.3f}, {high:.3f}]" if low is not None and high is not None else ""


def _report_held_out(run: Run, records_after: list[dict[str, Any]]) -> None:
    """After RL: the paired difference from the evaluation before (logged as ``val/paired/*``) and the
    lines under ``held-out success before RL: X  after RL: Y``."""
    cfg, result = run.cfg, run.result
    before, after = result.val_before, result.val_after
    if run.val_before_records and records_after:
        result.paired = paired_difference(run.val_before_records, records_after, n_bootstrap=cfg.eval_bootstrap)
        run.tracker.log_eval({f"val/paired/{k}": v for k, v in result.paired.items()}, cfg.steps)
        p = result.paired
        interval = f" [{p['ci_low']:+.3f}, {p['ci_high']:+.3f}]" if cfg.eval_bootstrap else ""
        print(f"  paired difference (after - before, greedy): {p['difference']:+.3f}{interval} over {int(p['tasks'])} tasks")
    k = cfg.eval_samples
    if k and f"val/sampled/pass_at_{k}" in before and f"val/sampled/pass_at_{k}" in after:
        figures = ", ".join(
            f"{name} {before[key]:.3f}{_interval(before, key)} -> {after[key]:.3f}{_interval(after, key)}"
            for name, key in (("pass@1", "val/sampled/pass_at_1"), (f"pass@{k}", f"val/sampled/pass_at_{k}")))
        print(f"  sampled (T={cfg.rollout.temperature:g}, {k} per task): {figures}")


def save_sft_checkpoint(run: Run) -> None:
    """The SFT-only checkpoint ``<run_dir>/sft/`` (``checkpoint.save_sft``), at the end of SFT; every
    rank calls it (the full state dict is gathered from the shards onto rank 0, which writes it)."""
    state = run.dp.full_state_dict(run.model)
    if state is not None:  # rank 0's: the gathered state, which it writes
        path = checkpoint.save_sft(run.run_dir, model_state=state, tokenizer=run.tokenizer, generator=run.generator,
                                   config=config_to_dict(run.cfg), demonstrations=run.result.demonstrations)
        log.info("SFT-only checkpoint %s", path)


def save_checkpoint(run: Run) -> None:
    """A checkpoint to continue at ``run.step``: ``checkpoint.pt`` in one process, the sharded
    ``checkpoint/`` folder under torchrun (every rank calls it). The rollout state is the one before
    batch ``run.step`` (``RolloutStream.resume_state``: in async mode the producer may be ahead)."""
    rollouts, discarded = run.stream.resume_state(run.step) if run.stream is not None else (rollout_state(run), 0)
    generator = torch.Generator()
    generator.set_state(rollouts.generator_state)
    if run.dp.enabled:
        meta = {
            "scheduler": run.scheduler.state_dict(), "step": run.step, "cursor": rollouts.cursor, "mlflow_run_id": run.tracker.run_id,
            "history": run.history, "config": config_to_dict(run.cfg), "val_before": run.result.val_before,
            "val_curve": run.val_curve, "val_points": run.val_points, "val_before_records": run.val_before_records,
            "task_success": rollouts.task_success, "curriculum": rollouts.curriculum, "discarded_batches": discarded,
        }
        path = checkpoint.save_sharded(run.run_dir, run.dp, model=run.model, optimizer=run.optimizer, ref_model=run.ref_model,
                                       generator=generator, meta=meta)
    else:
        path = checkpoint.save(
            run.run_dir, model=run.lm, optimizer=run.optimizer, scheduler=run.scheduler, generator=generator,
            step=run.step, cursor=rollouts.cursor, run_id=run.tracker.run_id, history=run.history, config=config_to_dict(run.cfg),
            extra={
                "val_before": run.result.val_before,
                "val_curve": run.val_curve,
                "val_points": run.val_points,
                "val_before_records": run.val_before_records,
                "task_success": rollouts.task_success,
                "curriculum": rollouts.curriculum,
                "discarded_batches": discarded,
                "ref_model": run.ref_model.lm.state_dict() if run.ref_model is not None else None,
            },
        )
    if run.dp.is_main:
        log.info("checkpoint %s at step %d", path, run.step)


# ---------------------------------------------------------------------------------------------------
# finish: the held-out evaluation after RL, the plot, the final checkpoint
# ---------------------------------------------------------------------------------------------------
def finish(run: Run) -> TrainResult:
    cfg, result = run.cfg, run.result
    if cfg.eval_num_tasks and run.dp.is_main:
        assert run.stream is not None  # rank 0's
        with run.stream.exclusive():  # the newest weights (async: the producer has drawn its last batch)
            result.val_after = evaluate(run, cfg.steps, sampled=True)
        print(
            f"held-out success before RL: {result.val_before.get('val/task_success_rate', float('nan')):.3f}  "
            f"after RL: {result.val_after['val/task_success_rate']:.3f}"
        )
        _report_held_out(run, run.val_records)
    if cfg.plot and run.history and run.dp.is_main:
        _plot(run.history, run.val_curve, run.val_points, run.run_dir / "curves.png")
        run.tracker.log_artifact(run.run_dir / "curves.png")
    save_checkpoint(run)
    return result


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

    @contextlib.contextmanager
    def installed(self) -> Iterator[None]:
        """The SIGTERM handler for the duration of the run (not installable outside the main thread)."""
        try:
            previous = signal.signal(signal.SIGTERM, self.on_sigterm)
        except ValueError:  # not the main thread
            yield
            return
        try:
            yield
        finally:
            signal.signal(signal.SIGTERM, previous)
