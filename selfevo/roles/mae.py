"""MAE roles (Multi-Agent Evolve, Chen et al. 2025, arXiv 2510.23595, Sec. 3): Proposer, Solver and Judge played by
one backbone, in any domain (no verifier, no reference answer: the Judge's score is the only signal).

* ``mae.proposer`` (reads ``reference``): writes ONE new question in ``<question>``, inspired by a ``reference``
  item when given (MAE "with reference"), else from scratch (MAE "no reference"). Parses into a new
  :class:`~selfevo.types.Task` (``id="gen-<hash of its question>"``, the reference's domain or ``"general"``,
  no reference answer).
* ``mae.solver``: reasons, then the final answer in ``<answer>``; the parsed value is the whole answer text (what
  the Judge is shown).
* ``mae.judge`` (reads ``subject``, ``solution``): scores the task's question (``subject="question"``: clarity,
  solvability, difficulty) or a Solver's answer to it (``subject="answer"``, the answer in ``solution``) from 1
  to 10 in ``<score>`` (:func:`~selfevo.roles.parsers.scale_score`). The Judge never sees a reference answer.

Prompts: the paper's prompts are in its appendix and the released code's templates are long; these
(``templates/mae_<role>[_<variant>].txt``) are this toolkit's own, short and explicit about the output format with a
tiny example, for small instruct models. Parse failures start with ``"format: "`` (a tag missing or empty; for the
Judge, a score that is not a number or a fraction). :data:`FORMAT_TAGS` gives each turn role's tags for
:func:`selfevo.rewards.formulas.soft_format_reward` (MAE's format reward: 1 for exactly one tag pair, 0.5 for more,
0 otherwise).
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import ClassVar

from selfevo.roles.base import (Context, Parsed, Role, RoleError, chat, fill, load_template, register_role,
                                strip_special_tokens)
from selfevo.roles.parsers import last_tag, scale_score
from selfevo.types import Task

FORMAT_TAGS: dict[str, dict[str, int]] = {"proposer": {"question": 1}, "solver": {"answer": 1},
                                          "judge": {"score": 1}}


def _clean(text: str | None) -> str:
    return strip_special_tokens(text or "").strip()


@register_role
@dataclass
class MAEProposer(Role):
    """Writes a new question in ``<question>``, from a ``reference`` item or (None) from scratch."""

    name: ClassVar[str] = "mae.proposer"
    kind: ClassVar[str] = "challenger"
    reads: ClassVar[tuple[str, ...]] = ("reference",)

    def render(self, task: Task, ctx: Context) -> list[dict[str, str]]:
        if ctx.reference is None:
            return chat(load_template("mae_proposer_scratch"))
        return chat(fill(load_template("mae_proposer_reference"), question=_clean(ctx.reference.question)))

    def read(self, text: str, ctx: Context) -> Parsed:
        question = last_tag(strip_special_tokens(text or ""), "question")
        if not question:
            return Parsed.failure("format: no <question>...</question> (or an empty one)")
        key = hashlib.blake2b(question.encode("utf-8"), digest_size=6).hexdigest()
        domain = ctx.reference.domain if ctx.reference is not None else "general"
        return Parsed.success(Task(f"gen-{key}", domain, question, meta={"verifier": domain}))


@register_role
@dataclass
class MAESolver(Role):
    """Answers the task, the final answer in ``<answer>``; the value is the whole answer text."""

    name: ClassVar[str] = "mae.solver"
    kind: ClassVar[str] = "solver"
    reads: ClassVar[tuple[str, ...]] = ()

    def render(self, task: Task, ctx: Context) -> list[dict[str, str]]:
        return chat(fill(load_template("mae_solver"), question=_clean(task.question)))

    def read(self, text: str, ctx: Context) -> Parsed:
        cleaned = strip_special_tokens(text or "").strip()
        if not last_tag(cleaned, "answer"):
            return Parsed.failure("format: no <answer>...</answer> (or an empty one)")
        return Parsed.success(cleaned)


@register_role
@dataclass
class MAEJudge(Role):
    """Scores the task's question (``subject="question"``, the default) or the answer in ``solution``
    (``subject="answer"``) from 1 to 10; the value is the number in the last ``<score>`` tag (``8.5``; ``7/10``
    reads as 7: :func:`~selfevo.roles.parsers.scale_score`)."""

    name: ClassVar[str] = "mae.judge"
    kind: ClassVar[str] = "critic"
    reads: ClassVar[tuple[str, ...]] = ("subject", "solution")

    def render(self, task: Task, ctx: Context) -> list[dict[str, str]]:
        subject = ctx.subject or "question"
        if subject not in ("question", "answer"):
            raise RoleError(f"role '{self.name}': subject must be 'question' or 'answer', got {subject!r}")
        return chat(fill(load_template(f"mae_judge_{subject}"), question=_clean(task.question),
                         solution=_clean(ctx.solution) or "(empty answer)"))

    def read(self, text: str, ctx: Context) -> Parsed:
        return scale_score(strip_special_tokens(text or ""))


__all__ = ["FORMAT_TAGS", "MAEJudge", "MAEProposer", "MAESolver"]
