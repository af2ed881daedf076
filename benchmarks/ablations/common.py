"""Run recipe variants as separate ``selfevo run`` processes (one per seed), then tabulate and plot their metrics.

Seeds: each variant runs once per seed in ``<out>/<variant>/seed<S>`` (``seed=S``); a run made before seeds existed,
directly in ``<out>/<variant>``, counts as seed 0. Tables give, per metric, the mean over seeds and the half-width
of its 95% t-interval (``0.512 ± 0.034``; one seed: ``0.512 (n=1)``); plots draw the mean curve with the interval
as a shaded band. The aggregation is small pure functions: :func:`mean_ci` (over ``selfevo.stats``), :func:`fmt_ci`,
:func:`per_seed`, :func:`band`.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Callable, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from selfevo.stats import seed_interval  # noqa: E402

Run = list[dict]  # one run's metrics.jsonl lines
Stat = Callable[[Run], "float | None"]  # one number per run (e.g. the mean of the last quarter)


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


def seed_dir(out: Path, variant: str, seed: int) -> Path:
    """Run directory of ``variant`` with ``seed``: ``<out>/<variant>/seed<S>``, except that a single-seed run made
    before seeds existed (``<out>/<variant>/metrics.jsonl``, no ``seed0`` folder) is seed 0."""
    base = out / variant
    if seed == 0 and (base / "metrics.jsonl").exists() and not (base / "seed0").exists():
        return base
    return base / f"seed{seed}"


def sweep(recipe: str, out: Path, variants: dict[str, list[str]], seeds: Sequence[int], overrides: list[str],
          run: bool = True, max_steps: int | None = None) -> dict[str, dict[int, Run]]:
    """Each variant once per seed (``run=False``: only read what is there); ``{variant: {seed: metrics}}``, runs
    without metrics left out, each cut to its first ``max_steps`` steps when given."""
    rows: dict[str, dict[int, Run]] = {}
    for name, extra in variants.items():
        rows[name] = {}
        for seed in seeds:
            path = seed_dir(out, name, seed)
            if run:
                run_variant(recipe, path, [*extra, *overrides, f"seed={seed}"])
            if (path / "metrics.jsonl").exists():
                rows[name][seed] = read_metrics(path)[:max_steps]
    return rows


# ---- aggregation over seeds (pure) -----------------------------------------------------------------------------
def mean_ci(xs: Sequence[float | None]) -> tuple[float | None, float | None, int]:
    """``(mean, half-width of the 95% t-interval, n)`` over the values that are not None (``selfevo.stats.
    seed_interval``: Student's t at n − 1 degrees of freedom); the half-width is None for n < 2, the mean None for
    n = 0."""
    v = [float(x) for x in xs if x is not None]
    if not v:
        return None, None, 0
    s = seed_interval(v)
    return s["mean"], (None if s["high"] is None else s["high"] - s["mean"]), s["k"]


def fmt_ci(xs: Sequence[float | None], digits: int = 3) -> str:
    """``"0.512 ± 0.034"`` (mean ± half-width over seeds), ``"0.512 (n=1)"`` for one value, ``"–"`` for none."""
    m, half, n = mean_ci(xs)
    if m is None:
        return "–"
    return f"{m:.{digits}f} (n=1)" if half is None else f"{m:.{digits}f} ± {half:.{digits}f}"


def per_seed(runs: Sequence[Run], stat: Stat) -> list[float | None]:
    """``stat`` of each seed's run (a run that is empty gives None)."""
    return [stat(run) if run else None for run in runs]


def band(runs: Sequence[Run], metric: Callable[[dict], float | None]) -> tuple[list[int], list[float], list[float],
                                                                               list[float]]:
    """Per step that any seed logged with a value: the mean of ``metric`` over the seeds that have it and the bounds
    of its 95% t-interval (both the mean where only one seed has it): ``(steps, mean, low, high)``."""
    values: dict[int, list[float]] = {}
    for run in runs:
        for m in run:
            x = metric(m)
            if x is not None:
                values.setdefault(m["step"], []).append(x)
    steps, mean, low, high = [], [], [], []
    for step in sorted(values):
        m, half, _ = mean_ci(values[step])
        steps.append(step)
        mean.append(m)
        low.append(m - (half or 0.0))
        high.append(m + (half or 0.0))
    return steps, mean, low, high


def quarter(metric: Callable[[dict], float | None], last: bool) -> Stat:
    """Stat: the mean of ``metric`` over a run's first (or last) quarter of steps (at least one step)."""

    def stat(run: Run) -> float | None:
        q = max(1, len(run) // 4)
        return _avg(metric(m) for m in (run[-q:] if last else run[:q]))

    return stat


def average(metric: Callable[[dict], float | None]) -> Stat:
    """Stat: the mean of ``metric`` over a run's steps (None values left out)."""
    return lambda run: _avg(metric(m) for m in run)


def as_runs(value) -> list[Run]:
    """A variant's runs: ``{seed: run}``, a list of runs, or one run (a list of step dicts: the pre-seed format)."""
    if isinstance(value, dict):
        return list(value.values())
    if value and isinstance(value[0], dict):
        return [value]
    return list(value)


def plot_bands(ax, runs: Sequence[Run], metric: Callable[[dict], float | None], label: str) -> None:
    """The mean curve over seeds with its 95% interval shaded."""
    steps, mean, low, high = band(runs, metric)
    (line,) = ax.plot(steps, mean, marker="o", label=label)
    if len(runs) > 1:
        ax.fill_between(steps, low, high, color=line.get_color(), alpha=0.2, linewidth=0)


# ---- CoMAS tables and curves ------------------------------------------------------------------------------------
def mean_agent_reward(m: dict) -> float | None:
    xs = [v for v in m["reward"].values() if v is not None]
    return sum(xs) / len(xs) if xs else None


def solver_reward(m: dict) -> float | None:
    return m["reward_by_role"].get("solver")


def judging_reward(m: dict) -> float | None:
    """The reward of the evaluation turns (the judge's in the w/o-evaluation variant)."""
    by_role = m["reward_by_role"]
    return by_role.get("evaluator", by_role.get("judge"))


def seconds_per_step(m: dict) -> float:
    return m["rollout_s"] + m["update_s"]


def table(rows: dict) -> str:
    """Markdown table, per variant (``{variant: {seed: run}}``, a list of runs, or one run): over seeds, the mean ±
    95% interval of each run's first/last-quarter solution reward and parse failures, solver length, precision,
    recall, seconds per step."""
    head = ("| variant | seeds | steps | solution reward (first ¼ → last ¼) | parse failure (first ¼ → last ¼) |"
            " solver length | precision | recall | s/step |")
    lines = [head, "|---|---|---|---|---|---|---|---|---|"]
    for name, value in rows.items():
        runs = [r for r in as_runs(value) if r]
        if not runs:
            continue
        fail = lambda m: m["parse_failure_rate"]  # noqa: E731
        cells = [f"{fmt_ci(per_seed(runs, quarter(solver_reward, False)))} → "
                 f"{fmt_ci(per_seed(runs, quarter(solver_reward, True)))}",
                 f"{fmt_ci(per_seed(runs, quarter(fail, False)))} → {fmt_ci(per_seed(runs, quarter(fail, True)))}",
                 fmt_ci(per_seed(runs, average(lambda m: m["length_by_role"].get("solver"))), 1),
                 fmt_ci(per_seed(runs, average(lambda m: m["precision"]))),
                 fmt_ci(per_seed(runs, average(lambda m: m["recall"]))),
                 fmt_ci(per_seed(runs, average(seconds_per_step)), 1)]
        lines.append(f"| {name} | {len(runs)} | {steps_range(runs)} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n\nCells: mean over seeds ± half-width of the 95% t-interval (n=1: one seed)."


def plot(rows: dict, path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 4, figsize=(20, 4))
    for name, value in rows.items():
        runs = [r for r in as_runs(value) if r]
        label = f"{name} (n={len(runs)})"
        for ax, metric in zip(axes, (solver_reward, judging_reward, lambda m: m["parse_failure_rate"],
                                     lambda m: m["length_by_role"].get("solver"))):
            plot_bands(ax, runs, metric, label)
    for ax, label in zip(axes, ("solution reward", "evaluation (or judge) reward", "score/verdict parse-failure rate",
                                "solver response length")):
        ax.set_xlabel("step")
        ax.set_title(label)
        ax.grid(alpha=0.3)
    axes[0].legend()
    fig.suptitle(f"{title} (mean over seeds, 95% t-interval shaded)")
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def steps_range(runs: Sequence[Run]) -> str:
    """The runs' step counts: ``"10"``, or ``"8–10"`` when the seeds got different numbers of steps."""
    lengths = sorted({len(r) for r in runs})
    return str(lengths[0]) if len(lengths) == 1 else f"{lengths[0]}–{lengths[-1]}"


def _avg(xs) -> float | None:
    xs = [x for x in xs if x is not None]
    return sum(xs) / len(xs) if xs else None


def _f(x: float | None) -> str:
    return "–" if x is None else f"{x:.3f}"
