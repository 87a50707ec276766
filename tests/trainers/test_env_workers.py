"""The trainer on Ray env workers (``env.workers``): the config group is checked at load, a run on Ray
workers trains exactly as in-process, and episodes of a worker killed mid-rollout are excluded from
the advantages and counted as infrastructure failures."""

from __future__ import annotations

import os
import sys

import pytest
import torch
import yaml

from sopgym.episodes.runner import POOL_BACKENDS
from sopgym.episodes.specs import EpisodeSpec
from sopgym.policy.hf import Sample
from sopgym.trainers.config import WORKER_BACKENDS, EnvWorkersConfig, load_config
from sopgym.trainers.rollout import RolloutSettings, collect
from sopgym.trainers.rollout_metrics import assign_advantages, rollout_metrics
from sopgym.trainers.tokenizer import build_bpe_tokenizer

from . import fake_env
from .helpers import tiny_tokenizer

BASE = ["env.env_ids=[sopgym/WarehouseReceiving-v0]", "model.tokenizer=bpe"]


def test_env_workers_default_to_in_process():
    assert load_config(None, BASE).env.workers == EnvWorkersConfig(backend="inprocess")


def test_env_workers_load_from_yaml(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump({
        "env": {"env_ids": ["sopgym/WarehouseReceiving-v0"], "workers": {"backend": "ray", "num_workers": 3, "address": "auto",
                                                                       "cpus_per_worker": 1, "resources": {"env_host": 1}}},
        "model": {"tokenizer": "bpe"},
    }))
    workers = load_config(path).env.workers
    assert workers == EnvWorkersConfig("ray", 3, "auto", 1.0, {"env_host": 1})
    assert isinstance(workers.cpus_per_worker, float)


@pytest.mark.parametrize("override,message", [
    ("env.workers.backend=dask", "env.workers.backend: expected one of inprocess, ray, got 'dask'"),
    ("env.workers.num_workers=0", "env.workers.num_workers: expected a value >= 1"),
    ("env.workers.num_workers=true", "env.workers.num_workers: expected an integer, got True"),
    ("env.workers.address=auto", "needs env.workers.backend 'ray', got 'inprocess'"),
    ("env.workers.cpus_per_worker=-1", "env.workers.cpus_per_worker: expected a value >= 0.0"),
    ("env.workers.resources={gpu_host: -1}", "env.workers.resources: expected amounts >= 0, got {'gpu_host': -1.0}"),
    ("env.workers.num_worker=2", "env.workers.num_worker: unknown key (did you mean 'num_workers'?)"),
    ("env.workers=4", "env.workers: expected a section (a mapping), got 4"),
])
def test_bad_env_workers_are_refused_at_load(override, message):
    with pytest.raises(ValueError) as exc:
        load_config(None, [*BASE, override])
    assert message in str(exc.value)


def test_the_config_backends_are_the_pool_backends():
    assert WORKER_BACKENDS == POOL_BACKENDS


# ----------------------------------------------------------------------------------------- on Ray
@pytest.fixture(scope="module")
def fake_env_by_value(ray_session):
    # the workers do not see the tests folder: ship the fake env and this module's factory by value
    ray_session.cloudpickle.register_pickle_by_value(fake_env)
    ray_session.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    yield


def _cfg(tmp_path, tok_dir, *extra):
    return load_config(None, [
        "env.env_ids=[sopgym-test/Fake-v0]", f"model.tokenizer={tok_dir}", "model.scratch_hidden_size=32",
        "model.scratch_num_layers=1", "model.scratch_intermediate_size=64", "env.max_context=512",
        "optim.row_tokens=1024", "rollout.max_new_tokens=24", "rollout.batch_size=2", "rollout.group_size=3",
        "optim.lr=1e-2", "eval_num_tasks=2", "progress=false", "plot=false", "tracking.enabled=false",
        f"run_dir={tmp_path}", "device=cpu", "steps=2", *extra,
    ])


def fake_env_factory(folder):
    """The fake env, noting in ``folder`` which process built each one."""

    def make(env_id):
        from pathlib import Path

        (Path(folder) / f"{os.getpid()}-{os.urandom(4).hex()}").touch()
        return fake_env.FakeSopEnv(max_turns=2, shaped=True)

    return make


def builders(folder) -> set[int]:
    """The processes that built envs."""
    return {int(p.name.split("-")[0]) for p in folder.iterdir()}


def test_training_on_ray_env_workers_equals_training_in_process(tmp_path, fake_env_by_value):
    from sopgym.trainers.loop import train

    tok_dir = tmp_path / "tok"
    tiny_tokenizer().save_pretrained(str(tok_dir))
    local_envs, ray_envs = tmp_path / "envs-local", tmp_path / "envs-ray"
    local_envs.mkdir()
    ray_envs.mkdir()
    local = train(_cfg(tmp_path / "local", tok_dir), make_env=fake_env_factory(str(local_envs)))
    remote = train(_cfg(tmp_path / "ray", tok_dir, "env.workers.backend=ray", "env.workers.num_workers=2"),
                   make_env=fake_env_factory(str(ray_envs)))
    assert builders(local_envs) == {os.getpid()}
    assert len(builders(ray_envs)) == 2 and os.getpid() not in builders(ray_envs)  # the envs ran on 2 workers
    a, b = local.model.state_dict(), remote.model.state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)
    strip = lambda h: {k: v for k, v in h.items() if not k.startswith("perf/")}  # noqa: E731
    assert [strip(h) for h in remote.history] == [strip(h) for h in local.history]
    assert remote.val_before == local.val_before and remote.val_after == local.val_after
    assert any(h["train/grad_norm"] > 0 for h in local.history)  # it did train


WR = "sopgym/WarehouseReceiving-v0"


class Hello:
    """A token-level sampler that always "samples" ``hello`` (an invalid action), arming worker 1's
    stall before the second round is stepped."""

    def __init__(self, tok, pool, folder):
        self.tok, self.pool, self.folder, self.calls = tok, pool, folder, 0

    def generate(self, prompts, caps, **_):
        from ray_helpers import arm

        self.calls += 1
        if self.calls == 2:
            arm(self.folder, self.pool.worker_info()[1]["pid"])
        ids = self.tok("hello", add_special_tokens=False)["input_ids"] + [self.tok.eos_token_id]
        return [Sample(ids[:cap], [-0.5] * min(len(ids), cap), len(ids) > cap) for cap in caps]


def test_episodes_of_a_worker_killed_mid_rollout_are_excluded_from_advantages_and_counted(ray_session, tmp_path):
    from ray_helpers import Killer, stalling_factory

    from sopgym.episodes.ray_pool import RayEnvPool

    make = stalling_factory(str(tmp_path), max_turns=3)
    probe = make(WR)
    _, info = probe.reset(seed=0, options={"split": "train"})
    probe.close()
    tok = build_bpe_tokenizer([m["content"] for m in info["messages"]] * 2 + ["hello"] * 4, vocab_size=600)
    # two groups of two: slots 0, 1 (group 0) and 2, 3 (group 1); worker 1 holds slots 1 and 3
    specs = [EpisodeSpec(WR, seed, {"split": "train"}, group_id=g, sample=j) for g, seed in enumerate((4, 5)) for j in range(2)]
    pool = RayEnvPool(make, num_workers=2)
    try:
        killer = Killer(str(tmp_path), pool, worker=1, how="SIGKILL")
        killer.start()
        episodes = collect(pool, specs, Hello(tok, pool, str(tmp_path)), tok,
                           RolloutSettings(max_new_tokens=16, max_context=100_000, temperature=1.0))
        killer.join(5)
        assert killer.killed_pid is not None
    finally:
        pool.close()
    assert [ep.infrastructure_failure for ep in episodes] == [False, True, False, True]
    assert [ep.truncation_cause for ep in episodes] == ["max_turns", "env_lost", "max_turns", "env_lost"]
    trainable, _ = assign_advantages(episodes, "grpo")
    assert trainable == [episodes[0], episodes[2]]
    assert rollout_metrics(episodes)["rollout/infrastructure_failures"] == 2.0
