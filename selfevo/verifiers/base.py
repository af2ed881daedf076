"""The result type every verifier returns, the verifier call signature, and the registry of verifiers (filled by
the modules :mod:`selfevo.verifiers` imports: code, math, mcq, numeric)."""
from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Callable

from selfevo.registry import Registry
from selfevo.types import Task


@dataclass(frozen=True)
class Verdict:
    """How well one response answers one task.

    ``score`` lies in [0, 1] (1 = correct; code tasks give the fraction of tests passed), ``reason`` is a short
    human-readable explanation, ``extracted`` is the answer (or code) the verifier pulled out of the response,
    or None when nothing could be extracted.
    """

    score: float
    reason: str
    extracted: str | None = None

    def __post_init__(self) -> None:
        if not 0.0 <= self.score <= 1.0:
            raise ValueError(f"Verdict score must lie in [0, 1], got {self.score}")


Verifier = Callable[[Task, str], Verdict]


def fail(reason: str, extracted: str | None = None) -> Verdict:
    """A zero-score verdict."""
    return Verdict(0.0, reason, extracted)


_VERIFIERS: Registry[Verifier] = Registry("verifier")


def register_verifier(name: str) -> Callable[[Verifier], Verifier]:
    """Decorator: ``@register_verifier("math")`` on a ``(task, response) -> Verdict`` function."""
    return _VERIFIERS.register(name)


def get_verifier(name: str) -> Verifier:
    """The verifier registered as ``name``; an unknown name raises a one-line error listing the known ones."""
    return _VERIFIERS.get(name)


def verifier_names() -> list[str]:
    return _VERIFIERS.names()


def verify(task: Task, response: str) -> Verdict:
    """Score ``response`` for ``task`` with the verifier its meta or domain names."""
    name = str(task.meta.get("verifier") or task.domain)
    return get_verifier(name)(task, response)


@lru_cache(maxsize=64)
def _fence_re(name: str) -> re.Pattern[str]:
    return re.compile(rf"```{re.escape(name)}[ \t]*\n(.*?)```", re.DOTALL)


def fenced_blocks(text: str | None, name: str) -> list[str]:
    """The bodies of every closed ```` ```name ```` block in ``text``, in order, without their final newline
    (```` ```python ```` does not match ``name="py"``; a block must start on the fence's line and end at ```` ``` ````)."""
    return [b[:-1] if b.endswith("\n") else b for b in _fence_re(name).findall(text or "")]
