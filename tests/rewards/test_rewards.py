"""Hand-worked checks of selfevo.rewards (CoMAS Eq. 6-8, the w/o-scoring ablation, SAGE Eq. 2-13)."""
import math

import pytest

from selfevo import rewards as W
from selfevo.roles.parsers import parse_score


def approx(x):
    return pytest.approx(x, abs=1e-9)


# ---------------------------------------------------------------- CoMAS
@pytest.mark.parametrize("text,want", [
    ("The evaluation is wrong.\n<score>3</score>", 3),
    ("<score>1</score> on second thought <score>2</score>", 2),  # the last tag decides
    ("<score> 2 </score>", 2),
    ("<score>\n1\n</score>", 1),
    ('enclosed within "<score>" and "</score>" tags. <score>3</score>', 3),  # echoed instruction, then a score
    ("<score><score>3</score>", 3),  # repeated opener binds to the nearest closer
    ("<score>2</score> later <score>5</score>", None),  # last tag out of range
    ('<score>3</score> ... "<score>" and "</score>"', None),  # last tag is the echo
    ("<score>4</score>", None),
    ("<score>0</score>", None),
    ("<score>2.0</score>", None),
    ("<score>two</score>", None),
    ("<score>3", None),
    ("score: 3", None),
    ("<SCORE>3</SCORE>", None),
    ("", None),
    (None, None),
])
def test_parse_score(text, want):
    assert parse_score(text) == want


def test_comas_rewards_eq7_eq8():
    # r(s) = (tau - 1)/2, r(e) = 1 - r(s), scorer 0 when parsed
    assert W.comas_rewards(1) == {"solver": 0.0, "evaluator": 1.0, "scorer": 0.0}
    assert W.comas_rewards(2) == {"solver": 0.5, "evaluator": 0.5, "scorer": 0.0}
    assert W.comas_rewards(3) == {"solver": 1.0, "evaluator": 0.0, "scorer": 0.0}
    # parse failure: scorer -1; solver/evaluator masked (None) or 0 (released code)
    assert W.comas_rewards(None) == {"solver": None, "evaluator": None, "scorer": -1.0}
    assert W.comas_rewards(None, on_parse_failure="zero") == {"solver": 0.0, "evaluator": 0.0, "scorer": -1.0}
    with pytest.raises(ValueError):
        W.comas_rewards(4)
    with pytest.raises(ValueError):
        W.comas_rewards(2, on_parse_failure="drop")


def test_comas_end_to_end():
    assert W.comas_rewards(parse_score("fatal error <score>1</score>"))["evaluator"] == 1.0
    assert W.comas_rewards(parse_score("no tag"))["scorer"] == -1.0


# ---------------------------------------------------------------- CoMAS w/o scoring (Sec. 4.3.1, App. J)
def test_support_ratio_and_agreement():
    # App. J (failure mode without scoring): two evaluations, both "correct" -> full support, full agreement
    assert W.support_ratio([True, True]) == 1.0
    assert W.verdict_agreement([True, True], 0) == W.verdict_agreement([True, True], 1) == 1.0
    verdicts = [True, False, True, None]
    assert W.support_ratio(verdicts) == pytest.approx(2 / 3)  # unparsed verdicts are left out
    assert W.verdict_agreement(verdicts, 0) == pytest.approx(1 / 2)  # others parsed: False, True
    assert W.verdict_agreement(verdicts, 1) == 0.0
    assert W.verdict_agreement(verdicts, 3) is None
    assert W.verdict_agreement([False], 0) is None  # n = 1: nothing to agree with
    assert W.support_ratio([None, None]) is None and W.support_ratio([]) is None


# ---------------------------------------------------------------- SAGE Norm (Eq. 2)
@pytest.mark.parametrize("s,want", [
    (0, 0.0), (0.3, 0.3), (1, 1.0),          # first branch, incl. s = 1 (as written in Eq. 2)
    (1.5, 0.5 / 9), (7, 6 / 9), (10, 1.0),   # (s - 1)/9
    (10.5, 0.5), (-1, 0.5), (None, 0.5), (math.nan, 0.5), (math.inf, 0.5),
])
def test_sage_norm(s, want):
    assert W.sage_norm(s) == approx(want)


def test_sage_norm_one_is_min():
    assert W.sage_norm(1, one_is_min=True) == 0.0
    assert W.sage_norm(0.5, one_is_min=True) == 0.5
    assert W.sage_norm(4, one_is_min=True) == approx(3 / 9)


# ---------------------------------------------------------------- format reward
def test_soft_format_reward():
    assert W.soft_format_reward("<plan>1. x</plan>", {"plan": 1}) == 1.0
    assert W.soft_format_reward("<plan>a</plan><plan>b</plan>", {"plan": 1}) == 0.5  # redundant: partial
    assert W.soft_format_reward("<plan>a", {"plan": 1}) == 0.0                       # unbalanced
    assert W.soft_format_reward("plain", {"plan": 1}) == 0.0                         # missing
    assert W.soft_format_reward("", {"plan": 1}) == 0.5                              # empty: neutral
    assert W.soft_format_reward("  \n", {"plan": 1}) == 0.5
    # two tags, one present: (1 + 0)/2
    assert W.soft_format_reward("<question>q</question>", {"question": 1, "answer": 1}) == 0.5


# ---------------------------------------------------------------- SAGE roles
def test_sage_difficulty():
    assert W.sage_difficulty([1, 0, 0, 1]) == approx(0.5)  # 1 - 2/4
    assert W.sage_difficulty([0.25]) == approx(0.75)
    with pytest.raises(ValueError):
        W.sage_difficulty([])


def test_sage_challenger_reward():
    # accepted: (0.8 + 0.5 + 1)/3 = 0.766667
    assert W.sage_challenger_reward(0.8, 0.5, 1.0, True) == approx(2.3 / 3)
    # good question, invalid verifier -> Algorithm 1 else-branch: (0.8 + 1)/2 = 0.9
    assert W.sage_challenger_reward(0.8, 0.5, 1.0, False) == approx(0.9)
    # low quality: (0.6 + 1)/2 = 0.8
    assert W.sage_challenger_reward(0.6, 0.5, 1.0, True) == approx(0.8)
    # boundary s_q = alpha is accepted: (0.7 + 0.5 + 1)/3 = 0.733333
    assert W.sage_challenger_reward(0.7, 0.5, 1.0, True) == approx(2.2 / 3)


def test_sage_planner_and_gate():
    assert W.sage_planner_reward(0.6, 1.0) == approx(0.8)  # 0.5*0.6 + 0.5*1
    assert W.sage_plan_gate(0.3) and not W.sage_plan_gate(0.29)


def test_sage_solver_reward():
    # plan passes: 0.2*0.5 + 0.6*1 + 0.2*1 = 0.9
    assert W.sage_solver_reward(1.0, 1.0, s_p=0.5) == approx(0.9)
    # plan gated out (0.2 < 0.3): 0 + 0.6 + 0.2 = 0.8
    assert W.sage_solver_reward(1.0, 1.0, s_p=0.2) == approx(0.8)
    # boundary 0.3 passes: 0.06 + 0.6 + 0.2 = 0.86
    assert W.sage_solver_reward(1.0, 1.0, s_p=0.3) == approx(0.86)
    # no planner: 0.5*s_gt + 0.5*r_f: 0.5*1 + 0.5*1 = 1.0 ; 0.5*0 + 0.5*0.5 = 0.25
    assert W.sage_solver_reward(1.0, 1.0) == approx(1.0)
    assert W.sage_solver_reward(0.0, 0.5) == approx(0.25)


def test_sage_critic_reward():
    assert W.sage_critic_reward(0.75) == 0.75
