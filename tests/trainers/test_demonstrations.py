"""SFT demonstrations: complete, successful, measured in tokens; what is dropped is counted and explained."""

import pytest

from sopgym.episodes.factory import EnvFactory
from sopgym.trainers.config import load_config
from sopgym.trainers.loop import train
from sopgym.trainers.rollout import EnvPool, group_spec_list
from sopgym.trainers.sft import collect_trajectories, default_oracle, select_demonstrations

from . import fake_env
from .helpers import tiny_tokenizer


def _fake_trajectories(wrong_rate, n=12):
    pool = EnvPool(lambda env_id: fake_env.FakeSopEnv(max_turns=3))
    specs = group_spec_list(["fake"], "train", 0, n, 1)
    return collect_trajectories(pool, specs, lambda: fake_env.FakeOracle(wrong_rate=wrong_rate))


def test_failed_demonstrations_are_dropped_and_counted():
    trajs = _fake_trajectories(wrong_rate=0.5)
    num_failed = sum(not t["success"] for t in trajs)
    assert 0 < num_failed < len(trajs)  # the fixture has both kinds
    episodes, stats = select_demonstrations(tiny_tokenizer(), trajs, len(trajs), max_context=512)
    assert len(episodes) == len(trajs) - num_failed
    assert stats["sft/demos_failed"] == num_failed and stats["sft/demos_used"] == len(episodes)


def test_failed_demonstrations_are_kept_when_asked():
    trajs = _fake_trajectories(wrong_rate=0.5)
    episodes, stats = select_demonstrations(tiny_tokenizer(), trajs, len(trajs), max_context=512, only_successful=False)
    assert len(episodes) == len(trajs) and stats["sft/demos_failed"] == 0


def test_demonstrations_longer_than_the_context_are_dropped():
    trajs = _fake_trajectories(wrong_rate=0.0, n=6)
    lengths = [len(ep.ids) for ep in select_demonstrations(tiny_tokenizer(), trajs, 6, 10_000)[0]]
    episodes, stats = select_demonstrations(tiny_tokenizer(), trajs, 6, max_context=max(lengths))
    assert len(episodes) == 6 and stats["sft/demos_too_long"] == 0
    cap = max(lengths) - 1
    episodes, stats = select_demonstrations(tiny_tokenizer(), trajs, 6, max_context=cap)
    assert all(len(ep.ids) <= cap for ep in episodes)
    assert stats["sft/demos_too_long"] == sum(n > cap for n in lengths) > 0


def test_no_demonstration_left_says_why():
    trajs = [t for t in _fake_trajectories(wrong_rate=1.0, n=16) if not t["success"]][:4]
    assert len(trajs) == 4  # the demonstrator says "red" whatever the lookup returned
    with pytest.raises(ValueError, match=r"expected at least 1 of 4, got 0 \(4 not successful"):
        select_demonstrations(tiny_tokenizer(), trajs, 4, max_context=512)


def test_authored_domain_demonstrations_are_whole_episodes(tmp_path):
    """Regression: demonstrations were once collected under a context budget counted in characters
    (the BPE did not exist yet), which cut every WarehouseReceiving demo after its first tool call."""
    cfg = load_config(None, [
        "env.env_ids=[sopgym/WarehouseReceiving-v0]", "model.tokenizer=bpe", "model.bpe_vocab_size=2048",
        "model.scratch_hidden_size=32", "model.scratch_num_layers=1", "model.scratch_intermediate_size=64",
        "env.max_context=3072", "optim.row_tokens=8192", "sft.num_episodes=6", "sft.epochs=1", "steps=0",
        "eval_num_tasks=0", "progress=false", "plot=false", "tracking.enabled=false", f"run_dir={tmp_path}", "device=cpu",
    ])
    result = train(cfg)
    assert result.demonstrations["sft/demos_used"] == 6, result.demonstrations
    assert result.demonstrations["sft/demo_policy_tokens_mean"] > 60  # four tool calls and an answer, not one call


def test_oracle_demonstrations_of_an_authored_domain_succeed():
    pool = EnvPool(EnvFactory({"max_turns": 8}))
    trajs = collect_trajectories(pool, group_spec_list(["sopgym/WarehouseReceiving-v0"], "train", 0, 4, 1), default_oracle)
    assert [t["success"] for t in trajs] == [True] * 4


def _policy_tokens(ep):
    return [t for t, m in zip(ep.ids, ep.loss_mask) if m]


def test_short_context_episode_starts_at_the_case_and_keeps_every_policy_token():
    from sopgym.trainers.sft import episode_from_messages, without_system_turn

    tok = tiny_tokenizer()
    for traj in _fake_trajectories(wrong_rate=0.0, n=4):
        whole = episode_from_messages(tok, traj["messages"], traj["tools"])
        short = without_system_turn(tok, traj)
        text = tok.decode(short.ids)
        assert text.startswith("<|im_start|>user\n"), text[:80]
        assert "system" not in text.split("<|im_start|>user", 1)[0]
        assert _policy_tokens(short) == _policy_tokens(whole)
        # What was dropped is the system turn, tools included: the rest is the whole episode's tail.
        assert whole.ids[-len(short.ids):] == short.ids and whole.loss_mask[-len(short.ids):] == short.loss_mask
        assert len(short.ids) < len(whole.ids)


def _staged_sft(short_steps: int, copy=None, whole_steps: int = 0):
    """``train_sft`` on 6 fake demonstrations (4 per whole step) after ``short_steps`` of 5 short ones;
    ``copy`` builds its ``CopyPretraining`` from the tokenizer. Returns (episodes, short episodes, history)."""
    import torch

    from sopgym.trainers.config import SFTConfig
    from sopgym.trainers.optimise import StepSettings
    from sopgym.trainers.sft import short_context_episodes, train_sft

    from .helpers import tiny_model

    tok = tiny_tokenizer()
    trajs = _fake_trajectories(wrong_rate=0.0, n=6)
    episodes, _ = select_demonstrations(tok, trajs, 6, max_context=512)
    short = short_context_episodes(tok, trajs, episodes)
    sft = SFTConfig(num_episodes=6, epochs=1, lr=1e-3, batch_episodes=4, short_context_steps=short_steps, short_context_batch_episodes=5,
                    whole_steps=whole_steps)
    history = train_sft(
        tiny_model(tok), episodes, sft, settings=StepSettings(loss="sft", row_tokens=4096), backend="sdpa",
        generator=torch.Generator().manual_seed(0), short_episodes=short, copy=copy(tok) if copy else None,
    )
    return episodes, short, history


def test_short_context_stage_runs_first_on_short_episodes_then_the_epochs(tok_dir):
    episodes, short, history = _staged_sft(short_steps=3)
    assert [h["short_context"] for h in history] == [1.0, 1.0, 1.0, 0.0, 0.0]
    def within(n, k, eps):
        return k * min(len(e.ids) for e in eps) <= n <= k * max(len(e.ids) for e in eps)

    # 5 short episodes per short step (drawn from passes of fresh permutations), then 4 and 2 whole ones.
    assert all(within(h["num_tokens"], 5, short) for h in history[:3]), [h["num_tokens"] for h in history]
    assert within(history[3]["num_tokens"], 4, episodes) and within(history[4]["num_tokens"], 2, episodes)
    assert max(len(e.ids) for e in short) < min(len(e.ids) for e in episodes)


def test_copy_sequence_is_a_random_half_then_itself_with_the_loss_on_the_predictable_repeat():
    import torch

    from sopgym.trainers.sft import COPY_LENGTHS, copy_sequences, copy_token_pool

    tok = tiny_tokenizer()
    seqs = copy_sequences(copy_token_pool(tok, 64), 50, torch.Generator().manual_seed(0))
    special = set(tok.all_special_ids)
    for ep in seqs:
        n = len(ep.ids) // 2
        assert COPY_LENGTHS[0] <= n <= COPY_LENGTHS[1] and ep.ids[:n] == ep.ids[n:]
        # Targets are token t+1 of mask position t+1: the repeat's second token onwards, never its first
        # (not predictable) nor the random half.
        assert ep.loss_mask == [0] * (n + 1) + [1] * (n - 1) and len(ep.old_logp) == len(ep.ids)
        assert not special & set(ep.ids) and max(ep.ids) < 64 + len(special)
    assert len({tuple(ep.ids) for ep in seqs}) == 50  # drawn, not repeated
    again = copy_sequences(copy_token_pool(tok, 64), 50, torch.Generator().manual_seed(0))
    assert [ep.ids for ep in again] == [ep.ids for ep in seqs]  # seeded


def test_copy_stage_runs_first_and_its_sequences_join_every_later_step(tok_dir):
    from sopgym.trainers.sft import COPY_LENGTHS, CopyPretraining

    episodes, short, history = _staged_sft(
        short_steps=2, copy=lambda tok: CopyPretraining(tok, steps=3, batch_sequences=7, mix_sequences=2, vocab=32), whole_steps=4
    )
    assert [h["copy_stage"] for h in history] == [1.0] * 3 + [0.0] * 6
    assert [h["short_context"] for h in history] == [0.0] * 3 + [1.0] * 2 + [0.0] * 4
    lo, hi = 2 * COPY_LENGTHS[0], 2 * COPY_LENGTHS[1]
    # 7 copy sequences per copy step; then 5 short episodes + 2 copies, and 4 whole ones + 2 copies
    # for each of the 4 whole steps (whole_steps, not one epoch of 6: 2 steps).
    assert all(7 * lo <= h["num_tokens"] <= 7 * hi for h in history[:3]), [h["num_tokens"] for h in history]

    def within(n, k, eps):
        return k * min(len(e.ids) for e in eps) + 2 * lo <= n <= k * max(len(e.ids) for e in eps) + 2 * hi

    assert all(within(h["num_tokens"], 5, short) for h in history[3:5]), [h["num_tokens"] for h in history]
    assert all(within(h["num_tokens"], 4, episodes) for h in history[5:]), [h["num_tokens"] for h in history]


def test_warm_up_ramps_the_learning_rate_linearly_then_the_decay_follows(tok_dir):
    import torch

    from sopgym.trainers.config import SFTConfig
    from sopgym.trainers.optimise import StepSettings
    from sopgym.trainers.sft import train_sft

    from .helpers import tiny_model

    tok = tiny_tokenizer()
    trajs = _fake_trajectories(wrong_rate=0.0, n=6)
    episodes, _ = select_demonstrations(tok, trajs, 6, max_context=512)
    history = train_sft(
        tiny_model(tok), episodes, SFTConfig(num_episodes=6, epochs=1, lr=1e-2, batch_episodes=1, warmup_steps=4),
        settings=StepSettings(loss="sft", row_tokens=4096), backend="sdpa", generator=torch.Generator().manual_seed(0),
    )
    total = 6
    expected = [1e-2 * min(1.0, (s + 1) / 4) * (1.0 - 0.8 * s / total) for s in range(total)]
    assert [h["lr"] for h in history] == pytest.approx(expected)


def test_copy_pretraining_makes_a_tiny_model_copy_unseen_sequences(tok_dir):
    """The property the stage is for: after it, a model predicts the repeat of random sequences it
    never saw (an induction head formed), far above chance. Measured on this model (2 layers, 128 wide):
    copy accuracy 0.05, 0.17, 0.32, 0.79, 0.98 after 100 to 500 steps, and 0.0 (chance: 1 in 256) before it."""
    import torch

    from sopgym.trainers.config import SFTConfig
    from sopgym.trainers.optimise import StepSettings
    from sopgym.trainers.sft import CopyPretraining, copy_sequences, copy_token_pool, train_sft

    from .helpers import tiny_model

    tok = tiny_tokenizer()
    torch.manual_seed(0)
    model = tiny_model(tok, hidden=128)
    trajs = _fake_trajectories(wrong_rate=0.0, n=1)
    episodes, _ = select_demonstrations(tok, trajs, 1, max_context=512)

    def copy_accuracy():
        model.eval()
        right = total = 0
        with torch.no_grad():
            for ep in copy_sequences(copy_token_pool(tok, 256), 16, torch.Generator().manual_seed(123), (8, 16)):
                x = torch.tensor(ep.ids)
                pred = model(input_ids=x[None]).logits[0, :-1].argmax(-1)
                m = torch.tensor(ep.loss_mask[1:]).bool()
                right += int((pred == x[1:])[m].sum())
                total += int(m.sum())
        model.train()
        return right / total

    before = copy_accuracy()
    train_sft(
        model, episodes, SFTConfig(num_episodes=1, epochs=1, lr=1e-3, batch_episodes=1, warmup_steps=50),
        settings=StepSettings(loss="sft", row_tokens=4096), backend="sdpa", generator=torch.Generator().manual_seed(0),
        copy=CopyPretraining(tok, steps=500, batch_sequences=32, vocab=256, lengths=(8, 16)),
    )
    after = copy_accuracy()
    assert before < 0.2 and after > 0.8, (before, after)
