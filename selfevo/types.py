"""Plain data records shared by every part of selfevo: tasks, sampling settings, requests, completions."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class Task:
    """One dataset item. ``reference`` is the answer (math, mcq, numeric) or may be empty for code."""

    id: str
    domain: str  # "math" | "code" | "mcq" | "numeric" | "science" ...
    question: str
    reference: str = ""
    tests: str = ""  # code only: Python test code that fails by raising
    entry_point: str = ""  # code only: function name for HumanEval-style check(entry_point)
    meta: dict[str, Any] = field(default_factory=dict)


@dataclass
class SamplingParams:
    max_new_tokens: int = 128
    temperature: float = 1.0
    top_p: float = 1.0
    stop: tuple[str, ...] = ()
    ignore_eos: bool = False  # keep going past end-of-sequence (throughput measurements)


@dataclass
class Request:
    """One generation: which agent (adapter) speaks, the chat so far, how to sample, and a seed."""

    agent: str | None  # adapter name; None = the bare backbone
    messages: list[dict[str, str]]
    sampling: SamplingParams = field(default_factory=SamplingParams)
    seed: int | None = None
    backbone: str | None = None  # which backbone serves it (heterogeneous agents); None = the engine's only one
    prefix: str = ""  # text the assistant turn starts with (part of the prompt; not in the completion)


@dataclass
class Completion:
    request: Request
    prompt_ids: list[int]
    token_ids: list[int]
    logprobs: list[float]  # log-prob of each sampled token under the sampling distribution (temperature 1 policy)
    text: str
    finish_reason: str  # "stop" | "length"
