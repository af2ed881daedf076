"""SAGE's pure parts: the four roles (prompts, parsers on hand-written outputs), FORMAT_TAGS with the soft format
reward, verifier validation (code in the sandbox), and the seed set (Table 5 counts, training splits)."""
from __future__ import annotations

import threading

import pytest

from helpers.paths import DATA, needs_data
from selfevo.rewards.formulas import soft_format_reward
from selfevo.roles import ROLES, get_role
from selfevo.roles.base import RoleError
from selfevo.roles.sage import FORMAT_TAGS, format_tags, statement
from selfevo.tasks import load_tasks, sage_seed_set
from selfevo.tasks.sage_seed import SAGE_COUNTS, sage_part_counts
from selfevo.types import Task
from selfevo.verifiers import verify
from selfevo.verifiers.validate import (REASONS, explain_item, find_entry_point, parses_as_math, strip_fences,
                                        validate_item)


MATH_REF = Task("gsm8k/train/0", "math", "Natalia sold 48 clips in April and half as many in May. How many in all?",
                "72", meta={"verifier": "math"})
CODE_REF = Task("mbpp/1", "code", "Write a function to add two numbers.\n\nYour code should pass these tests:\n\n"
                "```python\nassert add(1, 2) == 3\n```", tests="assert add(1, 2) == 3\n", entry_point="add",
                meta={"verifier": "code", "solution": "def add(a, b):\n    return a + b\n"})

GOOD_MATH = ("Here is a new one.\n<question>A farmer has 3 pens with 14 sheep each. He sells 9 sheep. How many "
             "sheep are left?</question>\n<answer>33</answer>")
GOOD_CODE = """<question>Write a function that returns the largest even number in a list, or None if there is none.
</question>
<tests>
```python
assert largest_even([1, 4, 7, 10]) == 10
assert largest_even([3, 5]) is None
assert largest_even([-2, -8]) == -2
```
</tests>
<solution>
```python
def largest_even(xs):
    evens = [x for x in xs if x % 2 == 0]
    return max(evens) if evens else None
```
</solution>"""
WRONG_CODE = GOOD_CODE.replace("return max(evens) if evens else None", "return min(evens) if evens else None")


def challenger():
    return get_role("sage.challenger")


# ---- registry and role options ---------------------------------------------------------------------------------
def test_sage_roles_are_registered_with_their_kinds_and_reads():
    expected = {"sage.challenger": ("challenger", ("reference",)), "sage.planner": ("planner", ()),
                "sage.solver": ("solver", ("plan",)), "sage.critic": ("critic", ("subject", "plan"))}
    for name, (kind, reads) in expected.items():
        cls = ROLES.get(name)
        assert (cls.kind, cls.reads) == (kind, reads)


def test_critic_defaults_to_a_low_temperature_and_others_to_the_runs():
    assert get_role("sage.critic").temperature == 0.1
    assert get_role("sage.critic", temperature=0.5).temperature == 0.5
    assert get_role("sage.solver").temperature is None


# ---- challenger ---------------------------------------------------------------------------------------------------
def test_challenger_prompts_show_the_reference_item_and_the_format():
    math_prompt = challenger().messages(MATH_REF, reference=MATH_REF)[-1]["content"]
    assert MATH_REF.question in math_prompt and "<answer>72</answer>" in math_prompt
    assert "<question></question>" in math_prompt
    code_prompt = challenger().messages(CODE_REF, reference=CODE_REF)[-1]["content"]
    assert "<question>Write a function to add two numbers.</question>" in code_prompt  # tests not repeated in it
    assert "assert add(1, 2) == 3" in code_prompt and "def add(a, b):" in code_prompt and "<solution>" in code_prompt
    assert challenger().messages(CODE_REF) == challenger().messages(MATH_REF, reference=CODE_REF)


def test_challenger_parses_a_good_math_item():
    parsed = challenger().parse(GOOD_MATH, reference=MATH_REF)
    assert parsed.ok, parsed.error
    task = parsed.value
    assert task.domain == "math" and task.reference == "33" and task.meta == {"verifier": "math"}
    assert task.id.startswith("gen-") and task.question.startswith("A farmer has 3 pens")
    assert challenger().parse(GOOD_MATH, reference=MATH_REF).value.id == task.id  # id = hash of the question
    assert validate_item(task) is None
    assert verify(task, "3*14 = 42, 42 - 9 = 33. <answer>\\boxed{33}</answer>").score == 1.0


@pytest.mark.parametrize("text, error", [
    ("<answer>33</answer>", "format: no <question>"),
    ("<question>  </question><answer>33</answer>", "format: no <question>"),
    ("<question>How many?</question>", "format: no <answer>"),
    ("<question>How many?</question><answer></answer>", "format: no <answer>"),
])
def test_challenger_math_failures_start_with_a_reason_key(text, error):
    parsed = challenger().parse(text, reference=MATH_REF)
    assert not parsed.ok and parsed.value is None and parsed.error.startswith(error), parsed.error


@pytest.mark.parametrize("answer", ["\\frac{1}{", "???"])
def test_challenger_math_item_with_an_unparsable_answer_parses_and_fails_validation(answer):
    """Every tag present: an item (the Critic scores it, SAGE Eq. 6), whose verifier admission rejects."""
    parsed = challenger().parse(f"<question>How many?</question><answer>{answer}</answer>", reference=MATH_REF)
    assert parsed.ok and validate_item(parsed.value) == "unparsable answer"


def test_challenger_math_answer_may_be_boxed():
    parsed = challenger().parse("<question>Half of 9?</question><answer>\\boxed{\\frac{9}{2}}</answer>",
                                reference=MATH_REF)
    assert parsed.ok and validate_item(parsed.value) is None
    assert verify(parsed.value, "<answer>\\boxed{4.5}</answer>").score == 1.0


def test_challenger_parses_a_fenced_code_item_into_a_valid_task():
    parsed = challenger().parse(GOOD_CODE, reference=CODE_REF)
    assert parsed.ok, parsed.error
    task = parsed.value
    assert task.domain == "code" and task.entry_point == "largest_even" and task.id.startswith("gen-")
    assert "```" not in task.tests and task.tests.startswith("assert largest_even([1, 4, 7, 10]) == 10")
    assert task.meta["verifier"] == "code" and task.meta["reference_solution"].startswith("def largest_even(xs):")
    # the question names the function (the statement did not) and shows the tests as MBPP prompts do
    assert "Write a Python function named `largest_even`." in task.question
    assert "Your code should pass these tests:\n\n```python\nassert largest_even([1, 4, 7, 10]) == 10" in task.question
    assert statement(task) == task.meta["statement"]
    assert validate_item(task) is None and explain_item(task) == ""
    # the solver's answer format verifies
    answer = "Keep the evens.\n<answer>\n```python\n" + task.meta["reference_solution"] + "```\n</answer>"
    assert verify(task, answer).score == 1.0
    assert verify(task, "<answer>\n```python\ndef largest_even(xs):\n    return 0\n```\n</answer>").score == 0.0
    # as a reference for the next challenge it shows the bare statement
    prompt = challenger().messages(task, reference=task)[-1]["content"]
    assert "<question>Write a function that returns the largest even number" in prompt
    assert prompt.count("assert largest_even([1, 4, 7, 10]) == 10") == 1


def test_challenger_code_item_that_names_its_function_gets_no_extra_line():
    text = GOOD_CODE.replace("Write a function that", "Write a function largest_even(xs) that")
    task = challenger().parse(text, reference=CODE_REF).value
    assert "Write a Python function named" not in task.question


def test_challenger_code_statement_that_copies_the_tests_shows_them_once():
    text = GOOD_CODE.replace("\n</question>", "\n\nYour code should pass these tests:\nassert largest_even([2]) == 2"
                             "</question>")
    task = challenger().parse(text, reference=CODE_REF).value
    assert task.question.count("Your code should pass these tests:") == 1
    assert "assert largest_even([2]) == 2" not in task.question
    only_tests = "<question>Your code should pass these tests:</question>" + GOOD_CODE.split("</question>", 1)[1]
    assert challenger().parse(only_tests, reference=CODE_REF).error.startswith("format: the <question> holds only")


def test_wrong_reference_solution_fails_validation():
    parsed = challenger().parse(WRONG_CODE, reference=CODE_REF)
    assert parsed.ok  # the format is fine; validation runs the reference
    assert validate_item(parsed.value) == "reference fails"
    assert explain_item(parsed.value).startswith("reference fails: passed 1/3 tests")


@pytest.mark.parametrize("text, error", [
    (GOOD_CODE.replace("<tests>", "<test>"), "format: no <tests>"),
    (GOOD_CODE.replace("<solution>", "").replace("</solution>", ""), "format: no <solution>"),
    ("<question>Q</question><tests>```python\n```</tests><solution>def f(): pass</solution>", "format: no <tests>"),
])
def test_challenger_code_failures_start_with_a_reason_key(text, error):
    parsed = challenger().parse(text, reference=CODE_REF)
    assert not parsed.ok and parsed.error.startswith(error), parsed.error


@pytest.mark.parametrize("text, detail", [
    ("<question>Q</question><tests>assert f(1) == </tests><solution>def f(x): return x</solution>",
     "format: the tests do not parse as Python"),
    ("<question>Q</question><tests>assert 1 + 1 == 2\nassert len([1]) == 1</tests><solution>def f(x): return x"
     "</solution>", "format: the tests call no function"),
    ("<question>Q</question><tests>x = f(1)</tests><solution>def f(x): return x</solution>",
     "format: the tests hold no assert"),
    ("<question>Q</question><tests>assert g(1) == 1</tests><solution>def f(x): return x</solution>",
     "format: the tests call g but the solution defines f"),
])
def test_challenger_code_item_with_invalid_tests_parses_and_fails_validation(text, detail):
    """Every tag present: an item (the Critic scores it, SAGE Eq. 6), whose verifier admission rejects, saying why."""
    parsed = challenger().parse(text, reference=CODE_REF)
    assert parsed.ok and validate_item(parsed.value) == "format"
    assert explain_item(parsed.value).startswith(detail), explain_item(parsed.value)


def test_challenger_parse_needs_a_reference():
    with pytest.raises(RoleError, match="ctx.reference"):
        challenger().parse(GOOD_MATH)


def test_sage_roles_refuse_other_domains():
    with pytest.raises(RoleError, match="math and code"):
        get_role("sage.solver").messages(Task("m", "mcq", "Pick one.", "A"))


# ---- entry point and fences -------------------------------------------------------------------------------------
def test_entry_point_is_the_called_function_the_solution_defines():
    tests = "import math\nassert math.isclose(area(sorted([2, 1])[0]), 3.14159, rel_tol=1e-3)\nassert helper(1)"
    assert find_entry_point(tests, "def helper(x): return x\ndef area(r): return math.pi*r*r") == ("area", "")
    tests = "def check(x):\n    return x > 0\nassert check(area(1))"  # helpers the tests define are not targets
    assert find_entry_point(tests, "def area(r): return 3") == ("area", "")
    assert find_entry_point("assert area(1) == 3", "def area(r) return") == ("area", "")  # broken solution: later
    assert strip_fences("```python\nx = 1\n```") == "x = 1" and strip_fences("\nx = 1\n") == "x = 1"
    assert strip_fences("```py\nx = 1\n") == "x = 1"  # unterminated fence


# ---- planner, solver, critic -----------------------------------------------------------------------------------
def test_planner_prompt_and_parse():
    planner = get_role("sage.planner")
    prompt = planner.messages(MATH_REF)[-1]["content"]
    assert MATH_REF.question in prompt and "<plan>" in prompt and "Do not solve" in prompt
    assert "Do not write code" in planner.messages(CODE_REF)[-1]["content"]
    good = "<plan>\n1. Halve 48.\n2. Add the two months.\n</plan>"
    assert planner.parse(good).value == "1. Halve 48.\n2. Add the two months."
    assert planner.parse("1. Halve 48.").error.startswith("format: no <plan>")
    assert planner.parse("<plan> </plan>").error.startswith("format: no <plan>")


def test_solver_prompt_with_and_without_plan():
    solver = get_role("sage.solver")
    bare = solver.messages(MATH_REF)[-1]["content"]
    assert MATH_REF.question in bare and "plan" not in bare and "<answer>\\boxed{17}</answer>" in bare
    planned = solver.messages(MATH_REF, plan="1. Halve 48.")[-1]["content"]
    assert "Follow this plan:\n1. Halve 48." in planned
    code = solver.messages(CODE_REF)[-1]["content"]
    assert CODE_REF.question in code and "```python" in code and "<answer>" in code
    assert solver.parse("<answer>\\boxed{72}</answer>").value == "<answer>\\boxed{72}</answer>"
    assert solver.parse("  ").error.startswith("format: ")


def test_solver_answers_verify_in_both_domains():
    math_answer = "48 / 2 = 24, 48 + 24 = 72.\n<answer>\\boxed{72}</answer>"
    assert verify(MATH_REF, math_answer).score == 1.0
    code_answer = "<answer>\n```python\ndef add(a, b):\n    return a + b\n```\n</answer>"
    assert verify(CODE_REF, code_answer).score == 1.0


def test_critic_prompts_for_question_and_plan():
    critic = get_role("sage.critic")
    q = critic.messages(MATH_REF, subject="question")[-1]["content"]
    assert MATH_REF.question in q and "<score>" in q and "1 (very bad) to 10" in q and "Plan:" not in q
    assert critic.messages(MATH_REF) == critic.messages(MATH_REF, subject="question")
    p = critic.messages(CODE_REF, subject="plan", plan="1. Add a and b.")[-1]["content"]
    assert "Plan:\n1. Add a and b." in p and CODE_REF.question in p
    assert "Plan:\n(empty plan)" in critic.messages(MATH_REF, subject="plan", plan="  ")[-1]["content"]
    with pytest.raises(RoleError, match="subject must be"):
        critic.messages(MATH_REF, subject="answer")


@pytest.mark.parametrize("text, value", [
    ("Clear and solvable.\n<score>8</score>", 8), ("<score> 10 </score>", 10), ("<score>1</score>", 1),
    ("<score>7/10</score>", 7), ("<score>6.0</score>", 6), ("<score>3</score> then <score>9</score>", 9),
])
def test_critic_reads_scores(text, value):
    assert get_role("sage.critic").parse(text).value == value


@pytest.mark.parametrize("text, error", [
    ("Score: 8", "format: no <score>"), ("<score>eight</score>", "format: "), ("<score>7.5</score>", "format: "),
    ("<score>0</score>", "out of range: "), ("<score>11</score>", "out of range: "),
    ("<score>-3</score>", "format: "),
])
def test_critic_failures(text, error):
    parsed = get_role("sage.critic").parse(text)
    assert not parsed.ok and parsed.error.startswith(error), parsed.error


# ---- format tags ----------------------------------------------------------------------------------------------
def test_format_tags_give_full_format_reward_on_good_outputs():
    good = {("challenger", "math"): GOOD_MATH, ("challenger", "code"): GOOD_CODE,
            ("planner", "math"): "<plan>1. Halve.</plan>", ("planner", "code"): "<plan>1. Add.</plan>",
            ("solver", "math"): "So 72.\n<answer>\\boxed{72}</answer>",
            ("solver", "code"): "<answer>\n```python\ndef add(a, b):\n    return a + b\n```\n</answer>",
            ("critic", "math"): "<score>8</score>", ("critic", "code"): "Fine.\n<score>6</score>"}
    assert set(good) == set(FORMAT_TAGS)
    for (kind, domain), text in good.items():
        assert soft_format_reward(text, format_tags(kind, domain)) == 1.0
    assert format_tags("challenger", "code") == {"question": 1, "tests": 1, "solution": 1}
    assert soft_format_reward("<question>Q</question>", format_tags("challenger", "math")) == 0.5
    with pytest.raises(RoleError, match="no SAGE format tags"):
        format_tags("selector", "math")


# ---- validation -------------------------------------------------------------------------------------------------
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


# ---- seed set ---------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def seeds():
    return sage_seed_set(seed=0, data_root=DATA)


@needs_data
def test_seed_set_has_table5_counts_and_unique_ids(seeds):
    assert SAGE_COUNTS == {"math": 156, "gsm8k": 148, "humaneval_substitute": 87, "mbpp": 109}
    assert sage_part_counts(seeds) == SAGE_COUNTS and len(seeds) == 500
    assert len({t.id for t in seeds}) == 500
    splits = {(t.meta["sage_part"], t.meta["benchmark"], t.meta["split"]) for t in seeds}
    assert splits == {("math", "math", "train"), ("gsm8k", "gsm8k", "train"),
                      ("humaneval_substitute", "mbpp_full", "validation"), ("mbpp", "mbpp", "train")}


@needs_data
def test_seed_set_items_carry_their_verifiers(seeds):
    for task in seeds:
        if task.domain == "code":
            assert task.tests.strip() and task.entry_point and task.meta["reference_solution"]
            assert task.meta["reference_solution"] == task.meta["solution"]
        else:
            assert task.domain == "math" and task.reference


@needs_data
def test_seed_code_items_validate(seeds):
    code = [t for t in seeds if t.domain == "code"]
    sample = [t for t in code if t.meta["sage_part"] == "mbpp"][:5] + \
        [t for t in code if t.meta["sage_part"] == "humaneval_substitute"][:5]
    assert len(sample) == 10
    assert [explain_item(t) for t in sample] == [""] * 10


@needs_data
def test_seed_math_items_validate(seeds):
    assert all(validate_item(t) is None for t in seeds if t.domain == "math")


@needs_data
def test_seed_set_is_deterministic_for_a_seed(seeds):
    again = sage_seed_set(seed=0, data_root=DATA)
    assert [t.id for t in again] == [t.id for t in seeds]
    other = sage_seed_set(seed=1, data_root=DATA)
    assert {t.id for t in other} != {t.id for t in seeds} and sage_part_counts(other) == SAGE_COUNTS


@needs_data
def test_seed_set_counts_override_and_errors():
    small = sage_seed_set(seed=0, data_root=DATA, counts={"math": 3, "gsm8k": 2, "humaneval_substitute": 0,
                                                          "mbpp": 1})
    assert sage_part_counts(small) == {"math": 3, "gsm8k": 2, "mbpp": 1}
    big = sage_seed_set(seed=0, data_root=DATA, counts={"math": 0, "gsm8k": 0, "humaneval_substitute": 500,
                                                        "mbpp": 0})
    assert len(big) == 90  # all of MBPP validation (logged)
    with pytest.raises(ValueError, match="unknown part"):
        sage_seed_set(counts={"humaneval": 87})
    with pytest.raises(ValueError, match="integers >= 0"):
        sage_seed_set(counts={"math": -1})


@needs_data
def test_seed_questions_are_the_training_items(seeds):
    mbpp = {t.id: t for t in load_tasks("mbpp", "train", data_root=DATA)}
    for task in seeds:
        if task.meta["sage_part"] == "mbpp":
            assert task.question == mbpp[task.id].question
