"""Item validation (selfevo.verifiers.validate): the entry point the tests call, fences, math answers that parse
(also off the main thread), code items whose reference solution passes its own tests in the sandbox, and references
that are not deterministic."""
from __future__ import annotations

import threading

import pytest

from selfevo.types import Task
from selfevo.verifiers.validate import REASONS, find_entry_point, parses_as_math, strip_fences, validate_item


# ---- entry point and fences -------------------------------------------------------------------------------------
def test_entry_point_is_the_called_function_the_solution_defines():
    tests = "import math\nassert math.isclose(area(sorted([2, 1])[0]), 3.14159, rel_tol=1e-3)\nassert helper(1)"
    assert find_entry_point(tests, "def helper(x): return x\ndef area(r): return math.pi*r*r") == ("area", "")
    tests = "def check(x):\n    return x > 0\nassert check(area(1))"  # helpers the tests define are not targets
    assert find_entry_point(tests, "def area(r): return 3") == ("area", "")
    assert find_entry_point("assert area(1) == 3", "def area(r) return") == ("area", "")  # broken solution: later
    assert strip_fences("```python\nx = 1\n```") == "x = 1" and strip_fences("\nx = 1\n") == "x = 1"
    assert strip_fences("```py\nx = 1\n") == "x = 1"  # unterminated fence


# ---- math and code items ---------------------------------------------------------------------------------------
def test_validate_math_items():
    assert validate_item(Task("a", "math", "Q", "\\frac{3}{4}")) is None
    assert validate_item(Task("a", "math", "Q", "\\frac{3}{")) == "unparsable answer"
    assert validate_item(Task("a", "math", "Q", "")) == "unparsable answer"
    assert validate_item(Task("a", "math", "Q", "so \\boxed{12}")) is None
    assert parses_as_math("x^2 + 1") and not parses_as_math("???")


def test_math_parse_check_works_off_the_main_thread():
    results = []
    thread = threading.Thread(target=lambda: results.extend([parses_as_math("12"), parses_as_math("\\sqrt{")]))
    thread.start()
    thread.join(60)
    assert results == [True, False]


def _code(tests, solution, entry_point="add"):
    return Task("c", "code", "Q", tests=tests, entry_point=entry_point,
                meta={"verifier": "code", "reference_solution": solution})


@pytest.mark.slow  # over 0.7 s on the AVX2 machine: out of the quick subset
def test_validate_code_items():
    add = "def add(a, b):\n    return a + b\n"
    assert validate_item(_code("assert add(1, 2) == 3\n", add)) is None
    assert validate_item(_code("assert add(1, 2) == \n", add)) == "format"
    assert validate_item(_code("assert mul(1, 2) == 2\n", add)) == "format"  # never calls the entry point
    assert validate_item(_code("x = add(1, 2)\n", add)) == "format"  # no assert
    assert validate_item(_code("assert add(1, 2) == 4\n", add)) == "reference fails"
    assert validate_item(_code("assert add(1, 2) == 3\n", "def add(a, b) return")) == "reference fails"
    assert validate_item(_code("assert add(1, 2) == 3\n", "")) == "reference fails"
    with pytest.raises(ValueError, match="math and code"):
        validate_item(Task("m", "mcq", "Q", "A"))
    assert set(REASONS) == {"format", "unparsable answer", "reference fails", "non-deterministic"}


def test_non_deterministic_reference_is_caught(monkeypatch):
    """A reference whose second sandbox run scores differently (faked here: real flakiness is not reproducible)."""
    import selfevo.verifiers.validate as validate
    from selfevo.verifiers.base import Verdict

    scores = iter([1.0, 0.0])
    monkeypatch.setattr(validate, "verify", lambda task, response: Verdict(next(scores), "faked"))
    assert validate_item(_code("assert add(1, 2) == 3\n", "def add(a, b):\n    return a + b\n")) == \
        "non-deterministic"
    runs = []
    monkeypatch.setattr(validate, "verify", lambda task, response: runs.append(1) or Verdict(0.0, "faked"))
    assert validate_item(_code("assert add(1, 2) == 3\n", "def add(a, b):\n    return 0\n")) == "reference fails"
    assert len(runs) == 1  # a failing first run is not repeated
