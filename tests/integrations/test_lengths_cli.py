"""``python -m sopgym.integrations.lengths``: the per-env figures, and ``--check N`` as a launch script's pre-flight.

Library-free (the main suite): the command needs only transformers' ``AutoTokenizer`` and the envs.
"""

from __future__ import annotations

import functools

import pytest

from sopgym.integrations.lengths import first_prompt_lengths, main, recommended_prompt_length

ENV = "sopgym/WarehouseReceiving-v0"


@functools.cache
def tokenizer_dir(root: str) -> str:
    from sopgym.integrations.tiny_model import _texts
    from sopgym.trainers.tokenizer import build_bpe_tokenizer

    tok = build_bpe_tokenizer(_texts([ENV], 2) * 2, vocab_size=1000)
    tok.save_pretrained(root)
    return root


def longest(folder: str) -> int:
    from transformers import AutoTokenizer

    return max(first_prompt_lengths(ENV, AutoTokenizer.from_pretrained(folder), "verl", num_tasks=2))


def test_check_refuses_a_cap_below_the_longest_first_prompt_with_the_value_to_set(tmp_path, capsys):
    folder = tokenizer_dir(str(tmp_path))
    with pytest.raises(SystemExit) as exit_:
        main(["--tokenizer", folder, "--library", "verl", "--env", ENV, "--tasks", "2", "--check", "64"])
    worst = longest(folder)
    err = capsys.readouterr().err
    assert exit_.value.code == 2
    assert (f"actor_rollout_ref.rollout.prompt_length=64 is shorter than the first prompt of ['{ENV}'] (longest {worst} "
            f"tokens") in err
    assert f"set actor_rollout_ref.rollout.prompt_length={recommended_prompt_length(worst)}" in err


def test_check_passes_a_cap_at_the_longest_first_prompt(tmp_path, capsys):
    folder = tokenizer_dir(str(tmp_path))
    worst = longest(folder)
    main(["--tokenizer", folder, "--library", "verl", "--env", ENV, "--tasks", "2", "--check", str(worst)])
    row = capsys.readouterr().out.splitlines()[1].split()
    assert row[0] == ENV and int(row[2]) == worst and int(row[3]) == recommended_prompt_length(worst)
