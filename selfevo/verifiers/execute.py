"""Running a model-written program on given arguments in the sandbox and reading back what it returned (AZR's
code executor): ``f(args)`` for each call as the ``repr`` of a plain-data value, run repeatedly to check that the
program is deterministic, and the checks that run no code (literal arguments, banned words, equal values).

The sandbox (:mod:`selfevo.verifiers.sandbox`) reports pass / fail per step and an error text, not values: each call
here is an ``exec`` step that raises an exception of a class named with a fresh random token, whose message is the
``repr`` of the returned value and an end mark. The harness checks the returned value as for any test (plain data
only: an object with rigged special methods is refused), and the program cannot forge the exception (it does not know
the class name). The harness keeps the first 500 characters of an error text: a value whose ``repr`` is longer is
reported as ``too long``.
"""
from __future__ import annotations

import ast
import re
import secrets
from dataclasses import dataclass

from selfevo.verifiers.sandbox import Limits, exec_step, run_program

END = "\x1e<end>"  # closes every value's text: a cut text has no end mark
EXEC_LIMITS = Limits(wall_s=30.0, cpu_s=30.0, unit_s=10.0, load_s=10.0)  # AZR: 10 s per execution


@dataclass(frozen=True)
class CallResult:
    """One call ``f(args)``: the ``repr`` of the value it returned, or None and why not (its error text)."""

    value: str | None
    error: str = ""


def literal_args(args: str) -> tuple | None:
    """The argument list ``args`` (``"1, 'a', [2]"``) as a tuple of Python literals, or None when it is not one (a
    call, a name, keywords, a syntax error): arguments are data, never code."""
    try:
        value = ast.literal_eval(f"({args},)") if args.strip() else None
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return None
    return value if isinstance(value, tuple) else None


def same_value(a: str, b: str) -> bool:
    """Whether two value texts mean the same Python value: equal as literals, else equal as stripped text."""
    try:
        return ast.literal_eval(a.strip()) == ast.literal_eval(b.strip())
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return a.strip() == b.strip()


def banned_words_used(program: str, words: list[str] | tuple[str, ...]) -> list[str]:
    """The ``words`` that occur in ``program`` as whole words or dotted names, comments included (AZR's prompt: "not
    allowed ... in any form, even in comments")."""
    return [w for w in words if re.search(rf"(?<![\w.]){re.escape(w)}(?![\w])", program)]


def call_values(program: str, calls: list[str], entry_point: str = "f", repeats: int = 1,
                limits: Limits = EXEC_LIMITS) -> list[list[CallResult]]:
    """One sandbox job: ``entry_point(args)`` for every argument text of ``calls``, each ``repeats`` times in a row
    (in the same process, so a program that keeps state between calls returns different values); per call, its
    results in order. Argument texts must be literals (:func:`literal_args`): anything else is an error here."""
    token = "Value_" + secrets.token_hex(8)
    steps = []
    for args in calls:
        code = (f"class {token}(Exception):\n    pass\nraise {token}(repr({entry_point}({args})) + {END!r})\n"
                if literal_args(args) is not None else "raise ValueError('arguments are not Python literals')\n")
        steps += [exec_step(code, label=f"{entry_point}({args[:60]})") for _ in range(repeats)]
    result = run_program(program, steps, limits, entry_point=entry_point)
    outcomes = {s.index: s for s in result.steps}
    out = []
    for i in range(len(calls)):
        out.append([_read(outcomes.get(i * repeats + r), token, result.detail) for r in range(repeats)])
    return out


def _read(step, token: str, detail: str) -> CallResult:
    if step is None:
        return CallResult(None, detail or "no result")
    head = f"{token}: "
    if not step.error.startswith(head):
        return CallResult(None, step.error or "returned without a value")
    text = step.error[len(head):]
    return CallResult(text[:-len(END)], "") if text.endswith(END) else CallResult(None, "too long")


def deterministic_values(program: str, calls: list[str], runs: int = 2, entry_point: str = "f",
                         limits: Limits = EXEC_LIMITS) -> tuple[list[str] | None, str]:
    """The value of every call, when the program returns one for each, twice in a row in each of ``runs`` separate
    jobs (other processes: another hash seed), always the same: ``(values, "")``; else ``(None, reason)``, the reason
    starting with ``error``, ``too long`` or ``nondeterministic``."""
    seen: list[list[str]] = [[] for _ in calls]
    for _ in range(runs):
        for i, results in enumerate(call_values(program, calls, entry_point, repeats=2, limits=limits)):
            for r in results:
                if r.value is None:
                    return None, "too long" if r.error == "too long" else f"error: {r.error[:200]}"
                seen[i].append(r.value)
    if any(len(set(values)) > 1 for values in seen):
        return None, "nondeterministic"
    return [values[0] for values in seen], ""
