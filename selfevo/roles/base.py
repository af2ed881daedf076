"""What every role shares: the Role protocol, typed parse results, discussion history, templates, sanitising.

A Role is pure: ``messages(task, **context)`` builds the chat messages of one turn, ``parse(text)`` turns the
completion into a :class:`Parsed`. No model, no randomness, no I/O beyond reading its packaged template files.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Any, Iterable, Protocol, Sequence, runtime_checkable

from selfevo.registry import Registry
from selfevo.types import Task

HISTORY_KINDS = ("solution", "evaluation")
EMPTY_DISCUSSION = "(Empty discussion)"


@runtime_checkable
class Role(Protocol):
    """A prompt builder and a parser; ``name`` is its registry key (e.g. ``"comas.solver"``)."""

    name: str

    def messages(self, task: Task, **context: Any) -> list[dict[str, str]]: ...

    def parse(self, text: str) -> "Parsed": ...


ROLES: Registry[type] = Registry("role")  # name -> Role class; ``ROLES.get("comas.solver")(kappa=2)``


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
