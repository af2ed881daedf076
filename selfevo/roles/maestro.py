"""MAESTRO's roles (paper 004, App. C.1 prompts): execution agents, the central selector (Central-Select), and the
central generator of the Central-Gen ablation; the strict ``Reason / Chosen / Final`` parser and the broadcast.

* ``maestro.executor`` (solver): "Reasoning Agent #i". Without a ``broadcast`` it gets the initial (base) prompt;
  with one, the interactive prompt: its own earlier solutions (``history``, each cut to its last ``history_chars``)
  and the Center Arbiter's feedback (the broadcast).
* ``maestro.central`` (selector): the Center Arbiter over a slate of ``candidates`` shown as ``Candidate 1..n``;
  ``view`` shows each candidate whole (``both``), without its final answer (``reason``: every ``\\boxed{...}``
  and code block hidden) or only its final answer (``answer``), Fig. 3. Parsed with the slate size into a
  :class:`Selection`; a missing or out-of-range choice is a failure that says why, never candidate 1.
* ``maestro.central_gen`` (solver): the Center Arbiter reads the slate and writes its own solution (Central-Gen).

Texts inserted into prompts are stripped of chat special tokens.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import ClassVar

from selfevo.roles.base import Context, Parsed, Role, RoleError, chat, register_role, strip_special_tokens
from selfevo.tasks import format_prompt
from selfevo.types import Task
from selfevo.verifiers.math import last_boxed

INITIAL = (
    "You are Reasoning Agent #{agent_id}. Your task is to carefully solve the given problem step by step. Clearly "
    "show your reasoning process, making sure that each transformation is logically valid. Avoid skipping important "
    "intermediate steps.\nAt the end of your reasoning, provide {answer_format}.\nProblem: {problem}"
)
INTERACTIVE = (
    "You are Reasoning Agent #{agent_id}. You previously proposed multiple solutions and now also receive the Center "
    "Arbiter's synthesis.\nRe-evaluate the problem carefully, considering both your earlier solutions and the "
    "Arbiter's feedback. Generate refined solutions that correct any mistakes if needed, ensuring logical "
    "consistency.\nEach output must end with {answer_format}.\nProblem: {problem}\nYour Previous Solutions: "
    "{previous}\nCenter Arbiter's Feedback: {feedback}"
)
CENTRAL = (
    "You are the Center Arbiter, responsible for evaluating candidate solutions proposed by agents. Carefully read "
    "the original problem and all candidate solutions. Compare their reasoning, detect mistakes if present, and "
    "identify the most reliable candidate.\nThen, following the strict format below, provide a short "
    "justification, the chosen candidate index, and the final answer in \\boxed{{...}}.\nProblem: {problem}\n"
    "Candidates:\n{candidates}\nSTRICT OUTPUT FORMAT:\nReason: {{detailed justification}}\nChosen: {{candidate id}}\n"
    "Final: \\boxed{{...}}"
)
CENTRAL_GEN = (
    "You are the Center Arbiter, responsible for synthesising the candidate solutions proposed by agents. Carefully "
    "read the original problem and all candidate solutions, compare their reasoning and detect mistakes, then write "
    "your own complete solution step by step.\nAt the end, provide {answer_format}.\nProblem: {problem}\n"
    "Candidates:\n{candidates}"
)
BOXED_FORMAT = "the final answer in the exact format: \\boxed{...}"
CODE_FORMAT = "your complete solution in a single ```python code block"
VIEWS = ("both", "reason", "answer")


def answer_format(task: Task) -> str:
    return CODE_FORMAT if str(task.meta.get("verifier") or task.domain) == "code" else BOXED_FORMAT


def _problem(task: Task) -> str:
    return format_prompt(task)


# ---- strict parsing of the central output ----------------------------------------------------------------------
_REASON = re.compile(r"^[ \t]*Reason:[ \t]*", re.M)
_CHOSEN = re.compile(r"^[ \t]*Chosen:[ \t]*(?:Candidate[ \t]*)?(\d+)[ \t]*\.?[ \t]*$", re.M)
_CHOSEN_LABEL = re.compile(r"^[ \t]*Chosen:", re.M)
_FINAL = re.compile(r"^[ \t]*Final:[ \t]*", re.M)


@dataclass(frozen=True)
class Selection:
    """A parsed central output: ``index`` (0-based, of the candidate as displayed), the ``reason``, the ``final``
    answer, and the character spans (start, end) of the rationale and of the decision (``Chosen`` to the end of
    ``Final``) in the parsed text."""

    index: int
    reason: str
    final: str | None
    reason_span: tuple[int, int] = (0, 0)
    decision_span: tuple[int, int] = (0, 0)


def read_selection(text: str, n_candidates: int, require_boxed: bool = True) -> Selection | str:
    """``Reason: ... / Chosen: k / Final: \\boxed{...}`` read strictly: a :class:`Selection`, or why not (a str).

    Required, in this order, each label at the start of a line: ``Reason:`` and a non-empty justification (may span
    lines); ``Chosen:`` alone on its line with an integer 1..n_candidates (``Candidate 3`` is accepted too);
    ``Final:`` immediately followed by a balanced ``\\boxed{...}`` (any text when ``require_boxed`` is False, e.g.
    code tasks). Anything after the Final field is ignored.
    """
    reason_m = _REASON.search(text)
    if reason_m is None:
        return "no 'Reason:' line"
    chosen_m = _CHOSEN.search(text, reason_m.end())
    if chosen_m is None:
        return "no 'Chosen: k' line after the reason"
    body = text[reason_m.end():chosen_m.start()]
    reason, k = body.strip(), int(chosen_m.group(1))
    if not reason or _REASON.search(reason):
        return "empty or repeated reason"
    if not 1 <= k <= n_candidates:
        return f"chose candidate {k}, but the slate has {n_candidates}"
    final_m = _FINAL.search(text, chosen_m.end())
    if final_m is None or text[chosen_m.end():final_m.start()].strip():
        return "no 'Final:' line right after the choice"
    boxed = _leading_boxed(text, final_m.end())
    if boxed is None and require_boxed:
        return "'Final:' is not followed by \\boxed{...}"
    if boxed is not None:
        final, end = boxed
    else:
        line = text[final_m.end():].split("\n", 1)[0]
        final, end = line.strip() or None, final_m.end() + len(line.rstrip())
        if final is None:
            return "empty 'Final:' line"
    start = reason_m.end() + len(body) - len(body.lstrip())
    return Selection(k - 1, reason, final, (start, start + len(reason)), (text.index("Chosen:", chosen_m.start()), end))


def parse_selection(text: str, n_candidates: int, require_boxed: bool = True) -> Selection | None:
    """:func:`read_selection`, None on any deviation."""
    out = read_selection(text, n_candidates, require_boxed)
    return out if isinstance(out, Selection) else None


def _leading_boxed(text: str, at: int) -> tuple[str, int] | None:
    """``(content, end)`` of a balanced ``\\boxed{...}`` starting at ``text[at:]`` (after spaces), else None."""
    m = re.compile(r"\s*\\boxed\s*\{").match(text, at)
    if m is None:
        return None
    depth = 1
    for i in range(m.end(), len(text)):
        depth += {"{": 1, "}": -1}.get(text[i], 0)
        if depth == 0:
            return text[m.end():i].strip(), i + 1
    return None


def central_spans(text: str) -> tuple[tuple[int, int] | None, tuple[int, int] | None]:
    """Lenient (rationale, decision) character spans of any central output, parsed or not (CLPO's masks).

    Rationale: after the first ``Reason:`` label up to the ``Chosen:`` label (or the end). Decision: from the
    ``Chosen:`` label to the end of the ``Final:`` field (its balanced ``\\boxed{}``, else its line), or to the end
    of the ``Chosen`` line without a ``Final``. None where a label is missing (no rationale / no decision made).
    """
    reason_m = _REASON.search(text)
    chosen_m = _CHOSEN_LABEL.search(text, reason_m.end() if reason_m else 0)
    reason = None
    if reason_m is not None:
        end = chosen_m.start() if chosen_m else len(text)
        body = text[reason_m.end():end]
        start = reason_m.end() + len(body) - len(body.lstrip())
        reason = (start, start + len(body.strip())) if body.strip() else None
    if chosen_m is None:
        return reason, None
    start = chosen_m.start() + len(chosen_m.group(0)) - len(chosen_m.group(0).lstrip())
    line_end = text.find("\n", chosen_m.end())
    end = len(text) if line_end < 0 else line_end
    final_m = _FINAL.match(text, end + 1) if line_end >= 0 else None
    if final_m is not None:
        boxed = _leading_boxed(text, final_m.end())
        nl = text.find("\n", final_m.end())
        end = boxed[1] if boxed else (len(text) if nl < 0 else nl)
    return reason, (start, len(text[:end].rstrip()))


# ---- text helpers: truncation, broadcast, candidate views ------------------------------------------------------
def shorten(text: str, limit: int | None, keep: str = "head") -> str:
    """``text`` stripped and, beyond ``limit`` characters, cut at a space. ``keep="head"`` keeps the beginning
    (marked by a trailing `` ...``); ``keep="tail"`` keeps the end (marked by a leading ``... ``), where a
    solution's final answer is."""
    text = text.strip()
    if limit is None or len(text) <= limit:
        return text
    if keep == "tail":
        tail = text[len(text) - limit:]
        if not text[len(text) - limit - 1].isspace() and len(tail.split()) > 1:
            tail = tail.split(None, 1)[1]  # drop the partial first word
        return "... " + tail.lstrip()
    if keep != "head":
        raise ValueError(f"keep must be 'head' or 'tail', got {keep!r}")
    head = text[:limit]
    cut = head.rsplit(None, 1)[0] if len(head.split()) > 1 else head
    return cut.rstrip() + " ..."


def broadcast(selection: Selection | None, chosen: int | None, k: int, limit: int | None,
              answer: bool = False) -> str:
    """The public broadcast b_t (MAESTRO Sec. 3.1): the chosen solution named as its execution agent knows it
    (``chosen`` is its agent-major index: Reasoning Agent #``chosen // k + 1``'s Solution ``chosen % k + 1``, the
    numbering of that agent's "Your Previous Solutions"), a brief justification and, with ``answer``, the chosen
    final answer (not in the paper); after a parse failure, only that no valid selection was made."""
    if selection is None or chosen is None:
        return "The Center Arbiter made no valid selection."
    text = f"The Center Arbiter chose Reasoning Agent #{chosen // k + 1}'s Solution {chosen % k + 1}"
    if answer and selection.final:
        text += f" (final answer \\boxed{{{selection.final}}})"
    return text + f". Justification: {shorten(' '.join(selection.reason.split()), limit)}"


def gen_broadcast(text: str, final: str | None, limit: int | None) -> str:
    """Central-Gen's broadcast: its own final answer and the start of its reasoning."""
    answer = f" (final answer \\boxed{{{final}}})" if final else ""
    return f"The Center Arbiter wrote its own solution{answer}. Justification: {shorten(' '.join(text.split()), limit)}"


_CODE = re.compile(r"```[a-zA-Z0-9_+-]*\n.*?(?:```|$)", re.S)


def candidate_view(text: str, view: str) -> str:
    """What the central agent sees of one candidate: ``both`` (all), ``reason`` (every ``\\boxed{...}`` and code
    block replaced by ``[final answer hidden]``) or ``answer`` (only the last ``\\boxed{...}`` or code block)."""
    if view == "both":
        return text
    if view == "answer":
        boxed, code = last_boxed(text), _CODE.findall(text)
        if boxed is not None:
            return f"Final answer: \\boxed{{{boxed}}}"
        return code[-1].strip() if code else "(no final answer)"
    if view != "reason":
        raise RoleError(f"candidate view must be one of {', '.join(VIEWS)}, got {view!r}")
    out, i = [], 0
    for m in re.finditer(r"\\(?:boxed|fbox)\s*\{", text):
        if m.start() < i:
            continue
        depth, j = 1, m.end()
        while j < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[j], 0)
            j += 1
        out.append(text[i:m.start()] + "[final answer hidden]")
        i = j
    return _CODE.sub("[final answer hidden]", "".join(out) + text[i:])


def _clean(text: str) -> str:
    return strip_special_tokens(text or "")


# ---- roles ------------------------------------------------------------------------------------------------------
@register_role
@dataclass
class Executor(Role):
    """Execution agent #``agent_id``: the initial prompt (round 1, or ε-exploration: no broadcast), else the
    interactive one with its own earlier solutions (``history``) and the Center Arbiter's ``broadcast``."""

    agent_id: int = 1
    history_chars: int | None = 1500

    name: ClassVar[str] = "maestro.executor"
    kind: ClassVar[str] = "solver"
    reads: ClassVar[tuple[str, ...]] = ("history", "broadcast")

    def render(self, task: Task, ctx: Context) -> list[dict[str, str]]:
        fmt, problem = answer_format(task), _problem(task)
        if ctx.broadcast is None:
            return chat(INITIAL.format(agent_id=self.agent_id, answer_format=fmt, problem=problem))
        previous = "".join(f"\n\nSolution {j}:\n{shorten(_clean(h.text), self.history_chars, keep='tail')}"
                           for j, h in enumerate(ctx.history, 1))
        return chat(INTERACTIVE.format(agent_id=self.agent_id, answer_format=fmt, problem=problem, previous=previous,
                                       feedback=_clean(ctx.broadcast)))

    def read(self, text: str, ctx: Context) -> Parsed:
        return Parsed.success(text)


@register_role
@dataclass
class Central(Role):
    """The Center Arbiter (Central-Select): picks one of the ``candidates``; parsed into a :class:`Selection`
    (its ``index`` is the 0-based displayed position, which the ``slate`` reward source reads)."""

    view: str = "both"
    candidate_chars: int | None = None
    code: bool = False  # code tasks: ``Final:`` holds code, not \\boxed{} (the protocol uses a copy per task kind)
    temperature: float | None = 0.0

    name: ClassVar[str] = "maestro.central"
    kind: ClassVar[str] = "selector"
    reads: ClassVar[tuple[str, ...]] = ("candidates",)

    def render(self, task: Task, ctx: Context) -> list[dict[str, str]]:
        return chat(CENTRAL.format(problem=_problem(task), candidates=self.slate(ctx)))

    def slate(self, ctx: Context) -> str:
        shown = [shorten(candidate_view(_clean(c), self.view), self.candidate_chars, "tail") for c in ctx.candidates]
        return "\n".join(f"- Candidate {j}: {c}" for j, c in enumerate(shown, 1))

    def read(self, text: str, ctx: Context) -> Parsed:
        out = read_selection(text or "", len(ctx.candidates), require_boxed=not self.code)
        return Parsed.success(out) if isinstance(out, Selection) else Parsed.failure(out)


@register_role
@dataclass
class CentralGen(Central):
    """The Center Arbiter writing its own solution from the slate (Central-Gen ablation); parsed as the text."""

    name: ClassVar[str] = "maestro.central_gen"
    kind: ClassVar[str] = "solver"

    def render(self, task: Task, ctx: Context) -> list[dict[str, str]]:
        return chat(CENTRAL_GEN.format(answer_format=answer_format(task), problem=_problem(task),
                                       candidates=self.slate(ctx)))

    def read(self, text: str, ctx: Context) -> Parsed:
        return Parsed.success(text) if (text or "").strip() else Parsed.failure("empty answer")
