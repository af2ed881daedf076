"""Minimal roles of every kind the kit knows, for new methods and examples: a solver that can read a plan and other
agents' answers, a challenger that writes a new question with its answer, a planner, a critic (1-10), and a central
selector over a slate of candidates. The method-specific roles (SAGE's, MAESTRO's) build on the same contract.

Parsers are strict: a missing tag, an out-of-range score or choice is a :class:`Parsed` failure that says why,
never a default value.
"""
from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import ClassVar

from selfevo.roles.base import Context, Parsed, Role, chat, register_role, strip_special_tokens
from selfevo.roles.parsers import last_tag
from selfevo.tasks import format_prompt
from selfevo.types import Task


def _question(task: Task) -> str:
    return format_prompt(task)


@register_role
@dataclass
class Solver(Role):
    """Answers the task; with ``plan`` it is asked to follow the plan; with ``history`` (other agents' answers,
    as :class:`~selfevo.roles.base.HistoryItem` s) it reads them first and gives an updated answer."""

    name: ClassVar[str] = "generic.solver"
    kind: ClassVar[str] = "solver"
    reads: ClassVar[tuple[str, ...]] = ("history", "plan")

    def render(self, task: Task, ctx: Context) -> list[dict[str, str]]:
        parts = [_question(task)]
        if ctx.plan:
            parts.append(f"Follow this plan:\n{strip_special_tokens(ctx.plan).strip()}")
        if ctx.history:
            answers = "\n\n".join(f"Answer {i}: {strip_special_tokens(h.text).strip()}"
                                  for i, h in enumerate(ctx.history, 1))
            parts.append(f"Other agents answered:\n\n{answers}\n\nRead their answers critically, then give your "
                         f"own updated answer.")
        return chat("\n\n".join(parts))

    def read(self, text: str, ctx: Context) -> Parsed:
        cleaned = strip_special_tokens(text or "").strip()
        return Parsed.success(cleaned) if cleaned else Parsed.failure("empty answer")


CHALLENGE = ("Here is an example problem:\n\n{question}\n\nWrite ONE new problem of the same kind and similar "
             "difficulty, different from the example, and its final answer. Use exactly this format:\n"
             "<question>the new problem</question>\n<answer>its final answer</answer>")


@register_role
@dataclass
class Challenger(Role):
    """Writes a new question (and its answer) from a ``reference`` item; parses into a new :class:`Task` of the
    reference's domain and verifier, or a failure when a tag is missing or empty."""

    name: ClassVar[str] = "generic.challenger"
    kind: ClassVar[str] = "challenger"
    reads: ClassVar[tuple[str, ...]] = ("reference",)

    def render(self, task: Task, ctx: Context) -> list[dict[str, str]]:
        ref = ctx.reference or task
        return chat(CHALLENGE.format(question=strip_special_tokens(ref.question).strip()))

    def read(self, text: str, ctx: Context) -> Parsed:
        question, answer = last_tag(text, "question"), last_tag(text, "answer")
        if not question:
            return Parsed.failure("no <question>...</question> (or an empty one)")
        if not answer:
            return Parsed.failure("no <answer>...</answer> (or an empty one)")
        ref = ctx.reference
        meta = {"verifier": ref.meta.get("verifier", ref.domain)} if ref is not None else {}
        digest = hashlib.blake2b(question.encode(), digest_size=6).hexdigest()
        return Parsed.success(Task(f"gen-{digest}", ref.domain if ref else "math", question, answer, meta=meta))


@register_role
@dataclass
class Planner(Role):
    """Writes a step-by-step plan for the task (not the answer) in ``<plan>`` tags."""

    name: ClassVar[str] = "generic.planner"
    kind: ClassVar[str] = "planner"
    reads: ClassVar[tuple[str, ...]] = ()

    def render(self, task: Task, ctx: Context) -> list[dict[str, str]]:
        return chat(f"{task.question.strip()}\n\nDo not solve the problem. Write a short step-by-step plan for "
                    f"solving it inside <plan></plan> tags.")

    def read(self, text: str, ctx: Context) -> Parsed:
        plan = last_tag(text, "plan")
        return Parsed.success(plan) if plan else Parsed.failure("no <plan>...</plan> (or an empty one)")


@register_role
@dataclass
class Critic(Role):
    """Scores the task's question (``subject="question"``) or a ``plan`` for it (``subject="plan"``) from 1 to 10 in
    a ``<score>`` tag; the value is the integer score."""

    name: ClassVar[str] = "generic.critic"
    kind: ClassVar[str] = "critic"
    reads: ClassVar[tuple[str, ...]] = ("subject", "plan")

    def render(self, task: Task, ctx: Context) -> list[dict[str, str]]:
        if ctx.subject == "plan":
            what = f"Problem:\n{task.question.strip()}\n\nPlan:\n{strip_special_tokens(ctx.plan or '').strip()}\n\n" \
                   f"How good is this plan for solving the problem?"
        elif ctx.subject in (None, "question"):
            what = f"Problem:\n{task.question.strip()}\n\nHow clear, well-posed and solvable is this problem?"
        else:
            raise ValueError(f"critic subject must be 'question' or 'plan', got {ctx.subject!r}")
        return chat(f"{what} Give a score from 1 (worst) to 10 (best) as <score>n</score>.")

    def read(self, text: str, ctx: Context) -> Parsed:
        body = last_tag(text, "score")
        if body is None:
            return Parsed.failure("no <score>...</score> tag")
        if not re.fullmatch(r"\d+", body) or not 1 <= int(body) <= 10:
            return Parsed.failure(f"the last <score> tag holds {body!r}, not an integer 1-10")
        return Parsed.success(int(body))


SELECT = ("{question}\n\nCandidate solutions:\n\n{slate}\n\nChoose the candidate most likely to be correct. Answer "
          "in this format:\nReason: <one or two sentences>\nChosen: <candidate number>\nFinal: <its final answer>")
_CHOSEN = re.compile(r"Chosen:\s*(?:candidate\s*)?#?(\d+)", re.IGNORECASE)


@register_role
@dataclass
class Selector(Role):
    """A central agent: reads a slate of ``candidates`` (shown numbered 1..K) and picks one. The parsed value is
    the 0-based index; a missing or out-of-range choice is a failure (never read as candidate 1)."""

    name: ClassVar[str] = "generic.selector"
    kind: ClassVar[str] = "selector"
    reads: ClassVar[tuple[str, ...]] = ("candidates",)

    def render(self, task: Task, ctx: Context) -> list[dict[str, str]]:
        slate = "\n\n".join(f"Candidate {k}:\n{strip_special_tokens(c).strip()}"
                            for k, c in enumerate(ctx.candidates, 1))
        return chat(SELECT.format(question=_question(task), slate=slate))

    def read(self, text: str, ctx: Context) -> Parsed:
        found = _CHOSEN.findall(text or "")
        if not found:
            return Parsed.failure("no 'Chosen: k' line")
        k = int(found[-1])
        if not 1 <= k <= len(ctx.candidates):
            return Parsed.failure(f"chose candidate {k}, but the slate has {len(ctx.candidates)}")
        return Parsed.success(k - 1)
