"""Multi-agent generation demo: several agents, each with its own LoRA adapter, answer questions in one batch.

    selfevo run demo                                  # preset cpu: 4 agents on the embedded SmolLM2-135M
    selfevo run demo n_agents=8 engine.name=vllm        # the same through vLLM multi-LoRA
    selfevo run demo model.backbones=[smollm2-135m-instruct,gemma3-270m]   # heterogeneous agents

Fresh LoRA adapters start as the identity (B = 0), so agents differ through their seeds until they are trained;
``adapter_init_std > 0`` perturbs them so that the adapters themselves differ.
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from selfevo.loop import build, record_launch
from selfevo.config import (ConfigError, EngineCfg, ModelCfg, SamplingCfg, check_sampling_fits_engine, opt,
                            save_config)
from selfevo.engines import build_engine
from selfevo.types import Request


@dataclass
class DemoCfg:
    recipe: str = opt("demo", "recipe name (recorded in config.yaml)", choices=("demo",))
    seed: int = opt(0, "seed of the RNGs; request i uses seed + i", ge=0)
    output_dir: str = opt("runs/demo", "run directory: config.yaml, run.json, transcripts.jsonl, summary.json",
                          nonempty=True)
    n_agents: int = opt(4, "number of agents, one LoRA adapter each", ge=1)
    adapter_init_std: float = opt(0.0, "std of random adapter B matrices; 0 = identity adapters", ge=0)
    model: ModelCfg = opt(ModelCfg, "the backbones and their LoRA settings")
    engine: EngineCfg = opt(EngineCfg, "the generation engine")
    sampling: SamplingCfg = opt(SamplingCfg, "how every answer is sampled")
    questions: list[str] = opt([
        "Natalia sold clips to 48 friends in April, and half as many in May. How many clips did she sell in total?",
        "What is the capital of France? Answer in one word.",
    ], "questions every agent answers", nonempty=True)

    @staticmethod
    def check(cfg) -> None:
        """Cross-field rules: every backbone is used by some agent; vLLM responses fit the model length."""
        if len(cfg.model.backbones) > cfg.n_agents:
            raise ConfigError(f"model.backbones lists {len(cfg.model.backbones)} models but n_agents={cfg.n_agents}; "
                              f"agent i uses backbones[i % n], so n_agents must be >= {len(cfg.model.backbones)}")
        check_sampling_fits_engine(cfg)


def perturb_adapters(store, std: float) -> None:
    """Give every adapter's B matrices N(0, std) entries so agents' adapters really differ."""
    for agent in store.agents():
        for p in store.adapter_params(agent):
            if p.dim() == 2 and p.shape[1] == store.settings.lora.r:  # lora_B: [out, r]
                torch.nn.init.normal_(p.data, std=std)
        store.versions[agent] += 1


def main(cfg, command_line: list[str] | None = None) -> dict:
    build.seed_everything(cfg.seed)
    save_config(cfg, cfg.output_dir)
    store = build.policy_store(cfg.model)
    record_launch(Path(cfg.output_dir), dtype=store.dtype, command_line=command_line)
    names = [f"agent{i}" for i in range(cfg.n_agents)]
    build.add_agents(store, names, list(cfg.model.backbones))
    if cfg.adapter_init_std > 0:
        perturb_adapters(store, cfg.adapter_init_std)
    engine = build_engine(cfg.engine, store, cfg.model.dtype, workdir=str(Path(cfg.output_dir) / "engine"))
    sp = build.sampling(cfg.sampling)
    requests = [Request(agent=a, messages=[{"role": "user", "content": q}], sampling=sp, seed=cfg.seed + i)
                for i, (q, a) in enumerate((q, a) for q in cfg.questions for a in names)]
    start = time.perf_counter()
    completions = engine.generate(requests)
    seconds = time.perf_counter() - start
    engine.close()
    return _report(cfg, completions, seconds, store.agent_backbone)


def _report(cfg, completions, seconds: float, backbone_of: dict[str, str]) -> dict:
    path = Path(cfg.output_dir) / "transcripts.jsonl"
    with path.open("w") as f:
        for c in completions:
            question = c.request.messages[-1]["content"]
            print(f"\n[{c.request.agent} · {backbone_of[c.request.agent]}] Q: {question}\n  A: {c.text.strip()}")
            f.write(json.dumps({"agent": c.request.agent, "question": question, "answer": c.text,
                                "tokens": len(c.token_ids), "finish_reason": c.finish_reason}) + "\n")
    tokens = sum(len(c.token_ids) for c in completions)
    summary = {"requests": len(completions), "tokens": tokens, "seconds": round(seconds, 2),
               "tok_s": round(tokens / seconds, 1), "engine": cfg.engine.name}
    print("\n" + json.dumps(summary))
    (Path(cfg.output_dir) / "summary.json").write_text(json.dumps(summary, indent=1))
    return summary

