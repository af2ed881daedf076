"""Turns and episodes: the typed record of every generation, read by rewards, losses, logs, transcripts and setups.

A :class:`Turn` is one generation: who spoke (agent), under which label, the completion, what it parsed to, its
reward (None = masked out of training) and where it sits — the episode's ``wave`` (1-based: the how-manieth engine
call of this episode produced it) and ``slot`` (its index among the requests of that wave). ``refs`` links a turn to the
turns it reacts to, by index in the episode (an evaluation's ``{"solution": 0}``); reward sources follow them.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from selfevo.policy import SeqBatch
from selfevo.roles.base import Parsed
from selfevo.types import Completion, Task


@dataclass
class Turn:
    """One generation: who spoke under which label, what was said, what it parsed to, and its reward (None =
    masked). The label is the turn's name in its episode ("solver", "difficulty"), not a :class:`Role`."""

    agent: str | None
    label: str
    completion: Completion
    parsed: Parsed | None = None
    reward: float | None = None
    round: int | None = 0
    meta: dict[str, Any] = field(default_factory=dict)
    wave: int = 0
    slot: int = 0
    refs: dict[str, int] = field(default_factory=dict)

    @property
    def text(self) -> str:
        return self.completion.text

    @property
    def answer(self) -> str:
        """The whole answer: the prefix it was made to start with (part of the prompt) and the generated text."""
        return self.completion.request.prefix + self.completion.text

    @property
    def finish_reason(self) -> str:
        return self.completion.finish_reason

    @property
    def n_tokens(self) -> int:
        return len(self.completion.token_ids)

    def to_json(self) -> dict:
        """The turn as ``episodes.jsonl`` records it; the label under the key ``role``, as run folders (and the
        golden records) have it."""
        return {"agent": self.agent, "role": self.label, "round": self.round, "reward": self.reward,
                "messages": self.completion.request.messages, "text": self.text,
                "parsed_ok": None if self.parsed is None else self.parsed.ok,
                "parse_error": None if self.parsed is None else self.parsed.error,
                "tokens": self.n_tokens, "finish_reason": self.finish_reason, **self.meta}


@dataclass
class Episode:
    """Everything that happened on one task: its turns in order of generation, and per-episode data."""

    task: Task
    turns: list[Turn] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)
    key: str = ""  # unique among the episodes run together (the key of its request seeds); default: the task id

    def __post_init__(self) -> None:
        self.key = self.key or self.task.id

    def index(self, turn: Turn) -> int:
        """Position of ``turn`` in this episode (identity, not equality)."""
        for i, t in enumerate(self.turns):
            if t is turn:
                return i
        raise ValueError(f"the turn ({turn.label} by {turn.agent}) is not in episode '{self.key}'")

    def to_json(self, step: int) -> dict:
        return {"step": step, "task_id": self.task.id, "domain": self.task.domain, "question": self.task.question,
                "reference": self.task.reference, "turns": [t.to_json() for t in self.turns], **self.meta}


def rewarded_turns(episodes: list[Episode], agent: str) -> list[Turn]:
    """The agent's turns that carry a reward (masked turns, reward None, are left out of training)."""
    return [t for e in episodes for t in e.turns if t.agent == agent and t.reward is not None]


def turns_to_batch(turns: list[Turn], pad_id: int):
    """Prompt + completion ids of each turn as a right-padded ``SeqBatch``, with the turns' rewards [B] tensor."""
    batch = SeqBatch.build([t.completion.prompt_ids for t in turns], [t.completion.token_ids for t in turns], pad_id)
    return batch, torch.tensor([float(t.reward) for t in turns])
