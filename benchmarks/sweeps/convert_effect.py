"""One-off: benchmarks/results/effect.json's rows (recorded before `selfevo sweep` existed) as carried-over
evaluations in the folders ``selfevo sweep benchmarks/sweeps/effect.yaml`` reads, so that ``--table`` rebuilds the
effect table from them without running anything.

    .venv/bin/python -m benchmarks.sweeps.convert_effect      # writes OUT/<row>/seed<k>/eval/, OUT = the file's output_dir
    selfevo sweep benchmarks/sweeps/effect.yaml --table       # OUT/table.{md,json}

Per row of the sweep file and seed: ``eval/summary.json`` (selfevo eval's record: benchmark, split, setup, n,
accuracy, seed, sampling, dtype) with ``carried_over`` (where from, the evaluation and training commands, steps,
training seconds, mean answer length, answers' SHA-256 where recorded) and ``eval/arith-vanilla/items.jsonl`` with
each item's id and verdict, no answers. No run directory is written: the sweep counts these rows as not trained and
not evaluated by itself, so running it (without ``--table``) trains and evaluates a row again and replaces its
carried-over evaluation. The untrained rows: ``base`` is effect.json's float32 base (``bases``), ``base_auto`` its
dtype-auto base (``base``, bf16 where it was recorded), which ``grpo`` was evaluated and is paired with.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from selfevo.sweep import spec
from selfevo.tasks import load_tasks

ROOT = Path(__file__).resolve().parents[2]
RECORD = ROOT / "benchmarks" / "results" / "effect.json"
SWEEP = ROOT / "benchmarks" / "sweeps" / "effect.yaml"
UNTRAINED = {"base": "model.dtype=float32", "base_auto": None}  # sweep row → its base in effect.json


def base_of(record: dict, row: dict) -> dict:
    """The effect.json base a method row was paired with (the row's ``eval`` command; none: ``base``)."""
    command = row.get("eval")
    return record["base"] if command in (None, record["base"]["command"]) else record["bases"][command]


def untrained(record: dict, keys: str | None) -> dict:
    if keys is None:
        return record["base"]
    (base,) = [b for command, b in record["bases"].items() if command.endswith(keys)]
    return base


def summary(cfg, n: int, seed: int, items: list[float], eval_command: str, carried: dict) -> list[dict]:
    """summary.json's one record, as selfevo eval writes it, with ``carried_over``."""
    e = cfg.eval
    return [{"benchmark": e.benchmark, "split": "test", "setup": e.setup, "n": n, "accuracy": sum(items) / n,
             "seed": seed, "dtype": "float32" if "model.dtype=float32" in eval_command else "bfloat16",
             "sampling": {"max_new_tokens": e.sampling.max_new_tokens, "temperature": e.sampling.temperature,
                          "top_p": e.sampling.top_p},
             "carried_over": {"from": "benchmarks/results/effect.json", "eval": eval_command, **carried}}]


def write_seed(folder: Path, records: list[dict], ids: list[str], items: list[float]) -> None:
    where = folder / "eval" / f"{records[0]['benchmark']}-{records[0]['setup']}"
    where.mkdir(parents=True, exist_ok=True)
    where.joinpath("items.jsonl").write_text("".join(json.dumps({"id": i, "correct": bool(c)}) + "\n"
                                                     for i, c in zip(ids, items)))
    (folder / "eval" / "summary.json").write_text(json.dumps(records, indent=1) + "\n")


def convert(record: dict, sweep: Path, out: Path | None = None) -> Path:
    """Write every row of ``sweep`` that ``record`` holds into the sweep's output_dir (or ``out``); returns it."""
    cfg, rows = spec.load_sweep(sweep)
    out = Path(out or cfg.output_dir)
    n = cfg.eval.limit
    ids = [t.id for t in load_tasks(cfg.eval.benchmark, cfg.eval.split, limit=n)]
    for name, row in rows.items():
        if row.recipe is None:
            base = untrained(record, UNTRAINED[name])
            for seed in spec.row_seeds(cfg, row):
                carried = {"answer_chars": base["answer_chars"]}
                write_seed(out / name / f"seed{seed}", summary(cfg, n, seed, base["items"], base["command"], carried),
                           ids, base["items"])
            continue
        method = record["methods"][name]
        eval_command = base_of(record, method)["command"]
        for seed, p in method["per_seed"].items():
            carried = {"command": p["command"], **{k: p[k] for k in ("steps", "train_s", "answer_chars",
                                                                      "answers_sha256") if k in p}}
            write_seed(out / name / f"seed{seed}", summary(cfg, n, int(seed), p["items"],
                                                           p.get("eval") or eval_command, carried), ids, p["items"])
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--record", type=Path, default=RECORD)
    ap.add_argument("--sweep", type=Path, default=SWEEP)
    ap.add_argument("--out", type=Path, default=None, help="default: the sweep file's output_dir")
    args = ap.parse_args()
    print(convert(json.loads(args.record.read_text()), args.sweep, args.out))


if __name__ == "__main__":
    main()
