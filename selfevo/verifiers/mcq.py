"""Multiple-choice verifier: find the option letter a response commits to and compare it with the reference.

The ``\\boxed{...}`` answers come first: the last box whose content reads as an option letter wins. A box reads as
a letter when it holds the letter alone (``\\boxed{B}``, ``\\boxed{(B)}``, ``\\boxed{B.}``, also inside
``\\text{}``/``\\textbf{}``/``\\mathrm{}``: ``\\boxed{\\text{(B)}}``) or the letter *marked* as an option label and
followed by the option's text: ``\\boxed{D. oxidative phosphorylation}``, ``\\boxed{(D) text}``,
``\\boxed{D: text}``, ``\\boxed{D) text}``, ``\\boxed{D - text}``. A capital letter that merely starts a word
(``\\boxed{Because ...}``) is not a label; a box naming several options (``\\boxed{A or B}``, ``\\boxed{A, C}``)
is no answer at all, and the response then has none (later patterns are not consulted). Boxes that hold something
else (``\\boxed{42}``) are skipped.

Without a box, the other patterns, most explicit first (the last match of the first pattern that matches wins):
"answer is B" / "Answer: (B)" / "answer is **B**", a lone letter ending the response ("... so the choice is\\nB."),
and finally the last parenthesised letter "(B)". Letters run A..J (MMLU-Pro has ten options);
``task.meta["n_choices"]`` narrows that.
"""
from __future__ import annotations

import re
from typing import Iterator

from selfevo.types import Task
from selfevo.verifiers.base import Verdict, fail, register_verifier

_MAX_LETTERS = "ABCDEFGHIJ"
_WRAPPER = re.compile(r"\\(?:text(?:bf|it|rm)?|mathrm|mathbf|textsf|mbox)\s*\{([^{}]*)\}")
# several option letters joined by "or"/"and"/","/"/"/"&": an answer that does not commit to one option
_SEVERAL = re.compile(rf"\(?\s*[{_MAX_LETTERS}]\s*\)?(?:\s*(?:,|/|&|\bor\b|\band\b)\s*\(?\s*[{_MAX_LETTERS}]\s*\)?)+"
                      r"\s*\.?")


def _patterns(letters: str) -> list[re.Pattern]:
    """The non-box extraction patterns for the option letters ``letters`` (group 1 = the letter, upper case)."""
    cls = f"[{letters}]"
    return [
        re.compile(rf"(?i:answer)\s*(?:(?i:is)|:)?\s*(?:(?i:option|choice)\s*)?[:\-]?\s*[*_]*\s*\(?\s*({cls})\s*\)?"
                   rf"(?![A-Za-z])"),
        re.compile(rf"(?:^|[\s*:(>\"'])({cls})[\s).*_\"']*$"),
        re.compile(rf"\(\s*({cls})\s*\)"),
    ]


def _box_patterns(letters: str) -> list[re.Pattern]:
    """How a box's (unwrapped) content names one option: the letter alone, or an option label and its text."""
    cls = f"[{letters}]"
    return [
        re.compile(rf"\(?\s*({cls})\s*\)?\s*[.:]?"),  # B, (B), B., B), B:
        re.compile(rf"\(\s*({cls})\s*\)\s*[.:]?\s*\S.*", re.S),  # (B) text
        re.compile(rf"({cls})\s*(?::\s*|\)\s*|\.\s+|\s+[-\u2013\u2014]\s*)\S.*", re.S),  # B. text, B: text, B - text
    ]


def boxed_contents(text: str) -> Iterator[str]:
    """The contents of every balanced ``\\boxed{...}`` in ``text``, last first."""
    found = []
    for m in re.finditer(r"\\boxed\s*\{", text):
        depth = 1
        for i in range(m.end(), len(text)):
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            if depth == 0:
                found.append(text[m.end():i])
                break
    return reversed(found)


def _unwrap(content: str) -> str:
    """Box content without ``\\text{}``-style wrappers, ``$``, bold markers and surrounding space."""
    previous = None
    while previous != content:
        previous, content = content, _WRAPPER.sub(r"\1", content)
    return content.replace("$", "").replace("**", "").strip()


def _boxed_choice(text: str, letters: str) -> tuple[bool, str | None]:
    """(decided, letter): the last box naming one option gives its letter; a box naming several options decides
    "no answer"; (False, None) when no box reads as an option at all."""
    patterns = _box_patterns(letters)
    for content in boxed_contents(text):
        body = _unwrap(content)
        if _SEVERAL.fullmatch(body):
            return True, None
        for pattern in patterns:
            m = pattern.fullmatch(body)
            if m:
                return True, m.group(1)
    return False, None


def extract_choice(response: str, n_choices: int = len(_MAX_LETTERS)) -> str | None:
    """The option letter a response commits to, or None."""
    letters = _MAX_LETTERS[:max(1, min(n_choices, len(_MAX_LETTERS)))]
    text = response.strip()
    decided, letter = _boxed_choice(text, letters)
    if decided:
        return letter
    for pattern in _patterns(letters):
        matches = pattern.findall(text)
        if matches:
            return matches[-1]
    return None


def normalize_reference(reference: str) -> str | None:
    """``"B"``, ``"(B)"``, ``"b"`` or ``"\\boxed{B}"`` -> ``"B"``; None if it is not a single letter."""
    text = reference.strip()
    boxed = re.fullmatch(r"\\boxed\{(.*)\}", text)
    if boxed:
        text = boxed.group(1)
    text = text.strip().strip("().").strip()
    return text.upper() if re.fullmatch(r"[A-Za-z]", text) else None


@register_verifier("mcq")
def verify_mcq(task: Task, response: str) -> Verdict:
    """1.0 when the chosen letter equals the reference letter, else 0.0."""
    gold = normalize_reference(task.reference)
    if gold is None:
        return fail(f"reference {task.reference!r} is not an option letter")
    choice = extract_choice(response, int(task.meta.get("n_choices", len(_MAX_LETTERS))))
    if choice is None:
        return fail("no option letter found in the response")
    if choice == gold:
        return Verdict(1.0, f"chose {choice}, the correct option", choice)
    return fail(f"chose {choice}, correct option is {gold}", choice)
