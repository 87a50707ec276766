"""The verl agent loop, run with verl installed (``tox -e verl``), on CPU.

verl's own classes are used as verl's worker uses them: the registry entry is instantiated with
``hydra.utils.instantiate`` and the loop's output is verl's ``AgentLoopOutput``. Only the inference
server is a stand-in (this is the model, not verl): it answers each request with the token ids of
sopgym's oracle or majority reply for the prompt's task.
"""

from __future__ import annotations

import asyncio
import functools
import importlib.util
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from ..extras import assert_extra_complete
from ..helpers import ENV_KWARGS, as_served, import_or_skip, served, sopgym_run

import_or_skip("verl.experimental.agent_loop", "verl")

from verl.experimental.agent_loop.agent_loop import _agent_loop_registry  # noqa: E402

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


def _benchmark():
    """benchmarks/verl_agent_loop.py: the stand-in server and the loop as verl's worker builds it (one copy)."""
    path = Path(__file__).resolve().parents[3] / "benchmarks" / "verl_agent_loop.py"
    spec = importlib.util.spec_from_file_location("verl_agent_loop_benchmark", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


BENCH = _benchmark()


def FakeServerManager(policy, fail_at_turn=None, latency=0.0):  # noqa: N802 - stands for the class it builds
    """The inference server's stand-in: the next sopgym reply of the prompt's task as token ids."""
    replies = {row["prompt"][1]["content"]: [t.action for t in reference(policy, i).turns] for i, row in enumerate(rows())}
    return BENCH.ScriptedServer(tokenizer(), replies, latency=latency, fail_at_turn=fail_at_turn)


def _loop(server, response_length=4096, prompt_length=4096):
    return BENCH.build_loop(server, tokenizer(), prompt_length=prompt_length, response_length=response_length)


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


def _without_env_kwargs(row):
    return {**row, "extra_info": {**row["extra_info"], "sopgym": {**_task_row(row), "env_kwargs": None}}}


def test_a_served_env_plays_the_local_episodes(tmp_path):
    """verl_rows and the loop's config entry with servers=: the episodes run on `sopgym serve` (127.0.0.1)
    with the local env's tokens, masks, log-probs, turns and rewards; records without the ground truth the
    server withholds (so no success). The entry is read from a file as verl's worker reads
    agent_loop_config_path."""
    from omegaconf import OmegaConf

    with served(ENV, "verl") as servers:
        served_rows = verl_rows(ENV, "train", 2, servers=servers)
        assert [_without_env_kwargs(r) for r in served_rows] == [_without_env_kwargs(r) for r in rows()]  # env kwargs: the server's
        config = tmp_path / "sopgym_agent.yaml"
        OmegaConf.save([{"name": AGENT_NAME, "_target_": "sopgym.integrations.verl.SopgymAgentLoop", "servers": servers}], config)
        entry = OmegaConf.load(config)[0]
        for policy, index in (("oracle", 0), ("majority", 1)):
            local = _run(_loop(FakeServerManager(policy)), index)
            row = served_rows[index]
            remote = asyncio.run(BENCH.build_loop(FakeServerManager(policy), tokenizer(), entry=entry).run(
                {"temperature": 1.0}, **row, raw_prompt=row["prompt"]))
            for key in ("prompt_ids", "response_ids", "response_mask", "response_logprobs", "reward_score", "num_turns"):
                assert getattr(remote, key) == getattr(local, key), (policy, key)
            assert remote.extra_fields["sopgym_record"] == as_served(local.extra_fields["sopgym_record"])
            assert remote.extra_fields["sopgym_success"] is None and "success" not in remote.extra_fields["sopgym_metrics"]


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


def test_the_verl_extra_declares_everything_the_adapter_imports():
    assert_extra_complete("verl", "import sopgym.integrations.verl")


def test_num_turns_counts_the_prompt_each_reply_and_each_env_answer_in_the_response():
    """As verl's ToolAgentLoop counts: 1 + assistant turns + env turns (the env's answer to the last reply is
    not in the response)."""
    out = _run(_loop(FakeServerManager("oracle")))
    replies = len(reference("oracle", 0).turns)
    assert replies >= 3 and out.num_turns == 1 + replies + (replies - 1)


def test_rows_carry_verls_index_and_verls_dataset_reads_it(tmp_path):
    import pandas as pd
    from omegaconf import OmegaConf
    from verl.utils.dataset.rl_dataset import RLHFDataset

    assert [row["extra_info"]["index"] for row in rows()] == list(range(len(rows())))
    path = tmp_path / "train.parquet"
    pd.DataFrame(list(rows())).to_parquet(path)
    config = OmegaConf.create({"prompt_key": "prompt", "max_prompt_length": 100_000, "filter_overlong_prompts": False,
                               "return_raw_chat": True, "truncation": "error"})
    dataset = RLHFDataset([str(path)], tokenizer(), config)
    assert [dataset[i]["index"] for i in range(len(dataset))] == list(range(len(rows())))


def test_every_episode_has_its_request_in_flight_at_once_whatever_the_executor_size():
    """Generations are awaited on the event loop, not held in executor threads: with 2 executor threads,
    8 concurrent episodes still have 8 requests in flight against a slow server."""
    server = FakeServerManager("oracle", latency=0.2)

    async def main():
        asyncio.get_running_loop().set_default_executor(ThreadPoolExecutor(max_workers=2))
        runs = [_loop(server).run({}, **rows()[i % 2], raw_prompt=rows()[i % 2]["prompt"]) for i in range(8)]
        return await asyncio.gather(*runs)

    outputs = asyncio.run(main())
    assert [out.reward_score for out in outputs] == [1.0] * 8
    assert server.max_in_flight == 8


def test_a_prompt_longer_than_prompt_length_is_refused_before_any_request():
    server = FakeServerManager("oracle")
    with pytest.raises(ValueError, match=r"rollout.prompt_length=64"):
        _run(_loop(server, prompt_length=64))
    assert server.requests == []


def test_the_pre_flight_measures_the_prompt_the_loop_sends():
    from sopgym.integrations.lengths import first_prompt_lengths

    sent = [len(_run(_loop(FakeServerManager("oracle")), i).prompt_ids) for i in range(len(rows()))]
    assert first_prompt_lengths(ENV, tokenizer(), "verl", num_tasks=len(rows()), env_kwargs=ENV_KWARGS) == sent
