"""Packing, block masks, and packed-vs-unpacked equivalence (with a negative control)."""

import pytest
import torch

from sopgym.trainers import attention, packing
from sopgym.trainers.modeling import token_logprobs
from sopgym.trainers.optimise import StepSettings, accumulate_gradients, to_sequences

from .helpers import oracle_episode, tiny_model, tiny_tokenizer


def test_first_fit_decreasing_hand_example():
    assert packing.first_fit_decreasing([5, 4, 3, 3, 1], 8) == [[0, 2], [1, 3, 4]]
    with pytest.raises(ValueError, match="does not fit"):
        packing.first_fit_decreasing([9], 8)


def test_collate_resets_positions_and_shifts_fields():
    seqs = [
        packing.Sequence([10, 11, 12], {"mask": [0, 1, 1]}),
        packing.Sequence([20, 21], {"mask": [0, 1]}),
    ]
    b = packing.collate(seqs, [[0, 1]])
    assert b.input_ids_BT.tolist() == [[10, 11, 12, 20, 21]]
    assert b.position_ids_BT.tolist() == [[0, 1, 2, 0, 1]]
    assert b.segment_ids_BT.tolist() == [[0, 0, 0, 1, 1]]
    assert b.target_ids_BT[0, :2].tolist() == [11, 12] and b.target_ids_BT[0, 3].item() == 21
    # the last token of episode 0 must not predict the first of episode 1
    assert b.fields_BT["mask"].tolist() == [[1, 1, 0, 1, 0]]
    padded = packing.collate(seqs, [[0], [1]])
    assert padded.segment_ids_BT.tolist() == [[0, 0, 0], [1, 1, -1]] and padded.efficiency == 5 / 6


def test_padding_continues_positions_so_one_episode_rows_are_not_read_as_packed():
    from transformers.masking_utils import find_packed_sequence_indices

    seqs = [packing.Sequence([10, 11, 12], {"mask": [0, 1, 1]}), packing.Sequence([20], {"mask": [0]})]
    padded = packing.collate(seqs, [[0], [1]])
    assert padded.position_ids_BT.tolist() == [[0, 1, 2], [0, 1, 2]]
    # transformers builds a [T, T] mask (no fused causal kernel) when it sees positions restart
    assert find_packed_sequence_indices(padded.position_ids_BT) is None


def test_block_causal_mask_pattern():
    m = attention.block_causal_mask(torch.tensor([[0, 0, 1, 1, -1]]))[0, 0]
    expected = torch.tensor(
        [[1, 0, 0, 0, 0], [1, 1, 0, 0, 0], [0, 0, 1, 0, 0], [0, 0, 1, 1, 0], [0, 0, 0, 0, 1]], dtype=torch.bool
    )
    assert torch.equal(m, expected)
    add = attention.additive_mask(m[None, None], torch.float32)[0, 0]
    assert add[0, 0] == 0 and add[0, 1] == torch.finfo(torch.float32).min


def test_select_backend():
    # auto never builds a dense [B, 1, T, T] mask and never picks a flash kernel for fp32 weights
    assert attention.select_backend("auto", "cpu") == "sdpa_varlen"
    assert attention.select_backend("auto", "cpu", torch.bfloat16) == "sdpa_varlen"
    assert attention.select_backend("eager", "cpu") == "eager"
    for backend in attention.CUDA_BACKENDS:
        with pytest.raises(ValueError, match="float16 or bfloat16"):
            attention.select_backend(backend, "cpu", torch.float32)
        with pytest.raises(ValueError, match="CUDA"):
            attention.select_backend(backend, "cpu", torch.bfloat16)


@pytest.mark.gpu
def test_auto_on_cuda_picks_a_flash_kernel_for_half_weights_and_sdpa_varlen_for_fp32():
    assert attention.select_backend("auto", "cuda", torch.float32) == "sdpa_varlen"
    half = attention.select_backend("auto", "cuda", torch.bfloat16)
    expected = "flash_varlen" if attention.flash_attn_available() else "torch_varlen"
    assert half == expected or (half == "sdpa_varlen" and not attention.torch_varlen_available("cuda"))


def _episodes(tok, n=5):
    return [oracle_episode(tok, seed=s, group_id=s, advantage=(-1) ** s * 0.7) for s in range(n)]


def _alone_logps(model, tok, episodes):
    out = []
    with torch.no_grad():
        for ep in episodes:
            logits = model(input_ids=torch.tensor([ep.ids])).logits[0].float()
            lp = torch.log_softmax(logits[:-1], -1).gather(-1, torch.tensor(ep.ids[1:])[:, None])[:, 0]
            out.append(lp)
    return out


def _packed_logps(model, batch, backend):
    with torch.no_grad():
        logp_BT, _ = token_logprobs(model, batch, backend)
    out = {}
    for b, (row, lens) in enumerate(zip(batch.seq_index, batch.seq_lens)):
        start = 0
        for i, n in zip(row, lens):
            out[i] = logp_BT[b, start : start + n - 1]
            start += n
    return out


@pytest.mark.parametrize("backend", ["sdpa", "eager", "sdpa_varlen"])
def test_packed_logprobs_equal_unpacked(backend):
    tok = tiny_tokenizer()
    model = tiny_model(tok, attn=attention.HF_IMPLEMENTATION[backend]).eval()
    eps = _episodes(tok)
    seqs = to_sequences(eps, "token")
    row_len = 2 * max(len(e.ids) for e in eps) + 5
    rows = packing.first_fit_decreasing([len(e.ids) for e in eps], row_len)
    assert any(len(r) > 1 for r in rows)  # really packed
    batch = packing.collate(seqs, rows)
    packed = _packed_logps(model, batch, backend)
    alone = _alone_logps(model, tok, eps)
    diff = max(float((packed[i] - alone[i]).abs().max()) for i in range(len(eps)))
    assert diff < 1e-5, diff


def test_negative_control_packing_without_boundaries_fails():
    tok = tiny_tokenizer()
    model = tiny_model(tok).eval()
    eps = _episodes(tok)
    rows = packing.first_fit_decreasing([len(e.ids) for e in eps], 10_000)
    batch = packing.collate(to_sequences(eps, "token"), rows)
    with torch.no_grad():  # reset position ids but a plain causal mask: episodes see each other
        logits = model(input_ids=batch.input_ids_BT, position_ids=batch.position_ids_BT).logits
    logp_BT = torch.log_softmax(logits.float(), -1).gather(-1, batch.target_ids_BT[..., None])[..., 0]
    alone = _alone_logps(model, tok, eps)
    start, diffs = 0, []
    for i, n in zip(batch.seq_index[0], batch.seq_lens[0]):
        diffs.append(float((logp_BT[0, start : start + n - 1] - alone[i]).abs().max()))
        start += n
    assert max(diffs) > 1e-3  # the equivalence test above would fail on this


def _grads(model):
    return {n: p.grad.detach().clone() for n, p in model.named_parameters()}


@pytest.mark.parametrize("backend", ["sdpa", "sdpa_varlen"])
def test_packed_loss_and_gradients_equal_one_episode_per_row(backend):
    tok = tiny_tokenizer()
    eps = _episodes(tok)
    results = {}
    for packed in (True, False):
        model = tiny_model(tok, attn=attention.HF_IMPLEMENTATION[backend] if packed else "sdpa")
        s = StepSettings(row_tokens=4096, rows_per_micro_batch=8, packed=packed)
        stats = accumulate_gradients(model, None, eps, s, backend if packed else "sdpa")
        results[packed] = (stats["loss"], _grads(model))
    assert results[True][0] == pytest.approx(results[False][0], abs=1e-6)
    for name, g in results[True][1].items():
        assert torch.allclose(g, results[False][1][name], atol=1e-6, rtol=1e-4), name


def test_varlen_inputs_drop_padding_and_rows_come_back_in_place():
    seqs = [packing.Sequence([10, 11, 12], {"mask": [0, 1, 1]}), packing.Sequence([20, 21], {"mask": [0, 1]})]
    b = packing.collate(seqs, [[0], [1]])  # second row padded by one
    inputs = attention.model_inputs(b, "sdpa_varlen", torch.float32, "cpu")
    assert inputs["input_ids"].tolist() == [[10, 11, 12, 20, 21]]
    assert inputs["position_ids"].tolist() == [[0, 1, 2, 0, 1]]
    assert inputs["cu_seq_lens_q"].tolist() == [0, 3, 5] and inputs["max_length_q"] == 3
    assert attention.computed_positions(b, "sdpa_varlen") == 5 and attention.computed_positions(b, "sdpa") == 6
    out = torch.arange(5.0).reshape(1, 5, 1)
    assert attention.to_rows(out, b)[..., 0].tolist() == [[0, 1, 2], [3, 4, 0]]
    with pytest.raises(ValueError, match="expected 5 or 2x3 output positions, got"):
        attention.to_rows(torch.zeros(1, 4, 1), b)


def test_varlen_packing_computes_no_padding():
    import dataclasses

    tok = tiny_tokenizer()
    eps = _episodes(tok)
    cut = len(eps[0].ids) - 7  # one shorter episode, so that padded rows really pad
    eps[0] = dataclasses.replace(eps[0], ids=eps[0].ids[:cut], loss_mask=eps[0].loss_mask[:cut], old_logp=eps[0].old_logp[:cut])
    s = StepSettings(row_tokens=4096, rows_per_micro_batch=2, packed=False)  # one episode per row: padded
    stats = accumulate_gradients(tiny_model(tok, attn=attention.SDPA_VARLEN), None, eps, s, "sdpa_varlen")
    assert stats["packing_efficiency"] == 1.0
    assert accumulate_gradients(tiny_model(tok), None, eps, s, "sdpa")["packing_efficiency"] < 1.0


def test_sdpa_varlen_model_generates_like_sdpa():
    """Without cu_seqlens (generation) the varlen attention is SDPA, padding masks included."""
    from sopgym.policy.hf import HFPolicy

    tok = tiny_tokenizer()
    prompts = [tok("key: k1 lookup", add_special_tokens=False)["input_ids"], [5, 6, 7, 8, 9, 10, 11]]
    out = {}
    for impl in ("sdpa", attention.SDPA_VARLEN):
        policy = HFPolicy(tiny_model(tok, attn=impl).eval(), tok, bucket_by_length=False)  # a left-padded batch
        out[impl] = policy.generate(prompts, [6, 6], temperature=0.0)
    assert [s.ids for s in out["sdpa"]] == [s.ids for s in out[attention.SDPA_VARLEN]]
    diffs = [abs(x - y) for a, b in zip(out["sdpa"], out[attention.SDPA_VARLEN]) for x, y in zip(a.logps, b.logps)]
    assert max(diffs) < 1e-5


@pytest.mark.gpu
@pytest.mark.parametrize("backend", attention.CUDA_BACKENDS)
def test_flash_varlen_matches_unpacked_on_gpu(backend):
    if backend == "flash_varlen":
        pytest.importorskip("flash_attn")
    elif not attention.torch_varlen_available("cuda"):
        pytest.skip("this GPU or torch has no flash varlen kernel")
    tok = tiny_tokenizer()
    model = tiny_model(tok, dtype=torch.bfloat16, attn=attention.HF_IMPLEMENTATION[backend]).cuda().eval()
    eps = _episodes(tok)
    rows = packing.first_fit_decreasing([len(e.ids) for e in eps], 4096)
    batch = packing.collate(to_sequences(eps, "token"), rows)
    assert any(len(r) > 1 for r in rows)  # really packed
    packed = _packed_logps(model, batch, backend)
    alone = []
    with torch.no_grad():
        for ep in eps:
            logits = model(input_ids=torch.tensor([ep.ids]).cuda()).logits[0].float()
            alone.append(torch.log_softmax(logits[:-1], -1).gather(-1, torch.tensor(ep.ids[1:]).cuda()[:, None])[:, 0])
    diff = max(float((packed[i] - alone[i]).abs().max()) for i in range(len(eps)))
    assert diff < 5e-2, diff  # bf16 tolerance
