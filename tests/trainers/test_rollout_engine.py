"""The rollout-engine interface (policy/engine.py) and its Ray implementation (policy/ray_engine.py):
sampling in a Ray actor with its own copy of the weights gives what sampling in this process gives."""

from __future__ import annotations

import torch

from sopgym.policy.engine import RolloutEngine
from sopgym.policy.hf import HFPolicy
from sopgym.trainers.loop import train

from . import fake_env
from .helpers import fake_env_config, tiny_model, tiny_tokenizer


def test_the_engine_actor_samples_what_this_process_samples_after_every_weight_update(ray_session):
    from sopgym.trainers.ray_engine import RayRolloutEngine

    tok = tiny_tokenizer()
    model = tiny_model(tok, attn="sdpa")
    local = HFPolicy(model, tok)
    engine = RayRolloutEngine(model, tok)
    try:
        assert isinstance(local, RolloutEngine) and isinstance(engine, RolloutEngine)
        assert engine.info["pid"] != __import__("os").getpid()
        prompts = [tok("key: k1")["input_ids"], tok("key: k22 then")["input_ids"], tok("key: k3")["input_ids"]]
        for update in range(3):
            mine, theirs = torch.Generator().manual_seed(update), torch.Generator().manual_seed(update)
            expected = local.generate(prompts, [16, 8, 12], temperature=1.0, top_p=0.9, generator=mine)
            assert engine.generate(prompts, [16, 8, 12], temperature=1.0, top_p=0.9, generator=theirs) == expected
            assert torch.equal(mine.get_state(), theirs.get_state())  # the draws used up the same randomness
            assert engine.generate(prompts, 8, temperature=0.0) == local.generate(prompts, 8, temperature=0.0)
            with torch.no_grad():  # a learner's update, then the new weights to the actor
                for p in model.parameters():
                    p.add_(torch.randn(p.shape, generator=torch.Generator().manual_seed(update)) * 0.05)
            engine.load_weights(model.state_dict())
            assert engine.weights_version == update + 1
    finally:
        engine.close()


def test_a_seeded_run_gives_the_same_episodes_sampling_in_process_or_in_the_engine_actor(ray_session, tmp_path, tok_dir):
    """Three RL steps: the same episodes (every rollout metric), losses and final weights bit for bit,
    which needs the actor to receive the learner's weights after every step."""
    def run(backend: str):
        cfg = fake_env_config(tok_dir, tmp_path / backend, "eval_num_tasks=2", "steps=3", f"rollout.engine.backend={backend}")
        return train(cfg, make_env=lambda env_id: fake_env.FakeSopEnv(max_turns=2, shaped=True))

    inprocess, actor = run("inprocess"), run("ray")
    strip = [{k: v for k, v in h.items() if not k.startswith("perf/")} for h in inprocess.history]
    assert strip == [{k: v for k, v in h.items() if not k.startswith("perf/")} for h in actor.history]
    assert inprocess.val_after == actor.val_after
    a, b = inprocess.model.state_dict(), actor.model.state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_an_async_run_with_the_engine_in_an_actor_equals_one_with_the_engine_in_process(ray_session, tmp_path, tok_dir):
    """``rollout.mode: async`` (K = 1): the producer thread calls the actor while the learner trains, and
    the run (episodes, evaluations, final weights) is the in-process async run bit for bit."""
    def run(backend: str):
        cfg = fake_env_config(tok_dir, tmp_path / backend, "eval_num_tasks=2", "eval_every=2", "steps=4",
                              "rollout.mode=async", "rollout.max_staleness=1", f"rollout.engine.backend={backend}")
        return train(cfg, make_env=lambda env_id: fake_env.FakeSopEnv(max_turns=2, shaped=True))

    inprocess, actor = run("inprocess"), run("ray")
    strip = [{k: v for k, v in h.items() if not k.startswith("perf/")} for h in inprocess.history]
    assert strip == [{k: v for k, v in h.items() if not k.startswith("perf/")} for h in actor.history]
    assert [h["async/batch_version"] for h in actor.history] == [0.0, 0.0, 1.0, 2.0]
    assert inprocess.val_after == actor.val_after
    a, b = inprocess.model.state_dict(), actor.model.state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)
