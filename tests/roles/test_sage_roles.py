"""SAGE's roles (selfevo.roles.sage): the four roles (prompts, parsers on hand-written outputs) and FORMAT_TAGS
with the soft format reward."""
from __future__ import annotations

import pytest

from selfevo.rewards.formulas import soft_format_reward
from selfevo.roles import ROLES, get_role
from selfevo.roles.base import RoleError
from selfevo.roles.sage import FORMAT_TAGS, format_tags, statement
from selfevo.types import Task
from selfevo.verifiers import verify
from selfevo.verifiers.validate import explain_item, validate_item

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


@pytest.mark.slow  # over 1 s on the AVX2 machine: out of the quick subset
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


@pytest.mark.slow  # over 0.7 s on the AVX2 machine: out of the quick subset
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
    # decimals and fractions (issue 58 item 3): the range is Norm's (Eq. 2), not the parser's
    ("<score>8.5</score>", 8.5), ("<score>0.9</score>", 0.9), ("<score>0</score>", 0), ("<score>11</score>", 11),
    ("<score> 7 / 10 </score>", 7), ("<score>3/5</score>", 6), ("<score>8.5/10</score>", 8.5),
])
def test_critic_reads_scores(text, value):
    assert get_role("sage.critic").parse(text).value == pytest.approx(value)


@pytest.mark.parametrize("text, error", [
    ("Score: 8", "format: no <score>"), ("<score>eight</score>", "format: "), ("<score>abc</score>", "format: "),
    ("<score>-3</score>", "format: "), ("<score>7/0</score>", "format: "), ("<score>8 or 9</score>", "format: "),
    ("<score>8.</score>", "format: "), ("<score></score>", "format: "),
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
