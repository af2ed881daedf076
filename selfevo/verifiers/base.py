"""The result type every verifier returns, and the verifier call signature."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

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
