"""Math verifier: pull the final answer out of a response and test equivalence with ``math-verify``.

Extraction order: the last ``\\boxed{...}`` (or ``\\fbox{...}``, nested braces allowed), else GSM8K's ``#### n``,
else the last plain number (``1,000``, ``-3.5``, ``3/4``). The reference gets the same treatment when it holds a
``\\boxed{}`` or ``####``; otherwise it is taken whole. Both are wrapped in ``$...$`` and compared with
``math_verify.verify(gold, pred)`` (gold first: it is not symmetric), which handles fractions vs decimals, LaTeX
forms, tuples, intervals, sets, ``x=3`` vs ``3``, ``1,000``, ``\\%`` and ``\\text{ cm}`` style units.

Threads: math-verify's timeouts use ``signal.alarm``, which only works on the main thread. On the main thread we
call it directly with its timeouts; on any other thread the call goes to a small pool of worker processes (each
runs math-verify on its own main thread, so its timeouts work there) and the calling thread waits with its own
deadline, killing a worker that overruns. Each worker costs one Python process with sympy loaded (~150 MB).
"""
from __future__ import annotations

import atexit
import json
import os
import re
import select
import subprocess
import sys
import threading
import time

from selfevo.types import Task
from selfevo.verifiers.base import Verdict, fail, register_verifier

MATH_TIMEOUT_S = 5  # math-verify's own parse/verify timeouts (whole seconds: it uses signal.alarm)
_WORKER_START_S = 120.0  # first import of sympy + math-verify in a fresh worker
_NUMBER = r"-?\d+/\d+|-?\d{1,3}(?:,\d{3})+(?:\.\d+)?|-?\d+(?:\.\d+)?|-?\.\d+"


# ----------------------------------------------------------------------------------------------------------------
# Extraction (pure)
# ----------------------------------------------------------------------------------------------------------------


def last_boxed(text: str) -> str | None:
    """Content of the last ``\\boxed{...}`` / ``\\fbox{...}`` (balanced braces), or None."""
    starts = [m.end() for m in re.finditer(r"\\(?:boxed|fbox)\s*\{", text)]
    for start in reversed(starts):
        content = _balanced(text, start)
        if content is not None:
            return content.strip()
    return None


def _balanced(text: str, start: int) -> str | None:
    """Text from ``start`` up to the brace closing the one just before it, or None if it never closes."""
    depth = 1
    for i in range(start, len(text)):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                return text[start:i]
    return None


def gsm8k_answer(text: str) -> str | None:
    """What follows the last ``####`` (commas removed, trailing period dropped), or None."""
    matches = re.findall(r"####\s*([^\n]+)", text)
    if not matches:
        return None
    answer = matches[-1].strip().rstrip(".").strip()
    return answer.replace(",", "") if re.fullmatch(_NUMBER, answer.replace(" ", "")) else answer


def last_number(text: str) -> str | None:
    """The last plain number in ``text`` (thousands separators removed), or None."""
    matches = re.findall(_NUMBER, text)
    return matches[-1].replace(",", "") if matches else None


def extract_answer(response: str) -> str | None:
    """The final answer of a response: boxed, else ``#### n``, else the last number."""
    for extractor in (last_boxed, gsm8k_answer, last_number):
        answer = extractor(response)
        if answer:
            return answer
    return None


def reference_answer(reference: str) -> str:
    """The gold answer inside a reference (a boxed solution, a GSM8K solution, or the bare answer)."""
    if "\\boxed" in reference or "\\fbox" in reference:
        return last_boxed(reference) or ""
    if "####" in reference:
        return gsm8k_answer(reference) or ""
    return reference.strip()


def _as_latex(answer: str) -> str:
    """Wrap an answer in ``$...$`` for math-verify's LaTeX extractor."""
    return "$" + answer.strip().strip("$").strip() + "$"


def _same_text(a: str, b: str) -> bool:
    """Cheap exact match before calling sympy (spaces and outer dollars ignored)."""
    norm = lambda s: re.sub(r"\s+", "", s).strip("$")  # noqa: E731
    return norm(a) == norm(b)


# ----------------------------------------------------------------------------------------------------------------
# Equivalence
# ----------------------------------------------------------------------------------------------------------------


def equivalent(gold: str, pred: str) -> tuple[bool, str]:
    """Whether ``pred`` equals ``gold`` per math-verify; returns (equal, problem-or-empty). Any thread."""
    if _same_text(gold, pred):
        return True, ""
    if threading.current_thread() is threading.main_thread():
        return _equivalent_here(gold, pred, MATH_TIMEOUT_S)
    return _POOL.ask(gold, pred)


def _equivalent_here(gold: str, pred: str, timeout: int | None) -> tuple[bool, str]:
    """math-verify in this process; ``timeout`` None disables its signal-based timeouts."""
    from math_verify import parse, verify

    gold_parsed = parse(_as_latex(gold), parsing_timeout=timeout)
    if not gold_parsed:
        return False, f"reference {gold!r} could not be parsed"
    pred_parsed = parse(_as_latex(pred), parsing_timeout=timeout)
    if not pred_parsed:
        return False, f"answer {pred!r} could not be parsed"
    return bool(verify(gold_parsed, pred_parsed, timeout_seconds=timeout)), ""


class _Worker:
    """One math-verify worker process speaking JSON lines over its stdin/stdout."""

    def __init__(self):
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        boot = f"import sys; sys.path.insert(0, {root!r}); from selfevo.verifiers.math import _serve; _serve()"
        self.proc = subprocess.Popen([sys.executable, "-c", boot], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, start_new_session=True)
        self.ready = False

    def ask(self, gold: str, pred: str, timeout: float) -> dict | None:
        """Send one question; the reply, or None if the worker died or overran ``timeout``."""
        try:
            self.proc.stdin.write((json.dumps({"gold": gold, "pred": pred}) + "\n").encode())
            self.proc.stdin.flush()
        except OSError:
            return None
        if not self.ready:
            timeout += _WORKER_START_S
        reply = self._read_line(timeout)
        self.ready = self.ready or reply is not None
        return reply

    def _read_line(self, timeout: float) -> dict | None:
        readable, _, _ = select.select([self.proc.stdout], [], [], timeout)
        if not readable:
            return None
        line = self.proc.stdout.readline()
        try:
            return json.loads(line) if line else None
        except ValueError:
            return None

    def kill(self) -> None:
        try:
            self.proc.kill()
            self.proc.wait(timeout=5)
        except (OSError, subprocess.TimeoutExpired):
            pass


class _WorkerPool:
    """At most ``size`` workers shared by all threads; a worker that overruns is killed and replaced."""

    def __init__(self, size: int):
        self.size = size
        self.idle: list[_Worker] = []
        self.count = 0
        self.cond = threading.Condition()
        atexit.register(self.close)

    def ask(self, gold: str, pred: str) -> tuple[bool, str]:
        worker = self._acquire()
        deadline = 3 * MATH_TIMEOUT_S + 5
        reply = worker.ask(gold, pred, deadline)
        if reply is None:
            worker.kill()
            self._release(None)
            return False, f"math-verify did not answer within {deadline} s"
        self._release(worker)
        return bool(reply.get("equal")), str(reply.get("problem", ""))

    def _acquire(self) -> _Worker:
        with self.cond:
            while not self.idle and self.count >= self.size:
                self.cond.wait()
            if self.idle:
                return self.idle.pop()
            self.count += 1
        return _Worker()

    def _release(self, worker: _Worker | None) -> None:
        with self.cond:
            if worker is None:
                self.count -= 1
            else:
                self.idle.append(worker)
            self.cond.notify()

    def close(self) -> None:
        with self.cond:
            workers, self.idle = self.idle, []
        for worker in workers:
            worker.kill()


_POOL = _WorkerPool(size=max(1, min(4, (os.cpu_count() or 2) // 2)))


def _serve() -> None:
    """Worker loop: one JSON question per stdin line, one JSON answer per stdout line."""
    out = os.fdopen(os.dup(1), "w")
    sys.stdout = sys.stderr  # anything math-verify prints must not corrupt the protocol
    import math_verify  # noqa: F401 - import before the first question so its time is not charged to it

    for line in sys.stdin:
        try:
            question = json.loads(line)
            equal, problem = _equivalent_here(question["gold"], question["pred"], MATH_TIMEOUT_S)
        except Exception as exc:  # noqa: BLE001 - report, never die on one question
            equal, problem = False, f"math-verify failed: {type(exc).__name__}: {exc}"
        out.write(json.dumps({"equal": equal, "problem": problem}) + "\n")
        out.flush()


# ----------------------------------------------------------------------------------------------------------------
# The verifier
# ----------------------------------------------------------------------------------------------------------------


@register_verifier("math")
def verify_math(task: Task, response: str) -> Verdict:
    """1.0 when the response's final answer is mathematically equal to the reference, else 0.0."""
    pred = extract_answer(response)
    if pred is None:
        return fail("no final answer found (no \\boxed{}, '#### n' or number)")
    gold = reference_answer(task.reference)
    if not gold:
        return fail("the task has no reference answer", pred)
    start = time.monotonic()
    try:
        equal, problem = equivalent(gold, pred)
    except Exception as exc:  # noqa: BLE001 - math-verify/sympy internals; a verdict, not a crash
        return fail(f"math-verify failed: {type(exc).__name__}: {exc}", pred)
    if equal:
        return Verdict(1.0, f"answer {pred!r} equals reference {gold!r}", pred)
    took = time.monotonic() - start
    return fail(problem or f"answer {pred!r} differs from reference {gold!r} ({took:.2f} s)", pred)
