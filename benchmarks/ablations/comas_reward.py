"""CoMAS reward ablations (paper Sec. 4.3.1, App. J): full vs w/o evaluation vs w/o scoring.

    .venv/bin/python benchmarks/ablations/comas_reward.py [--steps 10] [--out runs/ablations/comas_reward] [key=value ...]

Runs each variant with the cpu preset (plus any overrides), then writes ``table.md``, ``curves.png`` and
``summary.json`` into --out. Expected dynamics in the paper: the reward stays near 0.5 for full CoMAS, falls without
evaluation, and climbs towards 1.0 (collusion) without scoring.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import plot, read_metrics, run_variant, table  # noqa: E402

VARIANTS = {
    "full": ["protocol.variant=full"],
    "without_evaluation": ["protocol.variant=without_evaluation"],
    "without_scoring": ["protocol.variant=without_scoring", "protocol.evaluations=2"],
}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--out", default="runs/ablations/comas_reward")
    ap.add_argument("--variants", nargs="+", default=list(VARIANTS))
    ap.add_argument("--table-only", action="store_true", help="tabulate runs already in --out/<variant>")
    args, overrides = ap.parse_known_args()
    out = Path(args.out)
    rows = {}
    for name in args.variants:
        run = out / name
        if not args.table_only:
            run_variant("comas", run, [f"trainer.max_steps={args.steps}", *VARIANTS[name], *overrides])
        rows[name] = read_metrics(run)
    md = table(rows)
    (out / "table.md").write_text(md + "\n")
    plot(rows, out / "curves.png", "CoMAS reward ablations")
    (out / "summary.json").write_text(json.dumps(rows))
    print(md)


if __name__ == "__main__":
    main()
