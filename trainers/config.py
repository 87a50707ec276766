"""Typed training configuration: nested dataclasses, loaded from YAML with ``key.sub=value`` overrides.

Every field documents the trade-off it controls. Invalid values and combinations raise ``ValueError``
in ``__post_init__`` so a bad config fails before any model is built.

Example:
    >>> cfg = load_config("configs/demo-cpu.yaml", ["rollout.group_size=4", "steps=10"])
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ADVANTAGES = ("grpo", "dr_grpo", "rloo", "passk")
LOSSES = ("ppo_clip", "cispo", "is_reinforce")
AGGREGATIONS = ("token", "sequence")
ATTENTION = ("auto", "flash_varlen", "sdpa_varlen", "sdpa", "eager")
DTYPES = ("float32", "bfloat16", "float16", "float64")
WORKER_BACKENDS = ("inprocess", "ray")
"""Must equal ``sopgym.evaluation.runner.POOL_BACKENDS`` (tested)."""


@dataclass
class ModelConfig:
    name_or_path: str | None = None
    """A Hugging Face model id or a local directory (``save_pretrained`` output). None: build a small
    Llama from scratch with the ``scratch_*`` fields and the tokenizer from ``tokenizer``."""
    tokenizer: str | None = None
    """Tokenizer path; None with ``name_or_path`` uses the model's. ``"bpe"`` trains a byte-level BPE
    offline on the domains' texts (the CPU demo); it is saved under the run directory."""
    bpe_vocab_size: int = 2048
    """Vocabulary of the offline BPE: larger compresses episodes more but costs embedding parameters."""
    scratch_hidden_size: int = 64
    scratch_num_layers: int = 2
    scratch_num_heads: int = 4
    scratch_num_kv_heads: int = 4
    """Grouped-query attention: fewer KV heads shrink the KV cache, but on CPU (torch 2.13 SDPA) training
    with 1 KV head of 4 ran ~7x slower in our demo than with 4, so the demo keeps them equal."""
    scratch_intermediate_size: int = 128
    dtype: str = "float32"
    """Parameter dtype. bfloat16 halves memory on GPU; CPU runs and exactness tests want float32."""
    attention: str = "auto"
    """``auto`` picks flash-attention varlen on CUDA when ``flash_attn`` imports, else SDPA with a block mask.
    ``sdpa_varlen`` drops padding and runs causal SDPA per episode (the CPU analogue of flash varlen; see
    trainers/attention.py and docs/benchmarks.md)."""
    gradient_checkpointing: bool = False
    """Trades ~30% more compute for activation memory; useful for 1.5B+ models on one GPU."""

    def __post_init__(self) -> None:
        if self.dtype not in DTYPES:
            raise ValueError(f"model.dtype must be one of {DTYPES}, got {self.dtype!r}")
        if self.attention not in ATTENTION:
            raise ValueError(f"model.attention must be one of {ATTENTION}, got {self.attention!r}")
        if self.name_or_path is None and self.tokenizer is None:
            raise ValueError("model.tokenizer is required when model.name_or_path is None (use 'bpe')")
        if self.scratch_hidden_size % self.scratch_num_heads or self.scratch_num_heads % self.scratch_num_kv_heads:
            raise ValueError("model.scratch_hidden_size must be divisible by scratch_num_heads, and that by scratch_num_kv_heads")


@dataclass
class EnvWorkersConfig:
    """Where the envs (and their sandboxes) run while the policy generates."""

    backend: str = "inprocess"
    """``inprocess``: in the trainer's process, stepped one after another (no extra dependency).
    ``ray``: in ``num_workers`` Ray actors that step their envs in parallel (``pip install 'sopgym[ray]'``).
    Ray pays off when a step costs real time (Docker sandboxes, slow tools) or the envs must run on
    other hosts than the GPUs; for cheap in-process envs each round's round trip costs more than it
    saves (docs/scaling.md has the measured ratios)."""
    num_workers: int = 2
    """Ray actors; each owns the envs of every ``num_workers``-th episode slot. More workers step more
    envs at once, up to the CPUs available; a worker that dies costs only its own running episodes
    (ended as ``env_lost`` infrastructure failures: excluded from advantages, counted in
    ``rollout/infrastructure_failures``), and it is replaced."""
    address: str | None = None
    """null: start Ray on this machine (loopback only, stopped at the end of the run). ``auto``: the
    cluster this machine joined with ``ray start``; ``host:6379`` or ``ray://host:10001``: that cluster,
    whose nodes need the same sopgym (and domain data) installed."""
    cpus_per_worker: float = 1.0
    """Logical CPUs each worker reserves in Ray's scheduler. Fractions pack several workers per core,
    which suits envs that mostly wait on their sandboxes."""
    resources: dict[str, float] = field(default_factory=dict)
    """Custom Ray resources each worker needs, e.g. ``{env_host: 1}`` to place the workers only on the
    nodes started with ``ray start --resources '{"env_host": 8}'`` (the hosts with Docker)."""

    def __post_init__(self) -> None:
        if self.backend not in WORKER_BACKENDS:
            raise ValueError(f"env.workers.backend must be one of {WORKER_BACKENDS}, got {self.backend!r}")
        if isinstance(self.num_workers, bool) or not isinstance(self.num_workers, int) or self.num_workers < 1:
            raise ValueError(f"env.workers.num_workers must be an integer >= 1, got {self.num_workers!r}")
        if self.address is not None and (not isinstance(self.address, str) or not self.address.strip()):
            raise ValueError(f"env.workers.address must be null or a Ray address (auto, host:port, ray://host:port), got {self.address!r}")
        if self.address is not None and self.backend != "ray":
            raise ValueError(f"env.workers.address is set ({self.address!r}) but env.workers.backend is {self.backend!r}, expected 'ray'")
        if isinstance(self.cpus_per_worker, bool) or not isinstance(self.cpus_per_worker, (int, float)) or self.cpus_per_worker < 0:
            raise ValueError(f"env.workers.cpus_per_worker must be a number >= 0, got {self.cpus_per_worker!r}")
        if not isinstance(self.resources, dict) or not all(
            isinstance(k, str) and not isinstance(v, bool) and isinstance(v, (int, float)) and v >= 0 for k, v in self.resources.items()
        ):
            raise ValueError(f"env.workers.resources must map resource names to numbers >= 0, got {self.resources!r}")


@dataclass
class EnvConfig:
    env_ids: list[str] = field(default_factory=list)
    """Gymnasium ids of authored domains to train on (``sopgym/<Domain>-v0``); tasks alternate over them."""
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    """Extra kwargs for ``gymnasium.make`` (e.g. ``reward: dense``)."""
    train_split: str = "train"
    val_split: str = "val"
    max_turns: int = 8
    """Turn cap per episode; hitting it truncates with cause ``max_turns``."""
    max_context: int = 2048
    """Token cap per episode (prompt + all turns); the env and the trainer both enforce it."""
    max_tool_output_chars: int = 2000
    allow_restricted_training: bool = False
    """Train on a domain whose ``training_allowed`` is False. Recorded in MLflow when used. Never for SOP-Bench."""
    workers: EnvWorkersConfig = field(default_factory=EnvWorkersConfig)
    """Where the envs run: in-process (default) or on Ray env workers (``{backend: ray, num_workers: N}``)."""

    def __post_init__(self) -> None:
        if isinstance(self.workers, dict):
            allowed = {f.name for f in dataclasses.fields(EnvWorkersConfig)}
            bad = set(self.workers) - allowed
            if bad:
                raise ValueError(f"unknown keys in env.workers: {sorted(bad)} (expected some of {sorted(allowed)})")
            self.workers = EnvWorkersConfig(**_coerce(EnvWorkersConfig, self.workers))
        elif not isinstance(self.workers, EnvWorkersConfig):
            raise ValueError(f"env.workers must be a mapping, got {self.workers!r}")
        if not self.env_ids:
            raise ValueError("env.env_ids must name at least one environment")
        for env_id in self.env_ids:
            if "sopbench" in env_id.lower():
                raise ValueError(f"refusing to train on SOP-Bench data ({env_id}); use an authored domain")
        if self.max_turns < 1 or self.max_context < 16:
            raise ValueError("env.max_turns must be >= 1 and env.max_context >= 16")


@dataclass
class RolloutConfig:
    batch_size: int = 4
    """Tasks per RL step. Each contributes ``group_size`` episodes."""
    group_size: int = 4
    """Rollouts per task (same seed, same starting state). Larger groups give lower-variance advantages."""
    max_new_tokens: int = 128
    """Per-turn generation cap; hitting it is counted as a token-cap truncation."""
    temperature: float = 1.0
    """Sampling temperature; the training log-probs use the same temperature so ratios stay consistent."""
    top_p: float = 1.0
    """Nucleus sampling. Behaviour log-probs are taken before the top-p cut (documented simplification)."""
    eval_temperature: float = 0.0
    """0 = greedy decoding for held-out evaluation."""

    def __post_init__(self) -> None:
        if self.batch_size < 1 or self.group_size < 1:
            raise ValueError("rollout.batch_size and rollout.group_size must be >= 1")
        if self.temperature <= 0:
            raise ValueError("rollout.temperature must be > 0 (use eval_temperature=0 for greedy evaluation)")
        if not 0 < self.top_p <= 1:
            raise ValueError("rollout.top_p must be in (0, 1]")
        if self.max_new_tokens < 1 or self.eval_temperature < 0:
            raise ValueError("rollout.max_new_tokens must be >= 1 and eval_temperature >= 0")


@dataclass
class AlgoConfig:
    advantage: str = "grpo"
    """Estimator from ``advantages.ADVANTAGES``: grpo (mean/std), dr_grpo (mean only), rloo, passk."""
    passk_k: int = 2
    """k of the pass@k advantage (<= group_size)."""
    component_norm: bool = False
    """Normalise each reward component within its group before summing (helps when scales differ)."""
    loss: str = "ppo_clip"
    """Objective from ``losses.LOSSES``: ppo_clip, cispo, is_reinforce."""
    aggregation: str = "token"
    """token: every valid token weighs the same; sequence: every episode weighs the same."""
    clip_low: float = 0.2
    clip_high: float = 0.2
    """Clip range [1-clip_low, 1+clip_high] of the ratio (PPO) or of the detached IS weight (CISPO)."""
    kl_coef: float = 0.0
    """Weight of a k3 KL penalty to a frozen copy of the initial model; 0 skips the reference model."""
    filter_zero_variance: bool = False
    """Drop groups whose rewards are all equal (they carry no signal under group baselines)."""
    ppo_epochs: int = 1
    num_minibatches: int = 1
    """Optimiser steps per RL step = ppo_epochs * num_minibatches. More reuse of samples, more off-policy."""

    def __post_init__(self) -> None:
        if self.advantage not in ADVANTAGES:
            raise ValueError(f"algo.advantage must be one of {ADVANTAGES}, got {self.advantage!r}")
        if self.loss not in LOSSES:
            raise ValueError(f"algo.loss must be one of {LOSSES}, got {self.loss!r}")
        if self.aggregation not in AGGREGATIONS:
            raise ValueError(f"algo.aggregation must be one of {AGGREGATIONS}, got {self.aggregation!r}")
        if self.clip_low < 0 or self.clip_high < 0 or self.kl_coef < 0:
            raise ValueError("algo.clip_low, algo.clip_high and algo.kl_coef must be >= 0")
        if self.ppo_epochs < 1 or self.num_minibatches < 1 or self.passk_k < 1:
            raise ValueError("algo.ppo_epochs, algo.num_minibatches and algo.passk_k must be >= 1")


@dataclass
class OptimConfig:
    lr: float = 1e-5
    weight_decay: float = 0.0
    beta1: float = 0.9
    beta2: float = 0.95
    warmup_steps: int = 0
    """Linear warm-up in optimiser steps, then constant."""
    grad_clip: float = 1.0
    """Global grad-norm clip; 0 disables."""
    row_tokens: int = 2048
    """Length of a packed row. Must hold the longest episode (>= env.max_context)."""
    rows_per_micro_batch: int = 4
    """Rows per forward/backward; gradients accumulate over micro-batches (exactly, see losses.py)."""

    def __post_init__(self) -> None:
        if self.lr <= 0 or self.row_tokens < 8 or self.rows_per_micro_batch < 1:
            raise ValueError("optim.lr must be > 0, optim.row_tokens >= 8, optim.rows_per_micro_batch >= 1")
        if self.grad_clip < 0 or self.warmup_steps < 0:
            raise ValueError("optim.grad_clip and optim.warmup_steps must be >= 0")


@dataclass
class SFTConfig:
    num_episodes: int = 0
    """Oracle trajectories for the supervised warm start; 0 skips SFT."""
    epochs: int = 1
    lr: float = 1e-3
    batch_episodes: int = 16
    """Episodes per optimiser step."""
    context_loss_weight: float = 0.0
    """Weight of a next-token loss on the other tokens of the demonstrations (prompt, tool results),
    averaged over them, next to the policy tokens' loss. For a model trained from scratch this is its
    language-model pretraining on the domain's transcripts: tool results repeat the case's IDs and
    dates, which teaches copying far faster than the few policy tokens alone. 0 is plain SFT. RL
    never trains on these tokens."""
    only_successful: bool = True
    """Train only on demonstrations the evaluator scores as successful (and that fit ``env.max_context``
    in tokens). False keeps failed demonstrations too (e.g. to study noisy demonstrators)."""

    def __post_init__(self) -> None:
        if self.num_episodes < 0 or self.epochs < 1 or self.lr <= 0 or self.batch_episodes < 1:
            raise ValueError("sft.num_episodes >= 0, sft.epochs >= 1, sft.lr > 0, sft.batch_episodes >= 1")
        if self.context_loss_weight < 0:
            raise ValueError(f"sft.context_loss_weight must be >= 0, got {self.context_loss_weight}")


@dataclass
class TrackingConfig:
    tracking_uri: str | None = None
    """None: an embedded SQLite store at ``<run_dir>/mlflow.db``. Any MLflow URI otherwise."""
    experiment: str = "sopgym"
    run_name: str | None = None
    enabled: bool = True


@dataclass
class TrainConfig:
    env: EnvConfig
    model: ModelConfig
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    algo: AlgoConfig = field(default_factory=AlgoConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    sft: SFTConfig = field(default_factory=SFTConfig)
    tracking: TrackingConfig = field(default_factory=TrackingConfig)
    seed: int = 0
    steps: int = 10
    """RL steps (each: rollouts of batch_size x group_size episodes, then optimisation)."""
    run_dir: str = "runs/default"
    device: str = "auto"
    """auto: cuda when available, else cpu."""
    eval_every: int = 0
    """Held-out evaluation every N RL steps (and before/after training); 0 only before/after."""
    eval_num_tasks: int = 16
    checkpoint_every: int = 0
    """Checkpoint every N steps (and at the end); 0: only at the end."""
    plot: bool = True
    """Write reward/success curves to ``<run_dir>/curves.png``."""
    progress: bool = True

    def __post_init__(self) -> None:
        if self.steps < 0 or self.eval_every < 0 or self.checkpoint_every < 0 or self.eval_num_tasks < 0:
            raise ValueError("steps, eval_every, checkpoint_every and eval_num_tasks must be >= 0")
        if self.optim.row_tokens < self.env.max_context:
            raise ValueError("optim.row_tokens must be >= env.max_context so every episode fits in one row")
        if self.algo.advantage == "passk" and self.algo.passk_k > self.rollout.group_size:
            raise ValueError("algo.passk_k must be <= rollout.group_size")
        if self.algo.num_minibatches > self.rollout.batch_size * self.rollout.group_size:
            raise ValueError("algo.num_minibatches must be <= batch_size * group_size")


_SECTIONS = {
    "env": EnvConfig,
    "model": ModelConfig,
    "rollout": RolloutConfig,
    "algo": AlgoConfig,
    "optim": OptimConfig,
    "sft": SFTConfig,
    "tracking": TrackingConfig,
}


def _parse_value(text: str) -> Any:
    import yaml

    return yaml.safe_load(text)


def apply_overrides(raw: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Apply ``a.b=value`` strings (values parsed as YAML) to a nested dict, in place.

    Raises:
        ValueError: an override without ``=`` or naming an unknown section or field.
    """
    for item in overrides:
        if "=" not in item:
            raise ValueError(f"override {item!r} is not key=value")
        key, text = item.split("=", 1)
        parts = key.strip().split(".")
        node = raw
        for part in parts[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ValueError(f"override {item!r}: {part} is not a section")
        node[parts[-1]] = _parse_value(text)
    return raw


def _coerce(cls, values: dict[str, Any]) -> dict[str, Any]:
    """YAML reads ``1e-3`` as a string and ``1`` as an int: convert them for float fields."""
    out = dict(values)
    for f in dataclasses.fields(cls):
        if f.name in out and f.type == "float" and isinstance(out[f.name], (str, int)) and not isinstance(out[f.name], bool):
            try:
                out[f.name] = float(out[f.name])
            except ValueError as exc:
                raise ValueError(f"{cls.__name__}.{f.name} must be a number, got {out[f.name]!r}") from exc
    return out


def config_from_dict(raw: dict[str, Any]) -> TrainConfig:
    """Build a TrainConfig, rejecting unknown keys so typos do not pass silently."""
    top_fields = {f.name for f in dataclasses.fields(TrainConfig)}
    unknown = set(raw) - top_fields
    if unknown:
        raise ValueError(f"unknown config keys: {sorted(unknown)}")
    kwargs: dict[str, Any] = {}
    for name, value in raw.items():
        if name in _SECTIONS:
            cls = _SECTIONS[name]
            allowed = {f.name for f in dataclasses.fields(cls)}
            bad = set(value or {}) - allowed
            if bad:
                raise ValueError(f"unknown keys in {name}: {sorted(bad)}")
            kwargs[name] = cls(**_coerce(cls, value or {}))
        else:
            kwargs[name] = value
    if "env" not in kwargs or "model" not in kwargs:
        raise ValueError("config needs 'env' and 'model' sections")
    return TrainConfig(**kwargs)


def load_config(path: str | Path | None, overrides: list[str] | None = None) -> TrainConfig:
    """Read a YAML config (or start empty when ``path`` is None) and apply overrides."""
    import yaml

    raw = yaml.safe_load(Path(path).read_text()) if path else {}
    return config_from_dict(apply_overrides(raw or {}, list(overrides or [])))


def config_to_dict(cfg: TrainConfig) -> dict[str, Any]:
    return dataclasses.asdict(cfg)


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
