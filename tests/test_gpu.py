"""The GPU path on a GPU: the store's update, the masked multi-LoRA forward, the hf engine's sampling and every
paper preset, on CUDA with tiny-random. CI has no GPU: these are skipped there; on a GPU machine run

    pytest -m gpu tests/test_gpu.py

The CPU suite already checks what the GPU presets hand vLLM (tests/test_models.py); these check that the parts the
recipes run on CUDA (store, hf engine, loop) take the same step there as on the CPU, in float32 within float
tolerance, and that each paper preset runs a whole step in its own dtype (bf16) on the GPU."""
import json

import pytest
import torch

from helpers.adapters import randomize_adapters
from selfevo import cli
from selfevo.engines.hf import HFEngine
from selfevo.engines.multilora import MultiLoRA
from selfevo.policy import SeqBatch
from selfevo.types import Request, SamplingParams

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]


def _stores(make_store, agents=("a0", "a1"), **kw):
    """The same agents on the CPU and on the GPU, with the CPU store's adapters copied into the GPU store (PEFT
    initialises lora_A with the generator of the device it runs on)."""
    torch.manual_seed(0)
    cpu = make_store(agents, **kw)
    randomize_adapters(cpu)
    gpu = make_store(agents, device="cuda", **kw)
    for a in agents:
        for p_gpu, p_cpu in zip(gpu.adapter_params(a), cpu.adapter_params(a)):
            p_gpu.data.copy_(p_cpu.data)
        gpu.versions[a] += 1
    return cpu, gpu


def test_store_lives_on_the_gpu(make_store):
    _, gpu = _stores(make_store)
    assert all(p.is_cuda for p in gpu.adapter_params("a0"))
    assert next(gpu.backbones["tiny-random"].model.parameters()).is_cuda


def test_update_on_cuda_takes_the_cpu_step(make_store):
    b = SeqBatch.build([[5, 6, 7], [9], [4, 4]], [[8, 9], [1, 2, 3, 4], [6]], 2)
    loss = lambda logp, mb, ent: -(logp * mb.loss_mask).sum() / 7 - 0.1 * (ent * mb.loss_mask).sum() / 7  # noqa
    cpu, gpu = _stores(make_store, ("a0",), micro_batch=2)
    stats = [s.update("a0", b, loss, entropy=True) for s in (cpu, gpu)]
    assert stats[1]["loss"] == pytest.approx(stats[0]["loss"], rel=1e-4)
    assert stats[1]["grad_norm"] == pytest.approx(stats[0]["grad_norm"], rel=1e-3)
    after = [torch.cat([p.detach().flatten().cpu() for p in s.adapter_params("a0")]) for s in (cpu, gpu)]
    torch.testing.assert_close(after[1], after[0], atol=1e-5, rtol=1e-4)


def test_gradient_checkpointing_on_cuda_takes_the_same_step(make_store):
    b = SeqBatch.build([[5, 6, 7] * 5, [9] * 4], [[8, 9] * 3, [1, 2, 3, 4]], 2)
    loss = lambda logp, mb: -(logp * mb.loss_mask).sum() / 10  # noqa: E731
    out = []
    for checkpointing in (False, True):
        _, gpu = _stores(make_store, ("a0",), gradient_checkpointing=checkpointing)
        stats = gpu.update("a0", b, loss)
        out.append((stats, torch.cat([p.detach().flatten().cpu() for p in gpu.adapter_params("a0")])))
    assert out[1][0]["loss"] == pytest.approx(out[0][0]["loss"], rel=1e-5)
    torch.testing.assert_close(out[1][1], out[0][1], atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@torch.no_grad()
def test_masked_multilora_on_cuda_matches_the_cpu(make_store, dtype):
    cpu, gpu = _stores(make_store, ("a0", "a1"), dtype=dtype)
    ids = torch.randint(0, 1000, (3, 9))
    rows = ["a0", None, "a1"]
    logits = []
    for s in (cpu, gpu):
        bb = s.backbones["tiny-random"]
        with MultiLoRA(bb.model, rows):
            logits.append(bb.causal_lm(input_ids=ids.to(bb.causal_lm.device)).logits.float().cpu())
    tol = 1e-4 if dtype == "float32" else 5e-2
    torch.testing.assert_close(logits[1], logits[0], atol=tol, rtol=tol)


def test_hf_engine_samples_on_cuda_and_its_logprobs_are_the_policy(make_store):
    """Sampled tokens on the GPU come with the log-probs the store scores them with (temperature 1)."""
    _, gpu = _stores(make_store, ("a0", "a1"))
    msgs = [[{"role": "user", "content": f"question {i}: " + "word " * i}] for i in range(4)]
    reqs = [Request(("a0", "a1", None, "a0")[i], m, SamplingParams(max_new_tokens=12, temperature=1.0), seed=i)
            for i, m in enumerate(msgs)]
    outs = HFEngine(gpu).generate(reqs)
    assert all(len(o.token_ids) == 12 for o in outs)  # tiny-random never stops early
    for o in outs:
        batch = SeqBatch.build([o.prompt_ids], [o.token_ids], 1)
        with torch.no_grad():
            scored = gpu.token_logprobs(o.request.agent, batch)[0][batch.loss_mask[0].bool()].cpu()
        torch.testing.assert_close(scored, torch.tensor(o.logprobs), atol=1e-4, rtol=1e-4)


def test_hf_engine_greedy_on_cuda_matches_the_cpu(make_store):
    cpu, gpu = _stores(make_store, ("a0",))
    msgs = [[{"role": "user", "content": "What is 2+2?"}], [{"role": "user", "content": "Name three colors."}]]
    greedy = SamplingParams(max_new_tokens=8, temperature=0.0)
    outs = [HFEngine(s).generate([Request(a, m, greedy) for a in ("a0", None) for m in msgs]) for s in (cpu, gpu)]
    assert [o.token_ids for o in outs[1]] == [o.token_ids for o in outs[0]]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_segmented_attention_on_cuda_matches_the_cpu(dtype):
    """Packed shared-prompt rows attended from their ranges (no L x L mask) on CUDA: the CPU's outputs and
    gradients (selfevo.attention.segmented_attention builds its small masks on the query's device)."""
    from selfevo.attention import segmented_attention

    segments = [(3, [(3, 5), (5, 6)]), (2, [(2, 3)]), (0, [(0, 2), (2, 4)])]
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(3, h, 6, 8, generator=gen).to(dtype) for h in (6, 2, 2))
    outs, grads = [], []
    for dev in ("cpu", "cuda"):
        leaves = [t.detach().to(dev, copy=True).requires_grad_() for t in (q, k, v)]
        out, _ = segmented_attention(*leaves, segments)
        assert out.device.type == dev
        (out.float() * torch.arange(out.numel(), device=dev).view_as(out).float().sin()).sum().backward()
        outs.append(out.detach().float().cpu())
        grads.append([t.grad.float().cpu() for t in leaves])
    tol = 1e-5 if dtype == torch.float32 else 3e-2
    torch.testing.assert_close(outs[1], outs[0], atol=tol, rtol=tol)
    for a, b in zip(*grads):
        torch.testing.assert_close(b, a, atol=tol, rtol=tol)


@pytest.mark.parametrize("kl_in_reward", [True, False])
def test_packed_grpo_update_with_kl_on_cuda_takes_the_cpu_step(make_store, kl_in_reward):
    """The GRPO update over shared-prompt packed rows (ranges on the CPU, the mask on CUDA under
    ``packed_attention=auto``), with the KL to the base folded into the reward or as a loss term scored in the
    training forward: the CPU's loss, KL and step on CUDA (fp32)."""
    from selfevo.optimizers import OPTIMIZERS, Samples
    from selfevo.optimizers.trainer import TrainerCfg

    gen = torch.Generator().manual_seed(3)
    prompts = [[5, 9, 11, 7], [5, 9, 11, 7], [5, 9, 11, 7], [8, 3], [8, 3]]
    completions = [torch.randint(10, 200, (n,), generator=gen).tolist() for n in (6, 3, 9, 5, 2)]
    b = SeqBatch.build(prompts, completions, 0)
    rewards = torch.tensor([1.0, 0.0, 0.5, 1.0, 0.0])
    cpu, gpu = _stores(make_store, ("a0",), micro_batch=4, shared_prompts=True)
    assert gpu._packed(b) is not None
    cfg = TrainerCfg(kl_coef=0.05, kl_in_reward=kl_in_reward)
    stats = [OPTIMIZERS.get("grpo")(cfg)(s, "a0", Samples(b, rewards)) for s in (cpu, gpu)]
    for key in ("loss", "grad_norm", "kl"):
        assert stats[1][key] == pytest.approx(stats[0][key], rel=1e-3, abs=1e-6), key
    # AdamW's first step moves a weight by about lr * sign(g): where |g| is near eps, float noise moves it a little
    # (on an H200: 2 of 16,384 weights by up to 6e-5 with lr 1e-2; loss, KL and gradient norm within 1e-3)
    after = [torch.cat([p.detach().flatten().cpu() for p in s.adapter_params("a0")]) for s in (cpu, gpu)]
    torch.testing.assert_close(after[1], after[0], atol=1e-4, rtol=1e-4)


TINY = ["model.backbones=[tiny-random]", "model.device=cuda", "data.source=local", "sampling.max_new_tokens=16",
        "eval.max_new_tokens=16", "engine.name=hf", "trainer.max_steps=1", "trainer.mask_truncated=false"]


@pytest.mark.parametrize("recipe", ["comas", "sage", "maestro", "azr", "mae"])
def test_paper_preset_runs_a_step_on_cuda_in_its_dtype(recipe, tmp_path):
    """Each paper preset in its own dtype (bf16) on the GPU, tiny-random, the hf engine (vLLM is what the presets
    name; its arguments are tested without a GPU): one whole step, adapters written, the launch records the GPU."""
    out = tmp_path / "run"
    assert cli.main(["run", recipe, "--preset", "paper", *TINY, f"output_dir={out}"]) == 0
    (metrics,) = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert metrics["step"] == 0 and metrics["train"]
    assert all(t["rows"] > 0 for t in metrics["train"].values())
    (launch,) = json.loads((out / "run.json").read_text())
    assert launch["machine"]["cuda"] == torch.cuda.get_device_name(0)
