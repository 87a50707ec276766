"""Dynamic sampling (``algo.dynamic_sampling``), informative groups and per-task success estimates.

The runs use the RL sanity test's bandit (``bandit_env``) after its context-blind warm start: success
about 0.5, so with groups of 2 about half the groups are all right or all wrong, and dynamic sampling
has groups to skip and extra ones to draw.
"""

import pytest
import torch

from sopgym.trainers import loop
from sopgym.trainers.config import ConfigError, load_config
from sopgym.trainers.episodes import Episode
from sopgym.trainers.sampling import TaskSuccess, informative_groups, missing_groups

from .test_rl_sanity import bandit_config, train_bandit

BATCH, MAX_EXTRA = 4, 3
DYNAMIC = ["rollout.batch_size=4", "rollout.group_size=2", "steps=4", "eval_num_tasks=0", "algo.ppo_epochs=1"]


class Spy:
    """Records what the loop trains on and how many groups it draws (the real functions still run)."""

    def __init__(self, monkeypatch):
        self.trained: list[list[Episode]] = []
        self.drawn: list[int] = []
        real_update, real_draw = loop.rl_update, loop.draw_groups

        def rl_update(model, ref, opt, sched, episodes, *a, **k):
            self.trained.append(list(episodes))
            return real_update(model, ref, opt, sched, episodes, *a, **k)

        def draw_groups(run, engine, num_groups, first_group_id):
            if first_group_id == 0:
                self.drawn.append(0)
            self.drawn[-1] += num_groups
            return real_draw(run, engine, num_groups, first_group_id)

        monkeypatch.setattr(loop, "rl_update", rl_update)
        monkeypatch.setattr(loop, "draw_groups", draw_groups)


@pytest.fixture(scope="module")
def dynamic_run(tmp_path_factory, tok_dir):
    """One run with dynamic sampling on: the spy's records and the result."""
    monkeypatch = pytest.MonkeyPatch()
    spy = Spy(monkeypatch)
    try:
        cfg = bandit_config(tok_dir, tmp_path_factory.mktemp("dyn"), *DYNAMIC, "algo.dynamic_sampling=true",
                            f"algo.max_extra_draws={MAX_EXTRA}")
        result = train_bandit(cfg)
    finally:
        monkeypatch.undo()
    return spy, result


def _outcomes_by_group(episodes):
    groups = {}
    for ep in episodes:
        groups.setdefault(ep.group_id, []).append(ep.outcome)
    return groups


def test_dynamic_sampling_trains_no_group_whose_outcomes_are_all_equal(dynamic_run):
    spy, _ = dynamic_run
    assert spy.trained and all(spy.trained)
    for episodes in spy.trained:
        for gid, outcomes in _outcomes_by_group(episodes).items():
            assert max(outcomes) > min(outcomes), (gid, outcomes)


def test_extra_draws_are_counted_and_never_exceed_the_bound(dynamic_run):
    spy, result = dynamic_run
    extra = [h["sampling/extra_groups"] for h in result.history]
    assert [d - BATCH for d in spy.drawn] == extra and max(extra) <= MAX_EXTRA and sum(extra) > 0, (spy.drawn, extra)


def test_dynamic_sampling_draws_until_the_batch_is_full_or_the_draws_run_out(dynamic_run):
    spy, result = dynamic_run
    trained_groups = [len(_outcomes_by_group(eps)) for eps in spy.trained]
    extra = [h["sampling/extra_groups"] for h in result.history]
    assert all(n == BATCH or e == MAX_EXTRA for n, e in zip(trained_groups, extra)), (trained_groups, extra)


def test_dynamic_sampling_without_extra_draws_trains_as_the_zero_variance_filter(tmp_path, tok_dir):
    """With no extra draws allowed, dynamic sampling is the zero-variance filter: identical weights."""
    filtered = train_bandit(bandit_config(tok_dir, tmp_path / "a", *DYNAMIC, "algo.filter_zero_variance=true"))
    dynamic = train_bandit(bandit_config(tok_dir, tmp_path / "b", *DYNAMIC, "algo.dynamic_sampling=true", "algo.max_extra_draws=0"))
    sa, sb = filtered.model.state_dict(), dynamic.model.state_dict()
    assert all(torch.equal(sa[k], sb[k]) for k in sa)


def test_step_metrics_count_informative_groups_and_trained_episodes(dynamic_run):
    _, result = dynamic_run
    for h in result.history:
        drawn = BATCH + h["sampling/extra_groups"]
        assert h["rollout/informative_group_fraction"] == pytest.approx(1 - h["rollout/zero_variance_group_fraction"])
        assert h["train/trained_episode_fraction"] == pytest.approx(h["train/trained_episodes"] / (2 * drawn))


def _episode(task_id, group_id, success, reward=None, infra=False):
    ep = Episode(task_id=task_id, group_id=group_id, seed=0, env_id="x", messages=[], tools=None)
    ep.success, ep.reward, ep.infrastructure_failure = success, float(success if reward is None else reward), infra
    return ep


def test_task_success_is_a_moving_average_per_task_summarised_by_its_share_strictly_between_0_and_1():
    est = TaskSuccess(0.5)
    est.update([_episode("a", 0, True), _episode("a", 0, True), _episode("b", 1, False), _episode("b", 1, True)])
    est.update([_episode("a", 0, False), _episode("a", 0, False)])
    assert est.estimates == {"a": 0.5, "b": 0.5}
    est.update([_episode("c", 0, True), _episode("c", 0, True, infra=True)])
    assert est.metrics() == {"tasks/tracked": 3.0, "tasks/success_estimate_mean": 2 / 3, "tasks/learnable_fraction": 2 / 3}


def test_informative_groups_leave_out_infrastructure_failures():
    episodes = [_episode("a", 0, True), _episode("a", 0, False, infra=True), _episode("b", 1, True), _episode("b", 1, False)]
    assert informative_groups(episodes) == {1}


def test_missing_groups_stops_at_the_bound_and_at_a_full_batch():
    assert [missing_groups(1, 4, 0, 8), missing_groups(1, 4, 6, 8), missing_groups(4, 4, 0, 8), missing_groups(0, 4, 8, 8)] == [3, 2, 0, 0]


def test_config_refuses_a_negative_extra_draw_bound_and_a_non_boolean_switch(tmp_path):
    base = ["env.env_ids=[x]", "model.tokenizer=bpe"]
    with pytest.raises(ConfigError) as err:
        load_config(None, [*base, "algo.max_extra_draws=-1", "algo.dynamic_sampling=3"])
    assert "algo.max_extra_draws: expected a value >= 0" in str(err.value) and "algo.dynamic_sampling: expected true or false" in str(err.value)
