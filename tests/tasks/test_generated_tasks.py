"""The generated arithmetic curriculum: seeded, disjoint splits, exact references the math verifier accepts."""
import pytest

from selfevo.tasks import TaskDataError, load_tasks
from selfevo.tasks.generated import arith_items, is_test
from selfevo.verifiers import verify


@pytest.mark.parametrize("name", ["arith", "arith2", "arith3", "arith4", "arith5"])
def test_splits_are_disjoint_and_deterministic(name):
    train = load_tasks(name, "train", count=600)
    test = load_tasks(name, "test", count=80)
    assert len(train) == 600 and len(test) == 80
    assert not {t.question for t in train} & {t.question for t in test}
    assert all(is_test(t.question) for t in test) and not any(is_test(t.question) for t in train)
    assert [t.question for t in load_tasks(name, "train", count=50)] == [t.question for t in train[:50]]  # prefix
    assert len({t.id for t in train}) == 600


def test_references_are_exact_and_verified():
    for t in load_tasks("arith", "test", count=60):
        expr = t.question.replace("What is ", "").rstrip("?")
        if set(expr) <= set("0123456789+-* "):
            assert int(t.reference) == eval(expr)  # noqa: S307 (digits and operators only)
        assert verify(t, f"So the answer is \\boxed{{{t.reference}}}.").score == 1.0
        assert verify(t, f"\\boxed{{{int(t.reference) + 1}}}").score == 0.0
    word = load_tasks("arith3", "train", count=1)[0]
    assert word.meta["level"] == 3 and word.meta["verifier"] == "math"


def test_bad_options_are_one_line_errors():
    with pytest.raises(TaskDataError, match="fewer than 500 distinct test items"):
        list(arith_items("test", 1, 500))  # one-digit sums: 81 × 6 phrasings, an eighth held out
    with pytest.raises(TaskDataError, match="level must be one of"):
        list(arith_items("train", 9, 10))
    with pytest.raises(TaskDataError, match="count must be a positive integer"):
        load_tasks("arith", "train", count=0)
