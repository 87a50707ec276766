"""Batched KV-cached sampling (the OpenAI-compatible client is tested in tests/agents)."""

import torch

from sopgym.policy.hf import HFPolicy, top_p_filter

from .helpers import tiny_model, tiny_tokenizer


def test_top_p_filter_keeps_smallest_nucleus():
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    out = top_p_filter(logits, 0.7)
    assert torch.isfinite(out[0, :2]).all() and torch.isinf(out[0, 2:]).all()
    assert torch.isfinite(top_p_filter(logits, 0.4)[0, 0]) and torch.isinf(top_p_filter(logits, 0.4)[0, 1:]).all()


def test_batched_greedy_equals_one_at_a_time():
    tok = tiny_tokenizer()
    model = tiny_model(tok)
    policy = HFPolicy(model, tok)
    prompts = [tok("key: k1 lookup", add_special_tokens=False)["input_ids"], tok("SOP", add_special_tokens=False)["input_ids"], [5, 6, 7, 8, 9, 10, 11]]
    caps = [7, 3, 5]
    batched = policy.generate(prompts, caps, temperature=0.0)
    for p, cap, b in zip(prompts, caps, batched):
        (single,) = policy.generate([p], cap, temperature=0.0)
        assert single.ids == b.ids
        assert max(abs(x - y) for x, y in zip(single.logps, b.logps)) < 1e-4
        assert len(b.ids) <= cap
    for kwargs in ({"static_cache": False}, {"bucket_by_length": False}, {"bucket_by_length": False, "static_cache": False}):
        other = HFPolicy(model, tok, **kwargs).generate(prompts, caps, temperature=0.0)  # left-padded batch too
        assert [s.ids for s in other] == [b.ids for b in batched], kwargs
        assert max(abs(x - y) for s, b in zip(other, batched) for x, y in zip(s.logps, b.logps)) < 1e-4


def test_sampling_is_reproducible_and_logps_match_the_model():
    tok = tiny_tokenizer()
    model = tiny_model(tok)
    policy = HFPolicy(model, tok)
    prompt = tok("key: k3", add_special_tokens=False)["input_ids"]
    a = policy.generate([prompt, prompt], 6, temperature=0.7, generator=torch.Generator().manual_seed(1))
    b = policy.generate([prompt, prompt], 6, temperature=0.7, generator=torch.Generator().manual_seed(1))
    assert [s.ids for s in a] == [s.ids for s in b]
    ids = prompt + a[0].ids
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([ids])).logits[0]
    ref = torch.log_softmax(logits[len(prompt) - 1 : -1] / 0.7, -1).gather(-1, torch.tensor(a[0].ids)[:, None])[:, 0]
    assert torch.allclose(ref, torch.tensor(a[0].logps), atol=1e-4)
    assert all(s.hit_cap == (tok.eos_token_id not in s.ids) for s in a)
