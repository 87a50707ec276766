"""Rollouts in a Ray actor: the second implementation of the rollout-engine interface (sopgym/policy/engine.py).

``RayRolloutEngine`` starts one Ray actor holding its own copy of the policy, a Hugging Face causal
LM shipped once at start, and samples there with ``HFPolicy``, in its own process: on the learner's
host, on a GPU of its own (``num_gpus``) or on another host of a Ray cluster. The learner calls it as
it calls the in-process sampler:

* ``generate`` sends the prompts, the sampling parameters and the state of the learner's CPU
  generator; the actor samples with a generator in that state and returns the samples and the
  generator's new state, which the learner's generator takes. The draws are those in-process
  sampling would make, so a seeded run gives the same episodes with either engine (tested).
* ``load_weights`` sends the learner's full state dict (CPU tensors, ``ray.put`` once into the object
  store, from which the actor reads it) and waits until the actor has loaded it, so the next
  ``generate`` samples from the new weights. The loop calls it after every optimiser step.
* The actor runs its CPU kernels with the learner's number of threads (a matrix product's rounding can
  depend on how the work is split).

``ray`` is imported only here, when an engine is made. What it does not do: replace an actor that
dies (the run fails with Ray's error; the learner's weights and the checkpoint are intact). Generation
overlaps training when the loop's rollouts are asynchronous (``rollout.mode: async``: its producer
thread calls this engine while the learner trains; sopgym/trainers/rollout_stream.py).
"""

from __future__ import annotations

import io
import os
from collections.abc import Mapping
from typing import Any

import torch

from sopgym.policy.engine import Sample


class EngineActor:
    """The actor's side: a model, an ``HFPolicy`` on it, and the version of its weights.

    Args:
        model_bytes: ``torch.save`` of the causal LM (loaded here onto this actor's device).
        tokenizer: the trainer's tokenizer (pad id, end-of-turn ids).
        num_threads: torch's CPU threads in this process.
        policy_kwargs: ``HFPolicy``'s options (``static_cache``, ``bucket_by_length``).
    """

    def __init__(self, model_bytes: bytes, tokenizer, num_threads: int, policy_kwargs: dict[str, Any]):
        import ray

        from sopgym.policy.hf import HFPolicy

        from . import attention  # noqa: F401  (registers sopgym's attention functions with transformers here)

        torch.set_num_threads(num_threads)
        device = torch.device("cuda") if ray.get_gpu_ids() and torch.cuda.is_available() else torch.device("cpu")
        # Our own model, serialised by the learner that started this actor (not a file from elsewhere).
        model = torch.load(io.BytesIO(model_bytes), map_location=device, weights_only=False)
        self.policy = HFPolicy(model, tokenizer, **policy_kwargs)
        self.weights_version = 0

    def describe(self) -> dict[str, Any]:
        return {"pid": os.getpid(), "device": str(next(self.policy.model.parameters()).device),
                "num_threads": torch.get_num_threads(), "weights_version": self.weights_version}

    def generate(self, prompts, max_new_tokens, temperature: float, top_p: float, generator_state):
        generator = None
        if generator_state is not None:
            generator = torch.Generator()
            generator.set_state(generator_state)
        samples = self.policy.generate(prompts, max_new_tokens, temperature=temperature, top_p=top_p, generator=generator)
        return samples, (generator.get_state() if generator is not None else None)

    def load_weights(self, state_dict: Mapping[str, torch.Tensor]) -> int:
        self.policy.load_weights(state_dict)
        self.weights_version += 1
        return self.weights_version


class RayRolloutEngine:
    """A rollout engine in a Ray actor with its own copy of the weights (see the module docstring).

    Args:
        model: the causal LM to sample from; serialised at once (later changes reach the actor only
            through ``load_weights``).
        tokenizer: the trainer's tokenizer.
        num_gpus: GPUs the actor reserves (0: it samples on CPU).
        num_cpus: logical CPUs the actor reserves in Ray's scheduler.
        address: the Ray cluster (``sopgym.episodes.ray_pool.init_ray``): None starts or reuses a
            local instance on loopback; ``auto`` or ``host:port`` attaches to a cluster.
        num_threads: torch's CPU threads in the actor (default: this process's).
        static_cache, bucket_by_length: passed to the actor's ``HFPolicy``.
        start_timeout_s: how long to wait for the actor to start (Ray must place it on a node).

    Raises:
        ImportError: ray is not installed (``pip install 'sopgym[ray]'``).
        TimeoutError: the actor did not start within ``start_timeout_s`` (no node offers what it asks).
    """

    def __init__(
        self, model, tokenizer, *, num_gpus: float = 0.0, num_cpus: float = 1.0, address: str | None = None,
        num_threads: int | None = None, static_cache: bool = True, bucket_by_length: bool | None = None,
        start_timeout_s: float = 600.0,
    ):
        from sopgym.episodes.ray_pool import init_ray

        self._owns_ray = init_ray(address)
        import ray

        buffer = io.BytesIO()
        torch.save(model, buffer)
        # Any: the actor's methods are reached at run time (``handle.method.remote``), which Ray's types cannot follow
        actor_class: Any = ray.remote(num_cpus=num_cpus, num_gpus=num_gpus)(EngineActor)
        self._actor = actor_class.remote(
            buffer.getvalue(), tokenizer, num_threads or torch.get_num_threads(),
            {"static_cache": static_cache, "bucket_by_length": bucket_by_length},
        )
        try:
            self.info = ray.get(self._actor.describe.remote(), timeout=start_timeout_s)
        except ray.exceptions.GetTimeoutError as exc:
            self.close()
            raise TimeoutError(
                f"the rollout engine actor did not start within {start_timeout_s:.0f} s: expected a node with "
                f"{num_cpus} CPU(s) and {num_gpus} GPU(s) free, the cluster has {ray.available_resources()}"
            ) from exc
        self.weights_version = 0
        """How many ``load_weights`` the actor has applied."""

    def generate(
        self,
        prompts: list[list[int]],
        max_new_tokens: list[int] | int,
        temperature: float = 1.0,
        top_p: float = 1.0,
        generator: torch.Generator | None = None,
    ) -> list[Sample]:
        import ray

        state = generator.get_state() if generator is not None else None
        samples, new_state = ray.get(self._actor.generate.remote(prompts, max_new_tokens, temperature, top_p, state))
        if generator is not None:
            generator.set_state(new_state)
        return samples

    def load_weights(self, state_dict: Mapping[str, torch.Tensor]) -> None:
        import ray

        ref = ray.put({k: v.detach().to("cpu") for k, v in state_dict.items()})
        self.weights_version = ray.get(self._actor.load_weights.remote(ref))

    def close(self) -> None:
        """Stop the actor (and Ray, when this engine started it). Safe to call twice."""
        import ray

        if self._actor is not None and ray.is_initialized():
            ray.kill(self._actor)
        self._actor = None
        if self._owns_ray and ray.is_initialized():
            ray.shutdown()
        self._owns_ray = False
