"""Does self-evolution work here? Untrained vs trained on the same held-out items, per method, paired.

    .venv/bin/python benchmarks/ablations/effect.py [--methods comas sage] [--n 500] [--table-only]

1. *Before*, once: ``selfevo eval benchmark=arith setup=vanilla`` of the untrained embedded model on the first
   ``--n`` held-out ``arith`` test items, greedy (``runs/effect/base``).
2. Per method: its ``cpu-learn`` preset (``selfevo run <method> --preset cpu-learn``, training on ``arith:train``,
   disjoint from the held-out items by construction), resumable in ``runs/effect/<method>``.
3. *After*: the same evaluation with the run's final adapter (``adapters/final/<agent>``; CoMAS: agent 0).
   Rows this script does not compute (``grpo`` and ``trl_grpo`` from ``grpo_vs_trl.py``) are kept.
4. MAESTRO: its selectors are compared on fixed held-out slates by ``maestro_selectors.py``; its table is read from
   ``benchmarks/results/maestro_selectors.json`` (prompt only → CLPO), when present.

Writes ``benchmarks/results/effect.json`` — ``{"methods": {name: {"n", "before", "after", "before_ci",
"after_ci", "diff", "diff_low", "diff_high", "improved", "worsened", "before_items", "after_items", "command",
"train_s"}}}`` (items: per-item 0/1 in the same order), ``effect.md`` and ``effect.png`` (training curves), and
prints the table. Intervals: 95%
Wilson for accuracies, the normal interval of the paired per-item differences for the change.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from selfevo.stats import paired_difference, wilson  # noqa: E402

BENCH = "arith"
EVAL = ["setup=vanilla", "sampling.max_new_tokens=256", "sampling.temperature=0"]
AGENTS = {"comas": ["agent0"], "sage": ["sage"]}  # CoMAS: agent 0 (its agents are symmetric)
# the training command of each method (output_dir appended); the GRPO rows (grpo, trl_grpo) are written by
# grpo_vs_trl.py, over seeds, into the same effect.json
COMMANDS = {
    "comas": ["-m", "selfevo.cli", "run", "comas", "--preset", "cpu-learn"],
    "sage": ["-m", "selfevo.cli", "run", "sage", "--preset", "cpu-learn"],
}


def sh(cmd: list[str]) -> None:
    print("+", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True)


def evaluate(out: Path, n: int, extra: list[str], run: bool) -> list[float] | None:
    """Per-item correctness (0/1, held-out order) of one evaluation, running it first if needed."""
    items = out / f"{BENCH}-vanilla" / "items.jsonl"
    if run and not items.exists():
        sh([sys.executable, "-m", "selfevo.cli", "eval", f"benchmark={BENCH}", f"limit={n}", f"output_dir={out}",
            *EVAL, *extra])
    if not items.exists():
        return None
    return [float(json.loads(line)["correct"]) for line in items.read_text().splitlines()]


def train(method: str, out: Path, run: bool) -> list[str]:
    cmd = [sys.executable, *COMMANDS[method], f"output_dir={out}"]
    resume = ["resume=true"] if (out / "metrics.jsonl").exists() else []
    if run and not (out / "adapters" / "final").exists():
        sh(cmd + resume)
    return ["selfevo", *cmd[3:]]


def train_seconds(out: Path) -> float | None:
    path = out / "metrics.jsonl"
    if not path.exists():
        return None
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    if not all("rollout_s" in m and "update_s" in m for m in lines):
        return None  # a run from before rollouts were timed: unknown
    return round(sum(m["rollout_s"] + m["update_s"] for m in lines), 1)


def row(before: list[float], after: list[float], **extra) -> dict:
    n = len(before)
    d = paired_difference(before, after)
    return {"n": n, "before": sum(before) / n, "after": sum(after) / n,
            "before_ci": wilson(int(sum(before)), n), "after_ci": wilson(int(sum(after)), n), "diff": d["diff"],
            "diff_low": d["low"], "diff_high": d["high"], "improved": d["improved"], "worsened": d["worsened"],
            "before_items": before, "after_items": after, **extra}


def maestro_row() -> dict | None:
    path = Path("benchmarks/results/maestro_selectors.json")
    if not path.exists():
        return None
    record = json.loads(path.read_text())
    centrals, meta = record["centrals"], record["meta"]
    if "prompt_only" not in centrals or "clpo" not in centrals:
        return None
    base, clpo = centrals["prompt_only"], centrals["clpo"]
    command = (f"benchmarks/ablations/maestro_selectors.py --n {meta['n']} --steps {meta['steps']} "
               f"--benchmark {meta['benchmark']}")
    return row(base["items"], clpo["items"], what="central agent on fixed held-out slates (accuracy = the chosen "
               "candidate is correct)", identification_before=base["identification"],
               identification_after=clpo["identification"], command=command, train_s=clpo.get("train_s"))


def table(methods: dict) -> str:
    lines = ["| method | agent | n | before | after | after − before (paired 95%) | items +/− | training s |",
             "|---" * 8 + "|"]
    for name, r in methods.items():
        ci = lambda x: f"[{x[0]:.3f}, {x[1]:.3f}]"  # noqa: E731
        lines.append(f"| {name} | {r.get('agent', '–')} | {r['n']} | {r['before']:.3f} {ci(r['before_ci'])} | "
                     f"{r['after']:.3f} {ci(r['after_ci'])} | {r['diff']:+.3f} [{r['diff_low']:+.3f}, "
                     f"{r['diff_high']:+.3f}] | +{r['improved']}/−{r['worsened']} | {r.get('train_s') or '–'} |")
    return "\n".join(lines) + "\n"


CURVES = {"comas": ("verified_accuracy", "precision", "recall", "parse_failure_rate"),
          "sage": ("solver_accuracy", "format.solver", "acceptance_rate")}


def plot(runs: list[tuple[str, Path, tuple[str, ...]]], path: Path) -> None:
    """One panel per run: ``(title, metrics.jsonl, keys)`` → each key of its per-step metrics against the step (runs
    whose metrics file is missing are left out; nothing is written when none is there)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = [r for r in runs if r[1].exists()]
    if not runs:
        return
    fig, axes = plt.subplots(1, len(runs), figsize=(6 * len(runs), 4), squeeze=False)
    for ax, (title, metrics, keys) in zip(axes[0], runs):
        lines = [json.loads(x) for x in metrics.read_text().splitlines()]
        for key in keys:
            ys = [m.get(key) for m in lines]
            ax.plot([m["step"] for m in lines], [float("nan") if y is None else y for y in ys], marker="o", label=key)
        ax.set_title(title)
        ax.set_xlabel("step")
        ax.set_ylim(-0.02, 1.02)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--methods", nargs="+", default=list(AGENTS), choices=list(AGENTS))
    ap.add_argument("--n", type=int, default=500)
    ap.add_argument("--out", default="runs/effect")
    ap.add_argument("--results", default="benchmarks/results/effect")
    ap.add_argument("--table-only", action="store_true")
    args = ap.parse_args()
    out, run = Path(args.out), not args.table_only
    before = evaluate(out / "base", args.n, [], run)
    methods: dict[str, dict] = {}
    for method in args.methods:
        where = out / method
        command = train(method, where, run)
        for agent in AGENTS[method]:
            adapter = where / "adapters" / "final" / agent
            after = evaluate(where / "eval" / agent, args.n, [f"adapters=[{adapter}]"], run and adapter.exists())
            if before is not None and after is not None:
                key = method if len(AGENTS[method]) == 1 else f"{method}/{agent}"
                methods[key] = row(before, after, agent=agent, command=" ".join(command),
                                   train_s=train_seconds(where))
    if (m := maestro_row()) is not None:
        methods["maestro"] = {**m, "agent": "central"}
    path = Path(args.results + ".json")
    kept = json.loads(path.read_text())["methods"] if path.exists() else {}  # rows other scripts wrote (grpo, ...)
    methods = {**kept, **methods}
    md = table(methods)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"benchmark": BENCH, "eval": EVAL, "methods": methods}) + "\n")
    Path(args.results + ".md").write_text(md)
    plot([(f"{m} --preset cpu-learn (training rollouts)", out / m / "metrics.jsonl", CURVES[m]) for m in args.methods],
         Path(args.results + ".png"))
    print(md)


if __name__ == "__main__":
    main()
