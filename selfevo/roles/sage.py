"""SAGE roles (``/work/shared/papers/003_*``, Sec. 4, Algorithm 1): Challenger, Planner, Solver, Critic on one
backbone, for math and code items.

* ``sage.challenger`` (reads ``reference``): from a reference item ``(q_ref, v_ref)`` writes a new question with its
  verifier (Eq. 3). Math: ``<question>`` + ``<answer>``; code: ``<question>`` + ``<tests>`` (assert statements
  calling one function) + ``<solution>`` (a reference solution; ```` ```python ```` fences inside tags are
  stripped). Parses into a new :class:`~selfevo.types.Task` (``id="gen-<hash of its question>"``). A code item's
  question is the model's statement, then "Write a Python function named `f`." when the statement does not name
  ``f``, then the tests the way MBPP prompts show them ("Your code should pass these tests:" + a python block);
  ``meta["statement"]`` keeps the bare statement (shown when the item is later a reference).
* ``sage.planner``: a step-by-step plan in ``<plan>`` (Sec. 4.3).
* ``sage.solver`` (reads ``plan``): the answer, following the plan when one is given (Eq. 9). Math: reasoning then
  ``<answer>\\boxed{...}</answer>``; code: ``<answer>`` around one ```` ```python ```` block. The parsed value is the
  whole text; correctness is :func:`selfevo.verifiers.verify` (last ``\\boxed{}`` / last python block).
* ``sage.critic`` (reads ``subject``, ``plan``): scores a question (``subject="question"``, the default: clarity,
  well-formedness, relevance, solvability; it sees the question only, as Algorithm 1 line 7 ``pi_cr(q_t)``) or a
  plan for the task (``subject="plan"``) from 1 to 10 in ``<score>`` (Sec. 4.5); ``temperature`` defaults to 0.1
  (the paper's critic is "deterministic", Eq. 12). Normalising the score (Eq. 2) is the recipe's job.

Prompts: the paper's prompts (App. C) are images only; these templates (``templates/sage_<role>_<domain>.txt``,
the critic's ``sage_critic_<subject>_<domain>.txt``) are this toolkit's own, short and explicit about the output
format with a tiny example, for small instruct models. Every role shows ``task.question`` itself, not
:func:`selfevo.tasks.format_prompt`: the benchmark prompt appends "...put your final answer within \\boxed{}" /
"Return your complete solution in a single ```python code block", which would repeat or contradict the role's own
``<answer>`` instruction (the question text already carries everything else: MBPP's tests, HumanEval's stub).

Parse failures are :class:`~selfevo.roles.base.Parsed` failures whose error starts with a reason key the recipe can
count: ``"format: ..."`` (a tag missing or empty, an empty solver answer, a score that is not a number or a
fraction; the score's range is Norm's, Eq. 2). A Challenger answer with every tag parses into
an item even when its verifier is invalid (a math answer math-verify cannot read, code tests that do not parse,
hold no assert or call no function the solution defines): the Critic still scores it and admission rejects it
(:func:`selfevo.verifiers.validate.check_item`), so it gets SAGE's Eq. 6 with the Critic's real score.
:data:`FORMAT_TAGS` / :func:`format_tags` give each role's tags for
:func:`selfevo.rewards.formulas.soft_format_reward`.
"""
from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import ClassVar

from selfevo.roles.base import (Context, Parsed, Role, RoleError, chat, drop_paragraph, fill, load_template,
                                register_role, strip_special_tokens)
from selfevo.roles.parsers import last_tag, scale_score
from selfevo.tasks.prompts import fenced
from selfevo.types import Task
from selfevo.verifiers.math import reference_answer
from selfevo.verifiers.validate import find_entry_point, reference_solution, strip_fences

DOMAINS = ("math", "code")
MBPP_TESTS_LEAD = "Your code should pass these tests:"  # as selfevo.tasks.code_sets.mbpp_question writes it

FORMAT_TAGS: dict[tuple[str, str], dict[str, int]] = {
    ("challenger", "math"): {"question": 1, "answer": 1},
    ("challenger", "code"): {"question": 1, "tests": 1, "solution": 1},
    ("planner", "math"): {"plan": 1},
    ("planner", "code"): {"plan": 1},
    ("solver", "math"): {"answer": 1},
    ("solver", "code"): {"answer": 1},
    ("critic", "math"): {"score": 1},
    ("critic", "code"): {"score": 1},
}


def format_tags(kind: str, domain: str) -> dict[str, int]:
    """The ``tags`` argument of ``soft_format_reward`` for a role kind's output in a domain ("math" or "code")."""
    try:
        return dict(FORMAT_TAGS[(kind, domain)])
    except KeyError:
        kinds = sorted({k for k, _ in FORMAT_TAGS})
        raise RoleError(f"no SAGE format tags for kind {kind!r} in domain {domain!r} (kinds: {', '.join(kinds)}; "
                        f"domains: {', '.join(DOMAINS)})") from None


def domain_of(task: Task) -> str:
    """"math" or "code" for a task (its verifier name, else its domain); anything else is a :class:`RoleError`."""
    name = str(task.meta.get("verifier") or task.domain)
    if name not in DOMAINS:
        raise RoleError(f"SAGE roles handle math and code tasks, not {name!r} (task {task.id})")
    return name


def _clean(text: str | None) -> str:
    return strip_special_tokens(text or "").strip()


def statement(task: Task) -> str:
    """A code item's problem without the tests MBPP-style questions append (``meta["statement"]`` if set)."""
    text = str(task.meta.get("statement") or task.question)
    return text.split(f"\n\n{MBPP_TESTS_LEAD}", 1)[0].strip()


def code_question(text: str, tests: str, entry_point: str) -> str:
    """The solver-facing question of a generated code item: the statement, the function name when the statement
    does not say it, then the tests as MBPP prompts show them."""
    text = text.strip()
    if not re.search(rf"(?<![\w.]){re.escape(entry_point)}(?!\w)", text):
        text += f"\n\nWrite a Python function named `{entry_point}`."
    return f"{text}\n\n{MBPP_TESTS_LEAD}\n\n" + fenced(tests)


def _gen_id(question: str) -> str:
    return "gen-" + hashlib.blake2b(question.encode("utf-8"), digest_size=6).hexdigest()


@register_role
@dataclass
class SageChallenger(Role):
    """Writes a new question and its verifier from a ``reference`` item (the task itself when none is given);
    parses into a new :class:`Task` of the reference's domain (the module docstring says how)."""

    name: ClassVar[str] = "sage.challenger"
    kind: ClassVar[str] = "challenger"
    reads: ClassVar[tuple[str, ...]] = ("reference",)

    def render(self, task: Task, ctx: Context) -> list[dict[str, str]]:
        ref = ctx.reference or task
        domain = domain_of(ref)
        template = load_template(f"sage_challenger_{domain}")
        if domain == "math":
            return chat(fill(template, question=_clean(ref.question),
                             answer=_clean(reference_answer(ref.reference or "")) or "(not given)"))
        return chat(fill(template, question=_clean(statement(ref)), tests=_clean(ref.tests) or "(not given)",
                         solution=strip_special_tokens(reference_solution(ref)).strip("\n").rstrip()
                         or "(not given)"))

    def read(self, text: str, ctx: Context) -> Parsed:
        if ctx.reference is None:
            raise RoleError(f"role '{self.name}' parses with ctx.reference (its domain decides the format)")
        text = strip_special_tokens(text or "")
        domain = domain_of(ctx.reference)
        question = last_tag(text, "question")
        if not question:
            return Parsed.failure("format: no <question>...</question> (or an empty one)")
        return self._read_math(text, question) if domain == "math" else self._read_code(text, question)

    @staticmethod
    def _read_math(text: str, question: str) -> Parsed:
        answer = last_tag(text, "answer")
        if not answer:
            return Parsed.failure("format: no <answer>...</answer> (or an empty one)")
        return Parsed.success(Task(_gen_id(question), "math", question, answer, meta={"verifier": "math"}))

    @staticmethod
    def _read_code(text: str, question: str) -> Parsed:
        bodies = {}
        for tag in ("tests", "solution"):
            body = last_tag(text, tag)
            body = strip_fences(body) if body else ""
            if not body.strip():
                return Parsed.failure(f"format: no <{tag}>...</{tag}> (or an empty one)")
            bodies[tag] = body
        tests, solution = bodies["tests"], bodies["solution"]
        entry_point, _ = find_entry_point(tests, solution)  # "" when the tests are invalid: admission rejects them
        question = question.split(MBPP_TESTS_LEAD, 1)[0].strip()  # a statement that copied the tests: shown once
        if not question:
            return Parsed.failure("format: the <question> holds only the tests")
        full = code_question(question, tests, entry_point)
        return Parsed.success(Task(_gen_id(full), "code", full, tests=tests + "\n", entry_point=entry_point,
                                   meta={"verifier": "code", "reference_solution": solution + "\n",
                                         "statement": question}))


@register_role
@dataclass
class SagePlanner(Role):
    """Writes a step-by-step plan for the task (not the answer) in ``<plan>`` tags; the value is the plan text."""

    name: ClassVar[str] = "sage.planner"
    kind: ClassVar[str] = "planner"
    reads: ClassVar[tuple[str, ...]] = ()

    def render(self, task: Task, ctx: Context) -> list[dict[str, str]]:
        return chat(fill(load_template(f"sage_planner_{domain_of(task)}"), question=_clean(task.question)))

    def read(self, text: str, ctx: Context) -> Parsed:
        plan = last_tag(strip_special_tokens(text or ""), "plan")
        return Parsed.success(plan) if plan else Parsed.failure("format: no <plan>...</plan> (or an empty one)")


@register_role
@dataclass
class SageSolver(Role):
    """Answers the task, following ``plan`` when given (a plan under the Critic's gate is simply not passed);
    the value is the whole answer text, for :func:`selfevo.verifiers.verify`."""

    name: ClassVar[str] = "sage.solver"
    kind: ClassVar[str] = "solver"
    reads: ClassVar[tuple[str, ...]] = ("plan",)

    def render(self, task: Task, ctx: Context) -> list[dict[str, str]]:
        template = load_template(f"sage_solver_{domain_of(task)}")
        plan = _clean(ctx.plan)
        if not plan:
            template = drop_paragraph(template, "plan")
        return chat(fill(template, question=_clean(task.question), plan=plan))

    def read(self, text: str, ctx: Context) -> Parsed:
        cleaned = strip_special_tokens(text or "").strip()
        return Parsed.success(cleaned) if cleaned else Parsed.failure("format: empty answer")


EMPTY_PLAN = "(empty plan)"  # shown to the critic when the planner wrote nothing (an unparsed plan is still judged)


@register_role
@dataclass
class SageCritic(Role):
    """Scores the task's question (``subject="question"`` or None) or a ``plan`` for it (``subject="plan"``) from 1
    to 10; the value is the number in the last ``<score>`` tag (``8.5``; ``7/10`` reads as 7: ``scale_score``). An
    empty or missing plan is shown as ``(empty plan)``, so a run never stops on a planner that wrote nothing."""

    temperature: float | None = 0.1

    name: ClassVar[str] = "sage.critic"
    kind: ClassVar[str] = "critic"
    reads: ClassVar[tuple[str, ...]] = ("subject", "plan")

    def render(self, task: Task, ctx: Context) -> list[dict[str, str]]:
        subject = ctx.subject or "question"
        if subject not in ("question", "plan"):
            raise RoleError(f"role '{self.name}': subject must be 'question' or 'plan', got {subject!r}")
        template = load_template(f"sage_critic_{subject}_{domain_of(task)}")
        return chat(fill(template, question=_clean(task.question), plan=_clean(ctx.plan) or EMPTY_PLAN))

    def read(self, text: str, ctx: Context) -> Parsed:
        return scale_score(strip_special_tokens(text or ""))


def sage_roles(**options) -> dict[str, Role]:
    """The four SAGE roles by kind (``options`` maps a kind to that role's keyword options, e.g.
    ``critic={"prefix": "<score>"}``)."""
    classes = {"challenger": SageChallenger, "planner": SagePlanner, "solver": SageSolver, "critic": SageCritic}
    unknown = sorted(set(options) - set(classes))
    if unknown:
        raise RoleError(f"sage_roles: unknown kind(s) {unknown}; kinds: {', '.join(classes)}")
    return {kind: cls(**options.get(kind, {})) for kind, cls in classes.items()}


__all__ = ["DOMAINS", "FORMAT_TAGS", "SageChallenger", "SageCritic", "SagePlanner", "SageSolver", "code_question",
           "domain_of", "format_tags", "sage_roles", "statement"]
