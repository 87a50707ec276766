"""The rollout-engine interface: what the RL loop asks of whatever generates its rollouts.

The trainer's loop (sopgym/trainers/loop.py), its rollouts (``rollout.TokenAgent``) and its held-out evaluations call only this:

* ``generate(prompts, max_new_tokens, temperature=, top_p=, generator=)``: token ids in (each
  episode so far, rendered by the trainer's chat template), one turn per prompt out: the sampled ids
  and the log-prob of each under ``softmax(logits / temperature)`` (before the top-p cut; temperature
  0 is greedy with log-probs at temperature 1), stopping at an end-of-turn id or the row's cap.
* ``load_weights(state_dict)``: the learner's new weights (the causal LM's full state dict, keys as
  in ``model.state_dict()``), after every optimiser step and after SFT or a resume. Generation after
  the call uses them.
* ``close()``: release what the engine holds (processes, devices).

``generator`` is a CPU ``torch.Generator`` that the engine advances exactly as sampling in this
process would: an engine elsewhere takes its state with the request and hands the new state back.
That keeps a run reproducible from its checkpointed generator, whichever engine samples.

Implementations:

* ``sopgym.policy.hf.HFPolicy``: in this process, on a Hugging Face model: the learner's own model in a
  one-process run (``load_weights`` of its own tensors is a no-op), a full copy of the weights on
  rank 0 of a data-parallel learner.
* ``sopgym.trainers.ray_engine.RayRolloutEngine``: in a Ray actor that holds its own copy of the weights and
  receives the state dict after every step.

docs/trainer.md ("Rollout engines") says how another engine (vLLM, SGLang) plugs in, and what the
tests ask of it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import torch


@dataclass
class Sample:
    """One generated turn."""

    ids: list[int]
    logps: list[float]
    """Log-prob of each sampled id under ``softmax(logits / temperature)``, before any top-p cut."""
    hit_cap: bool
    """Stopped by max_new_tokens rather than by an end-of-turn id."""
    weights_version: int | None = None
    """The version of the weights that sampled it, when the caller tags it (the trainer's rollouts:
    sopgym/trainers/rollout_stream.py); engines leave it None."""


@runtime_checkable
class RolloutEngine(Protocol):
    """What the loop calls to sample (see the module docstring for the contract)."""

    def generate(
        self,
        prompts: list[list[int]],
        max_new_tokens: list[int] | int,
        temperature: float = 1.0,
        top_p: float = 1.0,
        generator: torch.Generator | None = None,
    ) -> list[Sample]: ...

    def load_weights(self, state_dict: Mapping[str, torch.Tensor]) -> None: ...

    def close(self) -> None: ...
