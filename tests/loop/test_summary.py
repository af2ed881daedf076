"""The closing summary of a run (selfevo.loop.summary): pure functions over metrics records, numbers by hand."""
from selfevo.loop import summary


def _records():
    return [
        {"step": 0, "eval_start": {"n": 50, "accuracy": {"agent0": 0.1, "agent1": 0.1}, "evaluated": "agent0"},
         "verified_accuracy": 0.25, "precision": None, "recall": 0.5},
        {"step": 1, "verified_accuracy": 0.5, "precision": 1.0, "recall": None},
        {"step": 2, "eval": {"n": 50, "accuracy": {"agent0": 0.12, "agent1": 0.16}}, "verified_accuracy": 0.0,
         "precision": 0.5, "recall": 0.25},
    ]


def test_held_out_first_and_last():
    (first_at, first), (last_at, last) = summary.held_out(_records())
    assert (first_at, last_at) == ("before step 0", "after step 2")
    assert summary.mean_accuracy(first) == 0.1
    assert abs(summary.mean_accuracy(last) - 0.14) < 1e-12  # (0.12 + 0.16) / 2
    assert summary.held_out([{"step": 0}]) is None
    assert summary.mean_accuracy({}) is None


def test_tracked_keys_first_to_last_with_a_value():
    (line,) = summary.tracked_lines(_records())
    assert line == ("verified accuracy 0.250 (step 0) -> 0.000 (step 2); precision 1.000 (step 1) -> 0.500 (step 2); "
                    "recall 0.500 (step 0) -> 0.250 (step 2)")
    assert summary.tracked_lines([{"step": 0, "precision": None}]) == []


def test_summary_lines():
    lines = summary.summary_lines("comas", "runs/x", _records(), 125.4, ["arith:test"])
    assert lines[0] == "selfevo comas: 3 steps done in 2 min 5 s (this launch); run directory runs/x"
    assert lines[1] == ("  held-out accuracy (arith:test, 50 items; mean of 2 agents): 0.100 before step 0 -> 0.140 "
                        "after step 2")
    assert lines[-1] == "  look at it: selfevo report runs/x"
    bare = summary.summary_lines("grpo", "r", [{"step": 0}], 9, ["gsm8k:test"])
    assert bare[0] == "selfevo grpo: 1 step done in 9 s (this launch); run directory r"
    assert "not evaluated" in bare[1]


def test_one_evaluation_only_is_not_shown_as_a_change():
    records = [{"step": 0, "eval": {"n": 4, "accuracy": {"a": 0.5}}}]
    lines = summary.summary_lines("x", "r", records, 1, ["t"])
    assert lines[1].endswith("0.500 after step 0")
