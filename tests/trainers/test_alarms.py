"""Alarms that alarm: each is induced in a real run and must fire (log warning, MLflow tag, metric),
and a healthy run must leave all of them silent."""

import logging

from sopgym.trainers.alarms import (
    ALARMS,
    DIVERGENCE,
    TRUNCATED,
    ZERO_VARIANCE,
    divergence_check,
    evaluation_points,
    truncation_check,
    zero_variance_check,
)
from sopgym.trainers.episodes import Episode
from sopgym.trainers.loop import train

from . import fake_env
from .helpers import fake_env_config


def _cfg(tmp_path, tok_dir, *extra):
    return fake_env_config(tok_dir, tmp_path, "tracking.enabled=true", *extra)


def _run_data(tmp_path, result):
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path.resolve() / 'mlflow.db'}")
    run = client.get_run(result.run_id)
    history = {name: [(m.step, m.value) for m in client.get_metric_history(result.run_id, f"alarms/{name}")] for name in ALARMS}
    return run.data.tags, history


def _fired_warnings(caplog, name):
    return [r for r in caplog.records if r.levelno == logging.WARNING and f"alarm {name}" in r.getMessage()]


def test_truncation_alarm_fires_when_episodes_hit_the_turn_cap(tmp_path, tok_dir, caplog):
    caplog.set_level(logging.WARNING, logger="sopgym.trainers")
    result = train(_cfg(tmp_path, tok_dir, "steps=1"), make_env=lambda e: fake_env.FakeSopEnv(max_turns=1, shaped=True))
    tags, history = _run_data(tmp_path, result)
    assert history[TRUNCATED] == [(0, 1.0)] and "max_turns" in tags[f"alarm/{TRUNCATED}"]
    assert _fired_warnings(caplog, TRUNCATED)


def test_zero_variance_alarm_fires_when_a_component_never_varies(tmp_path, tok_dir, caplog):
    caplog.set_level(logging.WARNING, logger="sopgym.trainers")
    # unshaped: every episode of a random model ends with reward 0, so every group has zero variance
    result = train(_cfg(tmp_path, tok_dir, "steps=1"), make_env=lambda e: fake_env.FakeSopEnv(max_turns=1))
    tags, history = _run_data(tmp_path, result)
    assert history[ZERO_VARIANCE] == [(0, 1.0)] and "correct in 100%" in tags[f"alarm/{ZERO_VARIANCE}"]
    assert _fired_warnings(caplog, ZERO_VARIANCE)


class DriftEnv(fake_env.FakeSopEnv):
    """Every reply ends the episode. Training reward rises with every training episode; held-out
    episodes are scored right during the first evaluation only: reward up, held-out success down."""

    train_episodes = 0
    val_episodes = 0

    def reset(self, *, seed=None, options=None):
        obs, info = super().reset(seed=seed, options=options)
        self.split = (options or {}).get("split", "train")
        return obs, info

    def step(self, action):
        self.turns += 1
        cls = type(self)
        if self.split == "train":
            cls.train_episodes += 1
            reward, answer = cls.train_episodes / 1000, "none"
        else:
            cls.val_episodes += 1
            reward, answer = 0.0, (self.value if cls.val_episodes <= 2 else "wrong")
        info = {
            "status": "SUBMITTED", "status_message": "", "messages": self.messages + [{"role": "assistant", "content": action}],
            "reward_components": {"correct": reward}, "truncation_cause": None, "infrastructure_failure": False,
            "episode": {
                "task_id": f"drift-{self.seed_}", "answer": {"answer": answer}, "expected": {"answer": self.value},
                "fields": [{"name": "answer", "type": "string"}], "turns": self.turns, "terminated": True,
                "truncated": False, "statuses": ["SUBMITTED"], "infrastructure_failure": False, "reward": reward,
            },
        }
        return "", reward, True, False, info


def test_divergence_alarm_fires_at_the_last_evaluation(tmp_path, tok_dir, caplog):
    caplog.set_level(logging.WARNING, logger="sopgym.trainers")
    DriftEnv.train_episodes = DriftEnv.val_episodes = 0
    cfg = _cfg(tmp_path, tok_dir, "steps=2", "eval_every=1", "eval_num_tasks=2", "alarms.divergence_window=3")
    result = train(cfg, make_env=lambda e: DriftEnv())
    tags, history = _run_data(tmp_path, result)
    # evaluations at steps 0, 1, 2: success 1, 0, 0 while training reward rises; the third is the
    # last evaluation (after the final step), where the window of 3 is first full
    assert history[DIVERGENCE] == [(0, 0.0), (1, 0.0), (2, 1.0)], history[DIVERGENCE]
    assert "held-out success fell 1.000 -> 0.000" in tags[f"alarm/{DIVERGENCE}"]
    assert result.val_after[f"alarms/{DIVERGENCE}"] == 1.0 and _fired_warnings(caplog, DIVERGENCE)


class OracleSampler:
    """A sampler (token ids in, ids out) that answers the fake env like its oracle, and submits the
    wrong colour on ``wrong_rate`` of its samples (never when greedy): a policy whose episodes end
    properly and whose rewards vary inside groups."""

    def __init__(self, tokenizer, wrong_rate=0.5):
        self.tok, self.wrong_rate = tokenizer, wrong_rate
        self.stop_ids = {tokenizer.eos_token_id}

    def generate(self, prompts, max_new_tokens, temperature=1.0, top_p=1.0, generator=None):
        import re

        import torch

        from sopgym.policy.hf import Sample

        caps = [max_new_tokens] * len(prompts) if isinstance(max_new_tokens, int) else max_new_tokens
        out = []
        for prompt, cap in zip(prompts, caps):
            text = self.tok.decode(prompt)
            results = re.findall(r"<\|im_start\|>tool\n(.*?)<\|im_end\|>", text)
            if results:
                wrong = temperature > 0 and float(torch.rand(1, generator=generator)) < self.wrong_rate
                colour = ("red" if results[-1] == "blue" else "blue") if wrong else results[-1]
                reply = '<tool_call>{"name": "submit_answer", "arguments": {"answer": "%s"}}</tool_call>' % colour
            else:
                key = re.findall(r"key: (k\d+)", text)[-1]
                reply = '<tool_call>{"name": "lookup", "arguments": {"key": "%s"}}</tool_call>' % key
            ids = (self.tok(reply, add_special_tokens=False)["input_ids"] + [self.tok.eos_token_id])[:cap]
            out.append(Sample(ids, [-0.5] * len(ids), hit_cap=ids[-1] != self.tok.eos_token_id))
        return out

    def load_weights(self, state_dict):
        pass  # scripted: the weights do not change what it says

    def close(self):
        pass


def test_a_healthy_run_raises_no_alarm(tmp_path, tok_dir, caplog):
    """Episodes that end with an answer (no truncation), rewards that vary inside groups, held-out
    success that does not fall: no alarm fires, and each was checked (metric 0)."""
    caplog.set_level(logging.WARNING, logger="sopgym.trainers")
    cfg = _cfg(tmp_path, tok_dir, "steps=3", "eval_every=1", "eval_num_tasks=4", "alarms.divergence_window=2",
               "rollout.group_size=6", "rollout.max_new_tokens=64", "rollout.batch_size=3")
    result = train(cfg, make_env=lambda e: fake_env.FakeSopEnv(max_turns=3, num_keys=1, fixed_value="blue"),
                   make_sampler=lambda model, tok: OracleSampler(tok))
    tags, history = _run_data(tmp_path, result)
    assert 0.2 < sum(h["rollout/reward/mean"] for h in result.history) / 3 < 0.8  # rewards really vary
    assert history[TRUNCATED] == [(s, 0.0) for s in range(3)] and history[ZERO_VARIANCE] == [(s, 0.0) for s in range(3)]
    assert history[DIVERGENCE] == [(s, 0.0) for s in (0, 1, 2, 3)]
    assert not [k for k in tags if k.startswith("alarm/")]
    assert not [r for r in caplog.records if "alarm" in r.getMessage()]


def _ep(cause=None, cap_hits=0):
    return Episode("t", 0, 0, "e", truncation_cause=cause, token_cap_hits=cap_hits)


def test_truncation_counts_every_cause():
    healthy = [_ep() for _ in range(19)]
    assert not truncation_check(healthy + [_ep()], 0.05).fired
    assert not truncation_check(healthy + [_ep("max_turns")], 0.05).fired  # exactly 5%: not more than
    for bad in (_ep("max_turns"), _ep("context_budget"), _ep("sandbox"), _ep(cap_hits=1)):
        check = truncation_check(healthy[:18] + [bad, bad], 0.05)
        assert check.fired, bad
    assert "max_new_tokens 2" in truncation_check(healthy[:18] + [_ep(cap_hits=1)] * 2, 0.05).message


def test_zero_variance_names_the_components():
    stats = {"rollout/zero_variance_group_fraction": 0.25, "rollout/zero_variance_fraction/format": 0.75,
             "rollout/zero_variance_fraction/correct": 0.5}
    check = zero_variance_check(stats, 0.5)
    assert check.fired and "format in 75%" in check.message and "correct" not in check.message
    assert not zero_variance_check(stats, 0.8).fired


def test_divergence_needs_rising_reward_and_falling_success_over_the_window():
    up_down = [(0, 0.1, 0.5), (8, 0.2, 0.4), (16, 0.3, 0.3)]
    assert divergence_check(up_down, 3).fired and not divergence_check(up_down[:2], 3).fired
    assert not divergence_check([(0, 0.1, 0.3), (8, 0.2, 0.4), (16, 0.3, 0.5)], 3).fired  # both rise
    assert not divergence_check([(0, 0.3, 0.5), (8, 0.2, 0.4), (16, 0.1, 0.3)], 3).fired  # both fall
    assert divergence_check(up_down, 2).fired  # only the last two


def test_evaluation_points_pair_each_evaluation_with_the_training_reward_since_the_previous_one():
    history = [{"step": s, "rollout/reward/mean": r} for s, r in enumerate([1.0, 3.0, 5.0, 7.0])]
    points = evaluation_points(history, [(0, 0.5, 0.0), (2, 0.4, 0.0), (4, 0.3, 0.0)])
    assert points == [(0, 1.0, 0.5), (2, 2.0, 0.4), (4, 6.0, 0.3)]
