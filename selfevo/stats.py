"""Intervals for accuracies measured on held-out items: pure functions, tested by hand.

* :func:`wilson` — the Wilson score interval of a proportion k/n (95% by default): never outside [0, 1], sensible
  at k = 0 and k = n, where the normal interval collapses to a point.
* :func:`paired_difference` — after − before on the SAME items (each 0/1 or a score): the mean of the per-item
  differences d_i with the normal interval mean ± z·s/√n (s: the sample standard deviation of d); with every d_i
  equal (e.g. no item changed) the interval is that single value. Pairing removes the items' own difficulty from
  the comparison, which is why it is much narrower than two independent Wilson intervals.
"""
from __future__ import annotations

import math
from typing import Sequence

Z95 = 1.959963984540054


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
