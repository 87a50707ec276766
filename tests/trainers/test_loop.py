"""The RL loop end to end on a fake env: MLflow contents, SIGTERM and exact resume, licence refusal, run status,
changed configs on resume, weights-only checkpoints."""

import os
import signal

import pytest
import torch

from sopgym.trainers.loop import Killed, train
from sopgym.trainers.rollout import TrainingNotAllowed

from . import fake_env
from .helpers import fake_env_config

TIMING = ("perf/",)


def _cfg(tmp_path, tok_dir, *extra):
    return fake_env_config(tok_dir, tmp_path, *extra)


def _env(**kw):
    return lambda env_id: fake_env.FakeSopEnv(max_turns=2, shaped=True, **kw)


def test_mlflow_contents_after_a_short_run(tmp_path, tok_dir):
    from mlflow.tracking import MlflowClient

    cfg = _cfg(tmp_path, tok_dir, "steps=2", "tracking.enabled=true", "eval_num_tasks=2", "plot=true",
               "sft.num_episodes=4", "algo.kl_coef=0.01", "rollout.max_new_tokens=4")
    result = train(cfg, make_env=_env(), make_oracle=fake_env.FakeOracle)
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path.resolve() / 'mlflow.db'}")
    run = client.get_run(result.run_id)
    assert run.info.status == "FINISHED"
    metrics = run.data.metrics
    for key in (
        "rollout/reward/mean", "rollout/reward/correct", "rollout/success_rate", "val/reward/mean", "val/task_success_rate",
        "rollout/tokens/response_max", "rollout/tokens/response_mean", "rollout/truncation_rate/max_turns",
        "rollout/truncation_rate/context_budget", "rollout/turns/mean", "rollout/invalid_action_rate",
        "rollout/tool_failure_rate", "rollout/zero_variance_group_fraction", "rollout/infrastructure_failures",
        "train/loss", "train/kl", "train/entropy", "train/clip_fraction", "train/grad_norm", "train/lr",
        "perf/train_tokens_per_s", "perf/episodes_per_s", "perf/packing_efficiency", "sft/loss",
        "rollout/informative_group_fraction", "train/trained_episode_fraction", "sampling/extra_groups",
        "tasks/tracked", "tasks/success_estimate_mean", "tasks/learnable_fraction",
    ):
        assert key in metrics, key
    # max_new_tokens=4 cuts every turn: the truncation alarm fires as metric and tag
    assert metrics["alarms/truncated_episodes"] == 1.0 and "alarm/truncated_episodes" in run.data.tags
    for key in ("mismatch/logp_abs_diff_mean", "mismatch/logp_abs_diff_max", "mismatch/kl_sampler_trainer"):
        assert key in metrics, key
    assert [m.step for m in client.get_metric_history(result.run_id, "val/task_success_rate")] == [0, 2]
    assert run.data.params["algo.loss"] == "ppo_clip" and run.data.params["rollout.group_size"] == "3"
    assert "curves.png" in [a.path for a in client.list_artifacts(result.run_id)]


def test_refuses_tasks_whose_licence_forbids_training(tmp_path, tok_dir):
    with pytest.raises(TrainingNotAllowed, match="training_allowed=False"):
        train(_cfg(tmp_path / "x", tok_dir, "steps=1"), make_env=_env(training_allowed=False))
    from mlflow.tracking import MlflowClient

    cfg = _cfg(tmp_path / "y", tok_dir, "steps=1", "env.allow_restricted_training=true", "tracking.enabled=true")
    result = train(cfg, make_env=_env(training_allowed=False))
    tags = MlflowClient(tracking_uri=f"sqlite:///{(tmp_path / 'y').resolve() / 'mlflow.db'}").get_run(result.run_id).data.tags
    assert tags["override/allow_restricted_training"] == "true"


def test_infrastructure_failures_are_counted_and_not_trained(tmp_path, tok_dir):
    cfg = _cfg(tmp_path, tok_dir, "steps=1", "rollout.batch_size=1")
    seed = 0 * 1_000_003 + 0  # the first task of step 0
    result = train(cfg, make_env=_env(fail_infra_seed=seed))
    h = result.history[0]
    assert h["rollout/infrastructure_failures"] == 3 and h["train/trained_episodes"] == 0


class _Boom(RuntimeError):
    pass


@pytest.mark.parametrize("how, status", [("raise", "FAILED"), ("sigterm", "KILLED")])
def test_run_status_on_exception_and_sigterm(tmp_path, tok_dir, how, status):
    from mlflow.tracking import MlflowClient

    class Exploding(fake_env.FakeSopEnv):
        def step(self, action):
            if how == "raise":
                raise _Boom("env crashed")
            os.kill(os.getpid(), signal.SIGTERM)
            return super().step(action)

    cfg = _cfg(tmp_path, tok_dir, "steps=1", "tracking.enabled=true")
    with pytest.raises((_Boom, Killed)):
        train(cfg, make_env=lambda env_id: Exploding())
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path.resolve() / 'mlflow.db'}")
    (run,) = client.search_runs([client.get_experiment_by_name("sopgym").experiment_id])
    assert run.info.status == status


class _TermDuring(fake_env.FakeSopEnv):
    """Sends SIGTERM to its own process once, during the rollouts of the task with seed ``term_seed``."""

    sent = False
    term_seed = 2  # the first task of RL step 1 (batch_size 2, seed 0)

    def step(self, action):
        if self.seed_ == self.term_seed and not type(self).sent:
            type(self).sent = True
            os.kill(os.getpid(), signal.SIGTERM)
        return super().step(action)


def test_sigterm_saves_a_checkpoint_and_resume_continues_bit_exactly(tmp_path, tok_dir):
    from mlflow.tracking import MlflowClient

    from sopgym.trainers import checkpoint

    straight = train(_cfg(tmp_path / "a", tok_dir, "steps=4"), make_env=_env())
    cfg = _cfg(tmp_path / "b", tok_dir, "steps=4", "tracking.enabled=true")
    _TermDuring.sent = False
    with pytest.raises(Killed):
        train(cfg, make_env=lambda env_id: _TermDuring(max_turns=2, shaped=True))
    saved = checkpoint.load(tmp_path / "b")
    assert saved is not None and saved["step"] == 2  # the step in flight finished, then the checkpoint
    client = MlflowClient(tracking_uri=f"sqlite:///{(tmp_path / 'b').resolve() / 'mlflow.db'}")
    assert client.get_run(saved["mlflow_run_id"]).info.status == "KILLED"
    resumed = train(cfg, make_env=_env())
    assert resumed.run_id == saved["mlflow_run_id"]  # the same MLflow run continues
    sa, sb = straight.model.state_dict(), resumed.model.state_dict()
    assert all(torch.equal(sa[k], sb[k]) for k in sa)
    strip = lambda h: {k: v for k, v in h.items() if not k.startswith(TIMING)}  # noqa: E731
    assert [strip(h) for h in straight.history] == [strip(h) for h in resumed.history]
    assert any(h["train/grad_norm"] > 0 for h in straight.history)  # the model did train
    steps = [m.step for m in client.get_metric_history(saved["mlflow_run_id"], "rollout/reward/mean")]
    assert sorted(steps) == [0, 1, 2, 3]  # no step logged twice
    assert client.get_run(saved["mlflow_run_id"]).info.status == "FINISHED"


def test_checkpoints_load_with_weights_only(tmp_path, tok_dir):
    train(_cfg(tmp_path, tok_dir, "steps=1", "algo.kl_coef=0.01"), make_env=_env())
    payload = torch.load(tmp_path / "checkpoint.pt", map_location="cpu", weights_only=True)
    assert payload["step"] == 1 and payload["ref_model"] is not None


def test_resume_refuses_a_changed_config_naming_the_keys(tmp_path, tok_dir):
    from sopgym.trainers.config import ConfigError

    train(_cfg(tmp_path, tok_dir, "steps=1"), make_env=_env())
    with pytest.raises(ConfigError, match=r"differs from the checkpoint's in algo.clip_high, optim.lr \("):
        train(_cfg(tmp_path, tok_dir, "steps=2", "optim.lr=1e-3", "algo.clip_high=0.3"), make_env=_env())
    longer = train(_cfg(tmp_path, tok_dir, "steps=2", "eval_every=1", "progress=true"), make_env=_env())  # run-length keys
    assert len(longer.history) == 2
    forced = train(_cfg(tmp_path, tok_dir, "steps=3", "optim.lr=1e-3"), make_env=_env(), allow_config_change=True)
    assert len(forced.history) == 3


def test_resume_allowed_to_change_the_learning_rate_trains_at_the_new_one(tmp_path, tok_dir):
    """The checkpoint's optimiser and schedule hold the old learning rate: the config's must win."""
    train(_cfg(tmp_path, tok_dir, "steps=1", "optim.lr=1e-4", "optim.warmup_steps=4"), make_env=_env())
    resumed = train(_cfg(tmp_path, tok_dir, "steps=3", "optim.lr=1e-3", "optim.warmup_steps=4"), make_env=_env(),
                    allow_config_change=True)
    lrs = [h["train/lr"] for h in resumed.history]
    assert lrs == pytest.approx([1e-4 * 1 / 4, 1e-3 * 2 / 4, 1e-3 * 3 / 4]), lrs


def test_train_command_exits_2_on_a_changed_config(tmp_path, tok_dir, capsys):
    from sopgym.cli.train import main

    base = ["env.env_ids=[sopgym-test/Fake-v0]", f"model.tokenizer={tok_dir}", "model.scratch_hidden_size=32",
            "model.scratch_num_layers=1", "model.scratch_intermediate_size=64", "env.max_context=512",
            "optim.row_tokens=1024", "rollout.max_new_tokens=8", "rollout.batch_size=1", "rollout.group_size=2",
            "eval_num_tasks=0", "progress=false", "plot=false", "tracking.enabled=false", f"run_dir={tmp_path}",
            "device=cpu", "steps=1"]
    config = tmp_path / "c.yaml"
    config.write_text("{}\n")
    assert main(["--config", str(config), *base]) == 0
    assert main(["--config", str(config), *base, "optim.lr=0.5"]) == 2
    assert "optim.lr" in capsys.readouterr().err


def _never():
    raise AssertionError("a run starting from an SFT checkpoint collected demonstrations")


def test_sft_writes_an_sft_only_checkpoint_and_a_run_starting_from_it_repeats_the_rl_exactly(tmp_path, tok_dir):
    """SFT ends with ``<run_dir>/sft/`` (before any RL step); a run with ``sft.from_checkpoint`` skips SFT
    and, with the same RL settings, repeats the first run's RL: same evaluation before RL, same steps,
    same weights."""
    rl = ("steps=2", "sft.num_episodes=4", "sft.batch_episodes=2", "algo.kl_coef=0.01", "eval_num_tasks=2")
    first = train(_cfg(tmp_path / "a", tok_dir, *rl), make_env=_env(), make_oracle=fake_env.FakeOracle)
    folder = tmp_path / "a" / "sft"
    saved = torch.load(folder / "checkpoint.pt", weights_only=True)
    end = torch.load(tmp_path / "a" / "checkpoint.pt", weights_only=True)
    assert all(torch.equal(saved["model"][k], end["ref_model"][k]) for k in saved["model"])  # the start of RL
    assert any(not torch.equal(saved["model"][k], end["model"][k]) for k in saved["model"])  # RL moved on from it
    assert (folder / "tokenizer" / "tokenizer.json").exists()
    again = train(_cfg(tmp_path / "b", tok_dir, *rl, f"sft.from_checkpoint={folder}"), make_env=_env(), make_oracle=_never)
    assert again.val_before == first.val_before and again.demonstrations == first.demonstrations
    strip = lambda h: {k: v for k, v in h.items() if not k.startswith(TIMING)}  # noqa: E731
    assert [strip(h) for h in again.history] == [strip(h) for h in first.history]
    sa, sb = first.model.state_dict(), again.model.state_dict()
    assert all(torch.equal(sa[k], sb[k]) for k in sa)


def test_starting_from_an_sft_checkpoint_of_another_model_is_refused(tmp_path, tok_dir):
    from sopgym.trainers.config import ConfigError

    train(_cfg(tmp_path / "a", tok_dir, "steps=0", "sft.num_episodes=2"), make_env=_env(), make_oracle=fake_env.FakeOracle)
    other = _cfg(tmp_path / "b", tok_dir, "steps=1", "model.scratch_hidden_size=64", f"sft.from_checkpoint={tmp_path / 'a' / 'sft'}")
    with pytest.raises(ConfigError, match=r"model differs from the checkpoint's in model.scratch_hidden_size"):
        train(other, make_env=_env())
