"""CoMAS roles (arXiv 2510.08529, ``/work/shared/papers/001_*``): Solver, Evaluator, Scorer, and the two ablations.

Interaction patterns (Sec. 3.1): solution ``s_i = u_k(q, h_q)`` (Eq. 3), evaluation ``e_ij = u_k(q, h_q, s_i)``
(Eq. 4), scoring ``tau_ij = u_k(q, s_i, e_ij)`` (Eq. 5); the history ``h_q`` is cut to the last κ rounds.
Ablations (Sec. 4.3.1, App. J): *without evaluation* (:class:`CoMASJudge`) and *without scoring*
(:class:`CoMASVerdictEvaluator`; its rewards are :func:`selfevo.rewards.formulas.support_ratio` and
:func:`~selfevo.rewards.formulas.verdict_agreement`).

Templates (files in ``selfevo/roles/templates``), two sets:

* ``template_set="paper"`` (default): App. B. The paper prints only the science templates ("they may vary
  slightly across different task domains"); the math and code variants take the paper's science templates and
  swap in the released code's domain sentences (solver tail, evaluator instruction, scorer example line).
* ``template_set="released"``: the released code's prompts as quoted in research/comas_marti.md Sec. 2.4.

Where the two sets differ, and what was ambiguous:

1. Evaluator: the paper's template shows the discussion (``{discussion}``, as Eq. 4 says); the released one does
   not. ``CoMASEvaluator(see_history=...)`` defaults to the set's behaviour; ``see_history=False`` on the paper set
   drops the discussion paragraph; ``see_history=True`` on the released set is an error (that template has no slot).
2. Scorer: the paper says "Keep your decision concise", the released code "Keep your scoring concise". The paper's
   PDF layout puts "For example:" and the example sentence on one line after the format paragraph; the released
   code has a blank line, "For example:" alone, then the sentence. In both sets ``<score>1</score>`` is on its own
   line (the PDF does not show where that line breaks).
3. Solver: identical in both sets. The code tail's exact line breaks around the ```python example are not given
   verbatim in the notes; the example block is placed on its own lines.
4. Neither source shows how ``{discussion}`` is rendered in the paper's sequential protocol; both sets use the
   released rendering (``=== Discussion i ===`` / ``Solution:`` / ``Evaluation:``, scores never shown, round 0
   = ``(Empty discussion)``), with ``Evaluation j:`` numbering when a round has n > 1 evaluations.
5. A "round" for κ is one solution plus its evaluations (paper Sec. 3.1). The released protocol instead passes a
   random sample of ``num_references`` discussions of the previous round as ``history``; with κ >= that number
   the role renders all of them.
6. The ablation prompts are not printed in the paper. :class:`CoMASJudge` (w/o evaluation) adapts the scoring prompt to
   judge the solution alone on the same 1-3 scale (App. J shows such a judge ending in ``<score>1</score>``).
   :class:`CoMASVerdictEvaluator` (w/o scoring) appends a verdict request to the evaluation prompt; App. J shows
   evaluations ending in ``<judgment>correct</judgment>``, so the verdict is ``correct`` / ``incorrect`` in a
   ``<judgment>`` tag. Both ablation templates are used with either template set.

Sanitising (``sanitize=True``, default): every text inserted into a prompt (question, history, solution,
evaluation) and every parsed text has chat special tokens removed (:func:`~selfevo.roles.base.strip_special_tokens`),
fixing the released code's special-token leakage; ``sanitize=False`` inserts texts as given (only stripped of
surrounding whitespace, as the released code does).
"""
from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from typing import Any, ClassVar

from selfevo.roles.base import (
    Context, Parsed, Role, chat, drop_paragraph, fill, load_template, register_role, render_discussion,
    strip_special_tokens,
)
from selfevo.roles.parsers import parse_score
from selfevo.types import Task

__all__ = [
    "DOMAINS", "DOMAIN_ALIASES", "TEMPLATE_SETS", "comas_domain",
    "CoMASSolver", "CoMASEvaluator", "CoMASScorer", "CoMASJudge", "CoMASVerdictEvaluator", "comas_roles",
    "parse_score_result", "parse_verdict", "parse_verdict_result",
]

DOMAINS = ("math", "code", "science")
DOMAIN_ALIASES = {"coding": "code", "numeric": "science"}  # the released data says "coding"
TEMPLATE_SETS = ("paper", "released")


def comas_domain(domain: str) -> str:
    """The CoMAS template domain for a task domain: math, code or science (``coding``→code, ``numeric``→science)."""
    name = DOMAIN_ALIASES.get(domain, domain)
    if name not in DOMAINS:
        raise ValueError(f"CoMAS has templates for {', '.join(DOMAINS)} (and aliases {', '.join(DOMAIN_ALIASES)}), "
                         f"not {domain!r}; pass domain=... to a role to force one")
    return name


# --------------------------------------------------------------------------------------------------------------
# parsers
# --------------------------------------------------------------------------------------------------------------

def parse_score_result(text: str | None) -> Parsed:
    """:func:`selfevo.roles.parsers.parse_score` as a :class:`Parsed`: the score 1/2/3, or a failure saying why."""
    score = parse_score(text)
    if score is not None:
        return Parsed.success(score)
    if not text or "<score>" not in text or "</score>" not in text:
        return Parsed.failure("no <score>...</score> tag")
    return Parsed.failure("the last <score>...</score> tag does not hold 1, 2 or 3")


# a <judgment> opener, then the shortest body without a further opener, then the closer (as parse_score)
_JUDGMENT_TAG = re.compile(r"<judgment>((?:(?!<judgment>).)*?)</judgment>", re.DOTALL)
_VERDICTS = {"correct": True, "incorrect": False}


def parse_verdict(text: str | None) -> bool | None:
    """The w/o-scoring verdict: the LAST ``<judgment>...</judgment>`` tag, ``correct`` → True (the evaluation
    supports the solution), ``incorrect`` → False; anything else None.

    Strict in the way of :func:`~selfevo.roles.parsers.parse_score`: the last tag decides, an echoed instruction as the
    last tag fails, tag names are case-sensitive; the body may differ in case and surrounding whitespace
    (``<judgment> Correct </judgment>`` → True). No fallback to the words "correct"/"incorrect" outside a tag.
    """
    tags = _JUDGMENT_TAG.findall(text or "")
    if not tags:
        return None
    return _VERDICTS.get(tags[-1].strip().lower())


def parse_verdict_result(text: str | None) -> Parsed:
    """:func:`parse_verdict` as a :class:`Parsed` (value True/False), or a failure saying why."""
    verdict = parse_verdict(text)
    if verdict is not None:
        return Parsed.success(verdict)
    if not text or not _JUDGMENT_TAG.search(text):
        return Parsed.failure("no <judgment>...</judgment> tag")
    return Parsed.failure("the last <judgment>...</judgment> tag is neither 'correct' nor 'incorrect'")


# --------------------------------------------------------------------------------------------------------------
# roles
# --------------------------------------------------------------------------------------------------------------

@dataclass
class _CoMASRole(Role):
    """Options shared by every CoMAS role.

    ``template_set``: "paper" or "released". ``sanitize``: strip chat special tokens from inserted and parsed text.
    ``special_tokens``: extra tokens to strip (e.g. a tokenizer's ``all_special_tokens``). ``domain``: use this
    domain's templates for every task instead of ``task.domain``. ``system_prompt``: an optional system message
    (CoMAS sends a single user message).
    """

    template_set: str = "paper"
    sanitize: bool = True
    special_tokens: tuple[str, ...] = ()
    domain: str | None = None
    system_prompt: str | None = None

    name: ClassVar[str] = "comas.role"

    def __post_init__(self) -> None:
        if self.template_set not in TEMPLATE_SETS:
            raise ValueError(f"template_set must be one of {TEMPLATE_SETS}, got {self.template_set!r}")
        if self.domain is not None:
            self.domain = comas_domain(self.domain)
        self.special_tokens = tuple(self.special_tokens)

    def clean(self, text: str) -> str:
        """Text as inserted into a prompt: special tokens removed (if ``sanitize``), surrounding whitespace stripped."""
        text = text or ""
        return (strip_special_tokens(text, self.special_tokens) if self.sanitize else text).strip()

    def template(self, role: str, task: Task) -> str:
        """The ``<template_set>_<role>_<domain>`` template for this task."""
        return load_template(f"{self.template_set}_{role}_{self.domain or comas_domain(task.domain)}")

    def parse_text(self, text: str, what: str) -> Parsed:
        """A free-text output (solution, evaluation): its cleaned text, or a failure if nothing is left."""
        cleaned = self.clean(text)
        return Parsed.success(cleaned) if cleaned else Parsed.failure(f"empty {what}")


@register_role
@dataclass
class CoMASSolver(_CoMASRole):
    """Solution step (Eq. 3): sees the question and the last ``kappa`` rounds of the discussion history."""

    kappa: int | None = 2
    name: ClassVar[str] = "comas.solver"
    kind: ClassVar[str] = "solver"
    reads: ClassVar[tuple[str, ...]] = ("history",)

    def render(self, task: Task, ctx: Context) -> list[dict[str, str]]:
        discussion = render_discussion(ctx.history, self.kappa, self.clean)
        text = fill(self.template("solver", task), problem=self.clean(task.question), discussion=discussion)
        return chat(text, self.system_prompt)

    def read(self, text: str, ctx: Context) -> Parsed:
        """The solution text (sanitised), or a failure if it is empty."""
        return self.parse_text(text, "solution")


@register_role
@dataclass
class CoMASEvaluator(_CoMASRole):
    """Evaluation step (Eq. 4): sees the question, the solution under evaluation and (``see_history``) the last
    ``kappa`` rounds of history. ``see_history=None`` follows the template set: paper True, released False."""

    kappa: int | None = 2
    see_history: bool | None = None
    name: ClassVar[str] = "comas.evaluator"
    kind: ClassVar[str] = "evaluator"
    reads: ClassVar[tuple[str, ...]] = ("solution", "history")

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.see_history and self.template_set == "released":
            raise ValueError("the released evaluator template has no discussion slot; use template_set='paper' "
                             "to let evaluators see the history")

    @property
    def shows_history(self) -> bool:
        return self.template_set == "paper" if self.see_history is None else self.see_history

    def prompt_template(self, task: Task) -> str:
        template = self.template("evaluator", task)
        return template if self.shows_history else drop_paragraph(template, "discussion")

    def render(self, task: Task, ctx: Context) -> list[dict[str, str]]:
        discussion = render_discussion(ctx.history, self.kappa, self.clean) if self.shows_history else ""
        text = fill(self.prompt_template(task), problem=self.clean(task.question), discussion=discussion,
                    solution=self.clean(ctx.solution or ""))
        return chat(text, self.system_prompt)

    def read(self, text: str, ctx: Context) -> Parsed:
        """The evaluation text (sanitised), or a failure if it is empty."""
        return self.parse_text(text, "evaluation")


@register_role
@dataclass
class CoMASScorer(_CoMASRole):
    """Scoring step (Eq. 5): sees ONLY the question, the solution and the evaluation (no discussion history)."""

    name: ClassVar[str] = "comas.scorer"
    kind: ClassVar[str] = "scorer"
    reads: ClassVar[tuple[str, ...]] = ("solution", "evaluation")

    def render(self, task: Task, ctx: Context) -> list[dict[str, str]]:
        text = fill(self.template("scorer", task), problem=self.clean(task.question),
                    solution=self.clean(ctx.solution or ""), evaluation=self.clean(ctx.evaluation or ""))
        return chat(text, self.system_prompt)

    def read(self, text: str, ctx: Context) -> Parsed:
        """Eq. 6, strict: the score from the last ``<score>k</score>`` with k in {1, 2, 3}, else a failure."""
        return parse_score_result(text)


@register_role
@dataclass
class CoMASJudge(_CoMASRole):
    """Ablation *without evaluation* (Sec. 4.3.1, App. J): an agent scores the solution directly from the question
    and the solution alone (no evaluation, no history) on the 1-3 scale. Reward use as in the full method
    (solution ``(tau-1)/2``, judge 0 or -1 for format). ``template_set`` does not change its template."""

    name: ClassVar[str] = "comas.judge"
    kind: ClassVar[str] = "scorer"
    reads: ClassVar[tuple[str, ...]] = ("solution",)

    def render(self, task: Task, ctx: Context) -> list[dict[str, str]]:
        template = load_template(f"ablation_judge_{self.domain or comas_domain(task.domain)}")
        text = fill(template, problem=self.clean(task.question), solution=self.clean(ctx.solution or ""))
        return chat(text, self.system_prompt)

    def read(self, text: str, ctx: Context) -> Parsed:
        """The score 1/2/3 from the last ``<score>`` tag, exactly as :meth:`CoMASScorer.parse`."""
        return parse_score_result(text)


@register_role
@dataclass
class CoMASVerdictEvaluator(CoMASEvaluator):
    """Ablation *without scoring* (Sec. 4.3.1, App. J): the evaluation prompt plus a request to end with a verdict
    ``<judgment>correct</judgment>`` or ``<judgment>incorrect</judgment>``. The parsed verdict (True = the
    evaluation supports the solution) feeds :func:`support_ratio` (solution reward) and :func:`verdict_agreement`
    (evaluation reward); there is no scoring step."""

    name: ClassVar[str] = "comas.verdict_evaluator"

    def prompt_template(self, task: Task) -> str:
        return super().prompt_template(task) + "\n\n" + load_template("ablation_verdict")

    def read(self, text: str, ctx: Context) -> Parsed:
        """The verdict (True/False) from the last ``<judgment>`` tag, else a failure."""
        return parse_verdict_result(text)


def comas_roles(classes: dict[str, type[_CoMASRole]], **options: Any) -> dict[str, _CoMASRole]:
    """One role of each class, keyed as ``classes`` (a CoMAS variant's labels, e.g. solver/evaluator/scorer: the
    recipe's ``VARIANTS`` table). Each option goes to every role that has a field of that name (``kappa`` to solver
    and evaluator, ``see_history`` to the evaluator, ``template_set``/``sanitize``/... to all); an option no role
    has is an error."""
    known = {f.name for cls in classes.values() for f in dataclasses.fields(cls)}
    if unknown := sorted(set(options) - known):
        raise TypeError(f"unknown option(s) for the CoMAS roles {', '.join(classes)}: {', '.join(unknown)}")
    return {label: cls(**_options_for(cls, options)) for label, cls in classes.items()}


def _options_for(cls: type, options: dict[str, Any]) -> dict[str, Any]:
    names = {f.name for f in dataclasses.fields(cls)}
    return {k: v for k, v in options.items() if k in names}
