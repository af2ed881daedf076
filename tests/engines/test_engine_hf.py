"""HF engine and masked multi-LoRA: exactness against PEFT, parity with transformers, fresh weights after a step."""
import pytest
import torch

from helpers.adapters import randomize_adapters
from selfevo.engines.base import render_prompt
from selfevo.engines.hf import HFEngine, sample_next
from selfevo.interaction import Ask
from selfevo.engines.multilora import MultiLoRA
from selfevo.policy import SeqBatch
from selfevo.shapes import size_bin
from selfevo.types import Request, SamplingParams

GREEDY = SamplingParams(max_new_tokens=8, temperature=0.0)
MSGS = [[{"role": "user", "content": f"question {i}: " + "word " * i}] for i in range(4)]


def peft_logits(store, agent, ids):
    bb = store.backbones[store.agent_backbone[agent] if agent else next(iter(store.backbones))]
    if agent is None:
        with bb.model.disable_adapter():
            return bb.causal_lm(input_ids=ids).logits
    bb.model.set_adapter(agent)
    return bb.causal_lm(input_ids=ids).logits


@torch.no_grad()
def test_masked_multilora_matches_peft_per_adapter(make_store):
    store = make_store(("a0", "a1", "a2"))
    randomize_adapters(store)
    ids = torch.randint(0, 1000, (4, 9))
    rows = ["a0", None, "a2", "a1"]
    bb = store.backbones["tiny-random"]
    with MultiLoRA(bb.model, rows):
        mixed = bb.causal_lm(input_ids=ids).logits
    for i, agent in enumerate(rows):
        torch.testing.assert_close(mixed[i], peft_logits(store, agent, ids)[i], atol=1e-5, rtol=1e-5)
    assert (peft_logits(store, "a0", ids) - peft_logits(store, "a1", ids)).abs().max() > 1e-2


@pytest.mark.slow
def test_greedy_matches_transformers_generate(make_store):
    store = make_store(("a0",), backbone="smollm2-135m-instruct")
    bb = store.backbones["smollm2-135m-instruct"]
    msgs = [[{"role": "user", "content": "What is 2+2?"}], [{"role": "user", "content": "Name three colors."}]]
    outs = HFEngine(store).generate([Request(None, m, SamplingParams(max_new_tokens=12, temperature=0)) for m in msgs])
    for m, o in zip(msgs, outs):
        p = render_prompt(bb.tokenizer, m)
        with torch.no_grad(), bb.model.disable_adapter():
            ref = bb.causal_lm.generate(torch.tensor([p]), max_new_tokens=12, do_sample=False,
                                        pad_token_id=bb.tokenizer.pad_token_id)
        assert o.token_ids == ref[0, len(p):].tolist()[:len(o.token_ids)]
    assert "4" in outs[0].text


@pytest.mark.slow  # over 1 s on the AVX2 machine: out of the quick subset
def test_two_adapters_differ_and_step_is_served(make_store):
    store = make_store(("a0", "a1"))
    randomize_adapters(store)
    engine = HFEngine(store)
    before = engine.generate([Request(a, MSGS[1], GREEDY) for a in ("a0", "a1")])
    assert before[0].token_ids != before[1].token_ids
    batch = SeqBatch.build([before[0].prompt_ids], [before[0].token_ids], 2)
    store.update("a0", batch, lambda logp, mb: logp.sum())  # push up the probability of what a0 said ... then more
    for _ in range(3):
        store.update("a0", batch, lambda logp, mb: -logp.sum())  # ... and far down: the greedy output must change
    after = engine.generate([Request(a, MSGS[1], GREEDY) for a in ("a0", "a1")])
    assert after[0].token_ids != before[0].token_ids
    assert after[1].token_ids == before[1].token_ids


def test_step_on_one_adapter_leaves_others_bit_identical(make_store):
    store = make_store(("a0", "a1", "a2"))
    randomize_adapters(store)
    snap = {a: [p.detach().clone() for p in store.adapter_params(a)] for a in store.agents()}
    batch = SeqBatch.build([[5, 6, 7]], [[8, 9, 10, 11]], 2)
    stats = store.update("a1", batch, lambda logp, mb: -logp.sum())
    assert stats["grad_norm"] > 0 and store.versions["a1"] == 2
    for a in ("a0", "a2"):
        assert all(torch.equal(p, q) for p, q in zip(store.adapter_params(a), snap[a]))
    assert not all(torch.equal(p, q) for p, q in zip(store.adapter_params("a1"), snap["a1"]))


def test_engine_logprobs_match_policy_store(make_store):
    store = make_store(("a0", "a1"))
    randomize_adapters(store)
    sp = SamplingParams(max_new_tokens=10, temperature=1.0)
    outs = HFEngine(store).generate([Request(a, MSGS[i], sp, seed=i) for i, a in enumerate(["a0", "a1", None])])
    for o in outs:
        batch = SeqBatch.build([o.prompt_ids], [o.token_ids], 2)
        with torch.no_grad():
            lp = store.token_logprobs(o.request.agent, batch, backbone="tiny-random")
        mad = (lp[0][batch.loss_mask[0] > 0] - torch.tensor(o.logprobs)).abs().mean().item()
        assert mad < 1e-4, mad


@pytest.mark.slow  # over 1 s on the AVX2 machine: out of the quick subset
def test_seeds_reproduce_and_compaction_changes_nothing(make_store):
    store = make_store(("a0", "a1"))
    randomize_adapters(store)
    sp = [SamplingParams(max_new_tokens=n, temperature=1.0) for n in (2, 3, 12, 12)]
    reqs = [Request(["a0", "a1"][i % 2], MSGS[i], sp[i], seed=10 + i) for i in range(4)]
    compacting = HFEngine(store, compact_below=0.99).generate(reqs)
    plain = HFEngine(store, compact_below=0.0).generate(reqs)
    assert [o.token_ids for o in compacting] == [o.token_ids for o in plain]
    assert [len(o.token_ids) for o in plain] == [2, 3, 12, 12]
    assert {o.finish_reason for o in plain} == {"length"}


def test_stop_strings_cut_text():
    store_free = SamplingParams(max_new_tokens=5, stop=("lo",))
    from selfevo.engines.base import truncate_at_stop

    assert truncate_at_stop("hello world", store_free.stop) == ("hel", True)
    assert truncate_at_stop("abc", ("x",)) == ("abc", False)


@pytest.mark.slow  # over 1 s on the AVX2 machine: out of the quick subset
def test_heterogeneous_backbones_in_one_call(make_store):
    from selfevo.policy import LoraSettings, PolicyStore, StoreSettings

    store = PolicyStore(StoreSettings(dtype="float32", lora=LoraSettings(r=8, alpha=16)))
    store.add_agent("llama", "tiny-random")
    store.add_agent("gemma", "tiny-random-gemma3")
    randomize_adapters(store)
    outs = HFEngine(store).generate([Request(a, MSGS[0], GREEDY) for a in ("llama", "gemma", "llama")])
    assert [len(o.token_ids) for o in outs] == [8, 8, 8]
    assert outs[0].token_ids == outs[2].token_ids and outs[0].token_ids != outs[1].token_ids
    for o in outs:  # each agent's log-probs come from its own backbone
        batch = SeqBatch.build([o.prompt_ids], [o.token_ids], 2)
        with torch.no_grad():
            lp = store.token_logprobs(o.request.agent, batch)
        assert (lp[0][batch.loss_mask[0] > 0] - torch.tensor(o.logprobs)).abs().max() < 1e-4


def test_sampling_respects_temperature_and_top_p():
    logits = torch.tensor([[2.0, 1.0, 0.0, -1.0]] * 3)
    temps = torch.tensor([0.0, 1.0, 1.0])
    top_p = torch.tensor([1.0, 1.0, 0.5])
    u = torch.tensor([0.99, 0.99, 0.99])
    tokens, logp = sample_next(logits, temps, top_p, u)
    # row 0 greedy → 0; row 1 inverse CDF at 0.99 → last token (cdf of softmax: .64,.88,.97,1.0); row 2: p=0.5 keeps
    # only the top token (mass before it 0 < 0.5; before the 2nd .64 ≥ .5) → 0
    assert tokens.tolist() == [0, 3, 0]
    torch.testing.assert_close(logp, torch.log_softmax(logits, -1)[torch.arange(3), tokens])


@pytest.mark.slow
@torch.no_grad()
def test_bf16_fast_path_matches_peft(make_store):
    """bf16 on the embedded model: masked multi-LoRA + prepacked oneDNN matmuls (when vLLM's CPU ops exist) give
    the same next-token distribution as PEFT's own per-adapter forward, to bf16 precision."""
    from selfevo.engines.packed import PackedLinears

    store = make_store(("a0", "a1"), backbone="smollm2-135m-instruct", dtype="bfloat16")
    randomize_adapters(store, std=0.02)
    bb = store.backbones["smollm2-135m-instruct"]
    ids = torch.randint(100, 40000, (3, 12), generator=torch.Generator().manual_seed(0))
    rows = ["a1", None, "a0"]
    with MultiLoRA(bb.model, rows), PackedLinears(bb.causal_lm):
        fast = torch.log_softmax(bb.causal_lm(input_ids=ids).logits[:, -1].float(), -1)
    for i, agent in enumerate(rows):
        ref = torch.log_softmax(peft_logits(store, agent, ids)[i, -1].float(), -1)
        kl = (ref.exp() * (ref - fast[i])).sum()  # bf16 logits are coarse (spacing 0.125 at 16): compare laws
        assert kl < 0.02, kl
        top = ref.topk(2).values  # the same top token unless two bf16 spacings or less separate the first two
        # (unseeded inputs failed here 1 run in 3 on ties of 0 or 0.125)
        assert fast[i].argmax() == ref.argmax() or float(top[0] - top[1]) <= 0.25


class ChainSource:
    """Requests become ready as others finish: request i+2 once request i is done (a discussion's next turn)."""

    def __init__(self, reqs, first=2):
        self.reqs, self.ready, self.out, self.order = reqs, list(range(first)), {}, []

    def take(self):
        ready, self.ready = self.ready, []
        return [(i, self.reqs[i]) for i in ready]

    def done(self, key, completion):
        self.out[key] = completion
        self.order.append(key)
        if key + 2 < len(self.reqs):
            self.ready.append(key + 2)


def mixed_requests(lengths, temperature=1.0):
    """Prompts of several lengths over two adapters and none, each sampled (seeded) to exactly ``lengths[i]``
    tokens at most: the messages and the requests."""
    msgs = [[{"role": "user", "content": "q " + "long words " * (i * 3 % 7)}] for i in range(len(lengths))]
    reqs = [Request(["a0", "a1", None][i % 3], msgs[i], SamplingParams(max_new_tokens=n, temperature=temperature),
                    seed=i) for i, n in enumerate(lengths)]
    return msgs, reqs


@pytest.mark.slow  # over 0.7 s on the AVX2 machine: out of the quick subset
@pytest.mark.parametrize("max_batch,join_every", [(64, 1), (64, 8), (3, 1)])
def test_rows_joining_mid_flight_get_what_they_would_alone(make_store, max_batch, join_every):
    store = make_store(("a0", "a1"))
    randomize_adapters(store)
    lengths = [3, 9, 5, 14, 2, 7, 11, 4]
    # temperature 0.3: still seeded sampling, but the tiny random model's near-uniform law at 1.0 let float noise of
    # another batch composition move a draw across a token boundary (1 run in the quick subset's order)
    _, reqs = mixed_requests(lengths, temperature=0.3)
    engine = HFEngine(store, max_batch=max_batch, join_every=join_every)
    source = ChainSource(reqs)
    engine.stream(source)
    assert sorted(source.out) == list(range(len(reqs)))
    assert source.order[:2] == [0, 2]  # the short ones finish first, their successors join running rows
    alone = HFEngine(store)
    for i, r in enumerate(reqs):
        ref = alone.generate([r])[0]
        got = source.out[i]
        assert got.token_ids == ref.token_ids and len(got.token_ids) == lengths[i]
        assert max(abs(a - b) for a, b in zip(got.logprobs, ref.logprobs)) < 1e-4
    assert engine.counters["decode_steps"] > 0
    assert engine.counters["decode_rows"] / engine.counters["decode_steps"] > 1  # rows shared decode steps
    shapes = engine.shapes.to_json()
    assert sum(n for _, _, n, _ in shapes["decode"]) == engine.counters["decode_steps"]
    assert sum(rows * n for rows, _, n, _ in shapes["decode"]) >= engine.counters["decode_rows"]  # + rows not dropped
    assert sum(rows * width for rows, _, _, width in shapes["prefill"]) >= engine.counters["prefill_tokens"]  # padding
    if max_batch == 64:
        assert shapes["merge"]  # rows joined a running batch


def test_multilora_keeps_no_layer_input_alive_after_a_forward(make_store):
    """The shared shrink of q/k/v (and gate/up) is computed once per input and dropped with it: after a forward no
    group holds an activation (a strong reference held every layer's input until the next forward: ~0.4 MB per
    prompt token of SmolLM2 in a prefill)."""
    store = make_store(("a0", "a1"))
    randomize_adapters(store)
    bb = store.backbones["tiny-random"]
    calls = []
    with torch.no_grad(), MultiLoRA(bb.model, ["a0", "a1"]) as ctx:
        for g in ctx._groups:
            mm = g.a_mm
            g.a_mm = lambda x, mm=mm: calls.append(1) or mm(x)
        bb.causal_lm(input_ids=torch.randint(0, 1000, (2, 7)))
        assert ctx._groups and all(g.s is None and (g.x is None or g.x() is None) for g in ctx._groups)
    layers = bb.causal_lm.config.num_hidden_layers
    assert len(calls) == 4 * layers  # per layer: q/k/v share one input, o, gate/up share one, down


@pytest.mark.slow  # over 0.7 s on the AVX2 machine: out of the quick subset
def test_multilora_set_rows_serves_a_new_batch(make_store):
    store = make_store(("a0", "a1"))
    randomize_adapters(store)
    bb = store.backbones["tiny-random"]
    ids = torch.randint(0, 1000, (3, 6))
    with torch.no_grad(), MultiLoRA(bb.model, [], names=["a0", "a1"]) as ctx:
        ctx.set_rows(["a1", None, "a0"])
        mixed = bb.causal_lm(input_ids=ids).logits
        with pytest.raises(KeyError, match="not stacked"):
            ctx.set_rows(["a2"])
    for i, agent in enumerate(["a1", None, "a0"]):
        torch.testing.assert_close(mixed[i], peft_logits(store, agent, ids)[i], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("backbone,dtype", [("tiny-random", "float32"),
                                            pytest.param("smollm2-135m-instruct", "bfloat16", marks=pytest.mark.slow)])
def test_lean_decode_is_the_full_forward_bit_for_bit(make_store, backbone, dtype, monkeypatch):
    """Decode steps through LeanDecoder give exactly the tokens and log-probs of transformers' forward: mixed
    adapters (and none), rows joining mid-flight, sampled at temperature 1."""
    from selfevo.engines import lean

    calls = []
    step = lean.LeanDecoder.__call__
    monkeypatch.setattr(lean.LeanDecoder, "__call__", lambda self, *a: calls.append(1) or step(self, *a))

    store = make_store(("a0", "a1"), backbone=backbone, dtype=dtype)
    randomize_adapters(store, std=0.3 if dtype == "float32" else 0.02)
    assert lean.supported(store.backbones[backbone].causal_lm)
    lengths = [6, 12, 4, 9, 7, 3]
    reqs = [Request(["a0", "a1", None][i % 3], MSGS[i % 4], SamplingParams(max_new_tokens=n, temperature=1.0),
                    seed=i) for i, n in enumerate(lengths)]
    got = {}
    for flag in (True, False):
        engine = HFEngine(store, lean=flag, join_every=1)
        source = ChainSource(reqs)
        engine.stream(source)
        got[flag] = source.out
        assert len(calls) == (engine.counters["decode_steps"] if flag else 0)
        calls.clear()
    for i in range(len(reqs)):
        assert got[True][i].token_ids == got[False][i].token_ids
        assert got[True][i].logprobs == got[False][i].logprobs


def test_lean_decode_only_for_models_it_reproduces(make_store):
    from selfevo.engines import lean

    gemma = make_store(("a0",), backbone="tiny-random-gemma3").backbones["tiny-random-gemma3"].causal_lm
    assert not lean.supported(gemma)  # sliding-window layers, other norms: the full forward serves it


@pytest.mark.slow  # over 0.7 s on the AVX2 machine: out of the quick subset
def test_prefill_without_padding_skips_the_mask(make_store):
    """One unpadded row prefills with no attention mask (SDPA's causal kernel): the same logits as with its mask."""
    from selfevo.engines import kvcache

    store = make_store(("a0",))
    net = store.backbones["tiny-random"].causal_lm
    ids = torch.randint(0, 1000, (1, 17))
    pos = torch.arange(17)[None]
    with torch.no_grad():
        masked, _ = HFEngine._forward(net, ids, torch.ones_like(ids), pos, kvcache.growing_cache(net.config, 40))
        plain, _ = HFEngine._forward(net, ids, None, pos, kvcache.growing_cache(net.config, 40))
    torch.testing.assert_close(plain, masked, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("family", ["llama", "qwen2"])
def test_lean_decoder_step_equals_the_model_forward(family):
    """One decode step of LeanDecoder against transformers' forward on the same cache, for both families it
    serves (qwen2: biased q/k/v projections), rows left-padded differently."""
    import copy

    import transformers
    from selfevo import attention
    from selfevo.engines import kvcache, lean

    attention.register()
    cls = {"llama": (transformers.LlamaConfig, transformers.LlamaForCausalLM),
           "qwen2": (transformers.Qwen2Config, transformers.Qwen2ForCausalLM)}[family]
    cfg = cls[0](vocab_size=300, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, max_position_embeddings=256, attn_implementation=attention.NAME)
    torch.manual_seed(0)
    net = cls[1](cfg).eval()
    if family == "qwen2":
        assert net.model.layers[0].self_attn.q_proj.bias is not None
    assert lean.supported(net)
    ids = torch.randint(0, 300, (3, 9))
    attn = torch.ones_like(ids)
    attn[0, :4] = 0
    attn[2, :2] = 0
    pos = (attn.cumsum(-1) - 1).clamp(min=0)
    with torch.no_grad():
        _, cache = HFEngine._forward(net, ids, attn, pos, kvcache.growing_cache(net.config, 20))
        step_ids, step_pos = torch.randint(0, 300, (3, 1)), pos[:, -1:] + 1
        step_attn = torch.cat([attn, torch.ones(3, 1, dtype=attn.dtype)], 1)
        full, _ = HFEngine._forward(net, step_ids, step_attn, step_pos, copy.deepcopy(cache))
        hidden, _ = lean.LeanDecoder(net)(step_ids, step_attn, step_pos, copy.deepcopy(cache))
    assert torch.equal(net.get_output_embeddings()(hidden.contiguous()), full)


def test_the_heap_is_trimmed_while_serving_and_the_outputs_do_not_change(make_store, monkeypatch):
    from selfevo import heap

    store = make_store(("a0",))
    reqs = [Request("a0", MSGS[i % len(MSGS)], SamplingParams(max_new_tokens=6, temperature=1.0), seed=i)
            for i in range(4)]
    calls = []
    monkeypatch.setattr(heap, "trim", lambda: calls.append(1) or True)
    never = HFEngine(store, trim_every=0).generate(reqs)
    assert calls == []
    always = HFEngine(store, trim_every=1e-9).generate(reqs)  # after every decode step
    assert len(calls) >= 6
    assert [o.token_ids for o in always] == [o.token_ids for o in never]


def test_engine_counts_the_shapes_of_its_forwards(make_store):
    """One join of three prompts left-padded to the longest (W), then n - 1 decode steps of three rows, each
    sweeping the growing cache's whole buffer: W + n keys (its reserve; it doubled on its first fill to 2·W before)."""
    store = make_store(("a0",))
    n = 5
    sp = SamplingParams(max_new_tokens=n, temperature=0.0, ignore_eos=True)
    reqs = [Request("a0", m, sp) for m in MSGS[:3]]
    engine = HFEngine(store)
    outs = engine.generate(reqs)
    assert all(len(o.token_ids) == n for o in outs)
    width = max(len(o.prompt_ids) for o in outs)
    keys = width + n
    shapes = engine.shapes.to_json()
    assert shapes["prefill"] == [[3, size_bin(width), 1, width]]
    assert shapes["decode"] == [[3, size_bin(keys), n - 1, (n - 1) * keys]]
    assert set(shapes) == {"prefill", "decode"}  # nothing joined a running batch, no row left early
    assert engine.counters["prefill_tokens"] == sum(len(o.prompt_ids) for o in outs) < 3 * width


# ---- the KV-cache budget ----------------------------------------------------------------------------------------
@pytest.mark.slow  # over 0.7 s on the AVX2 machine: out of the quick subset
def test_samples_of_one_prompt_prefill_once_and_get_what_they_would_alone(make_store):
    """A GRPO-style group (4 seeded samples of one prompt and adapter) and a second adapter's copy of the same
    prompt: two prefill rows, not five; each sample's tokens and log-probs are those it gets alone."""
    store = make_store(("a0", "a1"))
    randomize_adapters(store)
    sp = SamplingParams(max_new_tokens=6, temperature=1.0)
    reqs = [Request("a0", MSGS[2], sp, seed=k) for k in range(4)] + [Request("a1", MSGS[2], sp, seed=0)]
    engine = HFEngine(store)
    outs = engine.generate(reqs)
    prompt = len(outs[0].prompt_ids)
    assert engine.shapes.to_json()["prefill"][0][0] == 2
    assert engine.counters["prefill_tokens"] == 2 * prompt
    for r, got in zip(reqs, outs):
        ref = HFEngine(store).generate([r])[0]
        assert got.token_ids == ref.token_ids
        assert max(abs(a - b) for a, b in zip(got.logprobs, ref.logprobs)) < 1e-4
    assert len({tuple(o.token_ids) for o in outs[:4]}) > 1  # the samples still draw their own tokens


def test_distinct_prompts_by_hand():
    from selfevo.engines.hf import _Row, distinct_prompts

    def row(agent, ids):
        return _Row(Request(agent, [], GREEDY), ids, None, [], [])

    rows = [row("a", [1, 2]), row("a", [1, 2]), row("b", [1, 2]), row("a", [3]), row("a", [1, 2])]
    assert distinct_prompts(rows) == ([0, 2, 3], [0, 0, 1, 2, 0])
    assert distinct_prompts([]) == ([], [])


def test_kv_bytes_per_token_of_smollm2_by_hand():
    from types import SimpleNamespace

    from selfevo.engines.kvcache import bytes_per_token

    smol = SimpleNamespace(num_hidden_layers=30, num_attention_heads=9, num_key_value_heads=3, hidden_size=576)
    assert bytes_per_token(smol, 4) == 30 * 2 * 3 * 64 * 4 == 46080  # head_dim = 576 / 9
    wrapped = SimpleNamespace(text_config=SimpleNamespace(num_hidden_layers=2, num_attention_heads=4, head_dim=8,
                                                          num_key_value_heads=None, hidden_size=99))
    assert bytes_per_token(wrapped, 2) == 2 * 2 * 4 * 8 * 2  # no kv heads given: as many as query heads


@pytest.mark.parametrize("running,width,left,waiting,budget,expected", [
    (2, 10, 5, [(8, 4), (12, 6), (3, 20)], 60, 1),   # 3 rows x (10 + 5 + 1) = 48; 4 x (12 + 6 + 1) = 76 > 60
    (2, 10, 5, [(8, 4), (12, 6), (3, 20)], 0, 3),    # no budget: all
    (0, 0, 0, [(4, 4)] * 3, 20, 2),                  # empty batch, no merge slot: 2 x 8 = 16; 3 x 8 = 24 > 20
    (0, 0, 0, [(100, 50)], 10, 1),                   # a request alone always runs
    (1, 10, 5, [(100, 50)], 10, 0),                  # ... but waits while others run
    (0, 0, 0, [], 10, 0),                            # nothing waits
])
def test_admissible_by_hand(running, width, left, waiting, budget, expected):
    from selfevo.engines.kvcache import admissible

    assert admissible(running, width, left, waiting, budget) == expected


@pytest.mark.slow  # over 0.7 s on the AVX2 machine: out of the quick subset
def test_kv_budget_keeps_the_cache_small_and_the_outputs_unchanged(make_store, monkeypatch):
    """Requests under a KV budget of two of them: every decode forward's whole cache (rows x capacity) stays within
    it, fewer rows run together than without it, and every request gets exactly its unlimited tokens. Greedy: the
    tiny random model's next-token law is nearly uniform (~2e-5 a token), so a sample drawn at a CDF boundary flips
    on float noise of ~1e-6 between batch compositions (it did, under ATEN_CPU_CAPABILITY=avx2 with 2 threads after
    other engine tests); its top two logits are far apart by comparison."""
    from dataclasses import replace

    from selfevo.engines import hf, kvcache

    store = make_store(("a0", "a1"))
    randomize_adapters(store)
    lengths = [3, 9, 5, 14, 2, 7, 11, 4]
    msgs, reqs = mixed_requests(lengths)
    reqs = [replace(r, sampling=replace(r.sampling, temperature=0.0, ignore_eos=True)) for r in reqs]
    net = store.backbones["tiny-random"].causal_lm
    per_token = kvcache.bytes_per_token(net.config, net.get_output_embeddings().weight.element_size())
    prompts = [len(render_prompt(store.backbones["tiny-random"].tokenizer, m)) for m in msgs]
    budget = 2 * max(p + n for p, n in zip(prompts, lengths)) + 2
    seen = []
    decode = hf._Lane._decode
    monkeypatch.setattr(hf._Lane, "_decode", lambda self, ids: seen.append(
        (ids.shape[0], self.cache.layers[0].keys.shape[0] * kvcache.key_width(self.cache))) or decode(self, ids))
    limited = HFEngine(store, kv_cache_gib=budget * per_token / 2**30).generate(reqs)
    capped, seen[:] = list(seen), []
    free = HFEngine(store).generate(reqs)
    for a, b in zip(limited, free):
        assert a.token_ids == b.token_ids and a.logprobs == pytest.approx(b.logprobs, abs=1e-4)
    assert max(tokens for _, tokens in capped) <= budget < max(tokens for _, tokens in seen), (budget, prompts, capped)
    assert 1 < max(rows for rows, _ in capped) < max(rows for rows, _ in seen)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@torch.no_grad()
def test_frozen_linear_into_accumulates_the_product_in_place(dtype):
    """out += x @ W^T on the output's own storage (a strided x: a group's shrink columns), no new tensor returned;
    bf16 goes through vLLM's packed oneDNN GEMM where this CPU has one, else torch's."""
    from selfevo.engines.packed import frozen_linear_into

    g = torch.Generator().manual_seed(0)
    w = torch.randn(6, 4, generator=g).to(dtype)
    x = torch.randn(5, 12, generator=g).to(dtype)[:, 4:8]  # row stride 12
    out = torch.randn(5, 6, generator=g).to(dtype)
    want = out.float() + x.float() @ w.float().t()
    ptr = out.data_ptr()
    frozen_linear_into(w)(x, out)
    assert out.data_ptr() == ptr
    torch.testing.assert_close(out.float(), want, **({} if dtype == torch.float32 else {"atol": 0.05, "rtol": 0.02}))


def test_without_continuous_batching_the_engine_streams_in_waves(make_store):
    """``engine.hf.continuous=false`` (``HFEngine(continuous=False)``): the runner's stream is served by one
    ``generate`` call per wave of ready requests; the same turns as continuous batching (greedy decoding)."""
    from selfevo.interaction import Episode, Runner
    from selfevo.types import Task

    store = make_store(("a0",))
    greedy = SamplingParams(max_new_tokens=3, temperature=0.0)

    def program(ep):
        first = yield Ask("a0", "solver", [{"role": "user", "content": ep.task.question}])
        yield [Ask("a0", "check", [{"role": "user", "content": first.text}]) for _ in range(2)]

    tasks = [Task(f"t{i}", "math", f"What is {i}+1?") for i in range(3)]
    waves = HFEngine(store, continuous=False)
    calls = []
    generate = waves.generate
    waves.generate = lambda requests: calls.append(len(requests)) or generate(requests)
    got = Runner(waves, greedy, seed=1).run([Episode(t) for t in tasks], program)
    want = Runner(HFEngine(store), greedy, seed=1).run([Episode(t) for t in tasks], program)
    assert calls == [3, 6]
    assert [[t.text for t in e.turns] for e in got] == [[t.text for t in e.turns] for e in want]
