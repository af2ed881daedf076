"""Is a generated item's verifier valid? (SAGE Sec. 4.2: "validate the generated verifier (e.g., parsable and
executable for code tests)"; Algorithm 1 line 7.)

:func:`validate_item` returns None for a valid item, else one of the reason keys in :data:`REASONS`:

* math (``meta["verifier"]``, else ``domain``, is ``"math"``): ``"unparsable answer"`` when the reference's answer
  (its ``\\boxed{}`` / ``####`` part if it has one, as the math verifier reads it) does not parse as math with
  ``math_verify.parse`` (a parse that only echoes the string back, e.g. ``\\frac{1}{``, ``???`` or an empty answer).
  Note that math-verify is lenient: ``hello`` parses (as a product of symbols) and ``5 apples`` parses as 5.
* code: ``"format"`` when ``task.tests`` does not parse as Python, holds no ``assert``, or never calls
  ``task.entry_point``; ``"reference fails"`` when ``meta["reference_solution"]`` (else MBPP's ``meta["solution"]``)
  is missing or does not pass every test in the sandbox; ``"non-deterministic"`` when a second sandbox run of the
  reference gives a different score. The second run happens only after a passing first run (a reference that
  fails once is invalid whatever the second run says). Code runs only in the sandbox, through the code verifier.

Every helper here is pure except :func:`validate_item` on code items (two sandbox runs).
"""
from __future__ import annotations

import ast
import builtins
import re
import threading

from selfevo.types import Task
from selfevo.verifiers import verify
from selfevo.verifiers.code import extract_code
from selfevo.verifiers.math import MATH_TIMEOUT_S, _as_latex, reference_answer

FORMAT = "format"
UNPARSABLE = "unparsable answer"
REFERENCE_FAILS = "reference fails"
NON_DETERMINISTIC = "non-deterministic"
REASONS = (FORMAT, UNPARSABLE, REFERENCE_FAILS, NON_DETERMINISTIC)
# what a generated item must also pass before it enters a pool (:func:`check_generated`)
WORDS_IN_ANSWER = "words in answer"
ANSWER_IN_QUESTION = "answer in question"
UNMATCHABLE = "unmatchable"
GENERATED_REASONS = (WORDS_IN_ANSWER, ANSWER_IN_QUESTION, UNMATCHABLE)


# ----------------------------------------------------------------------------------------------------------------
# math
# ----------------------------------------------------------------------------------------------------------------


def parses_as_math(answer: str) -> bool:
    """Whether ``answer`` (taken whole; extract a ``\\boxed{}`` first if needed) parses as math with math-verify.

    math-verify's ``parse`` returns ``[sympy object, string]`` on success and only the string (or nothing) when it
    cannot parse. On the main thread its signal-based parsing timeout applies; on other threads it is off (parsing
    does not evaluate, so ``9^{9^{9^9}}`` is still quick).
    """
    from math_verify import parse

    if not answer or not answer.strip().strip("$").strip():
        return False
    timeout = MATH_TIMEOUT_S if threading.current_thread() is threading.main_thread() else None
    try:
        parsed = parse(_as_latex(answer), parsing_timeout=timeout)
    except Exception:  # noqa: BLE001 - sympy/latex2sympy internals: unparsable
        return False
    return any(not isinstance(p, str) for p in parsed)


# ----------------------------------------------------------------------------------------------------------------
# code (pure helpers, shared with the SAGE challenger's parser)
# ----------------------------------------------------------------------------------------------------------------


def strip_fences(text: str) -> str:
    """The code inside a Markdown fence (```` ```python ... ``` ````, the last python block if several; an
    unterminated fence gives the rest), or the text itself when it has no fence; stripped of blank edges."""
    return extract_code(text).strip("\n").rstrip() if "```" in text else text.strip("\n").rstrip()


def called_functions(tree: ast.AST) -> list[str]:
    """Names of plain functions called anywhere in ``tree`` (``f(x)``, not ``obj.f(x)``), in source order, once
    each, leaving out built-ins (``len``, ``set``, ``sorted`` ...)."""
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)]
    calls.sort(key=lambda n: (n.lineno, n.col_offset))
    names: list[str] = []
    for call in calls:
        name = call.func.id
        if name not in names and not hasattr(builtins, name):
            names.append(name)
    return names


def defined_functions(tree: ast.Module) -> list[str]:
    """Names of the top-level functions (and classes: a called class is a valid entry point) of a module."""
    return [n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))]


def has_assert(tree: ast.AST) -> bool:
    """Whether ``tree`` holds an ``assert`` whose test is not a constant (``assert True`` tests nothing)."""
    return any(isinstance(n, ast.Assert) and not isinstance(n.test, ast.Constant) for n in ast.walk(tree))


def find_entry_point(tests: str, solution: str) -> tuple[str, str]:
    """``(entry_point, problem)``: the first function the tests call that the solution defines; ``problem`` is ""
    on success, else a one-line reason (tests unparsable, no assert, no call, or no called function defined by the
    solution). A solution that does not parse is not a problem here (its validation will fail): the first called
    function is returned."""
    try:
        tree = ast.parse(tests)
    except (SyntaxError, ValueError) as exc:
        return "", f"the tests do not parse as Python ({_syntax_line(exc)})"
    if not has_assert(tree):
        return "", "the tests hold no assert statement"
    own = set(defined_functions(tree))
    targets = [name for name in called_functions(tree) if name not in own]
    if not targets:
        return "", "the tests call no function"
    try:
        defined = set(defined_functions(ast.parse(solution)))
    except (SyntaxError, ValueError):
        return targets[0], ""
    for name in targets:
        if name in defined:
            return name, ""
    return "", (f"the tests call {', '.join(targets[:3])} but the solution defines "
                f"{', '.join(sorted(defined)) or 'no function'}")


def _syntax_line(exc: Exception) -> str:
    if isinstance(exc, SyntaxError):
        return f"{exc.msg}, line {exc.lineno}"
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


def code_format_problem(task: Task) -> str:
    """"" when ``task.tests`` parse, hold an assert and call ``task.entry_point``; else a one-line reason."""
    try:
        tree = ast.parse(task.tests)
    except (SyntaxError, ValueError) as exc:
        return f"the tests do not parse as Python ({_syntax_line(exc)})"
    if not has_assert(tree):
        return "the tests hold no assert statement"
    if not task.entry_point:  # a generated item whose tests name no function its solution defines: say why
        return find_entry_point(task.tests, reference_solution(task))[1] or "the task has no entry_point"
    if not any(isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == task.entry_point
               for n in ast.walk(tree)):
        return f"the tests never call {task.entry_point}"
    return ""


def reference_solution(task: Task) -> str:
    """A code item's reference solution: ``meta["reference_solution"]``, else ``meta["solution"]`` (MBPP)."""
    return str(task.meta.get("reference_solution") or task.meta.get("solution") or "")


def as_response(solution: str) -> str:
    """A solution as a model response the code verifier reads (one ```python block)."""
    return "```python\n" + solution.rstrip("\n") + "\n```"


# ----------------------------------------------------------------------------------------------------------------
# validation
# ----------------------------------------------------------------------------------------------------------------


def verifier_of(task: Task) -> str:
    return str(task.meta.get("verifier") or task.domain)


def validate_item(task: Task) -> str | None:
    """None when the item's verifier is valid, else its reason key (see the module docstring and :data:`REASONS`).

    Math items cost one math-verify parse (milliseconds once math-verify is imported); code items two sandbox
    runs of the reference solution when the first passes (a fresh child process each, a fraction of a second
    apiece for MBPP-sized items; up to the sandbox limits for a reference that loops)."""
    return check_item(task)[0]


def explain_item(task: Task) -> str:
    """``"reason: detail"`` for a rejected item, "" for a valid one (for logs); runs the same checks."""
    reason, detail = check_item(task)
    return f"{reason}: {detail}" if reason else ""


def static_check(task: Task) -> tuple[str | None, str]:
    """The part of :func:`check_item` that runs no code: a math reference that parses, code tests in format."""
    kind = verifier_of(task)
    if kind == "math":
        answer = reference_answer(task.reference or "")
        return (None, "") if parses_as_math(answer) else (UNPARSABLE, f"{answer!r} does not parse as math")
    if kind == "code":
        problem = code_format_problem(task)
        return (FORMAT, problem) if problem else (None, "")
    raise ValueError(f"validate_item handles math and code items, not verifier {kind!r} (task {task.id})")


def check_item(task: Task) -> tuple[str | None, str]:
    """``(reason key or None, one-line detail)``: what :func:`validate_item` and :func:`explain_item` report."""
    reason, detail = static_check(task)
    if reason is not None or verifier_of(task) == "math":
        return reason, detail
    solution = reference_solution(task)
    if not solution.strip():
        return REFERENCE_FAILS, "no reference solution"
    first = verify(task, as_response(solution))
    if first.score < 1.0:
        return REFERENCE_FAILS, first.reason
    second = verify(task, as_response(solution))
    if second.score != first.score:
        return NON_DETERMINISTIC, f"first run: {first.reason}; second run: {second.reason}"
    return None, ""


# ----------------------------------------------------------------------------------------------------------------
# generated items: what a self-generated question must also pass to enter a verified pool
# ----------------------------------------------------------------------------------------------------------------

_LATEX_COMMAND = re.compile(r"\\[A-Za-z]+")
_WORD = re.compile(r"[A-Za-z]{2,}")
_ANSWER_MARKUP = re.compile(r"</?answer>|</?solution>|\\boxed\s*\{|\bthe (?:final )?answer is\b|\banswer\s*:",
                            re.IGNORECASE)


def answer_words(answer: str) -> str:
    """The first word (two or more letters, outside LaTeX command names such as ``\\frac`` or ``\\pi``) in a math
    answer, "" if none: ``12 pencils``, ``No answer`` and ``There are 5 boxes`` hold words; ``\\frac{3}{4}``,
    ``x + 1``, ``[0, 1)`` and ``\\{1, 2\\}`` do not. math-verify reads ``12 pencils`` as 12 and ``No answer`` as a
    product of symbols, so a parse alone admits them."""
    found = _WORD.search(_LATEX_COMMAND.sub(" ", answer))
    return found.group(0) if found else ""


def answer_markup(question: str) -> str:
    """The answer markup a question holds (``<answer>``, ``\\boxed{``, "the answer is", "answer:"), "" if none."""
    found = _ANSWER_MARKUP.search(question)
    return found.group(0) if found else ""


def check_generated(task: Task) -> tuple[str | None, str]:
    """``(reason key or None, detail)`` for a generated item whose verifier :func:`check_item` found valid: a math
    reference with words in its answer (:func:`answer_words`), a question that holds answer markup or states its
    answer (:func:`answer_markup`), a math reference that its own verifier does not accept as an answer (no sampled
    solution could match it). Pure except one math-verify comparison."""
    markup = answer_markup(task.question)
    if markup:
        return ANSWER_IN_QUESTION, f"the question holds {markup!r}"
    if verifier_of(task) != "math":
        return None, ""
    answer = reference_answer(task.reference or "")
    word = answer_words(answer)
    if word:
        return WORDS_IN_ANSWER, f"the answer {answer!r} holds the word {word!r}"
    if verify(task, f"\\boxed{{{answer}}}").score < 1.0:
        return UNMATCHABLE, f"the answer {answer!r} does not verify against itself"
    return None, ""
