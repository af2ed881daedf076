"""MAESTRO ablations: trainers (paper Table 1: prompt only, SFT, GRPO, CLPO), CLPO without L_choice / L_rank (Fig. 3
right), Central-Gen and Central-Gen+SC against Central-Select (Fig. 2), and the candidate views Reason-only /
Answer-only against Both (Fig. 3 left; "both" is the prompt-only row).

    .venv/bin/python benchmarks/ablations/maestro.py [--steps 10] [--seeds 0 1 2] [--eval-limit 20]
        [--out runs/ablations/maestro] [--variants clpo grpo ...] [--table-only] [key=value ...]

Each variant runs once per seed (the paper: 25 42 99) with the cpu preset (plus its overrides and yours) as its own
``selfevo run maestro`` process (resumable) in ``<out>/<variant>/seed<S>``; with ``--eval-limit N`` > 0 each run is
then evaluated on the first N GSM8K test questions by its own ``selfevo eval setup=maestro_select`` process with the
run's protocol settings and, for trained variants, its ``adapters/final/central``. Writes ``table.md`` (per
variant, mean ± 95% t-interval over seeds: accuracy, coverage, identification and selection parse-failure rate of
the training rounds over the last quarter of steps, and of the held-out evaluation), ``curves.png`` (the four per
step, and held-out accuracy) and ``summary.json`` into --out.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from selfevo.setups.maestro_rounds import RoundsCfg  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import (as_runs, average, fmt_ci, mean_ci, per_seed, plot_bands, quarter, seconds_per_step,  # noqa: E402
                    seed_dir, steps_range, sweep)

PROMPT_ONLY = ["trainer.optimizer=none"]
VARIANTS = {
    "prompt_only": PROMPT_ONLY,
    "sft": ["trainer.optimizer=sft"],
    "grpo": ["trainer.optimizer=grpo"],
    "clpo": [],
    "clpo_no_choice": ["clpo.choice=false"],
    "clpo_no_rank": ["clpo.rank=false"],
    "central_gen": ["protocol.central_mode=gen", *PROMPT_ONLY],
    "central_gen_sc": ["protocol.central_mode=gen_sc", *PROMPT_ONLY],
    "view_reason": ["protocol.view=reason", *PROMPT_ONLY],
    "view_answer": ["protocol.view=answer", *PROMPT_ONLY],
}
KEYS = ("accuracy", "coverage", "identification", "select_parse_failure_rate")


def held_out(run: Path, limit: int) -> dict | None:
    """``selfevo eval`` of the run's MAESTRO setting (its central adapter if it trained one) on GSM8K test."""
    out = run / "eval"
    result = out / "gsm8k-maestro_select" / "results.json"
    if limit and not result.exists():
        cfg = yaml.safe_load((run / "config.yaml").read_text())
        p = cfg["protocol"]
        argv = ["benchmark=gsm8k", "setup=maestro_select", f"limit={limit}", f"output_dir={out}",
                f"seed={cfg['seed']}", f"n_agents={cfg['agents']}",
                *(f"model.{k}={json.dumps(cfg['model'][k])}" for k in ("backbones", "dtype")),
                *(f"sampling.{k}={json.dumps(v)}" for k, v in cfg["sampling"].items()),
                *(f"{f.name}={json.dumps(p[f.name])}" for f in dataclasses.fields(RoundsCfg))]  # the rounds' keys
        if cfg["trainer"]["optimizer"] != "none":
            argv.append(f"central_adapter={run / 'adapters' / 'final' / 'central'}")
        cmd = [sys.executable, "-m", "selfevo.cli", "eval", *argv]
        print("+", " ".join(cmd), flush=True)
        subprocess.run(cmd, check=True)
    return json.loads(result.read_text()) if result.exists() else None


def table(rows: dict, evals: dict) -> str:
    lines = ["| variant | seeds | steps | train accuracy | coverage | identification | parse failure | held-out n |"
             " held-out accuracy | coverage | identification | parse failure | s/step |", "|---" * 13 + "|"]
    for name, value in rows.items():
        runs = [r for r in as_runs(value) if r]
        if not runs:
            continue
        held = [e for e in evals.get(name, {}).values() if e]
        train = [fmt_ci(per_seed(runs, quarter(lambda m, k=k: m.get(k), True))) for k in KEYS]
        test = [fmt_ci([e.get(k) for e in held]) for k in KEYS]
        n = held[0]["n"] if held else "–"
        lines.append(f"| {name} | {len(runs)} | {steps_range(runs)} | {' | '.join(train)} | {n} | {' | '.join(test)}"
                     f" | {fmt_ci(per_seed(runs, average(seconds_per_step)), 1)} |")
    return "\n".join(lines) + ("\n\nCells: mean over seeds ± half-width of the 95% t-interval (n=1: one seed); "
                               "training columns: the last quarter of steps.")


def plot(rows: dict, evals: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 5, figsize=(25, 4))
    for name, value in rows.items():
        runs = [r for r in as_runs(value) if r]
        for ax, key in zip(axes, KEYS):
            plot_bands(ax, runs, lambda m, k=key: m.get(k), f"{name} (n={len(runs)})")
    for ax, key in zip(axes, KEYS):
        ax.set_xlabel("step")
        ax.set_title(f"{key.replace('_', ' ')} (training rounds)")
        ax.grid(alpha=0.3)
    names, means, halves = [], [], []
    for name in rows:
        m, half, _ = mean_ci([e.get("accuracy") for e in evals.get(name, {}).values() if e])
        if m is not None:
            names.append(name)
            means.append(m)
            halves.append(half or 0.0)
    axes[4].barh(names, means, xerr=halves)
    axes[4].set_title("held-out accuracy (GSM8K test)")
    axes[0].legend(fontsize=7)
    fig.suptitle("MAESTRO ablations: trainers, CLPO terms, Central-Gen vs Select, candidate views "
                 "(mean over seeds, 95% t-interval)")
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0], help="run every variant once per seed")
    ap.add_argument("--eval-limit", type=int, default=20, help="held-out GSM8K test questions (0: no evaluation)")
    ap.add_argument("--out", default="runs/ablations/maestro")
    ap.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    ap.add_argument("--table-only", action="store_true", help="tabulate runs already in --out/<variant>/seed<S>")
    args, overrides = ap.parse_known_args()
    out = Path(args.out)
    variants = {name: [f"trainer.max_steps={args.steps}", *VARIANTS[name]] for name in args.variants}
    rows = sweep("maestro", out, variants, args.seeds, overrides, run=not args.table_only)
    limit = 0 if args.table_only else args.eval_limit
    evals = {name: {seed: held_out(seed_dir(out, name, seed), limit) for seed in runs} for name, runs in rows.items()}
    md = table(rows, evals)
    out.mkdir(parents=True, exist_ok=True)
    (out / "table.md").write_text(md + "\n")
    plot(rows, evals, out / "curves.png")
    (out / "summary.json").write_text(json.dumps({"train": rows, "held_out": evals}, default=str))
    print(md)


if __name__ == "__main__":
    main()
