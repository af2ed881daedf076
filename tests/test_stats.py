"""Intervals of held-out accuracies, against numbers worked out by hand."""
import math

import pytest

from selfevo.stats import paired_difference, wilson


def test_wilson_by_hand():
    # 3/10: centre (0.3 + 1.92/10) / 1.384 = 0.3555, half 1.96·sqrt(0.021 + 0.0096)/1.384 = 0.2477
    assert wilson(3, 10) == pytest.approx((0.10779, 0.60322), abs=1e-5)
    # k = 0 and k = n: one-sided, never a point, never outside [0, 1]
    assert wilson(0, 20) == pytest.approx((0.0, 0.16113), abs=1e-5)
    lo, hi = wilson(20, 20)
    assert hi == 1.0 and lo == pytest.approx(1 - 0.16113, abs=1e-5)
    assert wilson(1, 1)[0] == pytest.approx(0.2065, abs=1e-4)
    # the bounds are exact at the ends (floats gave wilson(0, 3) a low of 5.6e-17 and wilson(10, 10) a high of
    # 1 - 1e-16), and every rate lies inside its interval
    assert wilson(0, 3)[0] == 0.0 and wilson(10, 10)[1] == 1.0
    assert all(wilson(k, n)[0] <= k / n <= wilson(k, n)[1] for n in range(1, 40) for k in range(n + 1))
    with pytest.raises(ValueError):
        wilson(3, 0)
    with pytest.raises(ValueError):
        wilson(5, 4)


def test_paired_difference_by_hand():
    before, after = [0, 0, 1, 1], [1, 1, 1, 0]  # d = 1, 1, 0, -1: mean 0.25, s = sqrt(2.75/3)
    out = paired_difference(before, after)
    half = 1.959963984540054 * math.sqrt(2.75 / 3) / 2
    assert out["diff"] == pytest.approx(0.25) and out["n"] == 4
    assert (out["low"], out["high"]) == pytest.approx((0.25 - half, 0.25 + half))
    assert (out["improved"], out["worsened"]) == (2, 1)


def test_paired_difference_degenerate_cases():
    same = paired_difference([1, 0, 1], [1, 0, 1])  # nothing changed: a point at 0
    assert (same["diff"], same["low"], same["high"]) == (0.0, 0.0, 0.0)
    shift = paired_difference([0, 0], [1, 1])  # every item improved: a point at 1
    assert (shift["low"], shift["high"]) == (1.0, 1.0)
    one = paired_difference([0], [1])  # one item: no spread to estimate
    assert (one["diff"], one["low"], one["high"]) == (1.0, 1.0, 1.0)
    with pytest.raises(ValueError, match="differ in number"):
        paired_difference([1, 0], [1])
    with pytest.raises(ValueError, match="at least one"):
        paired_difference([], [])
