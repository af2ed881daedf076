"""The policy store (selfevo.policy): chosen log-probs and entropies against the full softmax, the reference policy
(adapters disabled), micro-batched gradients, adapters saved and loaded in PEFT's format, lending the model,
right-padded rows, and the LoRA computation in the activation dtype against PEFT."""
import contextlib
import re

import pytest
import torch

from helpers.adapters import randomize_adapters
from selfevo.optimizers.objectives import entropy_from_logits
from selfevo.policy.logprobs import chosen_entropy, chosen_logprobs, reference_chosen_logprobs
from selfevo.policy import SeqBatch


def test_chosen_logprobs_value_and_gradient_match_full_softmax():
    torch.manual_seed(0)
    h = torch.randn(37, 16, requires_grad=True)
    w = torch.randn(50, 16)
    t = torch.randint(0, 50, (37,))
    g = torch.randn(37)
    fast = chosen_logprobs(h, w, t, chunk=8)
    (fast * g).sum().backward()
    grad_fast = h.grad.clone()
    h.grad = None
    ref = reference_chosen_logprobs(h, w, t)
    (ref * g).sum().backward()
    torch.testing.assert_close(fast, ref, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(grad_fast, h.grad, atol=1e-5, rtol=1e-5)


def test_chosen_logprobs_refuses_trainable_head():
    with pytest.raises(ValueError, match="frozen"):
        chosen_logprobs(torch.randn(2, 4), torch.randn(5, 4, requires_grad=True), torch.tensor([0, 1]))


def test_chosen_entropy_matches_the_full_softmax_and_its_gradient():
    gen = torch.Generator().manual_seed(1)
    hidden = torch.randn(5, 4, generator=gen, dtype=torch.float64).requires_grad_(True)
    weight = torch.randn(11, 4, generator=gen, dtype=torch.float64)
    ref_h = hidden.detach().clone().requires_grad_(True)
    want = entropy_from_logits(ref_h @ weight.t())
    got = chosen_entropy(hidden, weight, chunk=2)
    assert torch.allclose(got.double(), want.double(), atol=1e-6)
    g = torch.randn(5, generator=gen, dtype=torch.float64)
    (got.double() * g).sum().backward()
    (want.double() * g).sum().backward()
    assert torch.allclose(hidden.grad, ref_h.grad, atol=1e-5)


def test_reference_policy_is_adapter_disabled(make_store):
    store = make_store(("a0",))
    b = SeqBatch.build([[5, 6, 7]], [[8, 9]], 2)
    with torch.no_grad():
        fresh = store.token_logprobs("a0", b)
        ref = store.token_logprobs(None, b)
    torch.testing.assert_close(fresh, ref)  # a fresh adapter (B = 0) is the identity
    randomize_adapters(store)
    with torch.no_grad():
        assert (store.token_logprobs("a0", b) - store.token_logprobs(None, b)).abs().max() > 1e-3


@pytest.mark.slow  # over 1 s on the AVX2 machine: out of the quick subset
def test_micro_batched_gradients_equal_one_big_batch(make_store):
    b = SeqBatch.build([[5, 6, 7], [9], [4, 4]], [[8, 9], [1, 2, 3, 4], [6]], 2)
    n_tokens = b.loss_mask.sum()
    grads = []
    for micro in (1, 3):
        torch.manual_seed(0)  # same lora_A init in both stores
        store = make_store(("a0",), micro_batch=micro)
        randomize_adapters(store)
        params = store.adapter_params("a0")
        loss = lambda logp, mb: -(logp * mb.loss_mask).sum() / n_tokens  # noqa: E731
        opt = store.adamw("a0")
        opt.zero_grad()
        for mb in store.micro_batches(b):
            loss(store.token_logprobs("a0", mb), mb).backward()
        grads.append(torch.cat([p.grad.flatten() for p in params]))
    torch.testing.assert_close(grads[0], grads[1], atol=1e-6, rtol=1e-5)


def test_save_load_roundtrip_and_peft_format(make_store, tmp_path):
    from peft import PeftModel

    from selfevo import models

    store = make_store(("a0", "a1"))
    randomize_adapters(store)
    path = store.save_adapter("a0", tmp_path / "a0")
    b = SeqBatch.build([[5, 6, 7]], [[8, 9, 10]], 2)
    with torch.no_grad():
        want = store.token_logprobs("a0", b)
    # PEFT itself loads it onto a fresh base model and gives the same log-probs
    base = models.load_model("tiny-random", dtype="float32")
    peft = PeftModel.from_pretrained(base, str(path))
    with torch.no_grad():
        logits = peft(input_ids=b.input_ids).logits.float()
    lp = torch.log_softmax(logits[0, :-1], -1).gather(-1, b.input_ids[0, 1:, None]).squeeze(-1)
    torch.testing.assert_close(lp[2:], want[0, 3:], atol=1e-5, rtol=1e-5)
    # load into another agent: now a1 behaves like a0
    store.load_adapter("a1", path)
    with torch.no_grad():
        torch.testing.assert_close(store.token_logprobs("a1", b), want)


@pytest.mark.slow  # over 1 s on the AVX2 machine: out of the quick subset
def test_load_adapter_errors(make_store, tmp_path):
    store = make_store(("a0",))
    with pytest.raises(FileNotFoundError, match="no adapter_model.safetensors"):
        store.load_adapter("a0", tmp_path)
    other = make_store(("b0",), backbone="tiny-random-gemma3")
    path = other.save_adapter("b0", tmp_path / "g")
    with pytest.raises(Exception):
        store.load_adapter("a0", path)


def test_lend_trains_only_the_agent_and_takes_the_model_back_as_lent(make_store):
    from peft import LoraConfig

    store = make_store(("a0", "a1"))
    randomize_adapters(store)
    b = SeqBatch.build([[5, 6, 7]], [[8, 9]], 2)
    with torch.no_grad():
        before = {a: store.token_logprobs(a, b) for a in ("a0", "a1")}
    grads = {n: p.requires_grad for n, p in store.backbones["tiny-random"].model.named_parameters()}
    version = store.versions["a0"]
    with store.lend("a0") as (model, tok):
        assert model is store.backbones["tiny-random"].model and tok is store.backbones["tiny-random"].tokenizer
        assert model.training and model.active_adapter == "a0"
        trainable = [n for n, p in model.named_parameters() if p.requires_grad]
        assert trainable and all(".a0." in n and "lora_" in n for n in trainable)
        model.add_adapter("ref", LoraConfig(r=4, target_modules="all-linear"))  # what TRL's DPOTrainer adds
        lm = model.get_base_model()
        lm.forward = lambda *a, **k: None  # a patched forward (TRL's fused LM head)
        opt = store.adamw("a0")
        ids = torch.tensor([[5, 6, 7, 8, 9]])
        model.set_adapter("a0")
        (-lm.__class__.forward(lm, input_ids=ids).logits.log_softmax(-1)[0, -1, 3]).backward()
        opt.step()
    assert list(model.peft_config) == ["a0", "a1"] and "forward" not in vars(lm) and not model.training
    assert {n: p.requires_grad for n, p in model.named_parameters()} == grads
    assert store.versions["a0"] == version + 1
    with torch.no_grad():
        assert (store.token_logprobs("a0", b) - before["a0"]).abs().max() > 0  # trained in place
        torch.testing.assert_close(store.token_logprobs("a1", b), before["a1"])  # the other agent untouched


def test_right_padded_rows_score_as_alone_without_a_padding_mask(make_store):
    """Training batches are right-padded: they run without a padding mask (SDPA's causal kernel). Every row's
    log-probs and the adapter's gradients equal those of the row scored alone; a left-padded batch keeps its mask."""
    store = make_store(("a0",))
    randomize_adapters(store)
    prompts, completions = [[5, 6, 7, 8, 9], [11, 12], [3]], [[20, 21], [22, 23, 24, 25], [26]]
    batch = SeqBatch.build(prompts, completions, 0)
    assert batch.right_padded()
    params = store.adapter_params("a0")
    together = store.token_logprobs("a0", batch)
    grads = torch.autograd.grad(together.sum(), params)
    alone_grads = [torch.zeros_like(p) for p in params]
    for i, (p, c) in enumerate(zip(prompts, completions)):
        alone = store.token_logprobs("a0", SeqBatch.build([p], [c], 0))
        torch.testing.assert_close(together[i, :alone.shape[1]], alone[0], atol=1e-5, rtol=1e-5)
        alone_grads = [a + g for a, g in zip(alone_grads, torch.autograd.grad(alone.sum(), params))]
    for a, g in zip(alone_grads, grads):
        torch.testing.assert_close(a, g, atol=1e-4, rtol=1e-4)
    left = SeqBatch(torch.tensor([[0, 0, 5, 6, 7]]), torch.tensor([[0, 0, 1, 1, 1]]), torch.tensor([[0, 0, 0, 1.0, 1]]))
    assert not left.right_padded()
    torch.testing.assert_close(store.token_logprobs("a0", left)[0, 3:],
                               store.token_logprobs("a0", SeqBatch.build([[5]], [[6, 7]], 0))[0, 1:])


@pytest.mark.slow  # over 1 s on the AVX2 machine: out of the quick subset
def test_activation_dtype_lora_matches_peft_forward_and_gradients(make_store):
    """The training-time LoRA forward (A, B cast to the activations' dtype, the up-projection accumulated into the
    base output in one addmm) gives PEFT's outputs and LoRA gradients: exactly in fp32 (the exactness check), to
    bf16 precision in bf16 (a sanity check). bf16 rounding differs between CPUs: on a Xeon with AMX (torch 2.11) one
    LoRA gradient differed from PEFT's by 10% of its norm, on AVX2 machines by under 5%; a wrong term or scale
    gives errors of the order of the gradient itself, so the bf16 bound is 20%."""
    from selfevo.policy.lora_compute import ActivationDtypeLoRA

    for dtype, out_tol, tol in (("float32", 1e-5, 1e-5), ("bfloat16", 0.05, 0.2)):
        store = make_store(("a0",), dtype=dtype)
        randomize_adapters(store, std=0.3)
        bb = store.backbones["tiny-random"]
        bb.model.set_adapter("a0")
        ids = torch.randint(0, 1000, (2, 11))
        params = [p for n, p in bb.model.named_parameters() if ".a0." in n]
        results = []
        for fast in (True, False):
            for p in params:
                p.grad = None
            with ActivationDtypeLoRA(bb.model, "a0") if fast else torch.enable_grad():
                logits = bb.causal_lm(input_ids=ids).logits.float()
            logits.logsumexp(-1).sum().backward()
            results.append((logits.detach(), [p.grad.clone() for p in params]))
        (fast_out, fast_grads), (ref_out, ref_grads) = results
        torch.testing.assert_close(fast_out, ref_out, atol=out_tol, rtol=out_tol)
        for g, r in zip(fast_grads, ref_grads):
            assert (g - r).norm() <= tol * max(r.norm(), 1e-3), (dtype, (g - r).norm(), r.norm())
        assert any(g.abs().sum() > 0 for g in fast_grads)


def _dropout_store(make_store, checkpointing: bool):
    from selfevo.policy import LoraSettings

    torch.manual_seed(0)  # the same lora_A init in both stores
    store = make_store(("a0",), micro_batch=2, gradient_checkpointing=checkpointing)
    store.settings.lora = LoraSettings(r=8, alpha=16, dropout=0.3)
    store.add_agent("a1", "tiny-random")  # with dropout: the recomputed forward must replay the same masks
    randomize_adapters(store)
    return store


@pytest.mark.slow  # over 0.7 s on the AVX2 machine: out of the quick subset
def test_gradient_checkpointing_takes_the_same_step(make_store):
    b = SeqBatch.build([[5, 6, 7], [9], [4, 4]], [[8, 9], [1, 2, 3, 4], [6]], 2)
    loss = lambda logp, mb, ent: -(logp * mb.loss_mask).sum() / 7 - 0.1 * (ent * mb.loss_mask).sum() / 7  # noqa
    after = []
    for checkpointing in (False, True):
        store = _dropout_store(make_store, checkpointing)
        torch.manual_seed(1)  # the dropout masks' stream
        stats = store.update("a1", b, loss, entropy=True)
        after.append((stats, torch.cat([p.detach().flatten() for p in store.adapter_params("a1")])))
    assert after[0][0]["grad_norm"] == pytest.approx(after[1][0]["grad_norm"], rel=1e-5)
    assert after[0][0]["loss"] == pytest.approx(after[1][0]["loss"], rel=1e-6)
    torch.testing.assert_close(after[0][1], after[1][1], atol=1e-6, rtol=1e-5)


@pytest.mark.slow  # over 0.7 s on the AVX2 machine: out of the quick subset
def test_gradient_checkpointing_keeps_no_activations_inside_the_layers_and_is_undone(make_store):
    from selfevo.policy.store import checkpointed_layers

    b = SeqBatch.build([[5, 6, 7, 8, 9, 10] * 4] * 2, [[8, 9, 3] * 4] * 2, 2)
    store = _dropout_store(make_store, False)
    bb = store.backbones["tiny-random"]
    layers = bb.causal_lm.model.layers
    inside, running = [], []  # bytes autograd keeps for the backward while each decoder layer runs
    hooks = [m.register_forward_pre_hook(lambda *_: inside.append(0) or running.append(1)) for m in layers]
    hooks += [m.register_forward_hook(lambda *_: running.pop() and None) for m in layers]

    def kept(t):
        if running:
            inside[-1] += t.numel() * t.element_size()
        return t

    def saved_inside_layers(checkpointing: bool) -> list[int]:
        inside.clear()
        bb.model.train()
        with torch.autograd.graph.saved_tensors_hooks(kept, lambda t: t):
            with checkpointed_layers(bb.causal_lm) if checkpointing else contextlib.nullcontext() as n:
                store.token_logprobs("a1", b)
        assert n is None or n == len(layers)
        return list(inside)

    plain, checkpointed = saved_inside_layers(False), saved_inside_layers(True)
    for h in hooks:
        h.remove()
    assert len(plain) == len(checkpointed) == len(layers) and min(plain) > 0
    layer_input = b.input_ids.numel() * bb.causal_lm.config.hidden_size * 4  # [B, T, H] fp32
    assert max(checkpointed) <= layer_input  # at most the layer's input, for the replay
    assert min(plain) > 10 * layer_input  # every intermediate of the layer
    assert not bb.causal_lm.is_gradient_checkpointing  # undone on exit


def test_store_counts_its_micro_batches_rows_steps_and_scoring_passes(make_store):
    """Rows of 5, 9, 3, 7, 2 tokens at micro-batch 2: sorted longest first and cut (9, 7 | 5, 3 | 2), each
    micro-batch padded to its longest row; one parameter update of 5 rows; a no-grad score pass counted apart."""
    from selfevo.optimizers.base import score

    lengths = [5, 9, 3, 7, 2]
    b = SeqBatch.build([[4] * (n - 1) for n in lengths], [[8]] * len(lengths), 2)
    store = make_store(("a0",), micro_batch=2)
    store.update("a0", b, lambda logp, mb: -(logp * mb.loss_mask).sum())
    assert store.shapes.to_json() == {"optimizer": [[16, 1, 5]], "row": [[16, 5, 26]],
                                      "train": [[1, 16, 1, 2], [2, 16, 2, 9 + 5]]}
    before = store.shapes.copy()
    score(store, "a0", b)  # in the batch's own order: (5, 9 | 3, 7 | 2), no sorting
    assert (store.shapes - before).to_json() == {"score": [[1, 16, 1, 2], [2, 16, 2, 9 + 7]]}


def test_chosen_logprobs_and_entropy_stay_on_the_inputs_device():
    """Outputs, saved tensors and gradients live where the hidden states do (a CPU-allocated buffer broke the
    update on CUDA): checked here on the meta device, which refuses any copy to or from the CPU."""
    hidden = torch.randn(5, 8, device="meta", requires_grad=True)
    weight, targets = torch.randn(11, 8, device="meta"), torch.zeros(5, dtype=torch.long, device="meta")
    logp, ent = chosen_logprobs(hidden, weight, targets, chunk=2), chosen_entropy(hidden, weight, chunk=2)
    assert logp.device.type == ent.device.type == "meta"
    (logp.sum() + ent.sum()).backward()
    assert hidden.grad.device.type == "meta"


@pytest.mark.slow  # over 0.7 s on the AVX2 machine: out of the quick subset
def test_an_update_maps_its_micro_batches_layer_blocks_and_sets_the_threshold_back(make_store, monkeypatch):
    """With ``heap_threshold`` the store sets glibc's threshold from each training micro-batch's layer block (rows ×
    width × hidden × 4 B, 7/8 of it, at least 1 MB) and restores its own after the step; scoring leaves it alone;
    without it the store never touches malloc."""
    from selfevo import heap

    calls = []
    monkeypatch.setattr(heap, "map_large_blocks", lambda threshold=heap.MMAP_THRESHOLD: calls.append(threshold))
    monkeypatch.setattr(heap.layer_threshold, "__defaults__", (heap.MMAP_THRESHOLD, 1))  # floor 1 B: exact values
    b = SeqBatch.build([[4] * 8, [4] * 3, [4] * 5], [[8]] * 3, 2)  # rows of 9, 4, 6 tokens; micro-batch 2
    store = make_store(("a0",), micro_batch=2, heap_threshold=1000)
    hidden = store.backbones["tiny-random"].causal_lm.config.hidden_size
    store.update("a0", b, lambda logp, mb: -(logp * mb.loss_mask).sum())
    blocks = [2 * 9 * hidden * 4, 1 * 4 * hidden * 4]  # sorted longest first: (9, 6 | 4), each padded to its longest
    assert blocks[1] * 7 // 8 < 1000 < blocks[0] * 7 // 8  # the first capped, the second not
    assert calls == [1000, blocks[1] * 7 // 8, 1000]
    calls.clear()
    with torch.no_grad():
        store.token_logprobs("a0", b)
    assert calls == []
    plain = make_store(("a0",), micro_batch=2)
    plain.update("a0", b, lambda logp, mb: -(logp * mb.loss_mask).sum())
    assert calls == []


# ---- scoring at the sampling temperature (issue 58 item 4) --------------------------------------------------------
def test_chosen_logprobs_and_entropy_at_a_temperature_by_hand():
    # one hidden state whose logits are [2, 0] (weight rows 2 and 0); sampled at T = 0.5 the logits are [4, 0]:
    # log p(token 0) = 4 - log(e^4 + 1) = -log(1 + e^-4) = -0.0181499; at T = 1: -log(1 + e^-2) = -0.1269280
    hidden, weight, target = torch.tensor([[1.0], [1.0]]), torch.tensor([[2.0], [0.0]]), torch.tensor([0, 0])
    got = chosen_logprobs(hidden, weight, target, temperature=torch.tensor([0.5, 1.0]))
    torch.testing.assert_close(got, torch.tensor([-0.0181499, -0.1269280]), atol=1e-6, rtol=0)
    torch.testing.assert_close(got[0], torch.log_softmax(torch.tensor([4.0, 0.0]), -1)[0])
    torch.testing.assert_close(chosen_logprobs(hidden, weight, target, temperature=0.5)[0], got[0])
    # entropy of softmax([4, 0]) = (0.9820138, 0.0179862): -(p ln p + q ln q) = 0.0178235 + 0.0722713 = 0.0900948
    ent = chosen_entropy(hidden[:1], weight, temperature=torch.tensor([0.5]))
    torch.testing.assert_close(ent, torch.tensor([0.0900948]), atol=1e-6, rtol=0)


def test_chosen_logprobs_gradient_at_a_temperature_matches_the_full_softmax():
    gen = torch.Generator().manual_seed(2)
    h = torch.randn(9, 6, generator=gen, requires_grad=True)
    w, t = torch.randn(13, 6, generator=gen), torch.randint(0, 13, (9,), generator=gen)
    temps = torch.tensor([0.1, 0.6, 1.0, 1.7, 0.6, 0.6, 0.3, 1.0, 2.0])
    (chosen_logprobs(h, w, t, chunk=4, temperature=temps) * torch.arange(9.0)).sum().backward()
    fast = h.grad.clone()
    h.grad = None
    ref = torch.log_softmax((h @ w.t()) / temps[:, None], -1).gather(-1, t[:, None]).squeeze(-1)
    (ref * torch.arange(9.0)).sum().backward()
    torch.testing.assert_close(fast, h.grad, atol=1e-5, rtol=1e-5)


def test_scoring_temperatures():
    from selfevo.policy.logprobs import scoring_temperatures

    sampled = torch.tensor([0.7, 0.0, 0.1, 1.0])
    assert scoring_temperatures(sampled).tolist() == pytest.approx([0.7, 1.0, 0.1, 1.0])  # greedy (0) at 1
    assert scoring_temperatures(sampled, 1.0).tolist() == [1.0] * 4  # trainer.logprob_temperature=1
    assert scoring_temperatures(sampled, 0.5).tolist() == [0.5] * 4
    assert scoring_temperatures(torch.zeros(0)).shape == (0,)


@pytest.mark.slow  # over 0.7 s on the AVX2 machine: out of the quick subset
@pytest.mark.parametrize("shared", [False, True])
def test_store_scores_each_row_at_its_sampling_temperature(make_store, shared):
    """Rows sampled at 0.5, greedily (0) and at 1.7 are scored at 0.5, 1 and 1.7: log_softmax(logits / T) of the
    model's own logits, for the agent and for the reference (adapter disabled), rows packed by shared prompt or not;
    ``logprob_temperature=1`` and a batch without temperatures score everything at 1; entropies at the same
    temperature."""
    from selfevo.policy.batch import TEMPERATURE

    store = make_store(("a0",), shared_prompts=shared)
    randomize_adapters(store)
    batch = SeqBatch.build([[5, 6, 7], [5, 6, 7], [3]], [[8, 9], [1, 2, 3], [6, 10]], 0)
    tempered = batch.with_extras(**{TEMPERATURE: torch.tensor([0.5, 0.0, 1.7])})
    lm = store.backbones["tiny-random"].model
    for agent in ("a0", None):
        with torch.no_grad():
            if agent is None:
                with lm.disable_adapter():
                    logits = lm(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits
            else:
                lm.set_adapter(agent)
                logits = lm(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits
            got, ent = store.token_logprobs(agent, tempered, entropy=True)
            plain = store.token_logprobs(agent, batch)
        scaled = logits[:, :-1].float() / torch.tensor([0.5, 1.0, 1.7])[:, None, None]
        want = torch.log_softmax(scaled, -1).gather(-1, batch.input_ids[:, 1:, None]).squeeze(-1)
        m = batch.loss_mask[:, 1:] > 0
        torch.testing.assert_close(got[:, 1:][m], want[m], atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(ent[:, 1:][m], entropy_from_logits(scaled)[m], atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(got[1], plain[1])  # the greedy row: at 1, as if no temperature were given
        assert (got[0] - plain[0]).abs().max() > 1e-3
    store.settings.logprob_temperature = 1.0  # trainer.logprob_temperature=1: every row at 1
    assert store.temperatures(tempered) is None and store.temperatures(batch) is None
    with torch.no_grad():
        torch.testing.assert_close(store.token_logprobs("a0", tempered), store.token_logprobs("a0", batch))
    with pytest.raises(ValueError, match="logprob_temperature"):
        make_store(("b0",), logprob_temperature=0.0)


def test_layer_blocks_set_back_the_cap_even_when_the_update_fails(monkeypatch):
    """heap.LayerBlocks: ``fit`` maps 7/8 of a layer block, at most the cap; ``restored`` sets the cap back however
    the block ends; cap None never touches malloc; a cap of 0 bytes is refused."""
    from selfevo import heap

    calls = []
    monkeypatch.setattr(heap, "map_large_blocks", lambda threshold=heap.MMAP_THRESHOLD: calls.append(threshold))
    blocks = heap.LayerBlocks(4 << 20)
    with pytest.raises(RuntimeError, match="boom"), blocks.restored():
        blocks.fit(2 << 20)  # 7/8 of 2 MB: 1,835,008 B
        blocks.fit(64 << 20)  # capped
        raise RuntimeError("boom")
    assert calls == [(2 << 20) * 7 // 8, 4 << 20, 4 << 20]
    calls.clear()
    off = heap.LayerBlocks(None)
    with off.restored():
        off.fit(2 << 20)
    assert calls == []
    with pytest.raises(ValueError, match="cap must be None or > 0 bytes"):
        heap.LayerBlocks(0)


@pytest.mark.parametrize("field, value, message", [
    ("micro_batch", 0, "micro_batch must be >= 1"),
    ("optim_state_dtype", "float16", "optim_state_dtype must be float32 or bfloat16"),
    ("logprob_temperature", 0.0, "logprob_temperature must be None"),
    ("packed_attention", "dense", "packed_attention must be one of auto, ranges, mask"),
    ("max_grad_norm", 0.0, "need lr >= 0, weight_decay >= 0 and max_grad_norm > 0"),
    ("lr", -1e-5, "need lr >= 0"),
    ("betas", (0.9, 1.0), "betas must be two numbers in"),
    ("heap_threshold", 0, "heap_threshold must be None or > 0 bytes"),
])
def test_store_settings_refuse_out_of_range_values_in_one_line(field, value, message):
    from selfevo.policy import StoreSettings

    with pytest.raises(ValueError, match=re.escape(message)):
        StoreSettings(**{field: value})
    assert StoreSettings(betas=[0.8, 0.99]).betas == (0.8, 0.99)  # a YAML list becomes the tuple AdamW takes


def test_the_store_takes_its_settings_as_one_value(make_store):
    """``PolicyStore(settings)``: AdamW is built from them (``adamw``), ``set_lr`` moves the settings' lr with every
    agent's AdamW, and ``update`` counts one parameter update (``versions``)."""
    store = make_store(("a0",), lr=3e-3, weight_decay=0.1)
    opt = store.adamw("a0")
    assert store.adamw("a0") is opt and isinstance(opt, torch.optim.AdamW)
    assert (opt.param_groups[0]["lr"], opt.param_groups[0]["weight_decay"]) == (3e-3, 0.1)
    store.set_lr(1e-3)
    assert store.settings.lr == opt.param_groups[0]["lr"] == 1e-3
    b = SeqBatch.build([[4] * 3], [[8, 9]], 2)
    before = store.versions["a0"]
    store.update("a0", b, lambda logp, mb: -(logp * mb.loss_mask).sum())
    assert store.versions["a0"] == before + 1
