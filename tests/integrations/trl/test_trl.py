"""The TRL adapter, run through TRL's own GRPOTrainer (``tox -e trl``), offline on CPU.

A tiny Qwen2-style model and a byte-level BPE tokenizer are built here (no hub downloads); the
tokenizer carries TRL's own copy of the Qwen2.5 chat template, one of those TRL parses tool calls for. Scripted
runs replace only the model's sampling (``GRPOTrainer._generate_single_turn``) with the token ids of
sopgym's oracle or majority replies; TRL's prompt rendering, response parsing, tool loop, masks and
rewards run as they are.
"""

from __future__ import annotations

import functools
import inspect
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from ..extras import assert_extra_complete
from ..helpers import AUTHORED_ENV_IDS, ENV_KWARGS, as_served, import_or_skip, served, sopgym_run

trl = import_or_skip("trl", "trl")

import torch  # noqa: E402
from transformers import Qwen2Config, Qwen2ForCausalLM  # noqa: E402
from transformers.utils import get_json_schema  # noqa: E402
from trl import GRPOConfig, GRPOTrainer  # noqa: E402

from sopgym.integrations._common import task_rows  # noqa: E402
from sopgym.integrations.trl import (  # noqa: E402
    TRL_GENERATE_PARAMS,
    SopgymRollout,
    environment_class,
    sopgym_reward,
    train_dataset,
    trl_generation,
)
from sopgym.trainers.tokenizer import build_bpe_tokenizer  # noqa: E402

ENV = "sopgym/WarehouseReceiving-v0"
NUM_TASKS, GROUP = 2, 2
#: Room for a whole scripted episode (TRL drops a tool result that would not fit and ends the rollout).
SCRIPTED_BUDGET = 4096


def _qwen_template() -> str:
    """TRL's copy of Qwen2.5's chat template (TRL recognises it by equality and parses its tool calls)."""
    from importlib.resources import files

    return (files("trl") / "chat_templates" / "qwen2_5.jinja").read_text()


def _hermes(action: str) -> str:
    """A sopgym reply's call in the layout the Qwen response parser reads."""
    inner = re.fullmatch(r"<tool_call>(.*)</tool_call>", action, re.DOTALL).group(1)
    return "<tool_call>\n" + json.dumps(json.loads(inner), ensure_ascii=False) + "\n</tool_call>"


@functools.cache
def rows() -> tuple:
    return tuple(task_rows(ENV, "train", NUM_TASKS, env_kwargs=ENV_KWARGS))


@functools.cache
def replies(policy: str) -> dict:
    """``user message -> sopgym's replies`` of a policy on each task, and the reference results."""
    out = {}
    for row in rows():
        result = sopgym_run(row, policy)
        out[row["prompt"][1]["content"]] = ([t.action for t in result.turns], result)
    return out


@functools.lru_cache(maxsize=1)
def tokenizer():
    texts = [m["content"] for row in rows() for m in row["prompt"]]
    for policy in ("oracle", "majority"):
        for actions, result in replies(policy).values():
            texts += [_hermes(a) for a in actions] + [m["content"] for m in result.messages]
    tok = build_bpe_tokenizer(texts * 2, vocab_size=1200)
    tok.chat_template = _qwen_template()
    tok.padding_side = "left"
    return tok


def _model():
    torch.manual_seed(0)
    tok = tokenizer()
    config = Qwen2Config(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=8192,
                         eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id, tie_word_embeddings=True)
    return Qwen2ForCausalLM(config)


def _args(tmp_path, **kw):
    base = dict(output_dir=str(tmp_path), per_device_train_batch_size=NUM_TASKS * GROUP, num_generations=GROUP,
                max_completion_length=48, max_steps=2, learning_rate=1e-3, logging_steps=1, save_strategy="no",
                report_to=[], use_cpu=True, bf16=False, seed=0, shuffle_dataset=False, temperature=1.0)
    base.update(kw)
    return GRPOConfig(**base)


class Scripted:
    """In place of the model's sampling: the next sopgym reply of the prompt's task, plus end of turn.

    The task is found by its user message in the decoded prompt; the turn by the assistant turns
    already in it. Past the policy's replies, it answers plain text (TRL asks once more after the
    last tool result)."""

    def __init__(self, policy):
        self.replies = {user: [_hermes(a) for a in actions] for user, (actions, _) in replies(policy).items()}
        self.sampled: dict[str, list[list[int]]] = {}

    def __call__(self, prompt_ids, images, multimodal_fields, num_generations, has_tool_images=False):
        tok = tokenizer()
        out = []
        for ids in prompt_ids:
            text = tok.decode(ids, skip_special_tokens=False)
            user = next(u for u in self.replies if u in text)
            turn = text.count("<|im_start|>assistant") - 1
            reply = self.replies[user][turn] if turn < len(self.replies[user]) else "Done."
            out.append(tok(reply, add_special_tokens=False)["input_ids"] + [tok.eos_token_id])
        return out, None


@pytest.fixture(scope="module")
def servers():
    """``servers=`` of ENV as ``sopgym serve`` serves it on 127.0.0.1 (without --send-ground-truth); each env
    instance TRL makes holds a session for the trainer's life, hence room for a few trainers' worth."""
    with served(ENV, "trl", "--max-sessions", "32") as found:
        yield found


def _placed(request, where):
    """How the adapter gets its envs: made here with ENV_KWARGS, or served (the server has the same kwargs)."""
    return {"env_kwargs": ENV_KWARGS} if where == "local" else {"servers": request.getfixturevalue("servers")}


def _as_seen(record, where):
    """A local record as the adapter sees it: whole here, without the ground truth from a server."""
    return record if where == "local" else as_served(record)


def _trainer(tmp_path, **kw):
    return GRPOTrainer(model=_model(), args=_args(tmp_path, **kw.pop("args", {})), processing_class=tokenizer(), **kw)


def _spy(trainer):
    """Keep what ``_generate_and_score_completions`` hands to the loss (ids, masks, advantages)."""
    seen = []
    original = trainer._generate_and_score_completions

    def spy(inputs):
        out = original(inputs)
        seen.append(out)
        return out

    trainer._generate_and_score_completions = spy
    return seen


def _parts(batch, i):
    """(trained tokens, masked env tokens) of completion ``i`` as the loss sees them."""
    ids, real = batch["completion_ids"][i], batch["completion_mask"][i].bool()
    tool = batch["tool_mask"][i].bool() if "tool_mask" in batch else torch.ones_like(real)
    return ids[real & tool].tolist(), ids[real & ~tool].tolist()


# --------------------------------------------------------------------------------------------------
# environment_factory
# --------------------------------------------------------------------------------------------------
def _said(exact_value) -> str:
    return exact_value if isinstance(exact_value, str) else json.dumps(exact_value, ensure_ascii=False, sort_keys=True)


def _as_json_schema(shown: dict) -> dict:
    """A rendered parameter in JSON Schema's own terms (transformers writes ``nullable: true``)."""
    out = {k: v for k, v in shown.items() if k not in ("description", "nullable")}
    if shown.get("nullable"):
        out["type"] = sorted([*([out["type"]] if isinstance(out["type"], str) else out["type"]), "null"])
        if "enum" in out:
            out["enum"] = [*out["enum"], None]
    return out


@pytest.mark.parametrize("env_id", AUTHORED_ENV_IDS)
def test_tool_methods_carry_every_keyword_of_each_exact_schema(env_id):
    """Each keyword of the exact schema is rendered as such, or written into the description as
    ``keyword: value``; ``additionalProperties: false`` as "Takes no other arguments."."""
    env = environment_class(env_id, ENV_KWARGS)()
    _, info = env._env.reset(seed=0)
    for tool in info["tools"]:
        fn = tool["function"]
        shown = get_json_schema(getattr(env, fn["name"]))["function"]
        assert shown["name"] == fn["name"] and shown["description"].startswith(fn["description"])
        assert "return" not in shown  # no return entry per tool: the model never uses it
        assert set(shown["parameters"].get("required", ())) == set(fn["parameters"].get("required", ()))
        for name, exact in fn["parameters"]["properties"].items():
            got = shown["parameters"]["properties"][name]
            conveyed = _as_json_schema(got)
            for key, value in exact.items():
                if key == "description":
                    assert value in got["description"]
                elif key == "type" and isinstance(value, list):
                    assert sorted(value) == conveyed.get("type") or f"{key}: {_said(value)}" in got["description"]
                else:
                    assert conveyed.get(key) == value or f"{key}: {_said(value)}" in got["description"], (env_id, fn["name"], name, key)
        for key, value in fn["parameters"].items():
            if key == "additionalProperties" and value is False:
                assert "Takes no other arguments." in shown["description"]
            elif key not in ("type", "properties", "required"):
                assert f"{key}: {_said(value)}" in shown["description"]


@pytest.mark.parametrize("env_id", AUTHORED_ENV_IDS)
def test_the_tool_block_trl_renders_is_the_size_of_the_exact_one(env_id):
    """The prompt TRL renders from the methods (through the chat template, as GRPOTrainer does) is at
    most 5% longer than the same prompt with the exact schemas (it was 1.46-1.58x the tool block)."""
    cls = environment_class(env_id, ENV_KWARGS)
    env = cls()
    _, info = env._env.reset(seed=0)
    tok = tokenizer()
    methods = [getattr(env, t["function"]["name"]) for t in info["tools"]]
    chat = [{"role": m["role"], "content": m["content"]} for m in info["messages"]]
    bare = len(tok.apply_chat_template(chat, tokenize=False, add_generation_prompt=True))
    exact = len(tok.apply_chat_template(chat, tools=info["tools"], tokenize=False, add_generation_prompt=True)) - bare
    rendered = len(tok.apply_chat_template(chat, tools=methods, tokenize=False, add_generation_prompt=True)) - bare
    assert rendered <= 1.05 * exact, f"{env_id}: tool block of {rendered} characters, exact schemas {exact}"


@pytest.mark.parametrize("where", ["local", "served"])
@pytest.mark.parametrize("policy", ["oracle", "majority"])
def test_scripted_environment_factory_rewards_and_masks_are_sopgyms(tmp_path, request, policy, where):
    """Through GRPOTrainer.train(): the env's rewards and records, and the loss mask on the sampled replies
    only; the same with the env served by `sopgym serve` (records without the ground truth it withholds)."""
    placed = _placed(request, where)
    dataset = train_dataset(ENV, "train", NUM_TASKS, **placed)
    trainer = _trainer(tmp_path, train_dataset=dataset, environment_factory=environment_class(ENV, **placed),
                       args={"max_steps": 1, "max_completion_length": SCRIPTED_BUDGET})
    script = Scripted(policy)
    trainer._generate_single_turn = script
    seen = _spy(trainer)
    try:
        trainer.train()
    finally:
        for env in trainer.environments or ():
            env._env.close()  # TRL never closes its env instances (a served env's session goes with it)
    envs = trainer.environments
    assert len(envs) == NUM_TASKS * GROUP
    tok = tokenizer()
    for i, env in enumerate(envs):
        actions, reference = _reference_of(env, policy)
        assert env.get_reward() == reference.total_reward
        assert env.record == _as_seen(reference.record, where)
        model, env_tokens = _parts(seen[0], i)
        # Loss mask 1 exactly on the sampled replies (then TRL's extra turn after the last tool result).
        expected = [t for a in actions for t in tok(_hermes(a), add_special_tokens=False)["input_ids"] + [tok.eos_token_id]]
        expected += tok("Done.", add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
        assert model == expected
        env_text = tok.decode(env_tokens, skip_special_tokens=False)
        for message in reference.messages[2:]:
            if message["role"] == "tool":
                assert message["content"] in env_text
        assert "<tool_call>" not in env_text  # no model token is masked out
    if policy == "oracle":
        assert all(env.get_reward() == 1.0 for env in envs)


def _reference_of(env, policy):
    task_id = env.record["task_id"]
    for actions, result in replies(policy).values():
        if result.record["task_id"] == task_id:
            return actions, result
    raise AssertionError(f"no reference for task {task_id}")


def test_a_rollout_trl_stops_is_ended_through_end_episode():
    cls = environment_class(ENV, ENV_KWARGS)
    env = cls()
    row = rows()[0]
    env.reset(**row, environment=ENV)
    first = json.loads(_hermes(replies("oracle")[row["prompt"][1]["content"]][0][0]).split("\n")[1])
    assert not getattr(env, first["name"])(**first["arguments"]).startswith("Error")
    reward = env.get_reward()  # TRL's tool loop ended (no further tool call): scored as an unanswered episode
    assert env.record["truncation_cause"] == "stopped" and env.record["statuses"] == ["OK"]
    assert reward == env.total_reward == 0.0


def test_sopgym_validates_arguments_the_rendered_schema_cannot_express():
    env = environment_class(ENV, ENV_KWARGS)()
    env.reset(**rows()[0])
    text = env.get_dock_appointment(dock_door="door 7", date="2026-01-01")  # violates the pattern ^D[0-9]{2}$
    assert text.startswith("Error") and "^D[0-9]{2}$" in text
    env.get_reward()
    assert env.record["statuses"] == ["ERROR_BAD_ARGUMENTS"] and env.record["num_invalid_actions"] == 1


def test_infrastructure_failure_is_unscorable_for_trl(monkeypatch):
    from sopgym.sandboxes import SandboxError, ToolBox

    def broken(self, spec, args):
        raise SandboxError("injected: the replay store is unreachable")

    monkeypatch.setattr(ToolBox, "_replay", broken)
    env = environment_class(ENV, ENV_KWARGS)()
    env.reset(**rows()[0])
    env.get_dock_appointment(dock_door="D01", date="2026-01-01")
    assert env.get_reward() is None and env.record["infrastructure_failure"]


@pytest.mark.slow
def test_two_grpo_steps_through_environment_factory(tmp_path):
    dataset = train_dataset(ENV, "train", NUM_TASKS, env_kwargs=ENV_KWARGS)
    trainer = _trainer(tmp_path, train_dataset=dataset, environment_factory=environment_class(ENV, ENV_KWARGS))
    trainer.train()
    assert trainer.state.global_step == 2
    assert all(env.record is not None for env in trainer.environments)
    assert sum("loss" in entry for entry in trainer.state.log_history) == 2


# --------------------------------------------------------------------------------------------------
# rollout_func
# --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("where", ["local", "served"])
@pytest.mark.parametrize("policy", ["oracle", "majority"])
def test_scripted_rollout_func_rewards_and_masks_are_sopgyms(tmp_path, request, policy, where):
    """Through GRPOTrainer.train(): sopgym's rewards, records and chat, the env_mask on the sampled replies
    only; the same with the env served by `sopgym serve` (records without the ground truth it withholds)."""
    placed = _placed(request, where)
    dataset = train_dataset(ENV, "train", NUM_TASKS, **placed)
    rollout = SopgymRollout(dataset, **placed)
    trainer = _trainer(tmp_path, train_dataset=dataset, reward_funcs=sopgym_reward, rollout_func=rollout,
                       args={"max_steps": 1, "max_completion_length": SCRIPTED_BUDGET})
    trainer._generate_single_turn = _RawScripted(policy)
    outputs = []
    original = rollout.__call__

    def spy(prompts, tr):
        out = original(prompts, tr)
        outputs.append(out)
        return out

    trainer.rollout_func = spy
    seen = _spy(trainer)
    try:
        trainer.train()
    finally:
        rollout.close()
    out = outputs[0]
    tok = tokenizer()
    assert len(out["completion_ids"]) == NUM_TASKS * GROUP
    for i, record in enumerate(out["sopgym_record"]):
        actions, reference = next(v for v in replies(policy).values() if v[1].record["task_id"] == record["task_id"])
        assert record == _as_seen(reference.record, where) and out["sopgym_reward"][i] == reference.total_reward
        assert out["sopgym_success"][i] == (reference.success if where == "local" else None)  # no ground truth: not judged
        ids, mask = out["completion_ids"][i], out["env_mask"][i]
        model = [t for t, m in zip(ids, mask) if m]
        env_part = [t for t, m in zip(ids, mask) if not m]
        assert tok.decode(model, skip_special_tokens=False) == "".join(a + tok.eos_token for a in actions)
        assert out["prompt_ids"][i] + ids == _template_ids(reference)  # prompt + completion decode to sopgym's chat
        last = max(k for k, m in enumerate(reference.messages) if m["role"] == "assistant")
        for message in reference.messages[2:last]:
            if message["role"] != "assistant":
                assert message["content"] in tok.decode(env_part, skip_special_tokens=False)
        loss_model, loss_env = _parts(seen[0], i)
        assert loss_model == model and loss_env == env_part  # what TRL trains on is the env_mask
    if policy == "oracle":
        assert out["sopgym_reward"] == [1.0] * (NUM_TASKS * GROUP)


def test_served_rows_are_the_local_rows(servers):
    """train_dataset of the served env: the rows (task, seed, prompt) of the same env made here."""
    assert train_dataset(ENV, "train", NUM_TASKS, servers=servers).to_list() == train_dataset(ENV, "train", NUM_TASKS, env_kwargs=ENV_KWARGS).to_list()


def _template_ids(result):
    """sopgym's chat up to the last reply through the chat template (assistant turns as the text the policy
    wrote; what the env answered to the last reply is never trained on, so the episode's tokens end there)."""
    tok = tokenizer()
    last = max(i for i, m in enumerate(result.messages) if m["role"] == "assistant")
    messages = [{"role": m["role"], "content": m["content"]} if m["role"] == "assistant" else m for m in result.messages[: last + 1]]
    text = tok.apply_chat_template(messages, tools=result.reset_info["tools"], tokenize=False)
    return tok(text, add_special_tokens=False)["input_ids"]


class _RawScripted(Scripted):
    """The rollout_func path: sopgym parses the text itself, so the replies go as sopgym wrote them."""

    def __init__(self, policy):
        super().__init__(policy)
        self.replies = {user: list(actions) for user, (actions, _) in replies(policy).items()}


def test_rollout_func_keeps_sopgyms_feedback_and_invalid_action_penalty(tmp_path):
    kwargs = {**ENV_KWARGS, "invalid_action_penalty": 0.5}
    dataset = train_dataset(ENV, "train", 1, env_kwargs=kwargs)
    rollout = SopgymRollout(dataset, env_kwargs=kwargs)
    trainer = _trainer(tmp_path, train_dataset=dataset, reward_funcs=sopgym_reward, rollout_func=rollout,
                       args={"max_steps": 1, "per_device_train_batch_size": GROUP, "max_completion_length": SCRIPTED_BUDGET})
    script = _RawScripted("majority")
    for user in script.replies:
        script.replies[user] = ["let me think", *script.replies[user]]
    trainer._generate_single_turn = script
    out = rollout(list(dataset["prompt"]) * GROUP, trainer)
    record = out["sopgym_record"][0]
    assert record["statuses"] == ["NO_TOOL_CALL", "SUBMITTED"] and record["num_invalid_actions"] == 1
    row = dataset[0]
    reference = sopgym_run(row, "majority", {"invalid_action_penalty": 0.5})
    assert out["sopgym_reward"][0] == reference.total_reward - 0.5
    text = tokenizer().decode(out["completion_ids"][0], skip_special_tokens=False)
    assert "No tool call found" in text  # the model sees sopgym's feedback


@pytest.mark.slow
def test_two_grpo_steps_through_rollout_func(tmp_path):
    dataset = train_dataset(ENV, "train", NUM_TASKS, env_kwargs=ENV_KWARGS)
    rollout = SopgymRollout(dataset, env_kwargs=ENV_KWARGS)
    trainer = _trainer(tmp_path, train_dataset=dataset, reward_funcs=sopgym_reward, rollout_func=rollout)
    trainer.train()
    assert trainer.state.global_step == 2


# --------------------------------------------------------------------------------------------------
# TRL's private generation, which SopgymRollout calls (pinned and checked)
# --------------------------------------------------------------------------------------------------
def test_trls_generation_takes_the_parameters_sopgym_rollout_passes():
    params = tuple(inspect.signature(GRPOTrainer._generate_single_turn).parameters)
    assert params[0] == "self" and params[1 : 1 + len(TRL_GENERATE_PARAMS)] == TRL_GENERATE_PARAMS


def test_a_trainer_without_that_generation_is_refused_with_trls_version():
    class Other:
        def _generate_single_turn(self, prompts, sampling):
            return [], None

    with pytest.raises(RuntimeError, match=rf"_generate_single_turn.*this TRL {re.escape(trl.__version__)} has \('prompts', 'sampling'\)"):
        trl_generation(Other())


def test_rollout_func_runs_trls_own_generation_unmocked(tmp_path):
    dataset = train_dataset(ENV, "train", 1, env_kwargs=ENV_KWARGS)
    rollout = SopgymRollout(dataset, env_kwargs=ENV_KWARGS)
    trainer = _trainer(tmp_path, train_dataset=dataset, reward_funcs=sopgym_reward, rollout_func=rollout,
                       args={"max_completion_length": 24, "per_device_train_batch_size": GROUP})
    out = rollout(list(dataset["prompt"]) * GROUP, trainer)
    assert len(out["completion_ids"]) == GROUP
    for ids, mask, record in zip(out["completion_ids"], out["env_mask"], out["sopgym_record"]):
        assert 0 < sum(mask) <= 24 and len(ids) == len(mask)  # the model's own tokens, within the budget
        assert record["turns"] >= 1 and record["task_id"] == dataset[0]["task_id"]


def test_the_trl_extra_declares_everything_the_adapter_imports():
    assert_extra_complete("trl", "import sopgym.integrations.trl, trl, transformers; from trl import GRPOTrainer")


# --------------------------------------------------------------------------------------------------
# What the docs say a user runs, run as written
# --------------------------------------------------------------------------------------------------
REPO = Path(__file__).resolve().parents[3]
DOCS = REPO / "docs" / "integrations.md"


def _documented_example() -> str:
    text = DOCS.read_text()
    section = text[text.index("### `environment_factory`: the env's tools as methods"):]
    return section.split("```python\n", 1)[1].split("```", 1)[0]


def _offline_env() -> dict:
    return {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TRL_EXPERIMENTAL_SILENCE": "1"}


@pytest.mark.slow
def test_the_documented_example_runs_as_written(tmp_path):
    """docs/integrations.md's environment_factory example, unchanged, offline on CPU (no hub, no GPU)."""
    out = subprocess.run([sys.executable, "-c", _documented_example()], cwd=tmp_path, env=_offline_env(),
                         capture_output=True, text=True, timeout=1800)
    assert out.returncode == 0, out.stderr[-3000:]
    assert (tmp_path / "tiny-qwen2" / "config.json").exists()


@pytest.fixture(scope="module")
def cpu_recipe(tmp_path_factory):
    """configs/integrations/trl-cpu.yaml run as written through `python -m sopgym.integrations.trl`, offline,
    in a fresh folder (so the tiny model is built and warm-started first): its JSON summary."""
    config = REPO / "configs" / "integrations" / "trl-cpu.yaml"
    out = subprocess.run([sys.executable, "-m", "sopgym.integrations.trl", "--config", str(config)],
                         cwd=tmp_path_factory.mktemp("trl-cpu"), env=_offline_env(), capture_output=True, text=True, timeout=1800)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_the_cpu_launch_recipe_runs_its_steps(cpu_recipe):
    """TRL's loop runs the recipe's steps end to end (generation, sopgym's step loop, the env's reward, the
    loss) and logs a loss each."""
    assert cpu_recipe["steps"] == 2 and cpu_recipe["loss"] is not None and cpu_recipe["reward"] is not None, cpu_recipe


@pytest.mark.slow
def test_the_cpu_launch_recipe_has_groups_whose_rewards_differ(cpu_recipe):
    """After the recipe's warm start the tiny model's episodes of a task do not all score the same: some
    GRPO group has rewards that differ (untrained, every episode scored -0.05 and every group's std was 0)."""
    assert any(step["frac_reward_zero_std"] < 1 for step in cpu_recipe["per_step"]), cpu_recipe["per_step"]


@pytest.mark.slow
def test_the_cpu_launch_recipe_changes_the_weights(cpu_recipe):
    """TRL's GRPO steps of the recipe change the model's parameter tensors (untrained: 0 of 14 changed)."""
    assert cpu_recipe["parameters_changed"] > 0, cpu_recipe


@pytest.mark.parametrize("template", ["sopgym", "unknown-tool-template"])
def test_trl_refuses_a_tokenizer_with_the_message_the_docs_quote(tmp_path, template):
    from sopgym.trainers.tokenizer import build_bpe_tokenizer

    tok = build_bpe_tokenizer(["a tool call"] * 4, vocab_size=300)
    if template == "unknown-tool-template":  # renders tool calls, but is not one of TRL's copies
        tok.chat_template = _qwen_template() + "{#- a local edit -#}"
    config = Qwen2Config(vocab_size=len(tok), hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=1)
    with pytest.raises(ValueError) as caught:
        GRPOTrainer(model=Qwen2ForCausalLM(config), processing_class=tok, args=_args(tmp_path),
                    train_dataset=train_dataset(ENV, "train", 1, env_kwargs=ENV_KWARGS),
                    environment_factory=environment_class(ENV, ENV_KWARGS))
    message = str(caught.value).split(" Please")[0]
    assert message and message in " ".join(DOCS.read_text().split()), message
