"""Answer voting (selfevo.verifiers.voting): answers normalised for comparison, and the majority vote with ties and
missing answers."""
from selfevo.verifiers.voting import majority_vote, normalize_answer


def test_normalize_answer():
    assert normalize_answer(" $1,000$ ") == "1000"
    assert normalize_answer("18.00") == normalize_answer("18") == "18"
    assert normalize_answer("\\text{B}") == "B"
    assert normalize_answer("x = 3.") == "x=3"
    assert normalize_answer("") is None and normalize_answer(None) is None


def test_majority_vote_counts_ties_and_missing():
    vote = majority_vote(["3", None, "5", "5.0", "$5$", "3"])
    assert (vote.index, vote.answer, vote.count, vote.total) == (2, "5", 3, 5)
    assert vote.groups == [[0, 5], [2, 3, 4]]
    tie = majority_vote(["7", "8", "8", "7"])
    assert tie.index == 0 and tie.count == 2  # ties go to the answer seen first
    assert majority_vote([None, None]).index is None
    half = majority_vote(["1/2", "0.5", "2"], same=lambda a, b: {a, b} == {"1/2", "0.5"})
    assert (half.index, half.count) == (0, 2)
