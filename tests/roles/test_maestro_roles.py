"""MAESTRO's roles (selfevo.roles.maestro): the central agent's selection read strictly (its spans leniently), the views
of a candidate, ``parse_selection``, and ``shorten``."""
import pytest

from selfevo.roles.maestro import Central, candidate_view, central_spans, parse_selection, read_selection, shorten
from selfevo.types import Task

TASK = Task("q1", "math", "What is 1 + 3?", "4", meta={"verifier": "math"})


def test_strict_selection_and_lenient_spans():
    text = "Reason: cand 2 adds up.\nChosen: 2\nFinal: \\boxed{\\frac{1}{2}} trailing"
    sel = read_selection(text, 3)
    assert (sel.index, sel.reason, sel.final) == (1, "cand 2 adds up.", "\\frac{1}{2}")
    assert text[slice(*sel.reason_span)] == "cand 2 adds up."
    assert text[slice(*sel.decision_span)] == "Chosen: 2\nFinal: \\boxed{\\frac{1}{2}}"
    assert central_spans(text) == (sel.reason_span, sel.decision_span)
    assert read_selection("Reason: x\nChosen: 4\nFinal: \\boxed{1}", 3) == "chose candidate 4, but the slate has 3"
    assert read_selection("Chosen: 1\nFinal: \\boxed{1}", 3) == "no 'Reason:' line"
    bad = "Reason: long story\nChosen: 9"
    assert central_spans(bad) == ((8, 18), (19, 28)) and bad[19:28] == "Chosen: 9"
    assert central_spans("Reason: rambling with no decision") == ((8, 33), None)
    assert central_spans("no labels at all") == (None, None)


def test_candidate_views():
    text = "First 2 + 3 = 5, so \\boxed{5}. Check: \\boxed{5}"
    assert candidate_view(text, "both") == text
    assert candidate_view(text, "answer") == "Final answer: \\boxed{5}"
    hidden = candidate_view(text, "reason")
    assert "boxed" not in hidden and hidden.count("[final answer hidden]") == 2 and hidden.startswith("First 2 + 3")
    prompt = Central(view="answer").messages(TASK, candidates=["work \\boxed{7}", "no answer"])
    assert "- Candidate 1: Final answer: \\boxed{7}\n- Candidate 2: (no final answer)" in prompt[-1]["content"]


def test_parse_selection_is_strict():
    ok = parse_selection("Reason: candidate 2 adds correctly.\nChosen: 2\nFinal: \\boxed{\\frac{1}{2}} done", 3)
    assert (ok.index, ok.reason, ok.final) == (1, "candidate 2 adds correctly.", "\\frac{1}{2}")
    multi = parse_selection("Some preamble\nReason: line one\nline two\n  Chosen: Candidate 3\nFinal: \\boxed{7}", 3)
    assert multi.index == 2 and multi.reason == "line one\nline two"
    bad = [
        "Chosen: 2\nFinal: \\boxed{7}",  # no reason
        "Reason: x\nChosen: 4\nFinal: \\boxed{7}",  # out of range
        "Reason: x\nChosen: 0\nFinal: \\boxed{7}",
        "Reason: x\nChosen: two\nFinal: \\boxed{7}",
        "Reason: x\nChosen: 2\nFinal: 7",  # no box
        "Reason: x\nChosen: 2\nFinal: \\boxed{7",  # unbalanced
        "Reason: x\nChosen: 2",  # no final
        "Reason: x\nChosen: 2 because it is right\nFinal: \\boxed{7}",
        "Reason: x\nChosen: 2\nsomething in between\nFinal: \\boxed{7}",
        "Reason:\nChosen: 2\nFinal: \\boxed{7}",  # empty reason
        "**Reason:** x\n**Chosen:** 2\n**Final:** \\boxed{7}",
        "I pick candidate 2, the answer is \\boxed{7}",
    ]
    for text in bad:
        assert parse_selection(text, 3) is None, text
    assert parse_selection("Reason: x\nChosen: 1\nFinal: def f(): pass", 3, require_boxed=False).final == \
        "def f(): pass"


def test_shorten_keeps_the_end_for_solutions():
    text = "first we set up the equation and then simplify it carefully so the answer is \\boxed{42}"
    tail = shorten(text, 30, keep="tail")
    assert tail.startswith("... ") and tail.endswith("\\boxed{42}") and len(tail) <= 34
    assert tail == "... so the answer is \\boxed{42}"  # the partial first word ("carefully") is dropped
    assert shorten(text, 30) == "first we set up the equation ..."  # head (the broadcast's justification)
    assert shorten(text, None, keep="tail") == text and shorten("short", 30, keep="tail") == "short"
    with pytest.raises(ValueError):
        shorten(text, 5, keep="middle")
