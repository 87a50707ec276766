"""The SkyRL adapter inside SkyRL's own generator: ``SkyRLGymGenerator.generate`` of skyrl 0.3.0 (``tox -e skyrl``).

SkyRL's generator builds each env with ``skyrl_gym.make`` from the dataset row, applies the chat
template, asks its inference engine for each turn, steps the env and builds the token ids, loss
masks and per-token rewards its trainer uses. Only the inference engine is a stand-in (the model,
not SkyRL): it answers each request with the token ids of sopgym's oracle or majority reply for the
prompt's task. skyrl 0.3.0's generator imports on Python 3.12 and later only (on 3.11 pydantic refuses
its ``typing.TypedDict``), so the tox env runs on 3.12.
"""

from __future__ import annotations

import asyncio
import functools

import pytest

from ..extras import assert_extra_complete
from ..helpers import ENV_KWARGS, import_or_skip, served, sopgym_run

import_or_skip("skyrl.train.generators.skyrl_gym_generator", "skyrl")

from skyrl.backends.skyrl_train.inference_servers.base import InferenceEngineInterface  # noqa: E402
from skyrl.train.config import GeneratorConfig, SamplingParams, SkyRLGymConfig  # noqa: E402
from skyrl.train.generators.skyrl_gym_generator import SkyRLGymGenerator  # noqa: E402

from sopgym.integrations.skyrl import register_skyrl_envs, skyrl_rows  # noqa: E402
from sopgym.trainers.tokenizer import build_bpe_tokenizer  # noqa: E402

register_skyrl_envs()

ENV = "sopgym/WarehouseReceiving-v0"


@functools.cache
def rows() -> tuple:
    return tuple(skyrl_rows(ENV, "train", 2, env_kwargs=ENV_KWARGS))


@functools.cache
def reference(policy: str, index: int):
    return sopgym_run(rows()[index], policy)


@functools.cache
def tokenizer():
    texts = []
    for i, row in enumerate(rows()):
        texts += [m["content"] for m in row["prompt"]]
        for policy in ("oracle", "majority"):
            texts += [str(m.get("content")) for m in reference(policy, i).messages]
    return build_bpe_tokenizer(texts * 2, vocab_size=1000)


class ScriptedEngine(InferenceEngineInterface):
    """SkyRL's inference engine stand-in: the next sopgym reply of the prompt's task as token ids."""

    def __init__(self, policy: str):
        self.replies = {row["prompt"][1]["content"]: [t.action for t in reference(policy, i).turns] for i, row in enumerate(rows())}
        self.prompts: list[list[int]] = []

    @property
    def model_name(self) -> str:
        return "scripted"

    async def generate(self, input_batch, model=None):
        tok = tokenizer()
        ids_in = input_batch["prompt_token_ids"][0]
        self.prompts.append(list(ids_in))
        text = tok.decode(ids_in, skip_special_tokens=False)
        user = next(u for u in self.replies if u in text)
        turn = text.count("<|im_start|>assistant") - 1
        reply = self.replies[user][turn]
        ids = tok(reply, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
        return {"responses": [reply], "response_ids": [ids], "stop_reasons": ["stop"],
                "response_logprobs": [[-0.25] * len(ids)], "prompt_logprobs": None, "rollout_expert_indices": None}

    async def finish_session(self, session_id):
        return None

    def _unused(self, *args, **kwargs):
        raise NotImplementedError("the stand-in engine serves generate() only (the generator uses nothing else)")

    get_endpoint_url = _unused
    chat_completion = render_chat_completion = completion = wake_up = sleep = _unused
    init_weight_update_communicator = update_named_weights = teardown = reset_prefix_cache = _unused
    pause_generation = resume_generation = get_world_size = _unused


def _generate(policy: str, max_input_length: int = 16384, batch_rows=None):
    engine = ScriptedEngine(policy)
    config = GeneratorConfig(max_turns=1, max_input_length=max_input_length, use_cache_salt=False,
                             sampling_params=SamplingParams(max_generate_length=512))
    generator = SkyRLGymGenerator(config, SkyRLGymConfig(max_env_workers=2), engine, tokenizer())
    batch_rows = rows() if batch_rows is None else batch_rows
    batch = {"prompts": [list(r["prompt"]) for r in batch_rows], "env_classes": [r["env_class"] for r in batch_rows],
             "env_extras": [dict(r) for r in batch_rows]}
    return asyncio.run(generator.generate(batch, disable_tqdm=True)), engine


@pytest.mark.parametrize("policy", ["oracle", "majority"])
def test_skyrls_generator_plays_sopgyms_episodes_and_rewards(policy):
    """generator_cfg.max_turns is 1 (SkyRL's default): the episode still runs to sopgym's end, and
    the per-token rewards sum to sopgym's return."""
    out, engine = _generate(policy)
    for i in range(len(rows())):
        ref = reference(policy, i)
        assert sum(out["rewards"][i]) == pytest.approx(ref.total_reward)
        assert out["env_metrics"][i]["success"] == float(ref.success)
        assert out["env_metrics"][i]["turns"] == len(ref.turns)
    if policy == "oracle":
        assert [sum(r) for r in out["rewards"]] == [1.0, 1.0]


@pytest.mark.parametrize("policy", ["oracle", "majority"])
def test_skyrls_generator_plays_a_served_envs_episodes_as_the_local_ones(policy):
    """register_skyrl_envs(servers=...) in the generator's process: SkyRLGymGenerator plays the episodes
    on `sopgym serve` (127.0.0.1) with the local env's prompts, tokens, masks, rewards and counts; only
    the evaluator's success is missing (the server withholds the ground truth)."""
    local, _ = _generate(policy)
    with served(ENV, "skyrl") as servers:
        register_skyrl_envs([ENV], servers=servers)
        try:
            served_rows = skyrl_rows(ENV, "train", 2, servers=servers)
            assert [{**r, "env_kwargs": None} for r in served_rows] == [{**r, "env_kwargs": None} for r in rows()]
            remote, _ = _generate(policy, batch_rows=tuple(served_rows))
        finally:
            register_skyrl_envs([ENV])  # the other tests' envs are made here again
    for key in ("prompt_token_ids", "response_ids", "loss_masks", "rewards"):
        assert remote[key] == local[key], key
    for here, there in zip(local["env_metrics"], remote["env_metrics"]):
        assert there == {k: v for k, v in here.items() if k != "success"}


def test_skyrls_loss_mask_is_one_on_the_sampled_replies_only():
    out, _ = _generate("oracle")
    tok = tokenizer()
    for i in range(len(rows())):
        ids, mask = out["response_ids"][i], out["loss_masks"][i]
        sampled = tok.decode([t for t, m in zip(ids, mask) if m], skip_special_tokens=False)
        env_part = tok.decode([t for t, m in zip(ids, mask) if not m], skip_special_tokens=False)
        replies = [t.action for t in reference("oracle", i).turns]
        assert all(r in sampled for r in replies) and "<tool_call>" not in env_part


def test_the_prompt_skyrl_sends_holds_the_exact_tool_schemas():
    out, engine = _generate("oracle")
    tok = tokenizer()
    first = tok.decode(out["prompt_token_ids"][0], skip_special_tokens=False)
    ref = reference("oracle", 0)
    import json

    for tool in ref.reset_info["tools"]:
        assert json.dumps(tool, ensure_ascii=False) in first


def test_the_skyrl_train_extra_declares_everything_the_generator_needs():
    assert_extra_complete("skyrl-train", "import sopgym.integrations.skyrl; "
                                         "from skyrl.train.generators.skyrl_gym_generator import SkyRLGymGenerator")


def test_the_rows_and_the_pre_flight_measure_the_prompt_skyrl_sends():
    """The dataset's prompt (what SkyRL's PromptDataset filter measures) and the pre-flight's figure are
    the first prompt's length as SkyRLGymGenerator sends it (tool schemas appended by init())."""
    from sopgym.integrations.lengths import first_prompt_lengths

    out, _ = _generate("oracle")
    sent = [len(p) for p in out["prompt_token_ids"]]
    tok = tokenizer()
    in_rows = [len(tok.apply_chat_template(r["prompt"], add_generation_prompt=True, tokenize=True, return_dict=False)) for r in rows()]
    assert in_rows == sent
    assert first_prompt_lengths(ENV, tok, "skyrl", num_tasks=2, env_kwargs=ENV_KWARGS) == sent


def test_the_pre_flight_refuses_a_max_input_length_below_the_prompt_with_the_number_to_set():
    from sopgym.integrations.lengths import check_prompt_length, first_prompt_lengths, recommended_prompt_length

    longest = max(first_prompt_lengths(ENV, tokenizer(), "skyrl", num_tasks=2, env_kwargs=ENV_KWARGS))
    with pytest.raises(ValueError, match=rf"longest {longest} tokens.*set generator.max_input_length={recommended_prompt_length(longest)}"):
        check_prompt_length([ENV], tokenizer(), "skyrl", longest - 1, "generator.max_input_length", num_tasks=2, env_kwargs=ENV_KWARGS)
    assert check_prompt_length([ENV], tokenizer(), "skyrl", longest, "generator.max_input_length",
                               num_tasks=2, env_kwargs=ENV_KWARGS) == {ENV: longest}
