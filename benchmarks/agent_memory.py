"""Peak memory of policy store + engine with 1, 2, 4, 8 agents on the embedded model.

    .venv/bin/python -m benchmarks.agent_memory [--engine hf] [--agents 1 2 4 8] [--optim-state-dtype float32]

Each count runs in a fresh process: build the store with N agents (LoRA r=16 on all linear layers, one AdamW each),
the engine, one rollout batch of the same size for every count (32 prompts × 64 tokens, spread over the agents,
all mixed in one batch), then one policy-gradient step per agent (so every optimizer has its state). Keeping the
workload fixed isolates what each extra agent costs (its adapter, gradients and AdamW state). Peak RSS covers the process and its children (vLLM workers).
Keys: agents, peak_rss_gib, settled_rss_gib (resident at the end, freed heap returned: what stays between steps),
ratio_max_vs_1 (peak), settled_ratio_max_vs_1, per_agent_mib (settled growth per extra agent). ``--optim-state-dtype
bfloat16`` keeps the AdamW moments in bf16 (``trainer.optim_state_dtype``). Writes results/agent_memory[_<engine>]
[_bf16state].json.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys

import psutil

from benchmarks.common import PeakRSS, gsm8k_prompts, machine, save

MODEL = "smollm2-135m-instruct"


def one(n_agents: int, engine_name: str, state_dtype: str) -> tuple[float, float]:
    from selfevo.engines import make_engine
    from selfevo.optimizers.objectives import token_mean
    from selfevo.policy import PolicyStore, StoreSettings, SeqBatch
    from selfevo.types import Request, SamplingParams

    with PeakRSS() as mem:
        store = PolicyStore(StoreSettings(dtype="bfloat16", optim_state_dtype=state_dtype))
        agents = [f"agent{i}" for i in range(n_agents)]
        for a in agents:
            store.add_agent(a, MODEL)
        kwargs = {"dtype": "bfloat16", "max_loras": n_agents, "max_model_len": 2048} if engine_name == "vllm" else {}
        engine = make_engine(engine_name, store, **kwargs)
        sp = SamplingParams(max_new_tokens=64, temperature=1.0, ignore_eos=True)
        prompts = gsm8k_prompts(32)
        reqs = [Request(agents[i % n_agents], [{"role": "user", "content": p}], sp, seed=i)
                for i, p in enumerate(prompts)]
        outs = engine.generate(reqs)
        for a in agents:
            mine = [o for o in outs if o.request.agent == a]
            batch = SeqBatch.build([o.prompt_ids for o in mine], [o.token_ids for o in mine], pad_id=2)
            store.update(a, batch, lambda logp, mb: token_mean(-logp, mb.loss_mask, float(batch.loss_mask.sum())))
        engine.close()
        from selfevo.loop.memory import release_freed_memory

        release_freed_memory()
        settled = psutil.Process().memory_info().rss / 2**30
    return mem.gib, round(settled, 3)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--engine", default="hf")
    ap.add_argument("--agents", type=int, nargs="+", default=[1, 2, 4, 8])
    ap.add_argument("--optim-state-dtype", default="float32", choices=("float32", "bfloat16"))
    ap.add_argument("--child", type=int, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child is not None:
        peak, settled = one(args.child, args.engine, args.optim_state_dtype)
        print(json.dumps({"peak": peak, "settled": settled}))
        return
    peaks, settled = [], []
    for n in args.agents:
        cmd = [sys.executable, "-m", __spec__.name, "--engine", args.engine, "--child", str(n),
               "--optim-state-dtype", args.optim_state_dtype]
        out = subprocess.run(cmd, capture_output=True, text=True, check=True)
        got = json.loads(out.stdout.strip().splitlines()[-1])
        peaks.append(got["peak"])
        settled.append(got["settled"])
    extra = args.agents[-1] - args.agents[0]
    result = {"model": MODEL, "engine": args.engine, "optim_state_dtype": args.optim_state_dtype,
              "agents": args.agents, "peak_rss_gib": peaks, "settled_rss_gib": settled,
              "ratio_max_vs_1": round(peaks[-1] / peaks[0], 3),
              "settled_ratio_max_vs_1": round(settled[-1] / settled[0], 3),
              "per_agent_mib": round((settled[-1] - settled[0]) * 1024 / extra, 1) if extra else None,
              "machine": machine()}
    name = "agent_memory" + (f"_{args.engine}" if args.engine != "hf" else "")
    save(name + ("_bf16state" if args.optim_state_dtype == "bfloat16" else ""), result)


if __name__ == "__main__":
    main()
