"""A model of a recipe step's time: the forward shapes the step ran, priced at rates measured in the same process.

A step logs the shapes of its forwards (``rollout_shapes``, ``update_shapes`` in ``metrics.jsonl``; entries
``[*key, bin, count, Σ size]``, see :mod:`selfevo.shapes`); ``benchmarks/step_calibration.py`` measures what one
forward of a given shape costs (a :class:`Calibration`). The prediction adds them up::

    rollout = Σ_prefill count · P(rows, width) + Σ_decode count · D(rows, keys)
    update  = Σ_train count · rows/mb · T(width) + Σ_score count · rows/mb · S(width) + parameter updates · O

- ``P(rows, width)``: seconds of one join of the HF engine: ``rows`` prompts left-padded to ``width`` prefilled
  together (the KV cache set up; a merge into a running batch is not priced: engine overhead);
- ``D(rows, keys)``: seconds of one decode step of the engine (sampling and bookkeeping included) with ``rows``
  rows in the forward (finished rows not yet dropped count: the forward computes them) and ``keys`` keys swept by
  attention (the KV buffer's width, spare capacity included);
- ``T(width)``: seconds of one forward + backward micro-batch of ``mb`` (the recipe's ``trainer.micro_batch``) rows
  of ``width`` tokens, right-padded to the longest row of the micro-batch as the store runs it, so padding counts
  as work; a micro-batch of fewer (or, with slates kept together, more) rows costs ``rows/mb`` of it;
  ``S(width)`` the same forward without gradients (reference / old log-probs); ``O``: the fixed cost of one
  parameter update (gradient clip, AdamW over the adapter).

Each entry is priced at its mean size (Σ size / count). KV-cache merges and compactions (``merge``, ``compact``),
joins waiting for rows, the protocol's own work between requests, reward scoring and data preparation are not
priced: measured / predicted above 1 is time the step spends outside the forwards it needs at the shapes it ran.

Interpolation (:class:`Table`): piecewise-linear along each axis in natural units (multilinear). A decode step's
cost is close to ``a + b·rows + c·keys + d·rows·keys`` (weights, per-row work, cache reads, attention), which
bilinear interpolation reproduces exactly. Below a grid's first point a coordinate is clamped to it (fixed costs
dominate small shapes); above its last point the last segment is extrapolated with its slope (floored at 0).
"""
from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass
from typing import Sequence


@dataclass(frozen=True)
class Table:
    """Values on a grid: ``axes`` (each strictly increasing), ``values`` nested like the axes
    (``values[i][j]`` at ``axes[0][i], axes[1][j]``); ``table(*point)`` interpolates (see the module doc)."""

    axes: tuple[tuple[float, ...], ...]
    values: tuple

    def __post_init__(self) -> None:
        if not self.axes:
            raise ValueError("a table needs at least one axis")
        _check(self.axes, self.values)

    def __call__(self, *point: float) -> float:
        if len(point) != len(self.axes):
            raise ValueError(f"a {len(self.axes)}-axis table takes {len(self.axes)} coordinates, not {len(point)}")
        return _interpolate(self.axes, self.values, point)

    def to_json(self) -> dict:
        return {"axes": [list(a) for a in self.axes], "values": _lists(self.values)}

    @classmethod
    def from_json(cls, data: dict) -> "Table":
        return cls(tuple(tuple(a) for a in data["axes"]), _tuples(data["values"]))


def _check(axes, values) -> None:
    grid = axes[0]
    if not grid or any(b <= a for a, b in zip(grid, grid[1:])):
        raise ValueError(f"grid {list(grid)} is empty or not strictly increasing")
    if len(values) != len(grid):
        raise ValueError(f"{len(values)} values for a grid of {len(grid)} points")
    for v in values:
        if len(axes) > 1:
            _check(axes[1:], v)
        elif not isinstance(v, (int, float)):
            raise ValueError(f"a table value must be a number, not {v!r}")


def _interpolate(axes, values, point) -> float:
    grid, x = axes[0], point[0]
    at = (lambda i: _interpolate(axes[1:], values[i], point[1:])) if len(axes) > 1 else (lambda i: float(values[i]))
    if len(grid) == 1 or x <= grid[0]:
        return at(0)
    if x >= grid[-1]:
        last, before = at(len(grid) - 1), at(len(grid) - 2)
        slope = max((last - before) / (grid[-1] - grid[-2]), 0.0)
        return last + slope * (x - grid[-1])
    i = bisect_right(grid, x) - 1
    w = (x - grid[i]) / (grid[i + 1] - grid[i])
    return (1 - w) * at(i) + w * at(i + 1)


def _lists(v):
    return [_lists(x) for x in v] if isinstance(v, (list, tuple)) else v


def _tuples(v):
    return tuple(_tuples(x) for x in v) if isinstance(v, (list, tuple)) else v


@dataclass(frozen=True)
class Calibration:
    """Seconds per forward by shape (the module doc's P, D, T, S, O) and the micro-batch ``mb`` T and S were
    measured at."""

    micro_batch: int
    prefill: Table  # (rows, width)
    decode: Table  # (rows, keys)
    train: Table  # (width,)
    score: Table  # (width,)
    optimizer_s: float

    def to_json(self) -> dict:
        return {"micro_batch": self.micro_batch, "optimizer_s": self.optimizer_s,
                **{name: getattr(self, name).to_json() for name in ("prefill", "decode", "train", "score")}}

    @classmethod
    def from_json(cls, data: dict) -> "Calibration":
        return cls(data["micro_batch"], *(Table.from_json(data[n]) for n in ("prefill", "decode", "train", "score")),
                   data["optimizer_s"])


def _priced(entries: Sequence[Sequence[int]], price) -> float:
    """Σ count · price(*key, mean size) over ``[*key, bin, count, Σ size]`` entries."""
    total = 0.0
    for *key, _bin, count, size in entries:
        if count > 0:
            total += count * price(*key, size / count)
    return total


def predict_rollout(shapes: dict, cal: Calibration) -> dict:
    """``{"prefill_s", "decode_s", "total_s"}`` of a step's ``rollout_shapes``."""
    prefill = _priced(shapes.get("prefill", []), cal.prefill)
    decode = _priced(shapes.get("decode", []), cal.decode)
    return {"prefill_s": prefill, "decode_s": decode, "total_s": prefill + decode}


def predict_update(shapes: dict, cal: Calibration) -> dict:
    """``{"train_s", "score_s", "optimizer_s", "total_s"}`` of a step's ``update_shapes``."""
    mb = cal.micro_batch
    train = _priced(shapes.get("train", []), lambda rows, width: rows / mb * cal.train(width))
    score = _priced(shapes.get("score", []), lambda rows, width: rows / mb * cal.score(width))
    steps = sum(count for *_key, count, _size in shapes.get("optimizer", []))
    optimizer = steps * cal.optimizer_s
    return {"train_s": train, "score_s": score, "optimizer_s": optimizer, "total_s": train + score + optimizer}


def measured_over_predicted(measured: float, predicted: float) -> float | None:
    """The ratio, or None where nothing was predicted (no forwards counted)."""
    return measured / predicted if predicted > 0 else None
