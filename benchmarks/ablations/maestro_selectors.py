"""MAESTRO central agents compared on the SAME held-out slates: prompt only vs SFT vs GRPO vs CLPO (paper Table 1).

    .venv/bin/python benchmarks/ablations/maestro_selectors.py [--n 200] [--steps 8] [--benchmark arith]
        [--out runs/maestro_selectors] [--trainers sft grpo clpo] [--eval-max-batch 16] [--table-only] [key=value ...]

1. *Slates*, once: ``selfevo eval setup=maestro_select rounds=1`` on the first ``--n`` held-out items of
   ``--benchmark`` with the base model's N×K execution candidates (written to ``<out>/slates``).
2. *Training*: one ``selfevo run maestro`` per trainer on ``<benchmark>:train`` (disjoint from the held-out items),
   ``--steps`` steps, the same protocol settings (resumable: ``<out>/train/<trainer>``).
3. *Selection*: every central agent (the base model = prompt only, and each trained ``adapters/final/central``)
   selects on the replayed slates (``slates=``: the same candidates, the same seeded display order), greedy.
4. *Table*: per central agent, coverage, identification and accuracy with 95% Wilson intervals, the selection
   parse-failure rate, and the paired difference in accuracy against prompt only (same items) with its 95%
   interval. Writes ``benchmarks/results/maestro_selectors.{json,md}`` (``--results``) and prints the table;
   ``.png``: each trainer's training curves (coverage, identification, accuracy, parse failures per step).

Extra ``key=value`` arguments go to every ``selfevo run maestro`` (e.g. ``model.backbones=[...]``). The protocol
settings shared by all steps are in ``PROTOCOL`` (the cpu preset's N=2, K=2, 128-token candidates; the chained
selection for the embedded model).
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from selfevo.stats import paired_difference, wilson  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from effect import plot, train_seconds  # noqa: E402

TRAINERS = ("sft", "grpo", "clpo")
CURVES = ("coverage", "identification", "accuracy", "select_parse_failure_rate")  # per training step
# (selfevo run maestro key, selfevo eval setup key, value)
PROTOCOL = (("agents", "n_agents", 2), ("protocol.k", "k", 2), ("protocol.rounds", "rounds", 1),
            ("protocol.central_chain", "central_chain", "true"), ("protocol.candidate_chars", "candidate_chars", 400),
            ("sampling.max_new_tokens", "sampling.max_new_tokens", 128),
            ("sampling.temperature", "sampling.temperature", 0.7),
            ("seed", "seed", 0))


def run(cmd: list[str]) -> None:
    print("+", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True)


def evaluate(out: Path, args, extra: list[str]) -> dict:
    """``selfevo eval`` of one central agent on the held-out items (skipped when its results exist)."""
    result = out / f"{args.benchmark}-maestro_select" / "results.json"
    if not result.exists():
        run([sys.executable, "-m", "selfevo.cli", "eval", f"benchmark={args.benchmark}", "setup=maestro_select",
             f"limit={args.n}", f"output_dir={out}", f"engine.max_batch={args.eval_max_batch}",
             *[f"{e}={v}" for _, e, v in PROTOCOL], *extra])
    return json.loads(result.read_text())


def items(out: Path, benchmark: str) -> list[dict]:
    lines = (out / f"{benchmark}-maestro_select" / "items.jsonl").read_text().splitlines()
    return [json.loads(line)["info"]["rounds"][0] for line in lines]


def summarise(rounds: list[dict], base: list[dict] | None) -> dict:
    """Coverage / identification / accuracy (Wilson 95%), parse failures, paired accuracy difference vs ``base``."""
    n = len(rounds)
    covered = [r for r in rounds if r["covered"]]
    hits = [float(r["chosen_correct"]) for r in rounds]
    ident = sum(r["chosen_correct"] for r in covered)
    row = {"n": n, "coverage": len(covered) / n, "coverage_ci": wilson(len(covered), n),
           "covered": len(covered), "identification": ident / len(covered) if covered else None,
           "identification_ci": wilson(ident, len(covered)) if covered else None,
           "accuracy": sum(hits) / n, "accuracy_ci": wilson(int(sum(hits)), n),
           "parse_failure_rate": sum(not r["parsed"] for r in rounds) / n, "items": hits,
           "chosen": [r["chosen"] for r in rounds]}
    if base is not None:
        if [r["correct"] for r in base] != [r["correct"] for r in rounds]:
            raise SystemExit("the slates differ between central agents: not a paired comparison")
        row["vs_prompt_only"] = paired_difference([float(r["chosen_correct"]) for r in base], hits)
    return row


def fmt(x: float | None, ci: tuple[float, float] | None) -> str:
    return "–" if x is None else f"{x:.3f} [{ci[0]:.3f}, {ci[1]:.3f}]"


def table(rows: dict, meta: dict) -> str:
    lines = [f"Held-out: first {meta['n']} items of {meta['benchmark']} (test), N={meta['agents']} agents × "
             f"K={meta['k']} candidates, 1 round; training: {meta['steps']} steps on {meta['benchmark']}:train.", "",
             "| central agent | coverage | identification (of covered) | accuracy | parse failures |"
             " accuracy − prompt only (paired 95%) | picks 1/2/3/4 shown | training s |", "|---" * 8 + "|"]
    for name, r in rows.items():
        d = r.get("vs_prompt_only")
        diff = f"{d['diff']:+.3f} [{d['low']:+.3f}, {d['high']:+.3f}] (+{d['improved']}/−{d['worsened']})" if d else "–"
        shown = [0] * meta["agents"] * meta["k"]
        for s in r["shown"]:
            if s is not None:
                shown[s - 1] += 1
        lines.append(f"| {name} | {fmt(r['coverage'], r['coverage_ci'])} ({r['covered']}) | "
                     f"{fmt(r['identification'], r['identification_ci'])} | {fmt(r['accuracy'], r['accuracy_ci'])} | "
                     f"{r['parse_failure_rate']:.3f} | {diff} | {'/'.join(map(str, shown))} | "
                     f"{r.get('train_s') or '–'} |")
    slates = f"; slates collected in {meta['slates_wall_s']:.0f} s" if meta.get("slates_wall_s") else ""
    return ("\n".join(lines) + "\n\nIntervals: 95% Wilson (proportions), normal on the paired per-item differences. "
            f"Training s: rollouts + updates{slates}.\n")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=200, help="held-out items")
    ap.add_argument("--steps", type=int, default=8, help="training steps per trainer")
    ap.add_argument("--benchmark", default="arith")
    ap.add_argument("--out", default="runs/maestro_selectors")
    ap.add_argument("--trainers", nargs="+", default=list(TRAINERS), choices=TRAINERS)
    ap.add_argument("--results", default="benchmarks/results/maestro_selectors")
    ap.add_argument("--eval-max-batch", type=int, default=16,
                    help="rows per forward pass in the evals (64 with a central adapter peaked at 11.5 GB here)")
    ap.add_argument("--table-only", action="store_true", help="tabulate what is already in --out")
    args, overrides = ap.parse_known_args()
    out = Path(args.out)
    slates = out / "slates"
    if not args.table_only:
        evaluate(slates, args, [])
    replay = f"slates={slates / f'{args.benchmark}-maestro_select' / 'items.jsonl'}"
    centrals = {"prompt_only": (out / "select" / "prompt_only", [replay])}
    for name in args.trainers:
        train = out / "train" / name
        if not args.table_only:
            cmd = [sys.executable, "-m", "selfevo.cli", "run", "maestro", f"output_dir={train}",
                   f"trainer.optimizer={name}", f"trainer.max_steps={args.steps}", "trainer.tasks_per_step=8",
                   f"data.tasks=[{args.benchmark}:train]", *[f"{k}={v}" for k, _, v in PROTOCOL], *overrides]
            run(cmd + (["resume=true"] if (train / "metrics.jsonl").exists() else []))
        centrals[name] = (out / "select" / name, [replay, f"central_adapter={train / 'adapters/final/central'}"])
    rows, base = {}, None
    for name, (where, extra) in centrals.items():
        if not args.table_only:
            evaluate(where, args, extra)
        if not (where / f"{args.benchmark}-maestro_select" / "items.jsonl").exists():
            continue
        rounds = items(where, args.benchmark)
        rows[name] = summarise(rounds, base)
        rows[name]["shown"] = [r["shown"] for r in rounds]
        rows[name]["train_s"] = None if name == "prompt_only" else train_seconds(out / "train" / name)
        base = rounds if name == "prompt_only" else base
    setting = {e: v for _, e, v in PROTOCOL}
    meta = {"n": args.n, "benchmark": args.benchmark, "steps": args.steps, "agents": setting["n_agents"],
            "k": setting["k"]}
    slate_results = slates / f"{args.benchmark}-maestro_select" / "results.json"
    if slate_results.exists():
        meta["slates_wall_s"] = json.loads(slate_results.read_text())["wall_time_s"]
    md = table(rows, meta)
    Path(args.results).parent.mkdir(parents=True, exist_ok=True)
    plot([(f"{name} central agent (training slates)", out / "train" / name / "metrics.jsonl", CURVES)
          for name in args.trainers], Path(args.results + ".png"))
    Path(args.results + ".md").write_text(md)
    Path(args.results + ".json").write_text(json.dumps({"meta": meta, "centrals": rows}, default=list) + "\n")
    print(md)


if __name__ == "__main__":
    main()
