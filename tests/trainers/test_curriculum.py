"""The curriculum (``algo.curriculum``, ``sampling.Curriculum``): which training tasks a step draws again.

The runs use the RL sanity test's bandit (``bandit_env``) after its context-blind warm start, as the
dynamic-sampling tests do: success about 0.5, so with groups of 2 about half the tasks end with an
estimate strictly between 0 and 1 (candidates) and the rest at 0 or 1.
"""

import pytest
import torch

from sopgym.trainers import loop
from sopgym.trainers.config import ConfigError, load_config
from sopgym.trainers.rollout import group_spec_list
from sopgym.trainers.sampling import Curriculum

from . import bandit_env
from .test_rl_sanity import bandit_config, train_bandit

BATCH, STEPS, EXPLORE = 4, 6, 0.25
SMALL = [f"rollout.batch_size={BATCH}", "rollout.group_size=2", f"steps={STEPS}", "eval_num_tasks=0", "algo.ppo_epochs=1"]
ON = ["algo.curriculum=true", f"algo.curriculum_explore={EXPLORE}"]


class Spy:
    """Records the specs of every training draw and what the curriculum chose from (the real code runs)."""

    def __init__(self, monkeypatch):
        self.training_specs: list[list] = []
        self.evaluation_specs: list = []
        self.choices: list[tuple[dict, dict, list]] = []
        real_collect, real_draw, real_choose = loop.collect, loop.draw_groups, Curriculum.choose
        drawing = []

        def collect(pool, specs, *a, **k):
            (self.training_specs.append(list(specs)) if drawing else self.evaluation_specs.extend(specs))
            return real_collect(pool, specs, *a, **k)

        def draw_groups(*a, **k):
            drawing.append(True)
            try:
                return real_draw(*a, **k)
            finally:
                drawing.pop()

        def choose(curriculum, num_groups, estimates):
            estimates_then, seen_then = dict(estimates), dict(curriculum.seen)
            again = real_choose(curriculum, num_groups, estimates)
            self.choices.append((estimates_then, seen_then, again))
            return again

        monkeypatch.setattr(loop, "collect", collect)
        monkeypatch.setattr(loop, "draw_groups", draw_groups)
        monkeypatch.setattr(Curriculum, "choose", choose)


def _spied_run(tmp_path, tok_dir, *overrides):
    monkeypatch = pytest.MonkeyPatch()
    spy = Spy(monkeypatch)
    try:
        cfg = bandit_config(tok_dir, tmp_path, *SMALL, *overrides)
        result = train_bandit(cfg)
    finally:
        monkeypatch.undo()
    return cfg, spy, result


@pytest.fixture(scope="module")
def curriculum_run(tmp_path_factory, tok_dir):
    """One run with the curriculum on, held-out evaluations every 2 steps (so they could leak in)."""
    return _spied_run(tmp_path_factory.mktemp("cur"), tok_dir, *ON, "eval_num_tasks=4", "eval_every=2")


def _weights(result):
    return {k: v.clone() for k, v in result.model.state_dict().items()}


def test_off_by_default_every_group_is_the_next_fresh_task_from_the_cursor(tmp_path, tok_dir):
    cfg, spy, result = _spied_run(tmp_path, tok_dir)
    assert cfg.algo.curriculum is False
    expected = group_spec_list(cfg.env.env_ids, cfg.env.train_split, cfg.seed * 1_000_003, BATCH * STEPS, 2)
    drawn = [spec for specs in spy.training_specs for spec in specs]
    assert [(s.env_id, s.seed, dict(s.options), s.sample) for s in drawn] == [
        (s.env_id, s.seed, dict(s.options), s.sample) for s in expected]
    assert not any(k.startswith("sampling/curriculum") for h in result.history for k in h)


def test_curriculum_with_all_groups_exploring_trains_exactly_as_without_it(tmp_path, tok_dir):
    off = _weights(train_bandit(bandit_config(tok_dir, tmp_path / "off", *SMALL)))
    on = _weights(train_bandit(bandit_config(tok_dir, tmp_path / "on", *SMALL, "algo.curriculum=true",
                                             "algo.curriculum_explore=1")))
    assert all(torch.equal(off[k], on[k]) for k in off)


def test_the_exploration_share_is_the_configured_one_whenever_there_are_enough_candidates(curriculum_run):
    _, _, result = curriculum_run
    due = int((1 - EXPLORE) * BATCH)
    rows = [(h["sampling/curriculum_groups"], h["sampling/explore_groups"], h["sampling/curriculum_pool"]) for h in result.history]
    assert all(p == min(due, pool) and p + f == BATCH for p, f, pool in rows), rows
    assert sum(pool >= due for _, _, pool in rows) >= 2, rows  # the share was tested, not only the fallback


def test_tasks_whose_estimate_is_0_or_1_are_never_drawn_again(curriculum_run):
    _, spy, _ = curriculum_run
    where = {}
    for estimates, seen, again in spy.choices:
        where.update({v: t for t, v in seen.items()})
        assert all(0.0 < estimates[where[v]] < 1.0 for v in again), (estimates, again)
    estimates, seen, _ = spy.choices[-1]
    assert any(estimates.get(t) in (0.0, 1.0) for t in seen)  # there were such tasks to avoid


def test_repeated_tasks_are_training_tasks_drawn_fresh_before_never_held_out_ones(curriculum_run):
    cfg, spy, result = curriculum_run
    fresh_so_far: set = set()
    cursor_seed, repeated = cfg.seed * 1_000_003, 0
    for specs in spy.training_specs:  # fresh tasks are the next seeds from the cursor's; the rest are repeats
        assert all(dict(s.options) == {"split": cfg.env.train_split} for s in specs)
        fresh = {(s.env_id, s.seed) for s in specs if s.seed >= cursor_seed}
        again = {(s.env_id, s.seed) for s in specs} - fresh
        assert again <= fresh_so_far, again - fresh_so_far
        repeated += len(again)
        fresh_so_far |= fresh
        cursor_seed += len(fresh)
    assert repeated and spy.evaluation_specs  # tasks were repeated, and evaluations ran in between
    assert {dict(s.options)["split"] for s in spy.evaluation_specs} == {cfg.env.val_split}


def test_a_resumed_run_draws_and_trains_as_a_straight_one(tmp_path, tok_dir):
    straight = train_bandit(bandit_config(tok_dir, tmp_path / "a", *SMALL, *ON))
    train_bandit(bandit_config(tok_dir, tmp_path / "b", *SMALL, *ON, f"steps={STEPS // 2}"))
    resumed = train_bandit(bandit_config(tok_dir, tmp_path / "b", *SMALL, *ON))
    strip = lambda h: {k: v for k, v in h.items() if not k.startswith("perf/")}  # noqa: E731
    assert [strip(h) for h in straight.history] == [strip(h) for h in resumed.history]
    sa, sb = straight.model.state_dict(), resumed.model.state_dict()
    assert all(torch.equal(sa[k], sb[k]) for k in sa)
    assert sum(h["sampling/curriculum_groups"] for h in straight.history[STEPS // 2:]) > 0


def test_the_exploration_share_is_exact_over_draws_of_one_group():
    cur = Curriculum(explore=0.3, pool=100, group_size=2, seed=0)
    cur.seen = {f"t{i}": (bandit_env.ID, i) for i in range(50)}
    estimates = {t: 0.5 for t in cur.seen}
    cur.begin_step(estimates)
    again = [cur.choose(1, estimates) for _ in range(10)]
    assert sum(map(len, again)) == 7 and len({v for a in again for v in a}) == 7


def test_candidates_are_weighted_by_the_chance_of_an_informative_group():
    cur = Curriculum(explore=0.0, pool=10, group_size=4, seed=0)
    cur.seen = {"a": ("x", 1), "b": ("x", 2), "c": ("x", 3), "d": ("x", 4)}
    assert cur.candidates({"a": 0.0, "b": 1.0, "c": 0.5, "d": 0.25}) == [("c", 1 - 2 * 0.5**4), ("d", 1 - 0.25**4 - 0.75**4)]


def test_config_refuses_an_exploration_share_outside_0_1_an_empty_pool_and_a_non_boolean_switch():
    base = ["env.env_ids=[x]", "model.tokenizer=bpe"]
    with pytest.raises(ConfigError) as err:
        load_config(None, [*base, "algo.curriculum_explore=1.5", "algo.curriculum_pool=0", "algo.curriculum=maybe"])
    text = str(err.value)
    assert "algo.curriculum_explore: expected a value >= 0.0 and <= 1.0, got 1.5" in text
    assert "algo.curriculum_pool: expected a value >= 1 and <= 100000000, got 0" in text
    assert "algo.curriculum: expected true or false, got 'maybe'" in text
