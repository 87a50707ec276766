"""What the trainer benchmarks measure on: oracle trajectories of one authored domain and the run config's
offline BPE trained on them (as ``sopgym train`` builds it before SFT)."""

from __future__ import annotations


def oracle_data(domain: str, num_episodes: int, config: str):
    """``(run config, tokenizer, trajectories)``: ``num_episodes`` oracle trajectories of ``domain``'s
    train split (seeds 0 onwards) and a BPE with ``config``'s ``model`` settings trained on their texts."""
    import gymnasium

    import sopgym  # noqa: F401  (registers the envs)
    from sopgym.trainers.config import load_config
    from sopgym.trainers.rollout import EnvPool, group_spec_list
    from sopgym.trainers.sft import collect_trajectories, default_oracle, trajectory_texts
    from sopgym.trainers.tokenizer import build_bpe_tokenizer

    pool = EnvPool(lambda env_id: gymnasium.make(env_id))
    try:
        trajectories = collect_trajectories(pool, group_spec_list([domain], "train", 0, num_episodes, 1), default_oracle)
    finally:
        pool.close()
    run = load_config(config)
    tok = build_bpe_tokenizer(trajectory_texts(trajectories), run.model.bpe_vocab_size, split_digits=run.model.bpe_split_digits)
    return run, tok, trajectories
