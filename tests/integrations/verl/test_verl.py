"""The verl agent loop, run with verl installed (``tox -e verl``), on CPU.

verl's own classes are used as verl's worker uses them: the registry entry is instantiated with
``hydra.utils.instantiate`` and the loop's output is verl's ``AgentLoopOutput``. Only the inference
server is a stand-in (this is the model, not verl): it answers each request with the token ids of
sopgym's oracle or majority reply for the prompt's task.
"""

from __future__ import annotations

import asyncio
import functools

import pytest

from ..helpers import ENV_KWARGS, import_or_skip, sopgym_run

import_or_skip("verl.experimental.agent_loop", "verl")

import hydra  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402
from verl.experimental.agent_loop.agent_loop import DictConfigWrap, ToolListWrap, _agent_loop_registry  # noqa: E402
from verl.utils.dataset.rl_dataset import RLHFDataset  # noqa: E402
from verl.workers.rollout.replica import TokenOutput  # noqa: E402

from sopgym.integrations.verl import AGENT_NAME, SopgymAgentLoop, verl_rows  # noqa: E402
from sopgym.trainers.tokenizer import build_bpe_tokenizer  # noqa: E402

ENV = "sopgym/WarehouseReceiving-v0"


@functools.cache
def rows() -> tuple:
    return tuple(verl_rows(ENV, "train", 2, env_kwargs=ENV_KWARGS))


def _task_row(row):
    return row["extra_info"]["sopgym"]


@functools.cache
def reference(policy: str, index: int):
    return sopgym_run(_task_row(rows()[index]), policy)


@functools.cache
def tokenizer():
    texts = []
    for i, row in enumerate(rows()):
        texts += [m["content"] for m in row["prompt"]]
        for policy in ("oracle", "majority"):
            texts += [str(m.get("content")) for m in reference(policy, i).messages]
    return build_bpe_tokenizer(texts * 2, vocab_size=1000)


class FakeServerManager:
    """The inference server's stand-in: the next sopgym reply of the prompt's task as token ids."""

    def __init__(self, policy, fail_at_turn=None):
        self.policy, self.fail_at_turn = policy, fail_at_turn
        self.requests = []

    async def generate(self, request_id, *, prompt_ids, sampling_params, **kwargs):
        tok = tokenizer()
        self.requests.append((request_id, list(prompt_ids), dict(sampling_params)))
        text = tok.decode(prompt_ids, skip_special_tokens=False)
        index = next(i for i, row in enumerate(rows()) if row["prompt"][1]["content"] in text)
        turn = text.count("<|im_start|>assistant") - 1
        if turn == self.fail_at_turn:
            raise ConnectionError("injected: the inference server went away")
        action = reference(self.policy, index).turns[turn].action
        ids = tok(action, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
        return TokenOutput(token_ids=ids, log_probs=[-0.25] * len(ids), stop_reason="completed")


def _loop(server, response_length=4096):
    config = OmegaConf.create({"actor_rollout_ref": {"rollout": {"prompt_length": 4096, "response_length": response_length}},
                               "data": {}})
    # As verl's AgentLoopWorker._run_agent_loop builds a loop from the registry.
    return hydra.utils.instantiate(
        config=_agent_loop_registry[AGENT_NAME], trainer_config=DictConfigWrap(config=config), server_manager=server,
        tokenizer=tokenizer(), processor=None, hf_model_type=None, dataset_cls=RLHFDataset,
        data_config=DictConfigWrap(config.data), tools=ToolListWrap([]),
    )


def _run(loop, index=0):
    row = rows()[index]
    kwargs = {**row, "raw_prompt": row["prompt"]}
    return asyncio.run(loop.run({"temperature": 1.0}, **kwargs))


def _template_ids(result):
    tok = tokenizer()
    last = max(i for i, m in enumerate(result.messages) if m["role"] == "assistant")
    messages = [{"role": m["role"], "content": m["content"]} if m["role"] == "assistant" else m for m in result.messages[: last + 1]]
    text = tok.apply_chat_template(messages, tools=result.reset_info["tools"], tokenize=False)
    return tok(text, add_special_tokens=False)["input_ids"]


def test_the_loop_is_registered_under_its_name():
    assert _agent_loop_registry[AGENT_NAME] == {"_target_": "sopgym.integrations.verl.SopgymAgentLoop"}
    assert isinstance(_loop(FakeServerManager("oracle")), SopgymAgentLoop)


@pytest.mark.parametrize("index", [0, 1])
def test_oracle_episode_scores_one_with_a_mask_on_sampled_tokens_only(index):
    out = _run(_loop(FakeServerManager("oracle")), index)
    ref = reference("oracle", index)
    assert out.reward_score == 1.0 == ref.total_reward
    assert out.extra_fields["sopgym_record"] == ref.record and not out.extra_fields["infrastructure_failure"]
    tok = tokenizer()
    sampled = [t for t, m in zip(out.response_ids, out.response_mask) if m]
    env_part = [t for t, m in zip(out.response_ids, out.response_mask) if not m]
    assert tok.decode(sampled, skip_special_tokens=False) == "".join(t.action + tok.eos_token for t in ref.turns)
    env_text = tok.decode(env_part, skip_special_tokens=False)
    for message in ref.messages[2:-1]:  # up to the last reply (the env's answer to it is not appended)
        if message["role"] == "tool":
            assert message["content"] in env_text
    assert "<tool_call>" not in env_text
    # prompt + response decode back to sopgym's chat.
    assert out.prompt_ids + out.response_ids == _template_ids(ref)
    assert len(out.response_logprobs) == len(out.response_ids)
    assert [lp for lp, m in zip(out.response_logprobs, out.response_mask) if m] == [-0.25] * len(sampled)


def test_majority_scores_what_sopgym_scores():
    out = _run(_loop(FakeServerManager("majority")), 1)
    ref = reference("majority", 1)
    assert out.reward_score == ref.total_reward and out.extra_fields["sopgym_record"] == ref.record


def test_a_failed_generation_is_an_infrastructure_failure_with_nothing_trained_on():
    out = _run(_loop(FakeServerManager("oracle", fail_at_turn=2)))
    record = out.extra_fields["sopgym_record"]
    assert out.extra_fields["infrastructure_failure"] and record["truncation_cause"] == "inference"
    assert record["turns"] == 2 and set(out.response_mask) == {0}


def test_a_spent_response_budget_ends_the_episode_through_the_env():
    server = FakeServerManager("oracle")
    first = len(_run(_loop(server)).response_ids)
    out = _run(_loop(FakeServerManager("oracle"), response_length=first // 3))
    record = out.extra_fields["sopgym_record"]
    assert record["truncation_cause"] == "context_budget" and out.reward_score == 0.0
    assert len(out.response_ids) <= first // 3


def test_a_row_without_its_episode_is_refused():
    row = dict(rows()[0], extra_info={})
    with pytest.raises(ValueError, match="extra_info.sopgym"):
        asyncio.run(_loop(FakeServerManager("oracle")).run({}, **row))


def test_rows_written_to_parquet_run_as_written(tmp_path):
    """verl reads its data from Parquet: the rows must survive the round trip (numpy ints, JSON env kwargs)."""
    import pandas as pd

    path = tmp_path / "train.parquet"
    pd.DataFrame(list(rows())).to_parquet(path)
    row = pd.read_parquet(path).to_dict("records")[0]
    out = asyncio.run(_loop(FakeServerManager("oracle")).run({}, **row, raw_prompt=list(row["prompt"])))
    assert out.reward_score == 1.0 and out.extra_fields["sopgym_record"] == reference("oracle", 0).record
