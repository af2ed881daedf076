"""What every role shares: the Role contract, its typed Context, parse results, discussion history, templates.

A role is pure: :meth:`Role.messages` builds the chat messages of one turn from a task and a :class:`Context`,
:meth:`Role.parse` turns the completion (with the context, e.g. the slate size of a selector) into a
:class:`Parsed`. No model, no randomness, no I/O beyond reading packaged template files. Every role has a ``kind``
(one of :data:`ROLE_KINDS`), declares the context keys it ``reads`` (any other key is a one-line
:class:`RoleError`), and carries its format options: ``prefix`` (text its answer is made to start with, e.g.
``"<score>"`` for a small model that never opens the tag by itself), ``max_new_tokens`` and ``temperature``
(0 / None = the run's sampling settings).
"""
from __future__ import annotations

import abc
import dataclasses
import difflib
import re
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Any, ClassVar, Iterable, Sequence

from selfevo.errors import SelfevoError
from selfevo.registry import Registry
from selfevo.types import Task

HISTORY_KINDS = ("solution", "evaluation")
EMPTY_DISCUSSION = "(Empty discussion)"
ROLE_KINDS = ("solver", "evaluator", "scorer", "challenger", "planner", "critic", "selector")


class RoleError(SelfevoError, ValueError):
    """A role used wrongly (unknown context key, bad option), said in one line."""


@dataclass(frozen=True)
class Context:
    """Everything a role may be shown besides the task; a role reads only the keys it declares in ``reads``.

    ``history``: the discussion so far (:class:`HistoryItem` s). ``solution`` / ``evaluation`` / ``plan``: the text
    under judgement or to follow. ``candidates``: a selector's slate. ``reference``: the item a challenger writes a
    new question from. ``broadcast``: what a central agent announced to everyone. ``subject``: what a critic
    judges ("question" or "plan").
    """

    history: tuple[HistoryItem, ...] = ()
    solution: str | None = None
    evaluation: str | None = None
    plan: str | None = None
    candidates: tuple[str, ...] = ()
    reference: Task | None = None
    broadcast: str | None = None
    subject: str | None = None


CONTEXT_KEYS = tuple(f.name for f in dataclasses.fields(Context))


@dataclass
class Role(abc.ABC):
    """A prompt builder and a parser. Subclasses set ``name`` (registry key, e.g. ``"comas.solver"``), ``kind``
    and ``reads``, and implement :meth:`render` and :meth:`read`."""

    prefix: str = ""
    max_new_tokens: int = 0
    temperature: float | None = None

    name: ClassVar[str] = "role"
    kind: ClassVar[str] = ""
    reads: ClassVar[tuple[str, ...]] = ()

    def context(self, ctx: Context | None = None, **values: Any) -> Context:
        """A :class:`Context` from keywords (or ``ctx`` as is); a key this role does not read is an error."""
        if ctx is not None:
            if values:
                raise RoleError(f"role '{self.name}': pass a Context or keywords, not both")
            return ctx
        for key in values:
            if key not in self.reads:
                close = difflib.get_close_matches(key, list(self.reads) or list(CONTEXT_KEYS), n=1)
                hint = f"; did you mean '{close[0]}'?" if close else ""
                reads = ", ".join(self.reads) or "nothing"
                raise RoleError(f"role '{self.name}' does not read context '{key}'{hint} (it reads: {reads})")
        if "history" in values:
            values["history"] = tuple(values["history"])
        if "candidates" in values:
            values["candidates"] = tuple(values["candidates"])
        return Context(**values)

    def messages(self, task: Task, ctx: Context | None = None, **values: Any) -> list[dict[str, str]]:
        """The chat messages of one turn (``role.messages(task, history=h)`` or with a built Context)."""
        return self.render(task, self.context(ctx, **values))

    def parse(self, text: str, ctx: Context | None = None, **values: Any) -> "Parsed":
        """The completion (as the model wrote it after ``prefix``; pass ``prefix + text``) parsed in context."""
        return self.read(text, self.context(ctx, **values))

    @abc.abstractmethod
    def render(self, task: Task, ctx: Context) -> list[dict[str, str]]:
        """Chat messages for ``task`` in context ``ctx`` (keys already validated)."""

    @abc.abstractmethod
    def read(self, text: str, ctx: Context) -> "Parsed":
        """The completion parsed: a value, or a failure that says why."""


ROLES: Registry[type] = Registry("role")  # name -> Role class; ``ROLES.get("comas.solver")(kappa=2)``


def register_role(cls: type[Role]) -> type[Role]:
    """Class decorator: register ``cls`` under ``cls.name`` after checking its ``kind`` and ``reads``."""
    if cls.kind not in ROLE_KINDS:
        raise RoleError(f"role '{cls.name}' has kind {cls.kind!r}; kinds: {', '.join(ROLE_KINDS)}")
    if unknown := [k for k in cls.reads if k not in CONTEXT_KEYS]:
        raise RoleError(f"role '{cls.name}' reads unknown context keys {unknown}")
    return ROLES.register(cls.name)(cls)


@dataclass(frozen=True)
class Parsed:
    """A typed parse result: ``ok`` and ``value`` on success; ``ok=False``, ``value=None`` and ``error`` otherwise."""

    ok: bool
    value: Any = None
    error: str | None = None

    @classmethod
    def success(cls, value: Any) -> "Parsed":
        return cls(True, value, None)

    @classmethod
    def failure(cls, error: str) -> "Parsed":
        return cls(False, None, error)


@dataclass(frozen=True)
class HistoryItem:
    """One entry of a question's discussion history: who said it, whether a solution or an evaluation, the text.

    A history is a flat list in order of generation; every ``"solution"`` opens a new round (discussion) and the
    ``"evaluation"`` items after it belong to that round (see :func:`group_rounds`).
    """

    agent: str
    kind: str
    text: str

    def __post_init__(self) -> None:
        if self.kind not in HISTORY_KINDS:
            raise ValueError(f"HistoryItem.kind must be one of {HISTORY_KINDS}, got {self.kind!r}")


# --------------------------------------------------------------------------------------------------------------
# sanitising text that goes into later prompts
# --------------------------------------------------------------------------------------------------------------

# ``<|...|>`` covers Qwen/ChatML (<|im_start|>, <|im_end|>, <|endoftext|>), Llama 3 (<|eot_id|>,
# <|start_header_id|>, ...), Phi and GPT-style tokens; Gemma's tokens are spelled without bars.
_BAR_TOKEN = r"<\|[A-Za-z0-9_\-.:/ ]{1,64}\|>"
GEMMA_TOKENS = ("<start_of_turn>", "<end_of_turn>", "<bos>", "<eos>", "<pad>")


@lru_cache(maxsize=64)
def _special_token_re(extra: tuple[str, ...]) -> re.Pattern[str]:
    literals = sorted(set(GEMMA_TOKENS + extra), key=len, reverse=True)
    return re.compile("|".join([_BAR_TOKEN] + [re.escape(t) for t in literals if t]))


def strip_special_tokens(text: str, extra_tokens: Iterable[str] = ()) -> str:
    """Remove chat special tokens from ``text`` (CoMAS special-token leakage, research/comas_marti.md Sec. 9.8).

    Removed: every ``<|...|>`` token (``<|im_start|>``, ``<|im_end|>``, ``<|endoftext|>``, ``<|eot_id|>``, ...),
    Gemma's ``<start_of_turn>``, ``<end_of_turn>``, ``<bos>``, ``<eos>``, ``<pad>``, and any ``extra_tokens``
    (e.g. a tokenizer's ``all_special_tokens``; ``<s>``/``</s>`` are not removed by default because they are also
    HTML). A role name right after ``<|im_start|>`` or ``<start_of_turn>`` (``user``, ``assistant``, ``model``) is
    left in place: it is plain text once the token is gone.
    """
    return _special_token_re(tuple(extra_tokens)).sub("", text)


# --------------------------------------------------------------------------------------------------------------
# templates
# --------------------------------------------------------------------------------------------------------------

_SLOT = re.compile(r"\{([a-z_]+)\}")


@lru_cache(maxsize=None)
def load_template(name: str) -> str:
    """The packaged template ``selfevo/roles/templates/<name>.txt``, stripped of surrounding whitespace."""
    path = resources.files("selfevo.roles").joinpath("templates", f"{name}.txt")
    if not path.is_file():
        raise FileNotFoundError(f"no role template '{name}' (looked for {path})")
    return path.read_text(encoding="utf-8").strip()


def fill(template: str, **values: str) -> str:
    """Replace each ``{slot}`` whose name is in ``values``, in ONE pass over the template.

    Braces that are not named slots stay as they are (``\\boxed{}``, ``\\boxed{n}``), and inserted text is never
    re-scanned, so a question that itself contains ``{solution}`` is left alone.
    """
    return _SLOT.sub(lambda m: values[m.group(1)] if m.group(1) in values else m.group(0), template)


def drop_paragraph(template: str, slot: str) -> str:
    """The template without the blank-line-separated paragraph that contains ``{slot}``."""
    paragraphs = template.split("\n\n")
    return "\n\n".join(p for p in paragraphs if "{" + slot + "}" not in p)


def chat(content: str, system: str | None = None) -> list[dict[str, str]]:
    """One user message (the released CoMAS code sends only that), after an optional system message."""
    head = [{"role": "system", "content": system}] if system else []
    return head + [{"role": "user", "content": content}]


# --------------------------------------------------------------------------------------------------------------
# discussion history
# --------------------------------------------------------------------------------------------------------------

def group_rounds(history: Sequence[HistoryItem]) -> list[list[HistoryItem]]:
    """Split a flat history into rounds: each ``"solution"`` opens a round; evaluations join the open round.

    Evaluations before any solution form a round of their own (no solution), so nothing is silently lost.
    """
    rounds: list[list[HistoryItem]] = []
    for item in history:
        if item.kind == "solution" or not rounds:
            rounds.append([])
        rounds[-1].append(item)
    return rounds


def last_rounds(history: Sequence[HistoryItem], kappa: int | None) -> list[list[HistoryItem]]:
    """The last ``kappa`` rounds (CoMAS horizon κ); ``None`` keeps all, ``0`` keeps none."""
    rounds = group_rounds(history)
    if kappa is None:
        return rounds
    if kappa < 0:
        raise ValueError(f"kappa must be >= 0 or None, got {kappa}")
    return rounds[-kappa:] if kappa else []


def render_round(index: int, items: Sequence[HistoryItem], clean) -> str:
    """``=== Discussion i ===`` then ``Solution: ...`` and ``Evaluation: ...`` (numbered when there are several)."""
    evaluations = [it for it in items if it.kind == "evaluation"]
    lines = [f"=== Discussion {index} ==="]
    lines += [f"Solution: {clean(it.text)}" for it in items if it.kind == "solution"]
    if len(evaluations) == 1:
        lines.append(f"Evaluation: {clean(evaluations[0].text)}")
    else:
        lines += [f"Evaluation {j}: {clean(it.text)}" for j, it in enumerate(evaluations, 1)]
    return "\n".join(lines)


def render_discussion(history: Sequence[HistoryItem], kappa: int | None, clean=str.strip) -> str:
    """The ``{discussion}`` text: the last ``kappa`` rounds rendered as by the released code (Sec. 2.4 of
    research/comas_marti.md), rounds numbered from 1 and separated by a blank line; ``(Empty discussion)`` if none.

    ``clean`` is applied to every inserted text (sanitising). Scores are never shown; agent names are not shown.
    """
    rounds = last_rounds(history, kappa)
    if not rounds:
        return EMPTY_DISCUSSION
    return "\n\n".join(render_round(i, items, clean) for i, items in enumerate(rounds, 1))
