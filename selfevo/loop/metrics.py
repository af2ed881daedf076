"""Step metrics every recipe can log: rewards, lengths and masking per agent and label; rewards vs the verifier."""
from __future__ import annotations

from selfevo.interaction import Episode
from selfevo.verifiers import verify


def mean(xs) -> float | None:
    """Mean of the non-None values, rounded to 4 places; None if there are none."""
    xs = [x for x in xs if x is not None]
    return round(sum(xs) / len(xs), 4) if xs else None


def turn_metrics(episodes: list[Episode], agents: list[str]) -> dict:
    """Mean reward per agent and per turn label, mean completion length per label, masked turns, generated tokens
    (``reward_by_role`` and ``length_by_role`` are the metrics' logged names: keyed by label)."""
    turns = [t for e in episodes for t in e.turns]
    labels = sorted({t.label for t in turns})
    return {
        "reward": {a: mean(t.reward for t in turns if t.agent == a) for a in agents},
        "reward_by_role": {r: mean(t.reward for t in turns if t.label == r) for r in labels},
        "length_by_role": {r: mean(t.n_tokens for t in turns if t.label == r) for r in labels},
        "masked_samples": sum(t.reward is None for t in turns),
        "tokens": sum(t.n_tokens for t in turns),
    }


def precision_recall(episodes: list[Episode], threshold: float, label: str = "solver") -> dict:
    """Rewards of the turns labelled ``label`` as binary predictions (≥ threshold) against the verifier (CoMAS App. G)."""
    tp = fp = fn = tn = 0
    for e in episodes:
        if not (e.task.reference or e.task.tests or e.task.meta.get("io")):
            continue
        for s in (t for t in e.turns if t.label == label and t.reward is not None):
            correct = verify(e.task, s.text).score >= 1.0
            predicted = s.reward >= threshold
            tp, fp = tp + (correct and predicted), fp + (predicted and not correct)
            fn, tn = fn + (correct and not predicted), tn + (not correct and not predicted)
    return {"precision": round(tp / (tp + fp), 4) if tp + fp else None,
            "recall": round(tp / (tp + fn), 4) if tp + fn else None,
            "verified_accuracy": round((tp + fn) / (tp + fp + fn + tn), 4) if tp + fp + fn + tn else None}
