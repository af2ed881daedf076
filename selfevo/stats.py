"""Intervals for accuracies measured on held-out items: pure functions, tested by hand.

* :func:`wilson` — the Wilson score interval of a proportion k/n (95% by default): never outside [0, 1], sensible
  at k = 0 and k = n, where the normal interval collapses to a point.
* :func:`paired_difference` — after − before on the SAME items (each 0/1 or a score): the mean of the per-item
  differences d_i with the normal interval mean ± z·s/√n (s: the sample standard deviation of d); with every d_i
  equal (e.g. no item changed) the interval is that single value. Pairing removes the items' own difficulty from
  the comparison, which is why it is much narrower than two independent Wilson intervals.
* :func:`seed_interval` — the spread of an effect over training seeds: each seed's change c_j (its own paired
  difference), mean ± t·s/√k with Student's t at k − 1 degrees of freedom (s: the sample standard deviation of the
  k changes). The paired interval of the seed-averaged items counts item noise only; this one counts how much the
  effect moves from one training run to the next, which at k = 3 (t = 4.30) is often the larger part.
* :func:`item_mean` and :func:`row_summary` — a sweep row over its seeds (``selfevo sweep``'s table, formulas of
  benchmarks/results/effect.json's rows): the seed-averaged per-item accuracy with the Wilson interval of its
  rounded count, the paired difference of those items against a baseline row's (seed-averaged) items, each seed's
  own accuracy and paired change, and :func:`seed_interval` over the seeds' changes.
* :func:`contrast` — two rows a and b on the same items (``contrasts: ["a - b"]`` of a sweep file): the paired
  difference of a's seed-averaged items against b's, and over the seeds both rows ran, seed k of a minus seed k of
  b (its accuracy difference) with :func:`seed_interval`.
* :func:`t975` — Student's t quantile at 0.975 (two-sided 95%): a table for 1-30 degrees of freedom, the
  Cornish-Fisher expansion in 1/df beyond (within 1e-4 of the table at 30, tending to z).
"""
from __future__ import annotations

import math
from typing import Sequence

Z95 = 1.959963984540054
# Student's t at 0.975 for 1..30 degrees of freedom (the standard table; tests/test_stats.py integrates the density)
_T975 = (12.706205, 4.302653, 3.182446, 2.776445, 2.570582, 2.446912, 2.364624, 2.306004, 2.262157, 2.228139,
         2.200985, 2.178813, 2.160369, 2.144787, 2.131450, 2.119905, 2.109816, 2.100922, 2.093024, 2.085963,
         2.079614, 2.073873, 2.068658, 2.063899, 2.059539, 2.055529, 2.051831, 2.048407, 2.045230, 2.042272)


def wilson(k: int, n: int, z: float = Z95) -> tuple[float, float]:
    """``(low, high)`` of the Wilson score interval of k successes in n trials; exactly 0 at k = 0 and 1 at k = n
    (the formula's own bounds there, which floats miss by ~1e-16: a low of 5.6e-17 above a rate of 0 broke
    error bars)."""
    if n <= 0 or not 0 <= k <= n:
        raise ValueError(f"wilson needs 0 <= k <= n and n > 0, got k={k}, n={n}")
    p, z2 = k / n, z * z
    centre = (p + z2 / (2 * n)) / (1 + z2 / n)
    half = z * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / (1 + z2 / n)
    return (0.0 if k == 0 else max(0.0, centre - half)), (1.0 if k == n else min(1.0, centre + half))


def paired_difference(before: Sequence[float], after: Sequence[float], z: float = Z95) -> dict[str, float]:
    """``{"n", "diff", "low", "high", "improved", "worsened"}`` of after − before over paired items."""
    if len(before) != len(after):
        raise ValueError(f"paired items differ in number: {len(before)} before, {len(after)} after")
    n = len(before)
    if n == 0:
        raise ValueError("paired_difference needs at least one item")
    d = [float(a) - float(b) for b, a in zip(before, after)]
    mean = sum(d) / n
    sd = math.sqrt(sum((x - mean) ** 2 for x in d) / (n - 1)) if n > 1 else 0.0
    half = z * sd / math.sqrt(n)
    return {"n": n, "diff": mean, "low": mean - half, "high": mean + half,
            "improved": sum(x > 0 for x in d), "worsened": sum(x < 0 for x in d)}


def t975(df: int) -> float:
    """Student's t quantile at 0.975 for ``df`` >= 1 degrees of freedom."""
    if df < 1:
        raise ValueError(f"t975 needs df >= 1, got {df}")
    if df <= len(_T975):
        return _T975[df - 1]
    z = Z95
    return (z + (z**3 + z) / (4 * df) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)
            + (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / (384 * df**3))


def seed_interval(changes: Sequence[float]) -> dict[str, float | int | None]:
    """``{"k", "mean", "sd", "low", "high"}`` of k seeds' changes: mean ± t975(k − 1)·sd/√k. One seed has no spread
    to estimate: ``sd``, ``low`` and ``high`` are None (not a point, which would claim a certainty one run lacks)."""
    k = len(changes)
    if k == 0:
        raise ValueError("seed_interval needs at least one seed")
    mean = sum(changes) / k
    if k == 1:
        return {"k": 1, "mean": mean, "sd": None, "low": None, "high": None}
    sd = math.sqrt(sum((c - mean) ** 2 for c in changes) / (k - 1))
    half = t975(k - 1) * sd / math.sqrt(k)
    return {"k": k, "mean": mean, "sd": sd, "low": mean - half, "high": mean + half}


def item_mean(lists: Sequence[Sequence[float]]) -> list[float]:
    """The per-item mean of equally long lists (one per seed): ``[[1, 0], [1, 1]]`` → ``[1.0, 0.5]``."""
    if not lists:
        raise ValueError("item_mean needs at least one list")
    if len({len(x) for x in lists}) != 1:
        raise ValueError(f"item lists differ in length: {sorted({len(x) for x in lists})}")
    return [sum(col) / len(col) for col in zip(*lists)]


def row_summary(seeds: dict[str, Sequence[float]], baseline: Sequence[float] | None) -> dict:
    """A row of per-item 0/1 verdicts over its seeds (``{seed: items}``, the items in one order for every seed and
    the baseline), against ``baseline`` (the baseline row's seed-averaged items; None: the row is the baseline or
    there is none):

    ``n``, ``accuracy`` (of the seed-averaged items) and ``accuracy_ci`` (:func:`wilson` of its rounded count);
    ``per_seed`` ``{seed: {"accuracy", "diff"}}`` (``diff``: the seed's paired change against the baseline); with a
    baseline also ``paired`` (:func:`paired_difference` of the seed-averaged items against it) and ``over_seeds``
    (:func:`seed_interval` of the seeds' changes); without, both None."""
    if not seeds:
        raise ValueError("row_summary needs at least one seed")
    avg = item_mean(list(seeds.values()))
    n = len(avg)
    if baseline is not None and len(baseline) != n:
        raise ValueError(f"paired items differ in number: {len(baseline)} in the baseline, {n} in the row")
    per_seed = {s: {"accuracy": sum(items) / n,
                    "diff": paired_difference(baseline, items)["diff"] if baseline is not None else None}
                for s, items in seeds.items()}
    paired = paired_difference(baseline, avg) if baseline is not None else None
    spread = seed_interval([p["diff"] for p in per_seed.values()]) if baseline is not None else None
    return {"n": n, "accuracy": sum(avg) / n, "accuracy_ci": list(wilson(int(round(sum(avg))), n)),
            "per_seed": per_seed, "paired": paired, "over_seeds": spread}


def contrast(a: dict[str, Sequence[float]], b: dict[str, Sequence[float]]) -> dict:
    """Row a − row b, each ``{seed: items}`` (0/1 verdicts on the same items in one order): ``paired`` is
    :func:`paired_difference` of a's seed-averaged items against b's; ``per_seed`` ``{seed: accuracy of a − accuracy
    of b}`` over the seeds both rows have (in a's order), and ``over_seeds`` their :func:`seed_interval` (None when
    they share no seed)."""
    if not a or not b:
        raise ValueError("contrast needs at least one seed of each row")
    a_avg, b_avg = item_mean(list(a.values())), item_mean(list(b.values()))
    if len(a_avg) != len(b_avg):
        raise ValueError(f"paired items differ in number: {len(a_avg)} in a, {len(b_avg)} in b")
    n = len(a_avg)
    per_seed = {s: (sum(a[s]) - sum(b[s])) / n for s in a if s in b}
    return {"paired": paired_difference(b_avg, a_avg), "per_seed": per_seed,
            "over_seeds": seed_interval(list(per_seed.values())) if per_seed else None}
