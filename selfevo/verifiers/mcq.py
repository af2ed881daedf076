"""Multiple-choice verifier: find the option letter a response commits to and compare it with the reference.

Patterns, most explicit first (the last match of the first pattern that matches wins): ``\\boxed{B}`` (also
``\\boxed{\\text{(B)}}``), "answer is B" / "Answer: (B)" / "answer is **B**", a lone letter ending the response
("... so the choice is\\nB."), and finally the last parenthesised letter "(B)". Letters run A..J (MMLU-Pro has
ten options); ``task.meta["n_choices"]`` narrows that.
"""
from __future__ import annotations

import re

from selfevo.types import Task
from selfevo.verifiers import register_verifier
from selfevo.verifiers.base import Verdict, fail

_MAX_LETTERS = "ABCDEFGHIJ"


def _patterns(letters: str) -> list[re.Pattern]:
    """The extraction patterns for the option letters ``letters`` (group 1 = the letter, always upper case)."""
    cls = f"[{letters}]"
    return [
        re.compile(rf"\\boxed\s*\{{\s*(?:\\text(?:bf)?\s*\{{)?\s*\(?\s*({cls})\s*\)?\s*\}}?\s*\}}"),
        re.compile(rf"(?i:answer)\s*(?:(?i:is)|:)?\s*(?:(?i:option|choice)\s*)?[:\-]?\s*[*_]*\s*\(?\s*({cls})\s*\)?"
                   rf"(?![A-Za-z])"),
        re.compile(rf"(?:^|[\s*:(>\"'])({cls})[\s).*_\"']*$"),
        re.compile(rf"\(\s*({cls})\s*\)"),
    ]


def extract_choice(response: str, n_choices: int = len(_MAX_LETTERS)) -> str | None:
    """The option letter a response commits to, or None."""
    letters = _MAX_LETTERS[:max(1, min(n_choices, len(_MAX_LETTERS)))]
    text = response.strip()
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
