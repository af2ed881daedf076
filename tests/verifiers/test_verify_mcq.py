"""The multiple-choice verifier (selfevo.verifiers.mcq): extraction (a boxed option label followed by its text counts,
ambiguous boxes do not) and verdicts."""
import pytest

from selfevo.types import Task
from selfevo.verifiers import get_verifier
from selfevo.verifiers.mcq import boxed_contents, extract_choice, normalize_reference


@pytest.mark.parametrize("response,letter", [
    (r"The ATP comes mostly from \boxed{D. oxidative phosphorylation}", "D"),
    (r"\boxed{(D) oxidative phosphorylation}", "D"),
    (r"\boxed{D: oxidative phosphorylation}", "D"),
    (r"\boxed{D) oxidative phosphorylation}", "D"),
    (r"\boxed{D - oxidative phosphorylation}", "D"),
    (r"\boxed{\text{D. oxidative phosphorylation}}", "D"),
    (r"\boxed{\textbf{(B)} the second one}", "B"),
    (r"\boxed{D.}", "D"),
    (r"\boxed{ (C) }", "C"),
    (r"(A) is wrong, (C) too; \boxed{B. glycolysis}", "B"),  # the box beats earlier parenthesised letters
    (r"first \boxed{A}, on reflection \boxed{C. the third}", "C"),  # the last box wins
    (r"\boxed{C. x}, then a non-answer box \boxed{42}", "C"),  # a box that is no option is skipped
])
def test_boxed_option_label_with_text(response, letter):
    assert extract_choice(response) == letter


@pytest.mark.parametrize("response", [
    r"\boxed{A or B}",
    r"\boxed{A and B}",
    r"\boxed{(A), (C)}",
    r"\boxed{A/B}",
    r"Options (C) and (D) fail, so \boxed{A or B}",  # an ambiguous final box is no answer, not (D)
    r"\boxed{Because the membrane is polarised}",  # a word starting with a capital is no option label
    r"\boxed{Glycolysis}",
    r"\boxed{I think so}",  # I is an option letter when there are ten
    r"\boxed{A.M. radio}",
])
def test_ambiguous_or_wordy_boxes_give_no_letter(response):
    assert extract_choice(response) is None


def test_box_letters_respect_n_choices():
    assert extract_choice(r"\boxed{E. fifth}", n_choices=5) == "E"
    assert extract_choice(r"\boxed{E. fifth}", n_choices=4) is None
    assert extract_choice(r"\boxed{Because} the answer is (C)", n_choices=4) == "C"  # falls back past the box


def test_boxed_contents_are_balanced_and_last_first():
    assert list(boxed_contents(r"\boxed{\text{A}} and \boxed{\frac{1}{2}}")) == [r"\frac{1}{2}", r"\text{A}"]
    assert list(boxed_contents(r"\boxed{unclosed")) == []


def test_mcq_verdict_on_labelled_box():
    mcq = get_verifier("mcq")
    task = Task("t", "mcq", "q", reference="D", meta={"n_choices": 4})
    assert mcq(task, r"\boxed{D. oxidative phosphorylation}").score == 1.0
    assert mcq(task, r"\boxed{B. glycolysis}").score == 0.0
    verdict = mcq(task, r"\boxed{C or D}")
    assert verdict.score == 0.0 and verdict.extracted is None


@pytest.mark.parametrize("response,letter", [
    (r"... so \boxed{B}", "B"),
    (r"\boxed{\text{(C)}}", "C"),
    ("The answer is (D).", "D"),
    ("Answer: **A**", "A"),
    ("After checking each option, I pick\nC", "C"),
    ("Options (A) and (B) fail, leaving (D) as correct", "D"),
    ("I am not sure.", None),
])
def test_extract_choice(response, letter):
    assert extract_choice(response) == letter


def test_mcq_verdicts():
    mcq = get_verifier("mcq")
    assert mcq(Task("t", "mcq", "q", reference="(B)"), "The answer is B").score == 1.0
    assert mcq(Task("t", "mcq", "q", reference="B"), "The answer is C").score == 0.0
    assert mcq(Task("t", "mcq", "q", reference="banana"), "B").score == 0.0
    assert normalize_reference(r"\boxed{c}") == "C"
    assert extract_choice("answer is E", n_choices=4) is None
