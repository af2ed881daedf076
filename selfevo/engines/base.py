"""The engine interface every rollout goes through, and helpers shared by the engines.

An engine turns a list of :class:`~selfevo.types.Request` into a list of :class:`~selfevo.types.Completion` (same
order), serving each request with its agent's current adapter. ``sync_adapter(agent, store)`` tells the engine that
the agent's weights changed: the next ``generate`` must serve the new version, never a stale one. An engine that
batches continuously also has ``stream(source)`` (see :class:`RequestSource`); one that only generates is served a
source by :func:`serve_in_waves`.

Every registered engine is built from the ``engine`` config section (:class:`~selfevo.config.EngineCfg`) by its
classmethod ``from_config(section, store, dtype, workdir)``, which reads its own section (``engine.hf``,
``engine.vllm``, ``engine.vllm_server``); :func:`selfevo.engines.build_engine` picks the class by ``section.name``.
"""
from __future__ import annotations

from typing import Callable, Hashable, Protocol, Sequence

from selfevo.errors import SelfevoError
from selfevo.registry import Registry
from selfevo.types import Completion, Request

ENGINES: Registry = Registry("engine")
VLLM_LORA_RANKS = (8, 16, 32, 64, 128, 256, 320, 512)  # the max_lora_rank values vLLM accepts


class EngineError(SelfevoError, RuntimeError):
    """An engine that cannot serve (a server dead, timed out, or refusing an adapter), said in one line."""


class Engine(Protocol):
    @classmethod
    def from_config(cls, section, store, dtype: str, workdir: str | None = None) -> "Engine": ...

    def generate(self, requests: Sequence[Request]) -> list[Completion]: ...

    def sync_adapter(self, agent: str) -> None: ...

    def close(self) -> None: ...


class RequestSource(Protocol):
    """What a continuously batching engine serves (``engine.stream(source)``, engines that have it): requests
    become ready over time, e.g. the next turn of a discussion once the previous one finished.

    ``take()`` hands over every request ready now (each with a key of the source's choosing), ``done(key,
    completion)`` gets each one back as soon as it is finished and may make new requests ready. The engine stops
    when nothing is running and ``take()`` gives nothing."""

    def take(self) -> list[tuple[Hashable, Request]]: ...

    def done(self, key: Hashable, completion: Completion) -> None: ...


def serve_in_waves(generate: Callable[[list[Request]], list[Completion]], source: RequestSource) -> None:
    """Serve ``source`` with a batch call: every request ready now goes to ``generate`` as one call (a wave), each
    completion back to ``source.done`` in request order (which may make the next wave ready), until nothing is
    ready. The stream of an engine that only generates (the runner's one path)."""
    while ready := source.take():
        keys, requests = [k for k, _ in ready], [r for _, r in ready]
        completions = generate(requests)
        if len(completions) != len(requests):
            raise RuntimeError(f"engine returned {len(completions)} completions for {len(requests)} requests")
        for key, completion in zip(keys, completions):
            source.done(key, completion)


def vllm_lora_rank(store) -> int:
    """The smallest ``max_lora_rank`` vLLM accepts that fits every agent's adapter (the store's LoRA rank when it
    has no agent yet)."""
    ranks = [store.backbones[store.agent_backbone[a]].model.peft_config[a].r for a in store.agents()]
    rank = max(ranks or [store.settings.lora.r])
    return next(v for v in VLLM_LORA_RANKS if v >= rank)


def render_prompt(tokenizer, messages: list[dict[str, str]], prefix: str = "") -> list[int]:
    """Chat messages → prompt token ids through the backbone's chat template (generation prompt appended), then
    ``prefix``: the start of the assistant's answer, given rather than generated."""
    text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    return tokenizer(text + prefix, add_special_tokens=False)["input_ids"]


def truncate_at_stop(text: str, stops: Sequence[str]) -> tuple[str, bool]:
    """Cut ``text`` before the first stop string; says whether one was found."""
    cut = min((i for i in (text.find(s) for s in stops if s) if i >= 0), default=-1)
    return (text[:cut], True) if cut >= 0 else (text, False)
