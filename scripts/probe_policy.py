"""What a run's policy has learnt to copy: teacher-forced accuracy on held-out oracle episodes, and greedy transcripts.

Reads ``<run_dir>/checkpoint.pt`` and the run's tokenizer, replays the env oracle on the first
``--tasks`` seeds of the validation split and, with the oracle's replies as the teacher, reports the
share of policy tokens the model's argmax predicts, the same for tokens holding a digit (copied
identifiers, dates, counts) and how many episodes have their whole first turn right (the first tool
call copies the case's inputs). Then it prints ``--show`` greedy transcripts (assistant and tool turns).
Used to choose the CPU demo's recipe (docs/measurements.md, "The CPU demo").

    python scripts/probe_policy.py runs/demo-cpu --tasks 32 --show 2
"""

from __future__ import annotations

import argparse

import torch


def teacher_forced(model, tokenizer, trajectories, misses: list | None = None) -> dict[str, float]:
    """Argmax accuracy on the oracle's policy tokens: all, digit tokens, digit tokens after the first
    turn, whole first turns and whole episodes. ``misses`` (a list) receives ``(episode, context, expected, predicted)`` for every
    policy token the argmax gets wrong."""
    from sopgym.trainers.sft import episode_from_messages

    digit_ids = {i for i in range(len(tokenizer)) if any(c.isdigit() for c in tokenizer.decode([i]))}
    num = correct = num_digit = correct_digit = first_turns_right = episodes_right = num_later = correct_later = 0
    with torch.no_grad():
        for traj in trajectories:
            ep = episode_from_messages(tokenizer, traj["messages"], traj["tools"])
            ids_T = torch.tensor(ep.ids)
            pred_T = model(input_ids=ids_T[None]).logits[0, :-1].argmax(-1)
            target_T, mask_T = ids_T[1:], torch.tensor(ep.loss_mask[1:]).bool()
            right_T = (pred_T == target_T) & mask_T
            digit_T = mask_T & torch.tensor([t in digit_ids for t in target_T.tolist()])
            num, correct = num + int(mask_T.sum()), correct + int(right_T.sum())
            num_digit, correct_digit = num_digit + int(digit_T.sum()), correct_digit + int((right_T & digit_T).sum())
            policy = mask_T.nonzero().squeeze(-1).tolist()
            first = [p for i, p in enumerate(policy) if p - policy[0] == i]  # the first contiguous run
            first_turns_right += all(right_T[p] for p in first)
            later_T = digit_T.clone()
            later_T[: first[-1] + 1] = False  # digits after the first turn: copies from tool results, the answer's count
            num_later, correct_later = num_later + int(later_T.sum()), correct_later + int((right_T & later_T).sum())
            episodes_right += bool(right_T[mask_T].all())
            if misses is not None:
                for p in (mask_T & ~right_T).nonzero().squeeze(-1).tolist():
                    context = tokenizer.decode(ids_T[max(0, p - 12) : p + 1].tolist())
                    misses.append((len(misses), context, tokenizer.decode([int(target_T[p])]), tokenizer.decode([int(pred_T[p])])))
    return {
        "policy_token_accuracy": correct / max(1, num),
        "digit_token_accuracy": correct_digit / max(1, num_digit),
        "digit_tokens": float(num_digit),
        "later_digit_accuracy": correct_later / max(1, num_later),
        "first_turn_exact": first_turns_right / max(1, len(trajectories)),
        "episode_exact": episodes_right / max(1, len(trajectories)),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("run_dir")
    p.add_argument("--tasks", type=int, default=32, help="validation tasks for the teacher-forced figures")
    p.add_argument("--show", type=int, default=2, help="greedy transcripts to print")
    p.add_argument("--misses", type=int, default=0, help="teacher-forced misses to print (context, expected, predicted)")
    args = p.parse_args()

    from sopgym.episodes.factory import EnvFactory
    from sopgym.policy.hf import HFPolicy
    from sopgym.trainers import checkpoint
    from sopgym.trainers.config import config_from_dict
    from sopgym.trainers.modeling import load_model, load_tokenizer
    from sopgym.trainers.rollout import EnvPool, collect, group_spec_list, rollout_settings
    from sopgym.trainers.sft import as_shown, collect_trajectories, default_oracle

    ckpt = checkpoint.load(args.run_dir)
    if ckpt is None:
        raise SystemExit(f"no checkpoint in {args.run_dir}")
    cfg = config_from_dict(ckpt["config"])
    tokenizer = load_tokenizer(cfg.model, args.run_dir)
    model = load_model(cfg.model, tokenizer, "sdpa", torch.device("cpu"))
    model.load_state_dict(ckpt["model"])
    model.eval()
    env_kwargs = {"max_turns": cfg.env.max_turns, "max_tool_output_chars": cfg.env.max_tool_output_chars, **cfg.env.env_kwargs}

    pool = EnvPool(EnvFactory({**env_kwargs, "max_context": None}))
    try:
        trajectories = collect_trajectories(pool, group_spec_list(cfg.env.env_ids, cfg.env.val_split, 0, args.tasks, 1), default_oracle)
    finally:
        pool.close()
    misses: list = []
    stats = teacher_forced(model, tokenizer, as_shown(trajectories, cfg.model.system_turn), misses)
    print(f"teacher-forced on {args.tasks} held-out oracle episodes: " + ", ".join(f"{k} {v:.3f}" for k, v in stats.items()))
    for _, context, expected, predicted in misses[: args.misses]:
        print(f"  ...{context!r}: expected {expected!r}, predicted {predicted!r}")

    if args.show:
        def length_fn(text: str) -> int:
            return len(tokenizer(text, add_special_tokens=False)["input_ids"])

        pool = EnvPool(EnvFactory({**env_kwargs, "max_context": cfg.env.max_context, "length_fn": length_fn}))
        try:
            episodes = collect(
                pool, group_spec_list(cfg.env.env_ids, cfg.env.val_split, 0, args.show, 1), HFPolicy(model, tokenizer),
                tokenizer, rollout_settings(cfg).held_out(temperature=0.0),
            )
        finally:
            pool.close()
        for ep in episodes:
            print(f"=== {ep.task_id}: success {ep.success}, reward {ep.reward:.2f}")
            print(next(m["content"] for m in ep.messages if m["role"] == "user"))
            for m in ep.messages:
                if m["role"] in ("assistant", "tool"):
                    print(f"{m['role']}: {(m['content'] or '')[:300]}")


if __name__ == "__main__":
    main()
