"""Intervals of held-out accuracies, against numbers worked out by hand."""
import json
import math
from pathlib import Path

import pytest

from selfevo.stats import Z95, contrast, item_mean, paired_difference, row_summary, seed_interval, t975, wilson


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


def _t_cdf(t: float, df: int, n: int = 4000) -> float:
    """P(T <= t) for t >= 0 by Simpson's rule over Student's density (an independent check of the table)."""
    c = math.exp(math.lgamma((df + 1) / 2) - math.lgamma(df / 2)) / math.sqrt(df * math.pi)
    f = lambda x: c * (1 + x * x / df) ** (-(df + 1) / 2)  # noqa: E731
    h = t / n
    return 0.5 + h / 3 * (f(0) + f(t) + sum((4 if i % 2 else 2) * f(i * h) for i in range(1, n)))


def test_t975_is_the_quantile_of_students_density():
    for df in (1, 2, 3, 5, 10, 29, 30, 31, 60):
        assert _t_cdf(t975(df), df) == pytest.approx(0.975, abs=2e-6), df
    assert t975(2) == pytest.approx(4.3027, abs=1e-4)  # the familiar value for three seeds
    # the expansion beyond the table joins it at 30 and tends to the normal quantile
    assert abs(t975(31) - 2.039513) < 1e-4 and t975(10**6) == pytest.approx(Z95, abs=1e-5)
    assert all(t975(d) > t975(d + 1) for d in range(1, 80))
    with pytest.raises(ValueError):
        t975(0)


def test_seed_interval_by_hand():
    # changes 1, 2, 3: mean 2, s = 1, half = 4.302653 / sqrt(3) = 2.484138
    out = seed_interval([1.0, 2.0, 3.0])
    assert (out["k"], out["mean"], out["sd"]) == (3, pytest.approx(2.0), pytest.approx(1.0))
    assert (out["low"], out["high"]) == pytest.approx((2 - 2.484138, 2 + 2.484138), abs=1e-6)
    # two seeds +0.1 and +0.3: mean 0.2, s = 0.141421, half = 12.706205 * 0.141421 / sqrt(2) = 1.270621
    two = seed_interval([0.1, 0.3])
    assert (two["low"], two["high"]) == pytest.approx((0.2 - 1.270621, 0.2 + 1.270621), abs=1e-6)


def test_seed_interval_degenerate_cases():
    same = seed_interval([0.05, 0.05, 0.05])  # seeds that agree exactly: a point
    assert (same["sd"], same["low"], same["high"]) == pytest.approx((0.0, 0.05, 0.05), abs=1e-12)
    one = seed_interval([0.2])  # one seed: no spread to estimate, so no interval (not a point)
    assert (one["k"], one["mean"], one["sd"], one["low"], one["high"]) == (1, 0.2, None, None, None)
    with pytest.raises(ValueError, match="at least one"):
        seed_interval([])


def test_item_mean_by_hand():
    assert item_mean([[1, 0, 1], [1, 1, 0]]) == [1.0, 0.5, 0.5]
    assert item_mean([[0, 1]]) == [0.0, 1.0]  # one seed: its own items
    with pytest.raises(ValueError):
        item_mean([[1, 0], [1]])
    with pytest.raises(ValueError):
        item_mean([])


def test_row_summary_by_hand():
    # seed-averaged items [1, .5, 1, 0] (accuracy 0.625) against the baseline [0, 0, 1, 0]: d = 1, .5, 0, 0,
    # mean .375, s² = (.625² + .125² + 2·.375²)/3 = .6875/3; each seed's own change .25 and .5: t(1)·s/√2 with
    # s = .25/√2, i.e. 12.706205 · .125
    row = row_summary({"0": [1, 0, 1, 0], "1": [1, 1, 1, 0]}, [0, 0, 1, 0])
    assert row["n"] == 4 and row["accuracy"] == 0.625
    assert row["accuracy_ci"] == pytest.approx(list(wilson(2, 4)))  # round(2.5) = 2, as effect.py's rows
    assert row["per_seed"] == {"0": {"accuracy": 0.5, "diff": 0.25}, "1": {"accuracy": 0.75, "diff": 0.5}}
    half = Z95 * math.sqrt(0.6875 / 3) / 2
    assert (row["paired"]["diff"], row["paired"]["low"], row["paired"]["high"]) == pytest.approx(
        (0.375, 0.375 - half, 0.375 + half))
    assert (row["paired"]["improved"], row["paired"]["worsened"]) == (2, 0)
    assert (row["over_seeds"]["low"], row["over_seeds"]["high"]) == pytest.approx(
        (0.375 - 12.706205 * 0.125, 0.375 + 12.706205 * 0.125))


def test_row_summary_degenerate_cases():
    alone = row_summary({"0": [1, 0]}, None)  # the baseline row itself: no comparison
    assert alone["paired"] is None and alone["over_seeds"] is None and alone["per_seed"]["0"]["diff"] is None
    one = row_summary({"3": [1, 1]}, [0, 1])  # one seed: a paired interval, no spread over seeds
    assert one["over_seeds"]["k"] == 1 and one["over_seeds"]["low"] is None and one["paired"]["diff"] == 0.5
    same = row_summary({"0": [1, 0], "1": [1, 0]}, [1, 0])  # nothing changed on any seed: points at 0
    assert (same["paired"]["low"], same["paired"]["high"], same["over_seeds"]["low"]) == (0.0, 0.0, 0.0)
    with pytest.raises(ValueError):
        row_summary({"0": [1, 0, 1]}, [1, 0])
    with pytest.raises(ValueError):
        row_summary({}, [1])



def test_contrast_by_hand():
    # a's seed-averaged items [1, 2/3, 2/3, 0], b's (seeds 0, 1, 5) [1/3, 1/3, 0, 0]: d = 2/3, 1/3, 2/3, 0, mean 5/12,
    # deviations 3/12, −1/12, 3/12, −5/12, s² = (9 + 1 + 9 + 25)/144/3 = 44/432. Per seed, only the seeds both rows
    # ran: seed 0 (2 − 1)/4, seed 1 (2 − 1)/4; two equal changes: the over-seed interval is that point
    a = {"0": [1, 1, 0, 0], "1": [1, 0, 1, 0], "2": [1, 1, 1, 0]}
    b = {"0": [0, 1, 0, 0], "1": [1, 0, 0, 0], "5": [0, 0, 0, 0]}
    got = contrast(a, b)
    half = Z95 * math.sqrt(44 / 432) / 2
    assert (got["paired"]["diff"], got["paired"]["low"], got["paired"]["high"]) == pytest.approx(
        (5 / 12, 5 / 12 - half, 5 / 12 + half))
    assert (got["paired"]["improved"], got["paired"]["worsened"]) == (3, 0)
    assert got["per_seed"] == {"0": 0.25, "1": 0.25}
    assert (got["over_seeds"]["k"], got["over_seeds"]["low"], got["over_seeds"]["high"]) == (2, 0.25, 0.25)


def test_contrast_degenerate_cases():
    same = contrast({"0": [1, 0]}, {"0": [1, 0]})  # one seed each, identical: a point at 0, no spread over seeds
    assert (same["paired"]["low"], same["paired"]["high"]) == (0.0, 0.0)
    assert same["over_seeds"]["k"] == 1 and same["over_seeds"]["low"] is None
    apart = contrast({"0": [1, 0]}, {"1": [0, 0]})  # no seed in common: items paired, seeds not
    assert apart["paired"]["diff"] == 0.5 and apart["per_seed"] == {} and apart["over_seeds"] is None
    with pytest.raises(ValueError):
        contrast({"0": [1, 0, 1]}, {"0": [1, 0]})
    with pytest.raises(ValueError):
        contrast({}, {"0": [1]})


EFFECT = Path(__file__).resolve().parents[1] / "benchmarks" / "results" / "effect.json"


@pytest.mark.skipif(not EFFECT.exists(), reason="benchmarks/results/effect.json is not in this checkout")
def test_row_summary_reproduces_the_recorded_effect_rows():
    """selfevo sweep's statistics give effect.json's numbers (recorded before selfevo sweep existed) from the
    same per-item verdicts: the seed-averaged accuracy and its Wilson interval, the paired change, each seed's
    change and the interval over seeds."""
    record = json.loads(EFFECT.read_text())
    checked = 0
    for name, row in record["methods"].items():
        if not row.get("per_seed"):
            continue
        base = record["base"] if row.get("eval") in (None, record["base"]["command"]) else record["bases"][row["eval"]]
        got = row_summary({s: p["items"] for s, p in row["per_seed"].items()}, base["items"])
        assert got["accuracy"] == pytest.approx(row["after"], abs=1e-12), name
        assert got["accuracy_ci"] == pytest.approx(row["after_ci"], abs=1e-12), name
        assert (got["paired"]["diff"], got["paired"]["low"], got["paired"]["high"]) == pytest.approx(
            (row["diff"], row["diff_low"], row["diff_high"]), abs=1e-12), name
        assert (got["paired"]["improved"], got["paired"]["worsened"]) == (row["improved"], row["worsened"]), name
        assert [p["diff"] for p in got["per_seed"].values()] == pytest.approx(
            [p["diff"] for p in row["per_seed"].values()], abs=1e-12), name
        assert (got["over_seeds"]["low"], got["over_seeds"]["high"]) == pytest.approx(
            (row["over_seeds"]["low"], row["over_seeds"]["high"]), abs=1e-12), name
        checked += 1
    assert checked >= 15
