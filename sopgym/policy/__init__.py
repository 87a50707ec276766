"""Sampling one assistant turn for a batch of episodes, below its users: the trainer (its rollouts and
evaluations, sopgym/trainers/) and the local model agent (sopgym/agents/hf_local.py) both sample with
``sopgym.policy.hf.HFPolicy``.

``engine.py`` (the rollout-engine interface and ``Sample``), ``hf.py`` (the batched HF sampler, torch),
``end_of_turn.py`` (the ids that end a turn; no torch). Imports nothing of sopgym's other packages.
"""
