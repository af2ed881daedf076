"""Run recipe variants as separate ``selfevo run`` processes, then tabulate and plot their metrics."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path


def run_variant(recipe: str, out: Path, overrides: list[str], resume_ok: bool = True) -> Path:
    """``selfevo run RECIPE output_dir=OUT overrides...``; an existing finished run is reused."""
    if resume_ok and (out / "metrics.jsonl").exists():
        overrides = overrides + ["resume=true"]
    cmd = [sys.executable, "-m", "selfevo.cli", "run", recipe, f"output_dir={out}", *overrides]
    print("+", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True)
    return out


def read_metrics(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]


def mean_agent_reward(m: dict) -> float | None:
    xs = [v for v in m["reward"].values() if v is not None]
    return sum(xs) / len(xs) if xs else None


def solver_reward(m: dict) -> float | None:
    return m["reward_by_role"].get("solver")


def judging_reward(m: dict) -> float | None:
    """The reward of the evaluation turns (the judge's in the w/o-evaluation variant)."""
    by_role = m["reward_by_role"]
    return by_role.get("evaluator", by_role.get("judge"))


def table(rows: dict[str, list[dict]]) -> str:
    """Markdown table: per variant, first/last-quarter means of the solution reward, parse failures, lengths."""
    head = ("| variant | steps | solution reward (first ¼ → last ¼) | parse failure (first ¼ → last ¼) | solver length |"
            " precision | recall | s/step |")
    lines = [head, "|---|---|---|---|---|---|---|---|"]
    for name, ms in rows.items():
        q = max(1, len(ms) // 4)
        first, last = _avg(solver_reward(m) for m in ms[:q]), _avg(solver_reward(m) for m in ms[-q:])
        fail0, fail1 = (_avg(m["parse_failure_rate"] for m in part) for part in (ms[:q], ms[-q:]))
        lines.append(f"| {name} | {len(ms)} | {_f(first)} → {_f(last)} | {_f(fail0)} → {_f(fail1)}"
                     f" | {_f(_avg(m['length_by_role'].get('solver') for m in ms))} | {_f(_avg(m['precision'] for m in ms))}"
                     f" | {_f(_avg(m['recall'] for m in ms))} | {_f(_avg(m['rollout_s'] + m['update_s'] for m in ms))} |")
    return "\n".join(lines)


def plot(rows: dict[str, list[dict]], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 4, figsize=(20, 4))
    for name, ms in rows.items():
        steps = [m["step"] for m in ms]
        axes[0].plot(steps, [solver_reward(m) for m in ms], marker="o", label=name)
        axes[1].plot(steps, [judging_reward(m) for m in ms], marker="o", label=name)
        axes[2].plot(steps, [m["parse_failure_rate"] for m in ms], marker="o", label=name)
        axes[3].plot(steps, [m["length_by_role"].get("solver") for m in ms], marker="o", label=name)
    for ax, label in zip(axes, ("solution reward", "evaluation (or judge) reward", "score/verdict parse-failure rate",
                                "solver response length")):
        ax.set_xlabel("step")
        ax.set_title(label)
        ax.grid(alpha=0.3)
    axes[0].legend()
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def _avg(xs) -> float | None:
    xs = [x for x in xs if x is not None]
    return sum(xs) / len(xs) if xs else None


def _f(x: float | None) -> str:
    return "–" if x is None else f"{x:.3f}"
