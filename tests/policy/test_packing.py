"""Shared-prompt packing (selfevo.policy.packing): the layout worked out by hand, the degenerate cases, and the
store's log-probs and gradients packed against the same rows run one by one."""
import pytest
import torch

from helpers.adapters import randomize_adapters
from selfevo.policy import SeqBatch
from selfevo.policy.packing import (SHARED_PREFIX, common_prefix, group_prefixes, pack_shared_prompts, packed_positions,
                                    prompt_keys, prompt_length)


def _batch(prompts, completions):
    return SeqBatch.build(prompts, completions, 0)


def test_layout_by_hand():
    # rows 0 and 2 share the prompt [5, 6, 7]; row 1 has its own
    b = _batch([[5, 6, 7], [5, 6], [5, 6, 7]], [[8, 9], [4], [3]])
    p = pack_shared_prompts(b.input_ids, b.attention_mask, b.loss_mask)
    # packed row 0: prompt 5 6 7, row 0's 8 9, row 2's 3 (width 6); packed row 1: row 1 whole (5 6 4), padded
    assert p.input_ids.tolist() == [[5, 6, 7, 8, 9, 3], [5, 6, 4, 0, 0, 0]]
    assert p.position_ids.tolist() == [[0, 1, 2, 3, 4, 3], [0, 1, 2, 0, 0, 0]]
    assert p.where.tolist() == [[0, 1, 2, 3, 4], [6, 7, 8, -1, -1], [0, 1, 2, 5, -1]]
    assert p.tokens == 5 + 3 + 4
    m = p.mask[0, 0].int().tolist()
    assert m[3] == [1, 1, 1, 1, 0, 0]  # row 0's first token: the prompt and itself
    assert m[4] == [1, 1, 1, 1, 1, 0]
    assert m[5] == [1, 1, 1, 0, 0, 1]  # row 2's token: the prompt and itself, not row 0's tokens
    m1 = p.mask[1, 0].int().tolist()
    assert m1[2] == [1, 1, 1, 0, 0, 0]  # a row alone is plain causal
    assert m1[4] == [1, 1, 1, 0, 1, 0]  # padding sees the prompt and itself (never an empty row)
    assert p.segments == [(3, [(3, 5), (5, 6)]), (3, [])]  # the same as ranges; a row alone: its prompt only


def test_shared_prefix_by_hand():
    # a sampled row (prompt 5 6, completion 7 8 9) and two candidate rows (prompt 5 6 + rationale 7, decision 3 / 4):
    # by prompt, only the candidate rows share (5 6 7); with the shared prefix 2, all three share 5 6 once
    b = _batch([[5, 6], [5, 6, 7], [5, 6, 7]], [[7, 8, 9], [3], [4]])
    by_prompt = pack_shared_prompts(b.input_ids, b.attention_mask, b.loss_mask)
    assert by_prompt.input_ids.tolist() == [[5, 6, 7, 8, 9], [5, 6, 7, 3, 4]]
    p = pack_shared_prompts(b.input_ids, b.attention_mask, b.loss_mask, shared=torch.tensor([2.0, 2.0, 2.0]))
    assert p.input_ids.tolist() == [[5, 6, 7, 8, 9, 7, 3, 7, 4]]
    assert p.position_ids.tolist() == [[0, 1, 2, 3, 4, 2, 3, 2, 3]]
    assert p.where.tolist() == [[0, 1, 2, 3, 4], [0, 1, 5, 6, -1], [0, 1, 7, 8, -1]]
    assert p.segments == [(2, [(2, 5), (5, 7), (7, 9)])]
    assert prompt_keys(b.input_ids, b.attention_mask, b.loss_mask, torch.tensor([2.0, 2.0, 3.0])) == [
        (5, 6), (5, 6), (5, 6, 7)]
    with pytest.raises(ValueError, match=f"{SHARED_PREFIX} of row 1 is 5: not within its 4 tokens"):
        pack_shared_prompts(b.input_ids, b.attention_mask, b.loss_mask, shared=torch.tensor([2.0, 5.0, 2.0]))


def test_group_prefixes_by_hand():
    """A chained slate (group 0): two rationale rows (prompt 1 2 3) and two decision rows whose prompts carry more
    (1 2 3 6 and 1 2 3 8 9). By each row's prompt: the rationale rows pack as 1 2 3 4 5, the decision rows run
    alone, three rows of width 6 = 18 positions; by the 3 tokens all four begin with, one row 1 2 3 4 5 6 7 8 9
    10 = 10 positions, so the group shares 3. Group 1's rows have one prompt (nothing to gain), group 2 is one row,
    group 3's rows begin differently: each keeps its own prompt."""
    b = _batch([[1, 2, 3], [1, 2, 3], [1, 2, 3, 6], [1, 2, 3, 8, 9], [1, 2], [1, 2], [4], [5, 6], [7, 6]],
               [[4], [5], [7], [10], [3], [4], [5], [1], [1]])
    prompts = prompt_length(b.attention_mask, b.loss_mask)
    assert prompts == [3, 3, 4, 5, 2, 2, 1, 2, 2]
    assert common_prefix(b.input_ids, [0, 1, 2, 3], prompts) == 3
    assert common_prefix(b.input_ids, [7, 8], prompts) == 0 and common_prefix(b.input_ids, [], prompts) == 0
    slate = (b.input_ids[:4, :6], b.attention_mask[:4, :6], b.loss_mask[:4, :6])
    assert packed_positions(*slate) == 18 and packed_positions(*slate, torch.tensor([3, 3, 3, 3])) == 10
    got = group_prefixes(b.input_ids, b.attention_mask, b.loss_mask, [0, 0, 0, 0, 1, 1, 2, 3, 3])
    assert got.tolist() == [3, 3, 3, 3, 2, 2, 1, 2, 2]
    packed = pack_shared_prompts(b.input_ids, b.attention_mask, b.loss_mask, shared=got)
    assert packed.input_ids[0].tolist() == [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]
    # no group gains: None (the default packing is the same), also for one row and for rows of one prompt
    assert group_prefixes(b.input_ids, b.attention_mask, b.loss_mask, [0, 1, 2, 3, 4, 4, 5, 6, 6]) is None
    assert group_prefixes(b.input_ids[:1], b.attention_mask[:1], b.loss_mask[:1], [0]) is None


def test_nothing_shared_gives_none():
    b = _batch([[5, 6], [7, 6]], [[1], [2]])
    assert pack_shared_prompts(b.input_ids, b.attention_mask, b.loss_mask) is None


def test_prompt_length_and_keys_degenerate_rows():
    b = _batch([[5, 6], [5, 6], []], [[1], [], [4, 4]])
    assert prompt_length(b.attention_mask, b.loss_mask) == [2, 2, 0]  # no scored token: the whole row
    keys = prompt_keys(b.input_ids, b.attention_mask, b.loss_mask)
    assert keys[0] == keys[1] == (5, 6) and keys[2] == ("row", 2)  # no prompt: shares nothing
    p = pack_shared_prompts(b.input_ids, b.attention_mask, b.loss_mask)
    assert p.input_ids.shape[0] == 2 and p.where[1, :2].tolist() == [0, 1]  # the empty row adds no tokens


def test_a_group_longer_than_the_cap_is_dealt_over_packed_rows():
    b = _batch([[5, 6]] * 4, [[1, 2]] * 4)  # rows of 4 tokens; cap 1.5 x 4 = 6 tokens: prompt + 2 rows
    p = pack_shared_prompts(b.input_ids, b.attention_mask, b.loss_mask, max_factor=1.5)
    assert p.input_ids.tolist() == [[5, 6, 1, 2, 1, 2]] * 2
    with pytest.raises(ValueError, match="max_factor"):
        pack_shared_prompts(b.input_ids, b.attention_mask, b.loss_mask, max_factor=0.5)


@pytest.mark.parametrize("gqa", [False, True])
def test_segmented_attention_is_the_masked_attention(gqa):
    """From ranges, without the L x L mask: the same outputs and gradients as SDPA under the packed mask at every
    non-padding position (padding gets zeros there; nothing reads it), incl. a row alone, a one-token row and p=0."""
    from selfevo.attention import segmented_attention

    b = _batch([[5, 6, 7], [5, 6], [5, 6, 7], [5, 6, 7], [], []], [[8, 9], [4], [3], [1, 2, 3, 4], [7, 7], [7, 7]])
    p = pack_shared_prompts(b.input_ids, b.attention_mask, b.loss_mask)
    segments = p.segments + [(0, [(0, 2), (2, 3)])]  # add a packed row without a prompt
    mask = torch.cat([p.mask, torch.ones(1, 1, p.mask.shape[-1], p.mask.shape[-1], dtype=torch.bool).tril()])
    mask[-1, 0, 2, :2] = False  # its second range: own token only
    g, width = len(segments), p.mask.shape[-1]
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(g, 6, width, 4, generator=gen, requires_grad=True)
    kv_heads = 2 if gqa else 6
    k = torch.randn(g, kv_heads, width, 4, generator=gen, requires_grad=True)
    v = torch.randn(g, kv_heads, width, 4, generator=gen, requires_grad=True)
    want = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=gqa).transpose(1, 2)
    got, _ = segmented_attention(q, k, v, segments)
    real = torch.zeros(g, width, dtype=torch.bool)
    for row, (prompt, spans) in enumerate(segments):
        real[row, :spans[-1][1] if spans else prompt] = True
    assert (got[~real] == 0).all()
    torch.testing.assert_close(got[real], want[real])
    weights = torch.randn(got[real].shape, generator=gen)
    grads = [torch.autograd.grad((out[real] * weights).sum(), (q, k, v)) for out in (got, want)]
    for a, b_ in zip(*grads):
        torch.testing.assert_close(a, b_)


def test_store_runs_packed_rows_from_ranges_when_its_attention_can(make_store, monkeypatch):
    import selfevo.attention as attention

    store = make_store(("a0",))
    store.settings.shared_prompts = True
    calls = []
    real = attention.segmented_attention
    monkeypatch.setattr(attention, "segmented_attention", lambda *a, **k: calls.append(1) or real(*a, **k))
    store.token_logprobs("a0", _group_batch())
    assert calls  # the model's attention is selfevo_gqa: ranges, no mask
    assert attention.segments_supported(store.backbones["tiny-random"].causal_lm.config)


def _group_batch():
    gen = torch.Generator().manual_seed(3)
    prompts = [[5, 9, 11, 7], [5, 9, 11, 7], [5, 9, 11, 7], [8, 3], [8, 3]]
    completions = [torch.randint(10, 200, (n,), generator=gen).tolist() for n in (6, 3, 9, 5, 2)]
    return _batch(prompts, completions)


@pytest.mark.parametrize("setting, device, width, ranges", [
    ("auto", "cpu", 100, True), ("auto", "cpu", 9000, True), ("auto", "cuda", 100, False),
    ("auto", "cuda", 2048, False), ("auto", "cuda", 2049, True), ("auto", "meta", 0, False),
    ("ranges", "cpu", 100, True), ("ranges", "cuda", 100, True), ("mask", "cpu", 100, False),
    ("mask", "cuda", 9000, False)])
def test_ranges_attention_by_setting_device_and_width(setting, device, width, ranges):
    from selfevo.policy.settings import ranges_attention

    assert ranges_attention(setting, device, width) is ranges


def test_packed_attention_refuses_other_names(make_store):
    from selfevo.policy.settings import ranges_attention

    with pytest.raises(ValueError, match="auto, ranges, mask"):
        ranges_attention("flex", "cpu")
    with pytest.raises(ValueError, match="packed_attention must be one of"):
        make_store(("a0",), packed_attention="flex")


@pytest.mark.parametrize("setting, calls", [("ranges", True), ("mask", False)])
def test_store_attends_as_packed_attention_says(make_store, monkeypatch, setting, calls):
    import selfevo.attention as attention

    store = make_store(("a0",), shared_prompts=True, packed_attention=setting)
    seen = []
    real = attention.segmented_attention
    monkeypatch.setattr(attention, "segmented_attention", lambda *a, **k: seen.append(1) or real(*a, **k))
    store.token_logprobs("a0", _group_batch())
    assert bool(seen) is calls


@pytest.mark.slow  # over 0.7 s on the AVX2 machine: out of the quick subset
@pytest.mark.parametrize("setting", ["ranges", "mask"])
def test_store_logprobs_and_gradients_packed_equal_unpacked(make_store, setting):
    store = make_store(("a0",), packed_attention=setting)
    randomize_adapters(store)
    b = _group_batch()
    grads, logps = [], []
    for packed in (False, True):
        store.settings.shared_prompts = packed
        assert (store._packed(b) is not None) == packed
        store.backbones["tiny-random"].model.zero_grad()
        lp = store.token_logprobs("a0", b)
        (lp * torch.arange(lp.numel()).view_as(lp).float().sin()).sum().backward()
        grads.append(torch.cat([p.grad.flatten() for p in store.adapter_params("a0")]))
        logps.append(lp.detach())
    torch.testing.assert_close(logps[1], logps[0], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(grads[1], grads[0], atol=1e-5, rtol=1e-4)
    assert (logps[0][b.loss_mask == 0] == 0).all() and (logps[0][:, 1:][b.loss_mask[:, 1:] > 0] != 0).all()


def test_store_keeps_a_prompts_rows_in_one_micro_batch(make_store):
    store = make_store(("a0",), micro_batch=2, shared_prompts=True)
    b = _group_batch()
    mbs = store.micro_batches(b)
    # every micro-batch holds one prompt's rows, in runs of at most 2: 3 rows of one prompt, 2 of the other
    assert all(len(set(prompt_keys(mb.input_ids, mb.attention_mask, mb.loss_mask))) == 1 for mb in mbs)
    assert sorted(mb.input_ids.shape[0] for mb in mbs) == [1, 2, 2] and sum(len(mb.groups) for mb in mbs) == 5
    store.settings.shared_prompts = False  # by length, as before: rows of 10, 7, 13 | 7, 4 tokens
    assert [mb.attention_mask.sum(-1).tolist() for mb in store.micro_batches(b)] == [[13, 10], [7, 7], [4]]


@pytest.mark.slow  # over 1 s on the AVX2 machine: out of the quick subset
def test_store_step_packed_matches_unpacked(make_store):
    """A GRPO step packed: the same loss and gradient norm as unpacked, and the adapter moves (AdamW's first step
    moves every weight by about ±lr, so the moves themselves are compared through the gradients above)."""
    from selfevo.optimizers import OPTIMIZERS, Samples
    from selfevo.optimizers.trainer import TrainerCfg

    b = _group_batch()
    rewards = torch.tensor([1.0, 0.0, 0.5, 1.0, 0.0])
    stats = []
    for packed in (False, True):
        torch.manual_seed(0)  # PEFT draws the LoRA A matrices from the global generator
        store = make_store(("a0",), micro_batch=4, shared_prompts=packed)
        randomize_adapters(store, seed=1)
        before = [p.detach().clone() for p in store.adapter_params("a0")]
        stats.append(OPTIMIZERS.get("grpo")(TrainerCfg())(store, "a0", Samples(b, rewards)))
        assert max(float((p.detach() - q).abs().max()) for p, q in zip(store.adapter_params("a0"), before)) > 0
        assert stats[-1]["parameter_updates"] == 1
    assert stats[1]["loss"] == pytest.approx(stats[0]["loss"], rel=1e-4, abs=1e-6)
    assert stats[1]["grad_norm"] == pytest.approx(stats[0]["grad_norm"], rel=1e-4)
