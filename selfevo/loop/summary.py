"""The lines a recipe prints when its run ends: where the results are, how far it went, what moved.

    selfevo comas: 20 steps done in 24 min 10 s; run directory runs/comas
      held-out accuracy (arith:test, 60 items; mean of 4 agents): 0.083 before step 0 -> 0.100 after step 19
      verified accuracy 0.250 (step 0) -> 0.312 (step 19); precision 0.333 -> 0.500; recall 0.500 -> 0.400
      look at it: selfevo report runs/comas

Built from ``metrics.jsonl`` alone (so a resumed run's summary covers every step, not only this launch's), by pure
functions over its records: :func:`summary_lines`.
"""
from __future__ import annotations

import json
from pathlib import Path

# per-step quality keys shown first -> last when a recipe logs them (CoMAS App. G: precision_recall)
TRACKED = ("verified_accuracy", "precision", "recall")


def read_metrics(run: Path) -> list[dict]:
    """The records of ``run/metrics.jsonl`` (none if it does not exist)."""
    path = Path(run) / "metrics.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def mean_accuracy(evaluation: dict) -> float | None:
    """Mean over agents of one held-out evaluation's ``accuracy`` (None where it has none)."""
    values = list((evaluation or {}).get("accuracy", {}).values())
    return sum(values) / len(values) if values else None


def held_out(records: list[dict]) -> tuple[tuple[str, dict], tuple[str, dict]] | None:
    """(label, evaluation) of the first and the last held-out evaluation: ``eval_start`` is "before step 0", an
    ``eval`` logged with step k is "after step k". None when the run evaluated nothing."""
    found = []
    for r in records:
        if "eval_start" in r:
            found.append(("before step 0", r["eval_start"]))
        if "eval" in r:
            found.append((f"after step {r['step']}", r["eval"]))
    return (found[0], found[-1]) if found else None


def tracked_lines(records: list[dict]) -> list[str]:
    """``key first (step i) -> last (step j)`` of every :data:`TRACKED` key the run logged with a value."""
    parts = []
    for key in TRACKED:
        seen = [(r["step"], r[key]) for r in records if r.get(key) is not None]
        if seen:
            (i, a), (j, b) = seen[0], seen[-1]
            parts.append(f"{key.replace('_', ' ')} {a:.3f} (step {i}) -> {b:.3f} (step {j})")
    return ["; ".join(parts)] if parts else []


def duration(seconds: float) -> str:
    minutes, secs = divmod(int(round(seconds)), 60)
    return f"{minutes} min {secs} s" if minutes else f"{secs} s"


def summary_lines(recipe: str, run: Path, records: list[dict], seconds: float, eval_tasks: list[str]) -> list[str]:
    """The closing summary of a run from its metrics records and this launch's wall time."""
    steps = len({r["step"] for r in records})
    lines = [f"selfevo {recipe}: {steps} step{'s' * (steps != 1)} done in {duration(seconds)} (this launch); "
             f"run directory {run}"]
    ends = held_out(records)
    if ends:
        (first_at, first), (last_at, last) = ends
        agents = len(first.get("accuracy", {}))
        what = f"{', '.join(eval_tasks)}, {first.get('n')} items; mean of {agents} agent{'s' * (agents != 1)}"
        a, b = mean_accuracy(first), mean_accuracy(last)
        change = f"{a:.3f} {first_at}" if first_at == last_at else f"{a:.3f} {first_at} -> {b:.3f} {last_at}"
        lines.append(f"  held-out accuracy ({what}): {change}")
    else:
        lines.append("  held-out accuracy: not evaluated (eval.every=k and eval.at_start=true evaluate it)")
    lines += [f"  {line}" for line in tracked_lines(records)]
    lines.append(f"  look at it: selfevo report {run}")
    return lines
