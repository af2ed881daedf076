"""The math verifier (selfevo.verifiers.math): extraction, tricky equivalences, and use from worker threads."""
from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from selfevo.types import Task
from selfevo.verifiers import verify
from selfevo.verifiers.base import Verdict
from selfevo.verifiers.math import extract_answer, gsm8k_answer, last_boxed, last_number, reference_answer


def math_task(reference: str) -> Task:
    return Task(id="t", domain="math", question="q", reference=reference)


# ---- extraction ----------------------------------------------------------------------------------------------


def test_last_boxed_handles_nested_braces_and_takes_the_last():
    text = r"first \boxed{1} then \boxed{\frac{a^{2}}{\sqrt{b}}} done"
    assert last_boxed(text) == r"\frac{a^{2}}{\sqrt{b}}"
    assert last_boxed(r"\fbox{7}") == "7"
    assert last_boxed(r"\boxed{unclosed") is None
    assert last_boxed("no box") is None


def test_gsm8k_and_last_number():
    assert gsm8k_answer("work...\n#### 1,234") == "1234"
    assert gsm8k_answer("#### 72.") == "72"
    assert gsm8k_answer("nothing") is None
    assert last_number("we get 3 apples, then 1,000 pears and finally -2.5") == "-2.5"
    assert last_number("total 1,000") == "1000"
    assert last_number("ratio 3/4") == "3/4"
    assert last_number("no digits") is None


def test_extract_answer_priority():
    assert extract_answer(r"#### 5 but \boxed{6}") == "6"
    assert extract_answer("answer 4\n#### 5") == "5"
    assert extract_answer("I think it is 12 and then 13") == "13"
    assert extract_answer("nothing here") is None


def test_reference_answer_forms():
    assert reference_answer(r"so \boxed{\frac12}") == r"\frac12"
    assert reference_answer("steps\n#### 1,000") == "1000"
    assert reference_answer("  42 ") == "42"


# ---- equivalence (through math-verify) -----------------------------------------------------------------------

EQUAL = [
    (r"\frac{1}{2}", r"\boxed{0.5}"),
    ("0.5", r"\boxed{\dfrac{1}{2}}"),
    ("1000", r"\boxed{1,000}"),
    ("1,000", "The total is 1000."),
    ("3", r"\boxed{x=3}"),
    ("x=3", r"\boxed{3}"),
    (r"50\%", r"\boxed{50}"),
    ("5", r"\boxed{5\text{ cm}}"),
    (r"(1,3]", r"\boxed{(1, 3]}"),
    (r"\{1,2,3\}", r"\boxed{\{3,2,1\}}"),
    (r"(3,\frac{\pi}{2})", r"\boxed{\left(3, \pi/2\right)}"),
    (r"2\sqrt{3}", r"\boxed{\sqrt{12}}"),
    (r"\frac{\sqrt{3}}{3}", r"\boxed{\frac{1}{\sqrt{3}}}"),
    (r"(-\infty, 2)", r"\boxed{(-\infty,2)}"),
    ("x^2+2x", r"\boxed{x(x+2)}"),
    ("10", r"\boxed{10^\circ}"),
    (r"\text{Monday}", r"\boxed{\text{Monday}}"),
    ("72", "Natalia sold 48 + 24 = 72 clips.\n#### 72"),
]

NOT_EQUAL = [
    ("2", r"\boxed{3}"),
    ("[1,3]", r"\boxed{(1,3)}"),
    ("(1,2)", r"\boxed{(2,1)}"),
    ("1/3", r"\boxed{0.33}"),
    ("3", r"\boxed{3.0001}"),
    (r"\sqrt{2}", r"\boxed{2}"),
    ("1000", r"\boxed{100}"),
    (r"\{1,2\}", r"\boxed{\{1,2,3\}}"),
]


@pytest.mark.parametrize("reference,response", EQUAL)
def test_equal_answers_score_one(reference, response):
    verdict = verify(math_task(reference), response)
    assert verdict.score == 1.0, verdict.reason


@pytest.mark.parametrize("reference,response", NOT_EQUAL)
def test_different_answers_score_zero(reference, response):
    verdict = verify(math_task(reference), response)
    assert verdict.score == 0.0, verdict.reason


def test_no_answer_gives_reason():
    verdict = verify(math_task("4"), "I do not know")
    assert verdict == Verdict(0.0, verdict.reason, None) and "no final answer" in verdict.reason


def test_math_from_worker_threads_matches_main_thread():
    """math-verify's signal timeouts only work on the main thread; off it, the worker pool answers."""
    cases = EQUAL[:4] + NOT_EQUAL[:4]
    expected = [1.0] * 4 + [0.0] * 4
    seen_threads = set()

    def score(case):
        seen_threads.add(threading.current_thread() is threading.main_thread())
        return verify(math_task(case[0]), case[1]).score

    with ThreadPoolExecutor(max_workers=2) as pool:
        assert list(pool.map(score, cases)) == expected
    assert seen_threads == {False}
