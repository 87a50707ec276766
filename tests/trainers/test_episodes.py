"""Token bookkeeping: ids of a whole episode equal the chat template of its final messages."""

import pytest
import torch

from sopgym.policy.hf import HFPolicy
from sopgym.trainers.episodes import Episode, EpisodeBuilder, TemplatePrefixError, template_ids
from sopgym.trainers.rollout import EnvPool, RolloutSettings, collect, group_spec_list
from sopgym.trainers.sft import episode_from_messages

from . import fake_env
from .helpers import oracle_episode, tiny_model, tiny_tokenizer


def test_oracle_episode_is_prefix_consistent():
    tok = tiny_tokenizer()
    for seed in range(3):
        ep = oracle_episode(tok, seed)
        assert ep.ids == template_ids(tok, ep.messages, ep.tools)
        assert len(ep.ids) == len(ep.loss_mask) == len(ep.old_logp)


def test_sampled_rollouts_are_prefix_consistent_including_cut_turns():
    """Random-model rollouts: turns cut by max_new_tokens (no end-of-turn token) still close correctly."""
    tok = tiny_tokenizer()
    model = tiny_model(tok)
    pool = EnvPool(lambda env_id: fake_env.FakeSopEnv(max_turns=3))
    specs = group_spec_list(["fake"], "train", 0, 2, 2)
    eps = collect(pool, specs, HFPolicy(model, tok), tok, RolloutSettings(max_new_tokens=12, max_context=4096, temperature=1.0),
                  generator=torch.Generator().manual_seed(0))
    assert any(ep.token_cap_hits for ep in eps)
    for ep in eps:
        ref = template_ids(tok, ep.messages, ep.tools)
        # sampled ids are kept as sampled: they may tokenise differently from their decoded text, so
        # compare the non-policy parts (everything the template adds) and the decoded text.
        assert tok.decode(ep.ids) == tok.decode(ref)
        assert ep.num_turns == 3 and ep.truncation_cause == "max_turns"


def test_episode_from_messages_matches_template():
    tok = tiny_tokenizer()
    ep0 = oracle_episode(tok, 5)
    ep = episode_from_messages(tok, ep0.messages, ep0.tools)
    assert ep.ids == template_ids(tok, ep.messages, ep.tools)
    assert ep.loss_mask == ep0.loss_mask


def test_template_that_rewrites_history_is_reported():
    """A template that drops earlier assistant turns (as reasoning templates do) breaks prefix consistency."""
    tok = tiny_tokenizer()
    import copy

    tok2 = copy.deepcopy(tok)
    tok2.chat_template = (
        "{% for m in messages %}{% if m['role'] != 'assistant' or loop.last %}"
        "{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n' }}{% endif %}{% endfor %}"
        "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
    )
    env = fake_env.FakeSopEnv()
    _, info = env.reset(seed=0)
    ep = Episode("t", 0, 0, "fake", messages=list(info["messages"]), tools=None)
    b = EpisodeBuilder(tok2, ep)
    b.add_assistant_text(fake_env.oracle_reply(ep.messages))
    with pytest.raises(TemplatePrefixError, match="not prefix-consistent"):
        b.add_env_messages([{"role": "tool", "content": "red"}])
        b.add_assistant_text("x")
        b.add_env_messages([{"role": "tool", "content": "y"}])


def test_real_domain_oracle_episode_is_prefix_consistent():
    sopgym = pytest.importorskip("sopgym")
    import gymnasium

    from sopgym.envs.policies import make_policy

    env_id = "sopgym/WarehouseReceiving-v0"
    if env_id not in sopgym.registered_env_ids():
        pytest.skip("WarehouseReceiving is not registered")
    env = gymnasium.make(env_id)
    tok = tiny_tokenizer()
    _, info = env.reset(seed=3, options={"split": "train"})
    oracle = make_policy("oracle")
    oracle.reset(info)
    ep = Episode(info["task_id"], 0, 3, env_id, messages=list(info["messages"]), tools=info["tools"])
    b = EpisodeBuilder(tok, ep)
    seen, obs = len(info["messages"]), ""
    while True:
        b.add_assistant_text(oracle.act(obs, info))
        obs, _, term, trunc, info = env.step(ep.messages[-1]["content"])
        if term or trunc:
            b.close()
            break
        b.add_env_messages(info["messages"][seen + 1 :])
        seen = len(info["messages"])
    assert info["episode"]["reward"] == 1.0
    assert ep.ids == template_ids(tok, ep.messages, ep.tools)


def test_a_declared_end_of_turn_that_is_not_the_templates_is_kept_and_stripped_from_the_message():
    """Qwen2.5-Instruct may end a turn with <|endoftext|> (its generation config's second eos) while
    its template closes turns with <|im_end|>: the sampled id stays in ids (token in, token out), the
    env never sees it in the message, and the template's closing text follows as context."""
    tok = tiny_tokenizer()
    env = fake_env.FakeSopEnv()
    _, info = env.reset(seed=0)
    ep = Episode("t", 0, 0, "fake", messages=list(info["messages"]), tools=info["tools"])
    endoftext = tok.convert_tokens_to_ids("<|endoftext|>")
    b = EpisodeBuilder(tok, ep, stop_ids={tok.eos_token_id, endoftext})
    reply = fake_env.oracle_reply(ep.messages)
    sampled = tok(reply, add_special_tokens=False)["input_ids"] + [endoftext]
    start = len(ep.ids)
    assert b.add_assistant(sampled, [-0.5] * len(sampled)) == reply
    b.add_env_messages([{"role": "tool", "content": "red"}])
    assert ep.messages[-2] == {"role": "assistant", "content": reply}
    assert ep.ids[start : start + len(sampled)] == sampled and ep.sampler_logp[start : start + len(sampled)] == [-0.5] * len(sampled)
    after = tok.decode(ep.ids[start + len(sampled) :])
    assert after.startswith("<|im_end|>\n<|im_start|>tool\nred<|im_end|>")
    assert sum(ep.loss_mask) == len(sampled)
