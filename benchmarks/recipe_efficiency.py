"""How close a recipe's own steps come to the engine's and the trainer's benchmark rates, measured in one process.

    .venv/bin/python benchmarks/recipe_efficiency.py [--recipe comas] [--tasks 32] [--steps 2] [--repeats 3]
        [--preset cpu] [key=value ...]

Each repeat runs, in this order: the rollout micro-benchmark (``rollout_throughput.py``'s default multi-LoRA path:
32 prompts × 128 tokens, 4 adapters), the train-step micro-benchmark (``train_step.py``: 32 rows × 256 tokens,
micro-batch 8), then ``selfevo run RECIPE`` for ``--steps`` steps at ``trainer.tasks_per_step=--tasks`` and again
at the preset's own ``tasks_per_step``. A run's figures come from its last step (the first warms up: allocations,
packed weights). Figures are medians over the repeats:

- ``rollout_tok_s``: generated tokens / rollout wall time inside the recipe; ``rollout_efficiency``: ÷ the
  micro-benchmark's tok/s (target ≥ 0.6 at ``--tasks``);
- ``update_tok_s``: prompt + completion tokens of the trained rows (no padding, as ``train_step.py`` counts) /
  update wall time; ``update_efficiency``: ÷ the train-step benchmark's tok/s (target ≥ 0.8);
- ``step_s``, ``concurrency`` (mean requests in flight per decode step), the token counts (generated, prompt
  tokens prefilled, trained), the mean trained row
  length (the train-step benchmark's rows are 256 tokens; attention makes longer rows cost more per token).

``key=value`` arguments go to every recipe run (e.g. ``engine.continuous=false`` for lock-step waves). Writes
``results/recipe_efficiency_<recipe>.json`` and prints one JSON line.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import PeakRSS, gsm8k_prompts, machine, save  # noqa: E402
from rollout_throughput import AGENTS, build_store, requests, timed  # noqa: E402
from train_step import MODEL, make_batch, selfevo_step  # noqa: E402

from selfevo import cli  # noqa: E402
from selfevo.engines import make_engine  # noqa: E402
from selfevo.policy import PolicyStore  # noqa: E402

FIGURES = ("rollout_tok_s", "rollout_efficiency", "update_tok_s", "update_efficiency", "step_s", "rollout_s",
           "update_s", "concurrency", "rollout_tokens", "prefill_tokens", "update_tokens", "trained_rows",
           "mean_row_tokens")


def micro_rollout(prompts: int = 32, tokens: int = 128) -> float:
    """The default engine's multi-LoRA tok/s (``rollout_throughput.py``: 4 adapters mixed in one batch)."""
    return timed(make_engine("hf", build_store()), requests(gsm8k_prompts(prompts), AGENTS, tokens))


def micro_train(seqs: int = 32, length: int = 256, micro_batch: int = 8) -> float:
    """``train_step.py``'s tok/s: one PolicyStore step (clipped loss, forward + backward + AdamW)."""
    store = PolicyStore(dtype="bfloat16", micro_batch=micro_batch)
    store.add_agent("agent", MODEL)
    batch, adv = make_batch(seqs, length)
    selfevo_step(store, batch, adv)  # warm-up
    return seqs * length / selfevo_step(store, batch, adv)


def recipe_step(recipe: str, preset: str | None, steps: int, tasks: int | None, overrides: list[str]) -> dict:
    """Run the recipe for ``steps`` steps (eval off) and return its last step's metrics."""
    with tempfile.TemporaryDirectory() as out:
        argv = ["run", recipe, *(["--preset", preset] if preset else []), f"output_dir={out}",
                f"trainer.max_steps={steps}", "eval.every=0", "eval.at_start=false",
                *([f"trainer.tasks_per_step={tasks}"] if tasks else []), *overrides]
        if cli.main(argv) != 0:
            raise SystemExit(f"selfevo {' '.join(argv)} failed")
        last = json.loads((Path(out) / "metrics.jsonl").read_text().splitlines()[-1])
    rows = sum(s.get("rows", 0) for s in last.get("train", {}).values())
    return {**{k: last.get(k) for k in ("step_s", "rollout_s", "update_s", "concurrency", "rollout_tokens",
                                        "prefill_tokens", "update_tokens")}, "trained_rows": rows}


def figures(step: dict, rollout_rate: float, train_rate: float) -> dict:
    out = dict(step)
    out["rollout_tok_s"] = step["rollout_tokens"] / step["rollout_s"]
    out["update_tok_s"] = step["update_tokens"] / step["update_s"]
    out["rollout_efficiency"] = out["rollout_tok_s"] / rollout_rate
    out["update_efficiency"] = out["update_tok_s"] / train_rate
    out["mean_row_tokens"] = step["update_tokens"] / step["trained_rows"] if step["trained_rows"] else None
    return out


def median(runs: list[dict]) -> dict:
    out = {}
    for key in FIGURES:
        values = [r[key] for r in runs if r.get(key) is not None]
        if values:
            out[key] = round(statistics.median(values), 3)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--recipe", default="comas")
    ap.add_argument("--preset", default=None, help="default: the recipe's own (cpu)")
    ap.add_argument("--tasks", type=int, default=32, help="trainer.tasks_per_step of the full-batch runs")
    ap.add_argument("--steps", type=int, default=2, help="steps per run; the last one is measured")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", default=None, help="result name (default recipe_efficiency_<recipe>)")
    args, overrides = ap.parse_known_args()
    if args.steps < 1 or args.repeats < 1 or args.tasks < 1:
        raise SystemExit("--steps, --repeats and --tasks must be >= 1")
    rollout_rates, train_rates, full, own = [], [], [], []
    with PeakRSS() as mem:
        for r in range(args.repeats):
            rollout_rates.append(micro_rollout())
            train_rates.append(micro_train())
            for tasks, runs in ((args.tasks, full), (None, own)):
                step = recipe_step(args.recipe, args.preset, args.steps, tasks, overrides)
                runs.append(figures(step, rollout_rates[-1], train_rates[-1]))
            print(f"repeat {r + 1}/{args.repeats}: micro rollout {rollout_rates[-1]:.0f} tok/s, train "
                  f"{train_rates[-1]:.0f} tok/s; full batch {json.dumps(median(full[-1:]))}; preset "
                  f"{json.dumps(median(own[-1:]))}", file=sys.stderr, flush=True)
    result = {"recipe": args.recipe, "preset": args.preset or "default", "tasks_per_step": args.tasks,
              "steps": args.steps, "repeats": args.repeats, "overrides": overrides,
              "micro_rollout_tok_s": round(statistics.median(rollout_rates), 1),
              "micro_train_tok_s": round(statistics.median(train_rates), 1),
              **median(full), "preset_tasks_per_step": median(own),
              "targets": {"rollout_efficiency": 0.6, "update_efficiency": 0.8},
              "per_repeat": {"micro_rollout_tok_s": [round(x, 1) for x in rollout_rates],
                             "micro_train_tok_s": [round(x, 1) for x in train_rates], "full": full, "preset": own},
              "peak_rss_gib": mem.gib, "machine": machine()}
    save(args.out or f"recipe_efficiency_{args.recipe}", result)


if __name__ == "__main__":
    main()
