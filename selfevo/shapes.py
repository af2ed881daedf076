"""The shapes of the forward passes a step ran, counted compactly: what ``benchmarks/step_model.py`` predicts a
step's time from.

:class:`Shapes` counts passes by kind and key. The HF engine counts ``prefill`` (one per join: rows joining, padded
prompt width), ``decode`` (one per decode step: rows in the forward, finished ones not yet dropped included, and
the keys its attention sweeps), ``merge`` and ``compact`` (KV-cache copies: rows and key width after); the policy
store counts ``train`` (one per forward + backward micro-batch: rows, padded width), ``score`` (one per no-grad
scoring micro-batch), ``row`` (one per trained row: its tokens) and ``optimizer`` (one per parameter update: its rows
on this rank). A size goes in a bin (:func:`size_bin`) and the entry keeps the exact sum, so ``[*key, bin, count,
sum]`` in :meth:`Shapes.to_json` gives every entry's count and mean size.
"""
from __future__ import annotations

from collections import defaultdict

FIRST_BIN = 16


def size_bin(size: int) -> int:
    """The smallest of 16, 24, 32, 48, 64, 96, 128, … (powers of two and 1.5 × them) that is ≥ ``size``."""
    edge = FIRST_BIN
    while edge < size:
        edge = edge * 3 // 2 if edge & (edge - 1) == 0 else edge * 4 // 3  # 2^k -> 1.5·2^k -> 2^(k+1)
    return edge


class Shapes:
    """Counts of passes by kind: ``{kind: {(*key, bin): [count, Σ size]}}`` (see the module doc)."""

    def __init__(self) -> None:
        self.counts: dict[str, dict[tuple, list[int]]] = defaultdict(dict)

    def add(self, kind: str, *key: int, size: int) -> None:
        entry = self.counts[kind].setdefault((*key, size_bin(size)), [0, 0])
        entry[0] += 1
        entry[1] += int(size)

    def copy(self) -> "Shapes":
        out = Shapes()
        for kind, entries in self.counts.items():
            out.counts[kind] = {k: list(v) for k, v in entries.items()}
        return out

    def __sub__(self, other: "Shapes") -> "Shapes":
        """The passes counted here and not in ``other`` (an earlier copy of the same counts)."""
        out = Shapes()
        for kind, entries in self.counts.items():
            before = other.counts.get(kind, {})
            for key, (n, total) in entries.items():
                n0, total0 = before.get(key, (0, 0))
                if n != n0:
                    out.counts[kind][key] = [n - n0, total - total0]
        return out

    def __iadd__(self, other: "Shapes") -> "Shapes":
        for kind, entries in other.counts.items():
            for key, (n, total) in entries.items():
                entry = self.counts[kind].setdefault(key, [0, 0])
                entry[0] += n
                entry[1] += total
        return self

    def __bool__(self) -> bool:
        return any(self.counts.values())

    def to_json(self) -> dict[str, list[list[int]]]:
        """``{kind: [[*key, bin, count, Σ size], ...]}``, kinds and entries sorted."""
        return {kind: [[*key, n, total] for key, (n, total) in sorted(entries.items())]
                for kind, entries in sorted(self.counts.items()) if entries}

    @classmethod
    def from_json(cls, data: dict[str, list[list[int]]]) -> "Shapes":
        out = cls()
        for kind, entries in data.items():
            for *key, n, total in entries:
                out.counts[kind][tuple(key)] = [n, total]
        return out
