"""Code verifier: extraction, test splitting, scoring over every test format, output oracles."""
from __future__ import annotations

import os
import re

import pytest

from helpers.paths import DATA
from selfevo.types import Task
from selfevo.verifiers import verify
from selfevo.verifiers.code import (build_steps, evalplus_compare, extract_code, lcb_functional_case, lcb_method_name,
                                    lcb_task, limits_for, split_tests)
from selfevo.verifiers.sandbox import call_step, harness_for_tests, run_program

FAST = {"wall_s": 20.0, "cpu_s": 20.0, "unit_s": 2.0, "load_s": 5.0, "memory_mb": 1024}
ORACLES = harness_for_tests("oracles")  # the child harness's pure parts: output oracles and type checks
outputs_match, json_equal, evalplus_equal, foreign_type = (ORACLES.outputs_match, ORACLES._json_equal,
                                                           ORACLES._evalplus_equal, ORACLES._foreign_type)


def code_task(tests: str = "", entry_point: str = "", **meta) -> Task:
    return Task(id="t", domain="code", question="q", tests=tests, entry_point=entry_point,
                meta={"limits": FAST, **meta})


def fenced(code: str) -> str:
    return f"Here is my solution:\n```python\n{code}\n```\nIt works."


# ---- extraction ----------------------------------------------------------------------------------------------


def test_extract_code_prefers_last_python_fence():
    response = "```python\nx = 1\n```\ntext\n```python\nx = 2\n```\nOutput:\n```\n2\n```"
    assert extract_code(response).strip() == "x = 2"


def test_extract_code_untagged_unterminated_and_raw():
    assert extract_code("```\ny = 3\n```").strip() == "y = 3"
    assert extract_code("start\n```python\ndef f():\n    return 1\n").strip() == "def f():\n    return 1"
    assert extract_code("def g():\n    return 2\n") == "def g():\n    return 2\n"
    assert extract_code("  ```python\n  z = 1\n  ```").strip() == "z = 1"


# ---- splitting tests into steps ------------------------------------------------------------------------------


def test_split_asserts_setup_and_main_guard():
    source = "import math\nx = 2\nassert f(x) == 3\nassert True\nassert f(0) == 1, 'msg'\n" \
             "if __name__ == '__main__':\n    assert False\n"
    steps = split_tests(source)
    assert [s["unit"] for s in steps] == [False, False, True, False, True]


def test_split_humaneval_check_one_unit_per_assert():
    source = ("METADATA = {}\n\ndef check(candidate):\n    assert candidate(1) == 2\n    assert True, 'x'\n"
              "    y = candidate(2)\n    assert y == 3\n")
    steps = split_tests(source, entry_point="inc")
    units = [s["code"] for s in steps if s["unit"]]
    assert units == ["assert candidate(1) == 2", "assert y == 3"]
    assert any(s["code"] == "candidate = inc" for s in steps)


def test_split_check_called_explicitly_is_one_unit():
    steps = split_tests("def check(c):\n    assert c(1) == 2\ncheck(inc)\n", entry_point="inc")
    assert [s["code"] for s in steps if s["unit"]] == ["check(inc)"]


def test_split_pytest_functions_and_classes():
    source = ("import pytest\nfrom solution import f\n\ndef test_a():\n    assert f(1) == 2\n\n"
              "class TestB:\n    def test_c(self):\n        assert f(2) == 3\n    def helper(self):\n        pass\n")
    units = [s["name"] for s in split_tests(source) if s["kind"] == "pytest"]
    assert units == ["test_a", "TestB.test_c"]


def test_limits_override_and_unknown_limit():
    assert limits_for(code_task()).unit_s == 2.0
    with pytest.raises(ValueError, match="unknown sandbox limit"):
        limits_for(Task("t", "code", "q", meta={"limits": {"bogus": 1}}))


# ---- scoring -------------------------------------------------------------------------------------------------

ASSERTS = "assert add(1, 2) == 3\nassert add(2, 2) == 4\nassert add(0, 0) == 0\nassert add(-1, 1) == 0\n"


def test_correct_solution_scores_one():
    verdict = verify(code_task(ASSERTS), fenced("def add(a, b):\n    return a + b"))
    assert verdict.score == 1.0 and verdict.reason == "passed 4/4 tests"


def test_half_correct_solution_scores_half():
    verdict = verify(code_task(ASSERTS), fenced("def add(a, b):\n    return a + b if a > 0 else 99"))
    assert verdict.score == 0.5, verdict.reason
    assert "first failure" in verdict.reason


@pytest.mark.slow  # over 0.7 s on the AVX2 machine: out of the quick subset
def test_one_hanging_test_costs_only_that_test():
    code = "def add(a, b):\n    while a == -1:\n        pass\n    return a + b"
    verdict = verify(code_task(ASSERTS, limits={**FAST, "unit_s": 0.5}), fenced(code))
    assert verdict.score == 0.75 and "timed out" in verdict.reason


def test_syntax_error_and_missing_tests():
    assert verify(code_task(ASSERTS), fenced("def add(a, b) return")).score == 0.0
    assert "no tests" in verify(code_task(""), fenced("x = 1")).reason
    assert "does not parse" in verify(code_task("assert (("), fenced("x = 1")).reason


def test_humaneval_style_check_with_prompt():
    prompt = 'def inc(x: int) -> int:\n    """Add one."""\n'
    tests = "def check(candidate):\n    assert candidate(1) == 2\n    assert candidate(5) == 6\n"
    body_only = "    return x + 1\n"
    assert verify(code_task(tests, "inc", prompt=prompt), body_only).score == 1.0
    full = "```python\ndef inc(x):\n    return x + 2 if x > 3 else x + 1\n```"
    assert verify(code_task(tests, "inc", prompt=prompt), full).score == 0.5


@pytest.mark.slow  # over 1 s on the AVX2 machine: out of the quick subset
def test_pytest_style_with_parametrize_and_solution_import():
    tests = ("import pytest\nfrom solution import double\n\n@pytest.mark.parametrize('x,y', [(1, 2), (2, 4)])\n"
             "def test_double(x, y):\n    assert double(x) == y\n\ndef test_zero():\n    assert double(0) == 0\n\n"
             "class TestNeg:\n    def test_neg(self):\n        assert double(-3) == -6\n")
    assert verify(code_task(tests), fenced("def double(x):\n    return 2 * x")).score == 1.0
    # a parametrized test is one test: it passes only if every case passes
    wrong_for_two = fenced("def double(x):\n    return 5 if x == 2 else 2 * x")
    assert verify(code_task(tests), wrong_for_two).score == pytest.approx(2 / 3)


def test_stdin_stdout_cases():
    io = [{"input": "3 4\n", "output": "7\n"}, {"input": "10 -2\n", "output": "8"}]
    program = "import sys\na, b = map(int, sys.stdin.read().split())\nprint(a + b)\nsys.exit(0)"
    assert verify(code_task(io=io), fenced(program)).score == 1.0
    assert verify(code_task(io=io), fenced("print(7)")).score == 0.5
    assert verify(code_task(io=io), fenced("a, b = map(int, open(0).read().split())\nprint(a+b)")).score == 1.0


def test_livecodebench_functional_and_stdin_records():
    starter = "class Solution:\n    def addAll(self, nums: List[int], k: int) -> List[int]:\n"
    record = {"problem": "p", "starter_code": starter,
              "tests": [{"input": "[1, 2]\n3", "output": "[4, 5]", "testtype": "functional"},
                        {"input": "[]\n1", "output": "[]", "testtype": "functional"}]}
    task = lcb_task(record, "lcb/0")
    task.meta["limits"] = FAST
    good = starter + "        return tuple(x + k for x in nums)"
    assert verify(task, fenced(good)).score == 1.0
    assert lcb_method_name(record["starter_code"]) == "addAll"
    assert lcb_functional_case(record["tests"][0]) == {"args": [[1, 2], 3], "expected": [4, 5]}
    stdin_task = lcb_task({"problem": "p", "starter_code": "", "tests": [
        {"input": "2\n", "output": "4\n", "testtype": "stdin"}]}, "lcb/1")
    assert [s["kind"] for s in build_steps(stdin_task)] == ["io"]


def test_custom_eq_cannot_fake_call_results():
    record = {"problem": "p", "starter_code": "class Solution:\n    def f(self, x):\n",
              "tests": [{"input": "1", "output": "2", "testtype": "functional"}]}
    task = lcb_task(record, "lcb/2")
    task.meta["limits"] = FAST
    cheat = ("class Any:\n    def __eq__(self, other):\n        return True\n"
             "class Solution:\n    def f(self, x):\n        return Any()")
    verdict = verify(task, fenced(cheat))
    assert verdict.score == 0.0 and "type Any (it overrides Any.__eq__)" in verdict.reason


@pytest.mark.slow  # over 0.7 s on the AVX2 machine: out of the quick subset
def test_rebinding_builtins_or_numpy_cannot_fake_results():
    record = {"problem": "p", "starter_code": "class Solution:\n    def f(self, x):\n",
              "tests": [{"input": "1", "output": "2", "testtype": "functional"}]}
    task = lcb_task(record, "lcb/3")
    task.meta["limits"] = FAST
    cheat = ("import builtins\nbuiltins.bool = lambda *a: True\nbuiltins.all = lambda *a: True\n"
             "builtins.isinstance = lambda *a: True\n"
             "class Solution:\n    def f(self, x):\n        return 3")
    assert verify(task, fenced(cheat)).score == 0.0
    numpy_cheat = "import numpy\nnumpy.allclose = lambda *a, **k: True\ndef g():\n    return 2.0"
    float_step = call_step("g", [], 1.0, {"kind": "evalplus", "mode": "exact", "atol": 1e-6})
    assert run_program(numpy_cheat, [float_step], limits_for(code_task())).score == 0.0
    assert run_program(numpy_cheat.replace("2.0", "1.0000001"), [float_step], limits_for(code_task())).score == 1.0


# ---- output oracles (pure parts of the harness) ----------------------------------------------------------------


def test_outputs_match():
    assert outputs_match("1 2\n3\n", "1 2\n3")
    assert outputs_match("  1   2 \n", "1 2")
    assert outputs_match("1.0\n", "1\n")
    assert not outputs_match("1 2\n", "1 3\n")
    assert not outputs_match("1\n2\n", "1\n")


def test_json_and_type_checks():
    assert json_equal((1, [2, (3,)]), [1, [2, [3]]])
    assert not json_equal([1], [2])
    assert foreign_type([1, (2.0, "x"), {"a": None}], set()) == ""

    class Plain(int):
        pass

    class Fake(int):
        __eq__ = int.__ne__

    class Lying(tuple):
        def __iter__(self):
            return iter([1, 2])

    assert foreign_type([Plain(1)], set()) == ""  # overrides nothing: int's own == applies
    assert foreign_type([Fake(1)], set()) == "Fake (it overrides Fake.__eq__)"
    assert foreign_type({"k": [Lying()]}, set()).startswith("Lying")
    assert foreign_type([Fake(1)], {Fake}) == ""
    assert foreign_type(re.match("a", "a"), set()) == ""  # a C heap type


@pytest.mark.slow
def test_large_outputs_are_checked_completely():
    class Fake(int):
        __eq__ = int.__ne__

    assert foreign_type(list(range(2_000_000)), set()) == ""  # flat lists of plain scalars: checked at C speed
    assert foreign_type(list(range(2_000_000)) + [Fake(1)], set()).startswith("Fake")
    assert foreign_type([[1, 2]] * 20_000_000, set()) == "a value too large to check"  # fails closed


def test_call_target_named_like_a_builtin():
    """MBPP+'s ``sum``: a call step's target is the program's function even if it shadows a builtin."""
    step = call_step("sum", [10, 15], 6, {"kind": "evalplus", "mode": "exact", "atol": 0})
    program = ("import builtins\ndef sum(a, b):  # sum of common divisors\n"
               "    return builtins.sum(d for d in range(1, min(a, b) + 1) if a % d == 0 == b % d)")
    assert run_program(program, [step], limits_for(code_task())).score == 1.0


def test_evalplus_oracle_modes():
    exact = {"kind": "evalplus", "mode": "exact", "atol": 0}
    assert evalplus_equal(3, 3, exact, [])
    assert evalplus_equal(0.1 + 0.2, 0.3, exact, [])  # floats get atol 1e-6
    assert not evalplus_equal([1.0], (1.0,), {**exact, "atol": 1e-6}, [])  # type must match
    assert evalplus_equal([2, 1], [1, 2], {**exact, "mode": "set"}, [])
    assert evalplus_equal("match", True, {**exact, "mode": "not_none"}, [])
    assert evalplus_equal(1.0, 5.0, {**exact, "mode": "poly", "atol": 1e-4}, [[-1.0, 1.0]])
    assert evalplus_equal(0, 7, {**exact, "mode": "alt", "alt": 0}, [])
    assert evalplus_equal([1.0, [2.0, float("inf")]], [1.0 + 1e-9, [2.0, float("inf")]], {**exact, "atol": 1e-6}, [])
    assert not evalplus_equal([1.0, float("nan")], [1.0, float("nan")], {**exact, "atol": 1e-6}, [])
    assert evalplus_compare("humaneval", "find_zero", 1e-4, [[1, 2]])["mode"] == "poly"
    assert evalplus_compare("mbpp", "similar_elements", 0, [[1], [2]])["mode"] == "set"
    assert evalplus_compare("mbpp", "sum_div", 0, [4]) == {"kind": "evalplus", "mode": "alt", "atol": 0, "alt": 0}


MINI = os.path.join(DATA, "humanevalplus", "HumanEvalPlus-Mini.jsonl.gz")


@pytest.mark.slow  # over 0.7 s on the AVX2 machine: out of the quick subset
@pytest.mark.skipif(not os.path.exists(MINI), reason="HumanEval+ Mini data not found")
def test_evalplus_humaneval_plus_mini_task():
    from selfevo.verifiers.code import evalplus_data, evalplus_tasks

    tasks = {t.id: t for t in evalplus_tasks("humaneval", MINI)}
    problems, _ = evalplus_data("humaneval", MINI)
    task = tasks["HumanEval/0"]
    task.meta["limits"] = FAST
    canonical = problems["HumanEval/0"]["canonical_solution"]
    assert verify(task, canonical).score == 1.0
    wrong = "    return False\n"
    verdict = verify(task, wrong)
    assert 0.0 < verdict.score < 1.0 and "base[" in verdict.reason or "plus[" in verdict.reason
