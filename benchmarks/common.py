"""Shared bits of the benchmark scripts: peak memory of a process tree, result files, prompts."""
from __future__ import annotations

import json
import os
import platform
import threading
import time
from pathlib import Path

import psutil

RESULTS = Path(__file__).parent / "results"


class PeakRSS:
    """Samples the resident memory of this process plus its children (vLLM workers) until stopped."""

    def __init__(self, every: float = 0.1):
        self.every, self.peak, self._stop = every, 0, threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _sample(self) -> int:
        me = psutil.Process()
        total = me.memory_info().rss
        for child in me.children(recursive=True):
            try:
                total += child.memory_info().rss
            except psutil.Error:
                pass
        return total

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self._sample())
            time.sleep(self.every)

    def __enter__(self) -> "PeakRSS":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    @property
    def gib(self) -> float:
        return round(self.peak / 2**30, 3)


def machine() -> dict:
    import torch

    return {"cpu_count": os.cpu_count(), "torch_threads": torch.get_num_threads(), "platform": platform.platform(),
            "torch": torch.__version__}


def save(name: str, result: dict) -> None:
    RESULTS.mkdir(parents=True, exist_ok=True)
    line = json.dumps(result)
    print(line)
    (RESULTS / f"{name}.json").write_text(line + "\n")


def gsm8k_prompts(n: int, data_root: str | None = None) -> list[str]:
    """The first ``n`` GSM8K test questions, the file found like every benchmark file (``data_root``, else
    ``$SELFEVO_DATA``, the cache of ``selfevo prepare data``, ``../shared/data``); synthetic arithmetic where no
    place has it (never the hub: a benchmark run stays offline)."""
    from selfevo.tasks.base import load_context

    found = load_context("gsm8k", "test", data_root, "local", {}).find("gsm8k", "test.jsonl")
    path = Path(found) if found else None
    if path is not None:
        rows = [json.loads(x) for x in path.read_text().splitlines()[:n]]
        return [r["question"] for r in rows]
    return [f"What is {i} times {i + 7}? Explain step by step." for i in range(n)]


def grpo_samples(prompts: int, per_prompt: int, prompt_len: int = 66, lengths: tuple[int, int] = (40, 129),
                 ids: tuple[int, int] = (100, 40000)):
    """A seeded synthetic GRPO batch: ``prompts`` random prompts of ``prompt_len`` tokens (ids in ``ids``), each with
    ``per_prompt`` completions of ``lengths[0]`` to ``lengths[1] - 1`` tokens, 0/1 rewards (30% ones), grouped by
    prompt, as :class:`selfevo.optimizers.Samples`."""
    import torch

    from selfevo.optimizers import Samples
    from selfevo.policy import SeqBatch

    g = torch.Generator().manual_seed(0)
    p_ids, c_ids = [], []
    for _ in range(prompts):
        prompt = torch.randint(*ids, (prompt_len,), generator=g).tolist()
        for _ in range(per_prompt):
            n = int(torch.randint(*lengths, (1,), generator=g))
            p_ids.append(prompt)
            c_ids.append(torch.randint(*ids, (n,), generator=g).tolist())
    rewards = (torch.rand(len(c_ids), generator=g) < 0.3).float()
    return Samples(SeqBatch.build(p_ids, c_ids, 0), rewards, [i // per_prompt for i in range(len(c_ids))])
