"""The KV-cached sampler against a no-cache full forward, for every attention backend, batch shape and cache.

A static KV cache is pre-allocated: the slots not yet written hold zeros, and a decode step that
attends to them computes a slightly different policy than the one trained (issue: sdpa_varlen and
flash-attention did, whenever a batch had no padding). Here the sampler's greedy tokens must equal
greedy decoding with a full forward pass per token (no cache), and its log-probs must equal that
forward's (fp32: max abs difference < 1e-5), for one prompt, an equal-length bucket (no padding)
and a left-padded batch, with the static and the dynamic cache. The flash kernels need CUDA and
half precision: their cells run where CUDA is present, with a half-precision tolerance.
"""

import pytest
import torch

from sopgym.policy.end_of_turn import end_of_turn_ids
from sopgym.policy.hf import SHARED_PREFIX_MIN, HFPolicy, common_prefix_length
from sopgym.trainers import attention

from .helpers import tiny_model, tiny_tokenizer

CPU_BACKENDS = ("sdpa_varlen", "sdpa", "eager")
CAPS = (14, 6, 11)
SHAPES = ["one_prompt", "equal_length_bucket", "left_padded", "shared_prefix_bucket", "shared_prefix_padded", "group"]


def _prompts(tok, shape: str) -> tuple[list[list[int]], list[int]]:
    base = tok("key: k1 lookup the colour", add_special_tokens=False)["input_ids"]
    if shape == "one_prompt":
        return [base], [CAPS[0]]
    if shape == "equal_length_bucket":  # same length, different tokens: a batch without padding
        return [base, list(reversed(base)), base[1:] + base[:1]], list(CAPS)
    if shape == "left_padded":
        return [base, base[3:], [5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17]], list(CAPS)
    # A common prefix longer than SHARED_PREFIX_MIN (as every episode's system turn), then suffixes:
    prefix = (base * 8)[:SHARED_PREFIX_MIN + 9]
    if shape == "shared_prefix_bucket":  # suffixes of one length: no padding
        return [prefix + base[:4], prefix + base[2:6], prefix + base[5:9]], list(CAPS)
    if shape == "shared_prefix_padded":  # padding between the prefix and the shorter suffixes
        return [prefix + base, prefix + base[:2], prefix + base[4:]], list(CAPS)
    assert shape == "group"  # a GRPO group: the same prompt in every row
    return [prefix + base] * 3, list(CAPS)


@torch.no_grad()
def _reference(model, prompt: list[int], cap: int, stop_ids) -> tuple[list[int], list[float], list[float]]:
    """Greedy decoding with a full forward per token (no cache): ids, their log-probs, and the gap
    between the best and second-best logit at each step (for near-tie checks in half precision)."""
    device = next(model.parameters()).device
    ids, logps, gaps = [], [], []
    for _ in range(cap):
        logits = model(input_ids=torch.tensor([prompt + ids], device=device)).logits[0, -1].float()
        top2 = logits.topk(2).values
        nxt = int(logits.argmax())
        ids.append(nxt)
        logps.append(float(torch.log_softmax(logits, -1)[nxt]))
        gaps.append(float(top2[0] - top2[1]))
        if nxt in stop_ids:
            break
    return ids, logps, gaps


def _check(model, tok, shape, static, tol, policy=None):
    prompts, caps = _prompts(tok, shape)
    policy = policy or HFPolicy(model, tok, static_cache=static, bucket_by_length=not shape.endswith("padded"))
    samples = policy.generate(prompts, caps, temperature=0.0)
    worst = 0.0
    for prompt, cap, sample in zip(prompts, caps, samples):
        ref_ids, ref_logps, gaps = _reference(model, prompt, cap, policy.stop_ids)
        if tol > 1e-5:  # half precision: compare up to the first near-tie of the reference
            cut = next((i for i, g in enumerate(gaps) if g < 0.1), len(gaps))
            ref_ids, ref_logps = ref_ids[:cut], ref_logps[:cut]
            sample_ids, sample_logps = sample.ids[:cut], sample.logps[:cut]
        else:
            sample_ids, sample_logps = sample.ids, sample.logps
        assert sample_ids == ref_ids, (shape, static)
        worst = max([worst] + [abs(a - b) for a, b in zip(sample_logps, ref_logps)])
    assert worst < tol, (shape, static, worst)
    return policy


@pytest.mark.parametrize("static", [True, False], ids=["static_cache", "dynamic_cache"])
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_sampler_equals_a_no_cache_forward(backend, shape, static):
    tok = tiny_tokenizer()
    model = tiny_model(tok, attn=attention.HF_IMPLEMENTATION[backend]).eval()
    _check(model, tok, shape, static, tol=1e-5)


@pytest.mark.gpu
@pytest.mark.parametrize("static", [True, False], ids=["static_cache", "dynamic_cache"])
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("backend", attention.BACKENDS)
def test_sampler_equals_a_no_cache_forward_on_cuda(backend, shape, static):
    dtype = torch.bfloat16 if backend in attention.CUDA_BACKENDS else torch.float32
    if backend == "flash_varlen" and not attention.flash_attn_available():
        pytest.skip("flash_attn is not installed")
    if backend == "torch_varlen" and not attention.torch_varlen_available("cuda"):
        pytest.skip("this GPU or torch has no flash varlen kernel")
    tok = tiny_tokenizer()
    model = tiny_model(tok, dtype=dtype, attn=attention.HF_IMPLEMENTATION[backend]).cuda().eval()
    _check(model, tok, shape, static, tol=1e-5 if dtype == torch.float32 else 2e-2)


def test_the_shared_prefix_shapes_share_a_prefill():
    tok = tiny_tokenizer()
    for shape in ("shared_prefix_bucket", "shared_prefix_padded", "group"):
        prompts, _ = _prompts(tok, shape)
        assert common_prefix_length(prompts) >= SHARED_PREFIX_MIN, shape
    for shape in ("equal_length_bucket", "left_padded"):
        assert common_prefix_length(_prompts(tok, shape)[0]) < SHARED_PREFIX_MIN, shape
    assert common_prefix_length([[1, 2, 3], [1, 2, 3]]) == 2  # one token of each prompt is always fed
    assert common_prefix_length([[1, 2, 3]]) == 2 and common_prefix_length([[7], [7, 8]]) == 0


@pytest.mark.parametrize("static", [True, False], ids=["static_cache", "dynamic_cache"])
@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_a_kept_prefix_is_reused_across_calls_and_dropped_when_the_weights_change(backend, static):
    """The prefix's states are kept between calls: a second call with the same prefix, a call whose
    common prefix is shorter, and a call after an optimiser step (the kept states are stale then)
    all equal a no-cache forward of the weights of their time."""
    tok = tiny_tokenizer()
    model = tiny_model(tok, attn=attention.HF_IMPLEMENTATION[backend]).eval()
    policy = _check(model, tok, "shared_prefix_bucket", static, tol=1e-5)
    kept = policy._prefix["ids"]
    _check(model, tok, "group", static, tol=1e-5, policy=policy)  # a longer prefix, extended from the kept one
    assert policy._prefix["ids"][: len(kept)] == kept and len(policy._prefix["ids"]) > len(kept)
    _check(model, tok, "shared_prefix_padded", static, tol=1e-5, policy=policy)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    model.train()
    model(input_ids=torch.tensor([_prompts(tok, "group")[0][0]])).logits.float().logsumexp(-1).mean().backward()
    optimizer.step()
    model.eval()
    _check(model, tok, "shared_prefix_bucket", static, tol=1e-5, policy=policy)


def test_stops_on_every_declared_end_of_turn_id():
    """A generation config may declare several eos ids (Qwen2.5-Instruct: <|im_end|> and <|endoftext|>)."""
    tok = tiny_tokenizer()
    model = tiny_model(tok).eval()
    prompt = tok("key: k1 lookup the colour", add_special_tokens=False)["input_ids"]
    free = HFPolicy(model, tok).generate([prompt], 8, temperature=0.0)[0]
    assert len(free.ids) >= 3 and free.hit_cap
    third = free.ids[2]  # a token greedy decoding reaches: declare it an end of turn
    model.generation_config.eos_token_id = [tok.eos_token_id, third]
    policy = HFPolicy(model, tok)
    assert {tok.eos_token_id, third} <= policy.stop_ids
    stopped = policy.generate([prompt], 8, temperature=0.0)[0]
    assert stopped.ids == free.ids[: free.ids.index(third) + 1] and not stopped.hit_cap


def test_end_of_turn_ids_include_the_chat_templates_end_token():
    """A tokenizer whose eos is not the token its template closes a turn with (ChatML with eos
    <|endoftext|>, as base models ship): the template's <|im_end|> still ends a turn."""
    import copy

    base = copy.deepcopy(tiny_tokenizer())  # a copy: the cached tokenizer is shared by other tests
    base.eos_token = "<|endoftext|>"
    ids = end_of_turn_ids(base)
    assert base.convert_tokens_to_ids("<|im_end|>") in ids and base.eos_token_id in ids


def test_the_episode_builder_knows_the_generation_configs_ends_without_the_model(tmp_path):
    """The rollout's EpisodeBuilder gets no model: the generation config saved with the tokenizer
    (a model directory, or the Hugging Face cache) gives it the same ends as the sampler."""
    from transformers import AutoTokenizer, GenerationConfig

    from sopgym.trainers.episodes import Episode, EpisodeBuilder

    tok = tiny_tokenizer()
    endoftext = tok.convert_tokens_to_ids("<|endoftext|>")
    tok.save_pretrained(str(tmp_path))
    GenerationConfig(eos_token_id=[tok.eos_token_id, endoftext]).save_pretrained(str(tmp_path))
    loaded = AutoTokenizer.from_pretrained(str(tmp_path))
    assert endoftext in end_of_turn_ids(loaded) and endoftext not in end_of_turn_ids(tok)
    ep = Episode("t", 0, 0, "fake", messages=[{"role": "user", "content": "key: k1"}])
    sampled = loaded("hello", add_special_tokens=False)["input_ids"] + [endoftext]
    assert EpisodeBuilder(loaded, ep).add_assistant(sampled, [0.0] * len(sampled)) == "hello"
