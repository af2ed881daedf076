"""Majority voting over extracted answers, shared by the inference setups (self-consistency, Central-Gen+SC), the
MAESTRO rounds and the TTRL ``majority_vote`` reward source.

:func:`majority_vote` groups answers by :func:`normalize_answer` (plus an optional equivalence such as math-verify's,
:func:`answer_equivalence`) and returns the winning :class:`Vote`.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Callable, Sequence

from selfevo.types import Task
from selfevo.verifiers.math import equivalent

_NUM = re.compile(r"-?\d+(?:\.\d+)?")


def normalize_answer(answer: str | None) -> str | None:
    """A comparison key for an extracted answer: spacing, ``$``, ``\\!``/``\\,``, ``\\left/\\right``, thousands
    separators, a trailing period and ``\\text{...}`` wrappers are dropped; numbers are written canonically
    (``18.00`` → ``18``). None/empty stays None."""
    if answer is None:
        return None
    text = answer.strip().strip("$").strip()
    text = re.sub(r"\\text\{([^{}]*)\}", r"\1", text)
    text = re.sub(r"\\[!,;]|\\left|\\right|\s+", "", text).rstrip(".")
    text = re.sub(r"(?<=\d),(?=\d{3}\b)", "", text)
    if not text:
        return None
    if _NUM.fullmatch(text):
        value = float(text)
        text = str(int(value)) if value.is_integer() else repr(value)
    return text


@dataclass
class Vote:
    index: int | None  # first response carrying the winning answer; None when no response had an answer
    answer: str | None  # the winning (raw extracted) answer
    count: int  # votes for it
    total: int  # responses with an answer
    groups: list[list[int]] = field(default_factory=list)  # response indices per answer group, in first-seen order


def majority_vote(answers: Sequence[str | None], same: Callable[[str, str], bool] | None = None) -> Vote:
    """Group answers by :func:`normalize_answer` (and ``same(a, b)``, e.g. math equivalence, between groups);
    the largest group wins, ties go to the group seen first. Missing answers (None) do not vote."""
    groups: list[list[int]] = []
    keys: list[str] = []
    for i, raw in enumerate(answers):
        key = normalize_answer(raw)
        if key is None:
            continue
        for g, k in enumerate(keys):
            if key == k or (same is not None and _safe_same(same, answers[groups[g][0]], raw)):
                groups[g].append(i)
                break
        else:
            groups.append([i])
            keys.append(key)
    if not groups:
        return Vote(None, None, 0, 0, [])
    best = max(range(len(groups)), key=lambda g: (len(groups[g]), -g))
    first = groups[best][0]
    return Vote(first, answers[first], len(groups[best]), sum(len(g) for g in groups), groups)


def _safe_same(same: Callable[[str, str], bool], a: str, b: str) -> bool:
    try:
        return bool(same(a, b))
    except Exception:  # noqa: BLE001 - an equivalence checker that fails means "not shown equal"
        return False


def answer_equivalence(task: Task) -> Callable[[str, str], bool] | None:
    """Extra equivalence for voting: math-verify for math tasks (``1/2`` = ``0.5``), none otherwise."""
    name = str(task.meta.get("verifier") or task.domain)
    if name != "math":
        return None
    return lambda a, b: equivalent(a, b)[0]
