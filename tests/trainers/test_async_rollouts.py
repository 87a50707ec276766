"""Asynchronous rollouts (``rollout.mode: async``, sopgym/trainers/rollout_stream.py) on the fake env: the
staleness bound checked sample by sample, K = 0 against sync bit for bit, reproducibility under random
latencies, resume, failures."""

from __future__ import annotations

import os
import random
import signal
import time

import pytest
import torch

from sopgym.policy.hf import HFPolicy
from sopgym.trainers import loop
from sopgym.trainers.episodes import Episode
from sopgym.trainers.loop import Killed, train
from sopgym.trainers.rollout_stream import RolloutStreamError, staleness, within_staleness

from . import fake_env
from .helpers import fake_env_config

TIMING = ("perf/",)
RL = ("steps=5", "algo.kl_coef=0.01", "rollout.max_new_tokens=8")


def _env(env_id=None):
    return fake_env.FakeSopEnv(max_turns=2, shaped=True)


class SlowEnv(fake_env.FakeSopEnv):
    """The fake env whose every step takes a random 0-15 ms (a tool's latency)."""

    rng = random.Random(0)

    def step(self, action):
        time.sleep(self.rng.uniform(0.0, 0.015))
        return super().step(action)


class SlowEngine:
    """An in-process engine whose every generate takes a random 0-40 ms more."""

    def __init__(self, lm, tokenizer, seed: int = 1):
        self.policy, self.rng = HFPolicy(lm, tokenizer), random.Random(seed)

    def generate(self, *args, **kwargs):
        time.sleep(self.rng.uniform(0.0, 0.04))
        return self.policy.generate(*args, **kwargs)

    def load_weights(self, state_dict):
        time.sleep(self.rng.uniform(0.0, 0.04))
        self.policy.load_weights(state_dict)

    def close(self):
        self.policy.close()


class Trained:
    """Records every episode that reaches ``rl_update`` with the learner's version at that step."""

    def __init__(self, monkeypatch):
        self.seen: list[tuple[int, Episode]] = []
        real_step, real_update = loop.rl_step, loop.rl_update
        now: list[int] = []

        def rl_step(run):
            now[:] = [run.step]
            return real_step(run)

        def rl_update(model, ref, opt, sched, episodes, *a, **k):
            self.seen.extend((now[0], ep) for ep in episodes)
            return real_update(model, ref, opt, sched, episodes, *a, **k)

        monkeypatch.setattr(loop, "rl_step", rl_step)
        monkeypatch.setattr(loop, "rl_update", rl_update)

    def ages(self) -> list[int]:
        return [step - min(ep.turn_versions) for step, ep in self.seen]


def _strip(history):
    return [{k: v for k, v in h.items() if not k.startswith(TIMING)} for h in history]


def _same_parameters(a, b) -> bool:
    sa, sb = a.model.state_dict(), b.model.state_dict()
    return all(torch.equal(sa[k], sb[k]) for k in sa)


def _episode(group_id: int, versions: list[int]) -> Episode:
    return Episode(task_id="t", group_id=group_id, seed=0, env_id="fake", turn_versions=versions)


def test_the_staleness_of_an_episode_is_the_version_minus_its_oldest_turn():
    assert staleness(_episode(0, [3, 4, 4]), 5) == 2
    assert staleness(_episode(0, []), 5) == 0  # no sampled turn: nothing stale to train on


def test_a_group_with_one_member_beyond_the_bound_is_dropped_whole_and_counted():
    episodes = [_episode(0, [4]), _episode(0, [2]), _episode(1, [4]), _episode(1, [3])]
    kept, dropped, metrics = within_staleness(episodes, version=4, max_staleness=1)
    assert [ep.group_id for ep in kept] == [1, 1] and [ep.group_id for ep in dropped] == [0, 0]
    assert metrics["async/used_episodes"] + metrics["async/dropped_episodes"] == len(episodes)
    assert metrics["async/dropped_share"] == 0.5
    assert (metrics["async/staleness/0"], metrics["async/staleness/1"]) == (1.0, 1.0)


def test_sync_rollouts_are_sampled_with_the_weights_they_train(tmp_path, tok_dir, monkeypatch):
    trained = Trained(monkeypatch)
    result = train(fake_env_config(tok_dir, tmp_path, *RL), make_env=_env)
    assert trained.seen and set(trained.ages()) == {0}
    assert [h["async/batch_version"] for h in result.history] == [0, 1, 2, 3, 4]


def test_async_with_max_staleness_0_is_the_sync_run_bit_for_bit(tmp_path, tok_dir):
    """After SFT and 5 RL steps, with an evaluation between steps: same parameters, same metrics."""
    common = (*RL, "sft.num_episodes=4", "sft.batch_episodes=2", "eval_num_tasks=2", "eval_every=2")
    sync = train(fake_env_config(tok_dir, tmp_path / "sync", *common), make_env=_env, make_oracle=fake_env.FakeOracle)
    lagged = train(fake_env_config(tok_dir, tmp_path / "async", *common, "rollout.mode=async", "rollout.max_staleness=0"),
                   make_env=_env, make_oracle=fake_env.FakeOracle)
    assert any(h["train/grad_norm"] > 0 for h in sync.history)  # it trained
    assert _same_parameters(sync, lagged)
    assert _strip(sync.history) == _strip(lagged.history)
    assert sync.val_after == lagged.val_after


@pytest.mark.parametrize("k", [1, 2])
def test_async_trains_no_sample_older_than_max_staleness_under_random_latencies(tmp_path, tok_dir, monkeypatch, k):
    """Every episode reaching a gradient, checked one by one: at most K versions old; from step K on
    exactly K (the batches were drawn ahead); used + dropped = drawn at every step."""
    trained = Trained(monkeypatch)
    cfg = fake_env_config(tok_dir, tmp_path, *RL, "steps=6", "rollout.mode=async", f"rollout.max_staleness={k}")
    result = train(cfg, make_env=lambda env_id: SlowEnv(max_turns=2, shaped=True), make_sampler=SlowEngine)
    assert len(trained.seen) > 10
    assert max(trained.ages()) <= k
    assert {s - min(ep.turn_versions) for s, ep in trained.seen if s >= k} == {k}
    for h in result.history:
        drawn = sum(h[f"async/staleness/{a}"] for a in range(k + 1)) + h["async/dropped_episodes"]
        assert h["async/used_episodes"] + h["async/dropped_episodes"] == drawn == 6
    assert [h["async/batch_version"] for h in result.history] == [max(0, s - k) for s in range(6)]


def test_the_members_of_a_group_come_from_one_weight_version_turn_by_turn(tmp_path, tok_dir, monkeypatch):
    trained = Trained(monkeypatch)
    train(fake_env_config(tok_dir, tmp_path, *RL, "rollout.mode=async", "rollout.max_staleness=1",
                          "algo.filter_zero_variance=false"), make_env=_env)
    by_group: dict[tuple[int, int], set[int]] = {}
    for step, ep in trained.seen:
        by_group.setdefault((step, ep.group_id), set()).update(ep.turn_versions)
    assert by_group and all(len(v) == 1 for v in by_group.values())


def test_an_async_run_is_the_same_whatever_the_latencies_of_the_engine_and_the_envs(tmp_path, tok_dir):
    cfg = lambda d: fake_env_config(tok_dir, tmp_path / d, *RL, "rollout.mode=async", "rollout.max_staleness=1")  # noqa: E731
    quick = train(cfg("quick"), make_env=_env)
    slow = train(cfg("slow"), make_env=lambda env_id: SlowEnv(max_turns=2, shaped=True), make_sampler=SlowEngine)
    assert any(h["train/grad_norm"] > 0 for h in quick.history)
    assert _same_parameters(quick, slow)
    assert _strip(quick.history) == _strip(slow.history)


class _TermDuring(fake_env.FakeSopEnv):
    """Sends SIGTERM once, from an env step of a task drawn in step 2 (by the producer, ahead of it)."""

    sent = False

    def step(self, action):
        if self.seed_ == 4 and not type(self).sent:
            type(self).sent = True
            os.kill(os.getpid(), signal.SIGTERM)
        return super().step(action)


def test_an_async_run_resumed_mid_run_counts_the_batches_it_discards_and_keeps_the_bound(tmp_path, tok_dir, monkeypatch):
    from sopgym.trainers import checkpoint

    cfg = fake_env_config(tok_dir, tmp_path, *RL, "steps=6", "rollout.mode=async", "rollout.max_staleness=2")
    _TermDuring.sent = False
    with pytest.raises(Killed):
        train(cfg, make_env=lambda env_id: _TermDuring(max_turns=2, shaped=True))
    saved = checkpoint.load(tmp_path)
    assert saved is not None and 1 <= saved["step"] < 6
    assert saved["discarded_batches"] >= 1  # drawn ahead of the checkpointed step
    stopped_at = saved["step"]
    trained = Trained(monkeypatch)
    resumed = train(cfg, make_env=_env)
    assert [h["step"] for h in resumed.history] == list(range(6))
    assert trained.seen and max(trained.ages()) <= 2
    versions = [h["async/batch_version"] for h in resumed.history[stopped_at:]]
    assert versions == [max(stopped_at, s - 2) for s in range(stopped_at, 6)]  # versions go on from the resume


class _FailingEngine(HFPolicy):
    calls = 0

    def generate(self, *args, **kwargs):
        type(self).calls += 1
        if type(self).calls == 6:
            raise RuntimeError("injected engine failure")
        return super().generate(*args, **kwargs)


def test_an_engine_failing_mid_run_ends_the_async_run_failed_with_its_traceback(tmp_path, tok_dir):
    from mlflow.tracking import MlflowClient

    _FailingEngine.calls = 0
    cfg = fake_env_config(tok_dir, tmp_path, *RL, "rollout.mode=async", "tracking.enabled=true")
    start = time.monotonic()
    with pytest.raises(RolloutStreamError) as err:
        train(cfg, make_env=_env, make_sampler=_FailingEngine)
    assert time.monotonic() - start < 300
    assert "injected engine failure" in str(err.value.__cause__)
    text = (tmp_path / "failures" / "rank0.txt").read_text()
    assert "RuntimeError: injected engine failure" in text
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path.resolve() / 'mlflow.db'}")
    (run,) = client.search_runs(client.search_experiments()[0].experiment_id)
    assert run.info.status == "FAILED"
