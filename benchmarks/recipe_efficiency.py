"""How close a recipe's own steps come to a model of their work, the model calibrated in the same process.

    .venv/bin/python -m benchmarks.recipe_efficiency [--recipe comas] [--tasks 32] [--steps 2] [--repeats 3]
        [--preset cpu] [--no-micro] [grid options] [key=value ...]

Each repeat runs ``selfevo run RECIPE`` for ``--steps`` steps at ``trainer.tasks_per_step=--tasks`` and again at the
preset's own ``tasks_per_step``, then calibrates the step model (``step_calibration.py``: the HF engine's joins by
rows × prompt width, its decode steps by rows × keys swept, the store's train and score micro-batches by width at
the recipe's micro-batch, the parameter update) on a store and engine built from the same config, and, unless
``--no-micro``, the two older micro-benchmarks (``rollout_throughput.py``'s multi-LoRA path: 32 prompts × 128
tokens, 4 adapters; ``train_step.py``: 32 rows × 256 tokens, micro-batch 8). A run's figures come from its last
step (the first warms up: allocations, packed weights). Figures are medians over the repeats:

- ``rollout_predicted_s`` / ``update_predicted_s``: the step model's time for the step's own forwards
  (``rollout_shapes`` / ``update_shapes`` of its metrics; formula and interpolation in ``step_model.py``), with
  its parts (``predicted_prefill_s``, ``predicted_decode_s``, ``predicted_train_s``, ``predicted_score_s``,
  ``predicted_optimizer_s``); ``rollout_measured_over_predicted`` / ``update_measured_over_predicted``: the
  measured phase time over its prediction, the speed target (≤ 1.2): above 1 is time the phase spends outside
  the forwards it needs at the shapes it ran (KV merges, waiting, the protocol's own work, Python overhead);
- ``rollout_tok_s``: generated tokens / rollout wall time; ``rollout_efficiency``: ÷ the rollout micro-benchmark's
  tok/s; ``update_tok_s``: prompt + completion tokens of the trained rows (no padding) / update wall time;
  ``update_efficiency``: ÷ the train-step benchmark's tok/s (the older targets, 0.6 and 0.8: kept for comparison;
  they mix waste with the protocol's real prefill and long-row work, which the model tells apart);
- ``step_s``, ``concurrency`` (mean requests in flight per decode step), the token counts (generated, prompt
  tokens prefilled, trained), trained rows and their mean length.

The last repeat's shapes and every repeat's calibration are in the result (``shapes``, ``calibrations``).
``key=value`` arguments go to every recipe run and to the calibration's config (e.g.
``engine.hf.continuous=false``). Prints a measured-vs-predicted table per phase, then writes
``results/recipe_efficiency_<recipe>.json`` and prints it as one JSON line (the last line).
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

from benchmarks.common import PeakRSS, gsm8k_prompts, machine, save
from benchmarks.step_calibration import Grid, calibrate, check_config
from benchmarks.step_model import measured_over_predicted, predict_rollout, predict_update

from selfevo import cli
from selfevo.errors import SelfevoError

PREDICTED = ("rollout_predicted_s", "update_predicted_s", "rollout_measured_over_predicted",
             "update_measured_over_predicted", "predicted_prefill_s", "predicted_decode_s", "predicted_train_s",
             "predicted_score_s", "predicted_optimizer_s")
FIGURES = (*PREDICTED, "rollout_tok_s", "rollout_efficiency", "update_tok_s", "update_efficiency", "step_s",
           "rollout_s", "update_s", "concurrency", "rollout_tokens", "prefill_tokens", "update_tokens",
           "trained_rows", "mean_row_tokens")
TARGETS = {"rollout_measured_over_predicted": 1.2, "update_measured_over_predicted": 1.2, "rollout_efficiency": 0.6,
           "update_efficiency": 0.8}


class UsageError(Exception):
    """Bad arguments: one line on stderr, exit code 2."""


def micro_rollout(prompts: int = 32, tokens: int = 128) -> float:
    """The default engine's multi-LoRA tok/s (``rollout_throughput.py``: 4 adapters mixed in one batch)."""
    from rollout_throughput import AGENTS, build_store, requests, timed

    from selfevo.engines import make_engine

    return timed(make_engine("hf", build_store()), requests(gsm8k_prompts(prompts), AGENTS, tokens))


def micro_train(seqs: int = 32, length: int = 256, micro_batch: int = 8) -> float:
    """``train_step.py``'s tok/s: one PolicyStore update (clipped loss, forward + backward + AdamW)."""
    from benchmarks.train_step import MODEL, make_batch, selfevo_step

    from selfevo.policy import PolicyStore, StoreSettings

    store = PolicyStore(StoreSettings(dtype="bfloat16", micro_batch=micro_batch))
    store.add_agent("agent", MODEL)
    batch, adv = make_batch(seqs, length)
    selfevo_step(store, batch, adv)  # warm-up
    return seqs * length / selfevo_step(store, batch, adv)


def recipe_config(recipe: str, preset: str | None, overrides: list[str]):
    """The resolved config of ``selfevo run RECIPE [--preset P] key=value ...``."""
    from selfevo.algorithms import RECIPES
    from selfevo.config import load_config

    entry = RECIPES.get(recipe)
    return load_config(entry.config_class(), entry.name, preset or entry.default_preset, overrides)


def recipe_step(recipe: str, preset: str | None, steps: int, tasks: int | None, overrides: list[str]) -> dict:
    """Run the recipe for ``steps`` steps (eval off) and return its last step's metrics (with its shapes)."""
    with tempfile.TemporaryDirectory() as out:
        argv = ["run", recipe, *(["--preset", preset] if preset else []), f"output_dir={out}",
                f"trainer.max_steps={steps}", "eval.every=0", "eval.at_start=false", "log.tensorboard=false",
                *([f"trainer.tasks_per_step={tasks}"] if tasks else []), *overrides]
        if cli.main(argv) != 0:
            raise RuntimeError(f"selfevo {' '.join(argv)} failed")
        last = json.loads((Path(out) / "metrics.jsonl").read_text().splitlines()[-1])
    if "rollout_shapes" not in last:
        raise RuntimeError("the recipe's engine logged no rollout_shapes (the step model needs engine.name=hf)")
    rows = sum(s.get("rows", 0) for s in last.get("train", {}).values())
    return {**{k: last.get(k) for k in ("step_s", "rollout_s", "update_s", "concurrency", "rollout_tokens",
                                        "prefill_tokens", "update_tokens")}, "trained_rows": rows,
            "rollout_shapes": last["rollout_shapes"], "update_shapes": last.get("update_shapes", {})}


def predicted(step: dict, cal) -> dict:
    """The step model's figures for one step (see the module doc)."""
    rollout, update = predict_rollout(step["rollout_shapes"], cal), predict_update(step["update_shapes"], cal)
    return {"rollout_predicted_s": rollout["total_s"], "update_predicted_s": update["total_s"],
            "rollout_measured_over_predicted": measured_over_predicted(step["rollout_s"], rollout["total_s"]),
            "update_measured_over_predicted": measured_over_predicted(step["update_s"], update["total_s"]),
            "predicted_prefill_s": rollout["prefill_s"], "predicted_decode_s": rollout["decode_s"],
            "predicted_train_s": update["train_s"], "predicted_score_s": update["score_s"],
            "predicted_optimizer_s": update["optimizer_s"]}


def figures(step: dict, cal, rollout_rate: float | None, train_rate: float | None) -> dict:
    out = {k: v for k, v in step.items() if not k.endswith("_shapes")}
    out.update(predicted(step, cal))
    out["rollout_tok_s"] = step["rollout_tokens"] / step["rollout_s"] if step["rollout_s"] else None
    out["update_tok_s"] = step["update_tokens"] / step["update_s"] if step["update_s"] else None
    if rollout_rate and out["rollout_tok_s"] is not None:
        out["rollout_efficiency"] = out["rollout_tok_s"] / rollout_rate
    if train_rate and out["update_tok_s"] is not None:
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


def table(result: dict) -> str:
    """Measured vs predicted seconds per phase, at ``--tasks`` and at the preset's tasks per step."""
    lines = [f"{'phase':<8} {'tasks':>5} {'measured_s':>11} {'predicted_s':>12} {'measured/predicted':>19}"]
    for tasks, figs in ((result["tasks_per_step"], result), (result["preset_tasks"], result["preset_tasks_per_step"])):
        for phase in ("rollout", "update"):
            ratio = figs.get(f"{phase}_measured_over_predicted")
            lines.append(f"{phase:<8} {tasks:>5} {figs.get(f'{phase}_s', float('nan')):>11.2f} "
                         f"{figs.get(f'{phase}_predicted_s', float('nan')):>12.2f} "
                         f"{'-' if ratio is None else f'{ratio:.2f}':>19}")
    return "\n".join(lines)


def ints(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(x) for x in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not a comma-separated list of integers") from None


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser()
    ap.add_argument("--recipe", default="comas")
    ap.add_argument("--preset", default=None, help="default: the recipe's own (cpu)")
    ap.add_argument("--tasks", type=int, default=32, help="trainer.tasks_per_step of the full-batch runs")
    ap.add_argument("--steps", type=int, default=2, help="steps per run; the last one is measured")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", default=None, help="result name (default recipe_efficiency_<recipe>)")
    ap.add_argument("--no-micro", action="store_true", help="skip the two older micro-benchmarks (efficiency ratios)")
    g = Grid()
    ap.add_argument("--prefill-rows", type=ints, default=g.prefill_rows, help="calibration: rows per join")
    ap.add_argument("--prefill-widths", type=ints, default=g.prefill_widths, help="calibration: prompt widths")
    ap.add_argument("--decode-rows", type=ints, default=g.decode_rows, help="calibration: rows per decode step")
    ap.add_argument("--decode-keys", type=ints, default=g.decode_keys, help="calibration: keys a decode step sweeps")
    ap.add_argument("--decode-steps", type=int, default=g.decode_steps, help="calibration: timed steps per point")
    ap.add_argument("--train-widths", type=ints, default=g.train_widths, help="calibration: micro-batch widths")
    ap.add_argument("--calibration-repeats", type=int, default=g.repeats, help="timings per point (the minimum)")
    return ap


def grid_of(args) -> Grid:
    return Grid(args.prefill_rows, args.prefill_widths, args.decode_rows, args.decode_keys, args.decode_steps,
                args.train_widths, args.calibration_repeats)


def measure(args, overrides: list[str]) -> dict:
    """Every repeat (see the module doc); the result dict."""
    if args.steps < 1 or args.repeats < 1 or args.tasks < 1:
        raise UsageError("--steps, --repeats and --tasks must be >= 1")
    try:
        cfg = recipe_config(args.recipe, args.preset, overrides)
    except SelfevoError as exc:
        raise UsageError(str(exc).strip("'\"")) from None
    grid = grid_of(args)
    try:
        check_config(cfg, grid)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    rollout_rates, train_rates, calibrations, full, own, shapes = [], [], [], [], [], {}
    with PeakRSS() as mem:
        for r in range(args.repeats):
            steps = {}
            for label, tasks in (("full", args.tasks), ("preset", None)):
                steps[label] = recipe_step(args.recipe, args.preset, args.steps, tasks, overrides)
            cal = calibrate(cfg, grid)
            calibrations.append(cal.to_json())
            if not args.no_micro:
                rollout_rates.append(micro_rollout())
                train_rates.append(micro_train())
            rates = (rollout_rates[-1], train_rates[-1]) if not args.no_micro else (None, None)
            full.append(figures(steps["full"], cal, *rates))
            own.append(figures(steps["preset"], cal, *rates))
            shapes = {k: {s: steps[k][s] for s in ("rollout_shapes", "update_shapes")} for k in steps}
            print(f"repeat {r + 1}/{args.repeats}: full batch {json.dumps(median(full[-1:]))}; preset "
                  f"{json.dumps(median(own[-1:]))}", file=sys.stderr, flush=True)
    result = {"recipe": args.recipe, "preset": args.preset or "default", "tasks_per_step": args.tasks,
              "preset_tasks": cfg.trainer.tasks_per_step, "steps": args.steps, "repeats": args.repeats,
              "overrides": overrides, "grid": vars(grid),
              **median(full), "preset_tasks_per_step": median(own), "targets": TARGETS,
              "per_repeat": {"full": full, "preset": own}, "calibrations": calibrations, "shapes": shapes,
              "peak_rss_gib": mem.gib, "machine": machine()}
    if rollout_rates:
        result["micro_rollout_tok_s"] = round(statistics.median(rollout_rates), 1)
        result["micro_train_tok_s"] = round(statistics.median(train_rates), 1)
        result["per_repeat"].update(micro_rollout_tok_s=[round(x, 1) for x in rollout_rates],
                                    micro_train_tok_s=[round(x, 1) for x in train_rates])
    return result


def main(argv: list[str] | None = None) -> int:
    args, overrides = parser().parse_known_args(argv)
    try:
        result = measure(args, overrides)
    except UsageError as exc:
        print(f"recipe_efficiency: {exc}", file=sys.stderr)
        return 2
    print(table(result))
    save(args.out or f"recipe_efficiency_{args.recipe}", result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
