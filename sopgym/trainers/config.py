"""Typed training configuration: nested dataclasses, loaded from YAML with ``key.sub=value`` overrides.

Every field documents the trade-off it controls. The sections are pydantic dataclasses: each field's
type and range are declared in its annotation and default (``StrictInt``, ``Number``, ``Literal``
choices, ``Field(ge=..., le=...)``) and checked by pydantic when a section is built, every field of
every section in one pass; each section's ``_combinations`` then checks its fields against each
other, and ``TrainConfig``'s checks combinations across sections. ``config_from_dict`` turns every
problem into one line that names the field by its dotted name and says what was expected and what
was given, and raises them together as a ``ConfigError`` (a ``ValueError``), so a bad config fails
before anything is built. ``runtime_problems`` adds the checks that depend on the machine (device,
registered env ids, local paths); the command line prints both and exits with code 2.

Why pydantic (docs/architecture.md): it validates typed dataclasses field by field and reports every
error of a nested structure at once with its location, which is what the config needs; the messages
are ours (``_describe``), written from pydantic's error types and the fields' own declarations.

Example:
    >>> cfg = load_config("configs/demo-cpu.yaml", ["rollout.group_size=4", "steps=10"])
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import re
import typing
from dataclasses import field
from pathlib import Path
from typing import Annotated, Any, Literal

import annotated_types
from pydantic import (
    AfterValidator,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    StrictStr,
    TypeAdapter,
    ValidationError,
)
from pydantic.dataclasses import dataclass as _pydantic_dataclass
from pydantic_core import ErrorDetails, PydanticCustomError

Advantage = Literal["grpo", "dr_grpo", "rloo", "passk"]
ADVANTAGES = typing.get_args(Advantage)
"""Must equal the keys of ``advantages.ADVANTAGES`` (tested)."""
Loss = Literal["ppo_clip", "cispo", "is_reinforce", "rloo"]
LOSSES = typing.get_args(Loss)
"""Must equal the keys of ``losses.LOSSES`` (tested)."""
SEQUENCE_LOSSES = ("rloo",)
Aggregation = Literal["token", "sequence", "fixed_length"]
AGGREGATIONS = typing.get_args(Aggregation)
"""Must equal ``losses.AGGREGATIONS`` (tested)."""
KLEstimator = Literal["k1", "k2", "k3"]
KL_ESTIMATORS = typing.get_args(KLEstimator)
"""Must equal the keys of ``losses.KL_ESTIMATORS`` (tested)."""
Attention = Literal["auto", "flash_varlen", "torch_varlen", "sdpa_varlen", "sdpa", "eager"]
ATTENTION = typing.get_args(Attention)
"""``auto`` plus ``attention.BACKENDS`` (tested)."""
FLASH_ATTENTION = ("flash_varlen", "torch_varlen")
SystemTurn = Literal["keep", "drop"]
SYSTEM_TURNS = typing.get_args(SystemTurn)
"""Must equal ``episodes.SYSTEM_TURNS`` (tested)."""
DType = Literal["float32", "bfloat16", "float16", "float64"]
DTYPES = typing.get_args(DType)
DTYPE_BITS = {"float16": 16, "bfloat16": 16, "float32": 32, "float64": 64}
WorkerBackend = Literal["inprocess", "ray"]
WORKER_BACKENDS = typing.get_args(WorkerBackend)
"""Must equal ``sopgym.episodes.runner.POOL_BACKENDS`` (tested)."""
BehaviourLogp = Literal["trainer", "sampler"]
ISMode = Literal["none", "truncate", "mask"]
ISLevel = Literal["token", "sequence", "geometric"]
RolloutEngineBackend = Literal["inprocess", "ray"]
RolloutMode = Literal["sync", "async"]
DEVICE_RE = re.compile(r"^(auto|cpu|mps|cuda(:\d+)?)$")
RUN_LENGTH_KEYS = ("steps", "eval_every", "checkpoint_every", "progress", "plot")
"""Keys a resumed run may change: how long it goes and how often it stops to evaluate, checkpoint or
report. None of them changes what a training step computes."""


class ConfigError(ValueError):
    """Invalid configuration: ``problems`` holds one line per problem (also the message, joined)."""

    def __init__(self, problems: list[str]):
        self.problems = list(problems)
        super().__init__("\n".join(self.problems))


# ---- field types: strict (YAML gives real types; a 2.5 is not an integer, "1" is not a number) ------


def _yaml_number(value: Any) -> Any:
    """YAML 1.1 reads ``1e-3`` (no dot) as text: a string that parses as a number is that number.
    NaN and infinities are refused before any bound is checked against them."""
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            return value
    if isinstance(value, float) and not math.isfinite(value):
        raise PydanticCustomError("finite_number", "expected a finite number")
    return value


def _nonempty(value: str) -> str:
    if not value.strip():
        raise PydanticCustomError("nonempty", "expected a non-empty string")
    return value


def _device(value: str) -> str:
    if not DEVICE_RE.fullmatch(value):
        raise PydanticCustomError("device", "expected auto, cpu, mps, cuda or cuda:N")
    return value


def _empty_if_none(value: Any) -> Any:
    """A section written with nothing under it (``rollout:``) is a section with every default."""
    return {} if value is None else value


_T = typing.TypeVar("_T")
Section = Annotated[_T, BeforeValidator(_empty_if_none)]
"""A section inside a section (given as a mapping, or as nothing: every default)."""
Number = Annotated[float, BeforeValidator(_yaml_number), Field(strict=True)]
"""A finite float; integers and numeric text (YAML's ``1e-3``) are accepted, booleans are not."""
NonEmptyStr = Annotated[StrictStr, AfterValidator(_nonempty)]
Device = Annotated[StrictStr, AfterValidator(_device)]

_SECTION_CONFIG = ConfigDict(extra="forbid")


if typing.TYPE_CHECKING:
    # For mypy a section is a standard dataclass, which a pydantic dataclass is (validated on top): it
    # sees the fields, their defaults (pydantic's Field(default, ...)) and dataclasses.asdict.
    from dataclasses import dataclass as section
else:
    def section(cls):
        """A config section: a pydantic dataclass that refuses unknown keys."""
        return _pydantic_dataclass(cls, config=_SECTION_CONFIG)


class _Combinations:
    """Checks of a section's fields against each other, run once its fields are valid; raised as a
    ``ConfigError`` (which ``config_from_dict`` reports line by line, next to other sections' problems)."""

    def _combinations(self) -> list[str]:
        return []

    def __post_init__(self) -> None:
        problems = self._combinations()
        if problems:
            raise ConfigError(problems)


def _show(value: Any) -> str:
    """``repr`` cut to 80 characters (a config value can be a whole pasted file)."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _type_name(value: Any) -> str:
    if value is None:
        return "null"
    return {bool: "a boolean", int: "an integer", float: "a number", str: "a string", list: "a list", dict: "a mapping"}.get(
        type(value), type(value).__name__
    )


@section
class ModelConfig(_Combinations):
    name_or_path: StrictStr | None = None
    """A Hugging Face model id or a local directory (``save_pretrained`` output). None: build a small
    Llama from scratch with the ``scratch_*`` fields and the tokenizer from ``tokenizer``."""
    tokenizer: NonEmptyStr | None = None
    """Tokenizer path; None with ``name_or_path`` uses the model's. ``"bpe"`` trains a byte-level BPE
    offline on the domains' texts (the CPU demo); it is saved under the run directory."""
    bpe_vocab_size: StrictInt = Field(2048, ge=264, le=1_000_000)
    """Vocabulary of the offline BPE: larger compresses episodes more but costs embedding parameters."""
    bpe_split_digits: StrictBool = False
    """Isolate every digit before BPE merges (as Llama and Qwen2 tokenizers do): identifiers become digit
    sequences over a ten-token alphabet, which a small model copies far more easily than multi-digit
    pieces that each occur rarely; episodes get longer (more tokens per identifier). Only with
    ``tokenizer: bpe``."""
    scratch_hidden_size: StrictInt = Field(64, ge=8, le=65536)
    scratch_num_layers: StrictInt = Field(2, ge=1, le=1024)
    scratch_num_heads: StrictInt = Field(4, ge=1, le=1024)
    scratch_num_kv_heads: StrictInt = Field(4, ge=1, le=1024)
    """Grouped-query attention: fewer KV heads shrink the KV cache, but on CPU (torch 2.13 SDPA) training
    with 1 KV head of 4 ran ~7x slower in our demo than with 4, so the demo keeps them equal."""
    scratch_intermediate_size: StrictInt = Field(128, ge=1, le=1 << 20)
    dtype: DType = "float32"
    """Compute dtype: what the forward and backward passes (matmuls, attention) and the sampler run in.
    bfloat16 halves activation memory and runs the flash kernels on GPU; CPU runs and exactness tests
    want float32. The parameters, their gradients and AdamW's state are kept in ``master_dtype``."""
    master_dtype: DType | None = None
    """Dtype of the parameters, their gradients and the optimiser's state (the master weights). null:
    float32 under bfloat16 compute (mixed precision: autocast in one process, FSDP2's
    ``MixedPrecisionPolicy(param_dtype=bfloat16, reduce_dtype=float32)`` under torchrun), else ``dtype``.
    ``bfloat16`` keeps pure bf16 weights: half the memory of the masters, but an update smaller than
    half a weight's bf16 spacing is lost (at lr 1e-6 one AdamW step changes about 2% of std-0.02 weights
    and no norm gain: benchmarks/master_weights.py)."""
    attention: Attention = "auto"
    """``auto``: on CUDA with bf16/fp16 weights flash-attention varlen when ``flash_attn`` imports, else
    PyTorch's own flash varlen kernel (``torch_varlen``); otherwise (CPU, fp32) ``sdpa_varlen``, which
    drops padding and runs causal SDPA per episode. It never picks a backend that builds a dense
    ``[B, 1, T, T]`` mask (``sdpa``, ``eager``: the references, on request). See sopgym/trainers/attention.py."""
    gradient_checkpointing: StrictBool = False
    """Trades ~30% more compute for activation memory; useful for 1.5B+ models on one GPU."""
    system_turn: SystemTurn = "keep"
    """What the model is shown of the env's system turn (the SOP and the tool schemas, rendered by the
    chat template). ``keep``: all of it (a model that reads the SOP). ``drop``: nothing; its episodes
    (rollouts, evaluations, SFT demonstrations) start at the case. The system turn is the same text in
    every episode of a domain, so it holds nothing a model trained on that domain's demonstrations
    could not keep in its weights (the prompt "baked in", as context distillation does), and on the
    CPU demo it is 78% of every episode's tokens and every attention row. Only with one env id: with
    several, the system turn is what tells their domains apart. The env, its budgets and its
    evaluator are unchanged (its ``max_context`` still counts the system turn)."""

    def _combinations(self) -> list[str]:
        out = []
        if self.bpe_split_digits and self.tokenizer != "bpe":
            out.append(f"model.bpe_split_digits: true needs model.tokenizer 'bpe', got {_show(self.tokenizer)}")
        if self.name_or_path is None and self.tokenizer is None:
            out.append("model.tokenizer: expected a tokenizer ('bpe' or a path) when model.name_or_path is null, got null")
        if self.name_or_path is not None and not self.name_or_path.strip():
            out.append(f"model.name_or_path: expected a model id or directory, got {self.name_or_path!r}")
        if self.scratch_hidden_size % self.scratch_num_heads or self.scratch_num_heads % self.scratch_num_kv_heads:
            out.append(
                f"model.scratch_hidden_size ({self.scratch_hidden_size}) must be divisible by scratch_num_heads "
                f"({self.scratch_num_heads}), and that by scratch_num_kv_heads ({self.scratch_num_kv_heads})"
            )
        if self.attention in FLASH_ATTENTION and self.dtype not in ("bfloat16", "float16"):
            out.append(f"model.attention: {self.attention!r} runs flash kernels, which need model.dtype bfloat16 or float16, got {self.dtype!r}")
        master = self.resolved_master_dtype
        if master != self.dtype and DTYPE_BITS[master] <= DTYPE_BITS[self.dtype]:
            out.append(f"model.master_dtype: expected model.dtype ({self.dtype}) or a wider float, got {master}")
        elif self.dtype == "float16" and master != "float16":
            out.append(
                f"model.master_dtype: float16 compute over {master} master weights needs loss scaling, which the trainer "
                "does not do: use model.dtype bfloat16 (same memory, float32's range), or master_dtype float16"
            )
        return out

    @property
    def resolved_master_dtype(self) -> str:
        """``master_dtype``, or its default: float32 under bfloat16 compute, else ``dtype``."""
        if self.master_dtype is not None:
            return self.master_dtype
        return "float32" if self.dtype == "bfloat16" else self.dtype


@section
class EnvWorkersConfig(_Combinations):
    """Where the envs (and their sandboxes) run while the policy generates."""


    backend: WorkerBackend = "inprocess"
    """``inprocess``: in the trainer's process, stepped one after another (no extra dependency).
    ``ray``: in ``num_workers`` Ray actors that step their envs in parallel (``pip install 'sopgym[ray]'``).
    Ray pays off when a step costs real time (Docker sandboxes, slow tools) or the envs must run on
    other hosts than the GPUs; for cheap in-process envs each round's round trip costs more than it
    saves (docs/scaling.md has the measured ratios)."""
    num_workers: StrictInt = Field(2, ge=1, le=1_000_000)
    """Ray actors; each owns the envs of every ``num_workers``-th episode slot. More workers step more
    envs at once, up to the CPUs available; a worker that dies costs only its own running episodes
    (ended as ``env_lost`` infrastructure failures: excluded from advantages, counted in
    ``rollout/infrastructure_failures``), and it is replaced."""
    address: NonEmptyStr | None = None
    """null: start Ray on this machine (loopback only, stopped at the end of the run). ``auto``: the
    cluster this machine joined with ``ray start``; ``host:6379`` or ``ray://host:10001``: that cluster,
    whose nodes need the same sopgym (and domain data) installed."""
    cpus_per_worker: Number = Field(1.0, ge=0.0, le=1e6)
    """Logical CPUs each worker reserves in Ray's scheduler. Fractions pack several workers per core,
    which suits envs that mostly wait on their sandboxes."""
    resources: dict[StrictStr, Number] = field(default_factory=dict)
    """Custom Ray resources each worker needs, e.g. ``{env_host: 1}`` to place the workers only on the
    nodes started with ``ray start --resources '{"env_host": 8}'`` (the hosts with Docker)."""

    def _combinations(self) -> list[str]:
        out = []
        if self.address is not None and self.backend != "ray":
            out.append(f"env.workers.address: set to {_show(self.address)}, which needs env.workers.backend 'ray', got {self.backend!r}")
        negative = {k: v for k, v in self.resources.items() if v < 0}
        if negative:
            out.append(f"env.workers.resources: expected amounts >= 0, got {_show(negative)}")
        return out


@section
class EnvConfig(_Combinations):
    env_ids: list[StrictStr] = field(default_factory=list)
    """Gymnasium ids of authored domains to train on (``sopgym/<Domain>-v0``); tasks alternate over them."""
    env_kwargs: dict[StrictStr, Any] = field(default_factory=dict)
    """Extra kwargs for ``gymnasium.make`` (e.g. ``reward: dense``)."""
    train_split: NonEmptyStr = "train"
    val_split: NonEmptyStr = "val"
    max_turns: StrictInt = Field(8, ge=1, le=10_000)
    """Turn cap per episode; hitting it truncates with cause ``max_turns``."""
    max_context: StrictInt = Field(2048, ge=16, le=10_000_000)
    """Token cap per episode (prompt + all turns); the env and the trainer both enforce it."""
    max_tool_output_chars: StrictInt = Field(2000, ge=16, le=10_000_000)
    allow_restricted_training: StrictBool = False
    """Train on a domain whose ``training_allowed`` is False. Recorded in MLflow when used. Never for SOP-Bench."""
    workers: Section[EnvWorkersConfig] = field(default_factory=EnvWorkersConfig)
    """Where the envs run: in-process (default) or on Ray env workers (``{backend: ray, num_workers: N}``)."""

    def _combinations(self) -> list[str]:
        out = []
        if not self.env_ids:
            out.append("env.env_ids: expected at least one environment id, got none")
        for env_id in self.env_ids:
            if "sopbench" in env_id.lower():
                out.append(f"env.env_ids: refusing to train on SOP-Bench data ({env_id}); use an authored domain")
        return out


@section
class RolloutEngineConfig(_Combinations):
    """The rollout engine (policy/engine.py): what samples the rollouts and evaluations."""


    backend: RolloutEngineBackend = "inprocess"
    """``inprocess``: the trained model itself in one process, a full copy of the weights on rank 0
    under torchrun. ``ray``: a Ray actor with its own copy of the weights, sent to it after every
    optimiser step (``pip install 'sopgym[ray]'``); it can hold a GPU of its own (``num_gpus``) or run
    on another host. The same seeded run gives the same episodes either way (tested)."""
    num_gpus: Number = Field(0.0, ge=0.0, le=1024.0)
    """GPUs the Ray actor reserves (0: it samples on CPU)."""
    num_cpus: Number = Field(1.0, ge=0.0, le=1e6)
    """Logical CPUs the Ray actor reserves in Ray's scheduler."""
    address: NonEmptyStr | None = None
    """null: start Ray on this machine (loopback only), or use the Ray this process already runs (the
    env workers'). ``auto``: the cluster this machine joined with ``ray start``; ``host:6379`` or
    ``ray://host:10001``: that cluster."""

    def _combinations(self) -> list[str]:
        if self.backend == "ray":
            return []
        out = []
        if self.num_gpus:
            out.append(f"rollout.engine.num_gpus: set to {_show(self.num_gpus)}, which needs rollout.engine.backend 'ray', got {self.backend!r}")
        if self.address is not None:
            out.append(f"rollout.engine.address: set to {_show(self.address)}, which needs rollout.engine.backend 'ray', got {self.backend!r}")
        return out


@section
class RolloutConfig(_Combinations):
    batch_size: StrictInt = Field(4, ge=1, le=1_000_000)
    """Tasks per RL step. Each contributes ``group_size`` episodes."""
    group_size: StrictInt = Field(4, ge=2, le=1_000_000)
    """Rollouts per task (same seed, same starting state). Larger groups give lower-variance advantages;
    a group of one has no baseline (its advantage is 0), hence >= 2."""
    max_new_tokens: StrictInt = Field(128, ge=1, le=10_000_000)
    """Per-turn generation cap; hitting it is counted as a token-cap truncation."""
    temperature: Number = Field(1.0, gt=0.0, le=100.0)
    """Sampling temperature; the training log-probs use the same temperature so ratios stay consistent."""
    top_p: Number = Field(1.0, gt=0.0, le=1.0)
    """Nucleus sampling. Behaviour log-probs are taken before the top-p cut (documented simplification)."""
    eval_temperature: Number = Field(0.0, ge=0.0, le=100.0)
    """0 = greedy decoding for held-out evaluation."""
    engine: Section[RolloutEngineConfig] = field(default_factory=RolloutEngineConfig)
    """Where rollouts are generated: in this process (default) or in a Ray actor
    (``{backend: ray, num_gpus: 1}``)."""
    mode: RolloutMode = "sync"
    """``sync``: each step's rollouts are sampled when the step starts, with the weights it trains
    (on-policy). ``async``: a producer thread on rank 0 samples the batches of later steps while the
    learner trains on this one, with weights ``max_staleness`` steps old (sopgym/trainers/rollout_stream.py,
    docs/scaling.md): generation overlaps the update, at the cost of off-policy samples. The engine then
    holds weights of its own (a copy in this process, or a Ray actor)."""
    max_staleness: StrictInt = Field(1, ge=0, le=1000)
    """``async`` only: the batch of step ``b`` is sampled with the weights of step ``max(start, b - K)``
    (weight versions count RL steps), so no trained sample is more than K steps older than the learner;
    a sample beyond it is dropped and counted (``async/dropped_episodes``), never trained on. 0: no
    overlap, the same run as ``sync`` bit for bit (tested)."""


@section
class AlgoConfig(_Combinations):
    advantage: Advantage = "grpo"
    """Estimator from ``advantages.ADVANTAGES``: grpo (mean/std), dr_grpo (mean only), rloo, passk."""
    passk_k: StrictInt = Field(2, ge=1, le=1_000_000)
    """k of the pass@k advantage (<= group_size)."""
    component_norm: StrictBool = False
    """Normalise each reward component within its group before summing (helps when scales differ)."""
    loss: Loss = "ppo_clip"
    """Objective from ``losses.LOSSES``: ppo_clip, cispo, is_reinforce, or rloo (REINFORCE on each
    episode's summed log-prob, the RLOO paper's; needs ``aggregation: sequence`` and one update per step)."""
    aggregation: Aggregation = "token"
    """token: every valid token weighs the same; sequence: every episode weighs the same; fixed_length
    (Dr. GRPO): each episode's token sum over a constant (``aggregation_length``), so the length of
    an answer does not change the weight of its tokens."""
    aggregation_length: StrictInt | None = Field(None, ge=1, le=100_000_000)
    """The constant of ``fixed_length``; null: the most policy tokens an episode can hold
    (``env.max_turns * rollout.max_new_tokens``)."""
    clip_low: Number = Field(0.2, ge=0.0, le=1.0)
    clip_high: Number = Field(0.2, ge=0.0, le=1000.0)
    """Clip range [1-clip_low, 1+clip_high] of the ratio (PPO) or of the detached IS weight (CISPO)."""
    kl_coef: Number = Field(0.0, ge=0.0, le=1000.0)
    """Weight of a KL penalty to a frozen copy of the initial model; 0 skips the reference model."""
    kl_estimator: KLEstimator = "k3"
    """k1, k2 or k3 (see losses.py). As a loss, k2's expected gradient is that of KL(policy || ref),
    k3's that of KL(ref || policy), and k1's is zero."""
    behaviour_logp: BehaviourLogp = "trainer"
    """Behaviour log-probs of the losses' ratios: ``trainer`` recomputes them with the training forward
    (packed, same attention path) before the update, so numerical differences between the cached
    sampler and the training forward (bf16: up to 0.11 in ratio) are not clipped as if they were
    policy change; ``sampler`` uses the log-probs recorded while sampling (no extra forward)."""
    is_correction: ISMode = "none"
    """Correct for the sampler not being the trainer (needs ``behaviour_logp: trainer``): ``truncate``
    weighs each token by ``min(pi_trainer / pi_sampler, is_cap)`` (truncated importance sampling);
    ``mask`` drops tokens (or episodes, by ``is_level``) whose ratio leaves ``[is_low, is_high]``."""
    is_level: ISLevel = "token"
    """Ratio per token, per episode (product) or per episode as the geometric mean of its tokens'."""
    is_cap: Number = Field(2.0, ge=1.0, le=1e6)
    is_low: Number = Field(0.5, gt=0.0, le=1.0)
    is_high: Number = Field(2.0, ge=1.0, le=1e6)
    filter_zero_variance: StrictBool = False
    """Drop groups whose rewards are all equal (they carry no signal under group baselines)."""
    dynamic_sampling: StrictBool = False
    """DAPO's dynamic sampling (sampling.py): after the step's ``rollout.batch_size`` groups, keep drawing
    further task groups until ``batch_size`` of them have outcome variance (not all right or all
    wrong), within ``max_extra_draws`` extra groups; only those groups are trained on (it implies
    ``filter_zero_variance``). Every optimiser step then learns from a full batch of signal, at the
    cost of more rollouts per step when most groups agree (``sampling/extra_groups`` counts them).
    False: the step trains on the groups it drew, as before."""
    max_extra_draws: StrictInt = Field(16, ge=0, le=1_000_000)
    """Extra groups dynamic sampling may draw in one step, at most (each costs ``rollout.group_size``
    episodes); when they run out the step trains on the informative groups it has, however few.
    Extra groups consume training tasks like the batch's (the task cursor moves past them)."""
    task_success_ema: Number = Field(0.5, gt=0.0, le=1.0)
    """Weight of a task's newest group in its running success estimate (``sampling.TaskSuccess``, logged
    as ``tasks/*``): 1 keeps only the last group, smaller values average over more of its groups."""
    curriculum: StrictBool = False
    """Draw part of each step's groups again from tasks already trained on whose success estimate is
    strictly between 0 and 1, weighted by the chance that a group on them is informative, and the rest
    (``curriculum_explore``) fresh from the task cursor (sampling.Curriculum: the exact rule). Extra
    draws of dynamic sampling follow the same rule. False: every group is a fresh task, as before."""
    curriculum_explore: Number = Field(0.25, ge=0.0, le=1.0)
    """Share of the curriculum's groups drawn fresh (exploration): new tasks are how it finds informative
    ones, and how the estimates of the rest stay honest. 1: all fresh (the draws without a curriculum);
    0: fresh only when too few candidates are left."""
    curriculum_pool: StrictInt = Field(256, ge=1, le=100_000_000)
    """How many of the most recently trained tasks the curriculum chooses among (older estimates are of
    an older policy)."""
    ppo_epochs: StrictInt = Field(1, ge=1, le=1000)
    num_minibatches: StrictInt = Field(1, ge=1, le=1_000_000)
    """Optimiser steps per RL step = ppo_epochs * num_minibatches. More reuse of samples, more off-policy."""

    def _combinations(self) -> list[str]:
        out = []
        if self.loss in SEQUENCE_LOSSES and self.aggregation != "sequence":
            out.append(f"algo.aggregation: loss {self.loss!r} is a sequence-level objective and needs 'sequence', got {self.aggregation!r}")
        if self.loss in SEQUENCE_LOSSES and (self.ppo_epochs, self.num_minibatches) != (1, 1):
            out.append(
                f"algo.loss: {self.loss!r} is on-policy REINFORCE (one update per step), got ppo_epochs="
                f"{self.ppo_epochs} and num_minibatches={self.num_minibatches}"
            )
        if self.is_correction != "none" and self.behaviour_logp != "trainer":
            out.append(f"algo.is_correction: {self.is_correction!r} corrects sampler vs trainer and needs behaviour_logp 'trainer', got {self.behaviour_logp!r}")
        return out


@section
class OptimConfig(_Combinations):
    lr: Number = Field(1e-5, gt=0.0, le=10.0)
    weight_decay: Number = Field(0.0, ge=0.0, le=10.0)
    beta1: Number = Field(0.9, ge=0.0, lt=1.0)
    beta2: Number = Field(0.95, ge=0.0, lt=1.0)
    warmup_steps: StrictInt = Field(0, ge=0, le=100_000_000)
    """Linear warm-up in optimiser steps, then constant."""
    grad_clip: Number = Field(1.0, ge=0.0, le=1e9)
    """Global grad-norm clip; 0 disables."""
    row_tokens: StrictInt = Field(4096, ge=8, le=100_000_000)
    """Length of a packed row. Must hold the longest episode: ``env.max_context`` + one turn
    (``rollout.max_new_tokens``) + the chat template's overhead, measured once the tokenizer exists."""
    rows_per_micro_batch: StrictInt = Field(4, ge=1, le=1_000_000)
    """Rows per forward/backward; gradients accumulate over micro-batches (exactly, see losses.py)."""


@section
class SFTConfig(_Combinations):
    num_episodes: StrictInt = Field(0, ge=0, le=100_000_000)
    """Oracle trajectories for the supervised warm start; 0 skips SFT."""
    epochs: StrictInt = Field(1, ge=1, le=10_000)
    lr: Number = Field(1e-3, gt=0.0, le=10.0)
    batch_episodes: StrictInt = Field(16, ge=1, le=1_000_000)
    """Episodes per optimiser step."""
    context_loss_weight: Number = Field(0.0, ge=0.0, le=1e6)
    """Weight of a next-token loss on the other tokens of the demonstrations (prompt, tool results),
    averaged over them, next to the policy tokens' loss. For a model trained from scratch this is its
    language-model pretraining on the domain's transcripts: tool results repeat the case's IDs and
    dates, which teaches copying far faster than the few policy tokens alone. 0 is plain SFT. RL
    never trains on these tokens."""
    short_context_steps: StrictInt = Field(0, ge=0, le=100_000_000)
    """Optimiser steps of a first curriculum stage on the same demonstrations without their system turn
    (the SOP and the tool schemas: the same text in every episode of a domain, about 80% of an
    episode's tokens), before the ``epochs`` over whole demonstrations; 0: none. A model trained from
    scratch learns to copy the case's identifiers into its calls far sooner on these short episodes
    (more of them per second, attention over a few hundred tokens instead of thousands) and keeps the
    skill when the whole prompt comes back (docs/measurements.md, "The CPU demo"). The learning-rate
    schedule runs over both stages."""
    short_context_batch_episodes: StrictInt = Field(16, ge=1, le=1_000_000)
    """Episodes per optimiser step of the short-context stage."""
    copy_steps: StrictInt = Field(0, ge=0, le=100_000_000)
    """Optimiser steps of copy pretraining before every other SFT stage: sequences of random tokens
    followed by themselves, with the loss on the repeat (``sft.copy_sequences``); 0: none. A model trained
    from scratch forms a copying mechanism (an induction head) on them within a few hundred steps, and
    with it learns to copy identifiers out of tool results, which the demonstrations alone did not
    teach it (docs/measurements.md, "Copy pretraining")."""
    copy_batch_sequences: StrictInt = Field(32, ge=1, le=1_000_000)
    """Copy sequences per optimiser step of the copy stage."""
    copy_mix_sequences: StrictInt = Field(0, ge=0, le=1_000_000)
    """Copy sequences added to every later SFT step (short-context and whole demonstrations), which keeps
    the copying mechanism while the demonstrations' positional shortcuts are learnt."""
    copy_vocab: StrictInt = Field(512, ge=2, le=10_000_000)
    """Copy sequences draw their tokens from the tokenizer's first ``copy_vocab`` non-special ids."""
    whole_steps: StrictInt = Field(0, ge=0, le=100_000_000)
    """0: ``epochs`` passes over the whole demonstrations. Otherwise that many optimiser steps of
    ``batch_episodes`` of them (drawn in passes of fresh permutations) instead, e.g. after a short-context
    stage that already used every demonstration."""
    warmup_steps: StrictInt = Field(0, ge=0, le=100_000_000)
    """Linear learning-rate warm-up over the first steps of SFT (all stages); 0: none."""
    beta1: Number = Field(0.9, ge=0.0, lt=1.0)
    beta2: Number = Field(0.999, ge=0.0, lt=1.0)
    """SFT's AdamW betas (built by ``optimise.build_optimizer``, as RL's from ``optim``). SFT's recipes were
    measured with AdamW's usual 0.999; RL's ``optim.beta2`` defaults to 0.95."""
    weight_decay: Number = Field(0.0, ge=0.0, le=10.0)
    only_successful: StrictBool = True
    """Train only on demonstrations the evaluator scores as successful (and that fit ``env.max_context``
    in tokens). False keeps failed demonstrations too (e.g. to study noisy demonstrators)."""
    noise_task_share: Number = Field(0.0, ge=0.0, le=1.0)
    """0: the envs' oracle demonstrates. Otherwise a noisy oracle (``sopgym.envs.policies.NoisyOraclePolicy``,
    seeded by the run's ``seed``) with a misconception on outcome classes that hold this share of the
    domain's train tasks: there it submits another class's decision in a ``noise_confusion`` share of
    the tasks. Imperfect demonstrations, as a real demonstrator's are, leave the SFT policy a gap
    between its greedy success and its pass@k for RL to close (docs/trainer.md, "The CPU demo"). Needs
    ``only_successful: false`` (the wrong answers are the point)."""
    noise_confusion: Number = Field(0.6, ge=0.0, le=1.0)
    """The share of a confused class's demonstrations that answer the wrong class (above 0.5: the
    wrong decision is those classes' majority)."""
    from_checkpoint: NonEmptyStr | None = None
    """Start RL from an earlier run's SFT-only checkpoint (the folder ``<run_dir>/sft`` every run with
    SFT writes when SFT ends) instead of running SFT: its weights, tokenizer and random state, so that
    RL recipes compare from the same start (with the same RL settings the run repeats the earlier
    one's RL exactly). The ``model`` section must be the checkpoint's, except the keys of how it
    computes (attention, dtype, master_dtype, gradient_checkpointing); the other ``sft`` keys are not
    used (the checkpoint's config records how it was trained)."""

    def _combinations(self) -> list[str]:
        problems = []
        if self.short_context_steps and not self.num_episodes:
            problems.append(f"sft.short_context_steps: {self.short_context_steps} steps need demonstrations, got sft.num_episodes 0")
        if self.copy_steps and not self.num_episodes:
            problems.append(f"sft.copy_steps: {self.copy_steps} steps of copy pretraining come before SFT on demonstrations, got sft.num_episodes 0")
        if self.noise_task_share and self.only_successful:
            problems.append(f"sft.noise_task_share: {self.noise_task_share} needs the noisy oracle's wrong answers kept, expected sft.only_successful false, got true")
        if self.whole_steps and self.epochs != 1:
            problems.append(f"sft.whole_steps: expected sft.epochs 1 (whole_steps replaces the epochs), got epochs {self.epochs} and whole_steps {self.whole_steps}")
        return problems


@section
class TrackingConfig(_Combinations):
    tracking_uri: NonEmptyStr | None = None
    """None: an embedded SQLite store at ``<run_dir>/mlflow.db``. Any MLflow URI otherwise."""
    experiment: NonEmptyStr = "sopgym"
    run_name: StrictStr | None = None
    enabled: StrictBool = True


@section
class AlarmsConfig(_Combinations):
    divergence_window: StrictInt = Field(3, ge=2, le=10_000)
    """Held-out evaluations the divergence alarm looks back over: it fires when the training reward
    rose and held-out success fell across the last ``divergence_window`` evaluations."""
    truncation_rate: Number = Field(0.05, ge=0.0, le=1.0)
    """The truncation alarm fires when more than this share of a step's episodes were truncated by any
    cause (turn cap, context budget, a turn cut by max_new_tokens, a sandbox failure)."""
    zero_variance_share: Number = Field(0.5, ge=0.0, le=1.0)
    """The zero-variance alarm fires when a reward component (or the total) has zero variance in more
    than this share of a step's groups: those groups give that component no learning signal."""


@section
class DistributedConfig(_Combinations):
    timeout_s: StrictInt = Field(1800, ge=10, le=7 * 24 * 3600)
    """Under torchrun: how long a rank waits in a collective for the others before the run fails.
    Ranks other than 0 wait while rank 0 runs the rollouts, the held-out evaluations and (before RL)
    the demonstrations, so it must exceed the longest of those. A rank that dies is noticed sooner:
    at once on gloo (CPU), and through torchrun stopping the other ranks on NCCL."""


@section
class TrainConfig(_Combinations):
    env: Section[EnvConfig]
    model: Section[ModelConfig]
    rollout: Section[RolloutConfig] = field(default_factory=RolloutConfig)
    algo: Section[AlgoConfig] = field(default_factory=AlgoConfig)
    optim: Section[OptimConfig] = field(default_factory=OptimConfig)
    sft: Section[SFTConfig] = field(default_factory=SFTConfig)
    tracking: Section[TrackingConfig] = field(default_factory=TrackingConfig)
    alarms: Section[AlarmsConfig] = field(default_factory=AlarmsConfig)
    distributed: Section[DistributedConfig] = field(default_factory=DistributedConfig)
    seed: StrictInt = Field(0, ge=0, le=2**31 - 1)
    steps: StrictInt = Field(10, ge=0, le=100_000_000)
    """RL steps (each: rollouts of batch_size x group_size episodes, then optimisation)."""
    run_dir: NonEmptyStr = "runs/default"
    device: Device = "auto"
    """auto: cuda when available, else cpu."""
    eval_every: StrictInt = Field(0, ge=0, le=100_000_000)
    """Held-out evaluation every N RL steps (and before/after training); 0 only before/after."""
    eval_num_tasks: StrictInt = Field(16, ge=0, le=100_000_000)
    eval_samples: StrictInt = Field(0, ge=0, le=1024)
    """Sampled episodes per held-out task (at ``rollout.temperature``) in the evaluations before and after
    RL: pass@1 and pass@k (k = eval_samples) with their intervals beside the greedy figures; 0: greedy only."""
    eval_bootstrap: StrictInt = Field(1000, ge=0, le=1_000_000)
    """Bootstrap resamples over tasks of the held-out intervals (and of the paired before/after
    difference); 0: no intervals."""
    checkpoint_every: StrictInt = Field(0, ge=0, le=100_000_000)
    """Checkpoint every N steps (and at the end, and on SIGTERM); 0: only at the end."""
    plot: StrictBool = True
    """Write reward/success curves to ``<run_dir>/curves.png``."""
    progress: StrictBool = True

    def _combinations(self) -> list[str]:
        out = []
        one_turn = self.env.max_context + self.rollout.max_new_tokens
        if self.optim.row_tokens < one_turn:
            out.append(
                f"optim.row_tokens: expected >= env.max_context + rollout.max_new_tokens = {one_turn} so every episode "
                f"fits in one row (plus the template overhead, checked once the tokenizer exists), got {self.optim.row_tokens}"
            )
        if self.model.system_turn == "drop" and len(set(self.env.env_ids)) > 1:
            out.append(
                f"model.system_turn: 'drop' needs one env id (the system turn is what tells domains apart), "
                f"got {len(set(self.env.env_ids))}: {sorted(set(self.env.env_ids))}"
            )
        if self.rollout.max_new_tokens > self.env.max_context:
            out.append(f"rollout.max_new_tokens: expected <= env.max_context ({self.env.max_context}), got {self.rollout.max_new_tokens}")
        if self.algo.advantage == "passk" and self.algo.passk_k > self.rollout.group_size:
            out.append(f"algo.passk_k: expected <= rollout.group_size ({self.rollout.group_size}), got {self.algo.passk_k}")
        episodes = self.rollout.batch_size * self.rollout.group_size
        if self.algo.num_minibatches > episodes:
            out.append(f"algo.num_minibatches: expected <= batch_size * group_size ({episodes}), got {self.algo.num_minibatches}")
        return out


def _parse_value(text: str) -> Any:
    import yaml

    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return text


def apply_overrides(raw: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Apply ``a.b=value`` strings (values parsed as YAML) to a nested dict, in place.

    Raises:
        ConfigError: an override without ``=`` or that goes through a key that is not a section.
    """
    problems = []
    for item in overrides:
        if "=" not in item:
            problems.append(f"override {item!r}: expected key=value")
            continue
        key, text = item.split("=", 1)
        parts = key.strip().split(".")
        node = raw
        for part in parts[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                problems.append(f"override {item!r}: {part} is not a section")
                break
        else:
            node[parts[-1]] = _parse_value(text)
    if problems:
        raise ConfigError(problems)
    return raw


def _unknown(keys, allowed, where: str) -> list[str]:
    out = []
    for key in sorted(map(str, keys)):
        if key not in allowed:
            close = difflib.get_close_matches(key, sorted(allowed), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else f" (expected one of {', '.join(sorted(allowed))})"
            out.append(f"{where}{key}: unknown key{hint}")
    return out


_TRAIN_CONFIG = TypeAdapter(TrainConfig)


def config_from_dict(raw: Any) -> TrainConfig:
    """Build a TrainConfig, checking every section and field; unknown keys are rejected.

    Raises:
        ConfigError: every problem found, one line each.
    """
    if not isinstance(raw, dict):
        raise ConfigError([f"config: expected a mapping of sections, got {_type_name(raw)}"])
    try:
        return _TRAIN_CONFIG.validate_python(raw)
    except ValidationError as exc:
        raise ConfigError(problems_of(exc, raw)) from None


def problems_of(exc: ValidationError, raw: dict[str, Any], root: type | None = None) -> list[str]:
    """One line per problem of a pydantic ``ValidationError`` raised while building ``root`` (default
    ``TrainConfig``) from ``raw``: the field's dotted name, what it expects, what it got."""
    out: list[str] = []
    for error in exc.errors(include_url=False):
        for line in _describe(error, raw, root or TrainConfig):
            if line not in out:  # a union reports the same field once per member
                out.append(line)
    return out


def _field_path(loc: tuple, root: type) -> tuple[list[str], type | None, Any, tuple]:
    """Walk ``loc`` through the sections: the dotted path of the field it names, the section holding
    it, the field's type (Annotated unwrapped), and the rest of ``loc`` (inside the value: a list
    index, a mapping key, a union member)."""
    path: list[str] = []
    owner: type | None = root
    hint: Any = None
    i = 0
    while i < len(loc) and owner is not None and isinstance(loc[i], str) and loc[i] in _fields(owner):
        name = loc[i]
        path.append(name)
        hint = _strip(_fields(owner)[name])
        i += 1
        if not (isinstance(hint, type) and dataclasses.is_dataclass(hint) and i < len(loc)):
            break
        owner = hint
    return path, owner, hint, tuple(loc[i:])


def _fields(cls: type | None) -> dict[str, Any]:
    return typing.get_type_hints(cls, include_extras=True) if dataclasses.is_dataclass(cls) else {}


def _strip(hint: Any) -> Any:
    """``Annotated[X, ...]`` -> ``X``; ``X | None`` -> ``X``."""
    if typing.get_origin(hint) is Annotated:
        return _strip(typing.get_args(hint)[0])
    args = typing.get_args(hint)
    rest = [a for a in args if a is not type(None)]
    if len(rest) == 1 and len(args) == 2:  # X | None
        return _strip(rest[0])
    return hint


def _lookup(raw: Any, path: list[str]) -> Any:
    for part in path:
        raw = raw.get(part) if isinstance(raw, dict) else None
    return raw


_DESCRIPTIONS = {bool: "true or false", int: "an integer", float: "a number", str: "a string"}


def _expected(hint: Any) -> str:
    """What a field of type ``hint`` takes, in words."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is list:
        return "a list of strings"
    if origin is dict:
        return "a mapping of names to numbers" if _strip(args[1]) is float else "a mapping with string keys"
    if origin is Literal:
        return "one of " + ", ".join(map(str, args))
    return _DESCRIPTIONS.get(hint, getattr(hint, "__name__", str(hint)))


def _bounds(owner: type, name: str) -> str:
    """The field's bounds as written, e.g. ``>= 0.0 and < 1.0``."""
    info = getattr(owner, "__pydantic_fields__", {}).get(name)
    parts = []
    for kind, text in ((annotated_types.Ge, ">="), (annotated_types.Gt, ">"), (annotated_types.Le, "<="), (annotated_types.Lt, "<")):
        for rule in getattr(info, "metadata", ()):
            if isinstance(rule, kind):
                parts.append(f"{text} {getattr(rule, kind.__name__.lower())}")
    return " and ".join(parts)


_BOUND_ERRORS = ("greater_than", "greater_than_equal", "less_than", "less_than_equal")


def _describe(error: ErrorDetails, raw: dict[str, Any], root: type) -> list[str]:
    """The lines of one pydantic error (an item of ``ValidationError.errors()``)."""
    kind, loc, given = error["type"], tuple(error["loc"]), error.get("input")
    path, owner, hint, inside = _field_path(loc, root)
    name = ".".join(path)
    if kind == "value_error" and isinstance(error.get("ctx", {}).get("error"), ConfigError):
        return error["ctx"]["error"].problems  # a section's (or the whole config's) combination checks
    if kind == "unexpected_keyword_argument":
        return _unknown([loc[-1]], set(_fields(owner)), name + "." if name else "")
    if kind in ("missing", "missing_argument"):
        return [f"{name}: expected a section, got none (the config needs 'env' and 'model')"]
    if kind in ("dataclass_type", "dataclass_args_type"):
        return [f"{name}: expected a section (a mapping), got {_show(given)} ({_type_name(given)})"]
    if inside and typing.get_origin(hint) in (list, dict):  # an item of a list or mapping: show the whole value
        whole = _lookup(raw, path)
        return [f"{name}: expected {_expected(hint)}, got {_show(whole)} ({_type_name(whole)})"]
    if kind == "none_required":
        return []  # the other member of an optional field says what was wrong
    return [f"{name}: {_value_problem(kind, error, hint, owner, path[-1] if path else '')}"]


def _value_problem(kind: str, error: ErrorDetails, hint: Any, owner: Any, field_name: str) -> str:
    """What is wrong with a field's value: expected vs got."""
    given = error.get("input")
    if kind == "list_type" and isinstance(given, str):
        return f"expected a list of strings, got the string {_show(given)} (write [{given}])"
    if kind == "literal_error":
        close = difflib.get_close_matches(str(given), [str(c) for c in typing.get_args(hint)], n=1)
        return f"expected {_expected(hint)}, got {_show(given)}" + (f" (did you mean {close[0]!r}?)" if close else "")
    if kind in _BOUND_ERRORS:
        return f"expected a value {_bounds(owner, field_name)}, got {_show(given)}"
    if kind == "finite_number":
        return f"expected a finite number, got {_show(given)}"
    if kind in ("nonempty", "device"):
        return f"{error['msg']}, got {_show(given)}"
    if given is None:
        return f"expected {_expected(hint)}, got null"
    extra = ""
    if kind == "int_type" and isinstance(given, str) and re.fullmatch(r"[+-]?\d+(\.\d*)?[eE][+-]?\d+", given.strip()):
        extra = " (YAML reads 1e12 as text: write the digits)"
    return f"expected {_expected(hint)}, got {_show(given)} ({_type_name(given)}){extra}"


def load_config(path: str | Path | None, overrides: list[str] | None = None) -> TrainConfig:
    """Read a YAML config (or start empty when ``path`` is None) and apply overrides.

    Raises:
        ConfigError: an unreadable file, invalid YAML, or every problem ``config_from_dict`` finds.
    """
    import yaml

    raw: Any = {}
    if path:
        try:
            text = Path(path).read_text()
        except OSError as exc:
            raise ConfigError([f"config file {str(path)!r}: cannot read it ({exc.strerror or exc})"]) from exc
        try:
            raw = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            where = getattr(exc, "problem_mark", None)
            line = f" at line {where.line + 1}" if where is not None else ""
            raise ConfigError([f"config file {str(path)!r}: invalid YAML{line}: {getattr(exc, 'problem', None) or exc}"]) from exc
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ConfigError([f"config file {str(path)!r}: expected a mapping of sections, got {_type_name(raw)}"])
    return config_from_dict(apply_overrides(raw, list(overrides or [])))


def runtime_problems(cfg: TrainConfig, check_env_ids: bool = True) -> list[str]:
    """What this machine cannot run of ``cfg``: the device, unregistered env ids, a local model or
    tokenizer path that does not exist, a flash backend without its kernel. Checked before anything runs.

    Args:
        check_env_ids: False when the caller provides its own env factory.
    """
    out = []
    import torch

    device = cfg.device
    if device.startswith("cuda") and not torch.cuda.is_available():
        out.append(f"device: {device!r} requested but torch sees no CUDA device (use cpu or auto)")
    elif device.startswith("cuda:") and int(device.split(":")[1]) >= torch.cuda.device_count():
        out.append(f"device: expected an index < {torch.cuda.device_count()}, got {device!r}")
    if device == "mps" and not (getattr(torch.backends, "mps", None) and torch.backends.mps.is_available()):
        out.append("device: 'mps' requested but it is not available here")
    if check_env_ids:
        import gymnasium

        import sopgym  # noqa: F401  (registers the sopgym/* ids)

        registered = set(gymnasium.registry)
        for env_id in cfg.env.env_ids:
            if env_id not in registered:
                close = difflib.get_close_matches(env_id, sorted(registered), n=1)
                hint = f" (did you mean {close[0]!r}?)" if close else ""
                out.append(f"env.env_ids: {env_id!r} is not a registered environment{hint}")
    for name in ("name_or_path", "tokenizer"):
        value = getattr(cfg.model, name)
        if value and value != "bpe" and _looks_local(value) and not Path(value).exists():
            out.append(f"model.{name}: {value!r} looks like a local path but does not exist")
    if cfg.sft.from_checkpoint is not None and not Path(cfg.sft.from_checkpoint).is_dir():
        out.append(f"sft.from_checkpoint: expected an SFT checkpoint folder (<run_dir>/sft), {cfg.sft.from_checkpoint!r} is none")
    if cfg.model.attention in FLASH_ATTENTION:
        from . import attention
        from .modeling import DTYPES as TORCH_DTYPES
        from .modeling import resolve_device

        if not out:
            try:
                attention.select_backend(cfg.model.attention, resolve_device(device), TORCH_DTYPES[cfg.model.dtype])
            except ValueError as exc:
                out.append(f"model.attention: {exc}")
    return out


def _looks_local(value: str) -> bool:
    return value.startswith((".", "/", "~")) or value.count("/") > 1 or Path(value).exists()


def config_to_dict(cfg: TrainConfig) -> dict[str, Any]:
    return dataclasses.asdict(cfg)


def differing_keys(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    """Dotted keys whose values differ between two ``config_to_dict`` outputs (missing counts as differing)."""
    fa, fb = flatten(a), flatten(b)
    return sorted(k for k in set(fa) | set(fb) if fa.get(k, dataclasses.MISSING) != fb.get(k, dataclasses.MISSING))


def flatten(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"a": {"b": 1}} -> {"a.b": 1}`` (for MLflow params)."""
    out: dict[str, Any] = {}
    for key, value in d.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and value and all(isinstance(k, str) for k in value):
            out.update(flatten(value, name + "."))
        else:
            out[name] = value
    return out
