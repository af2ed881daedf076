"""One table, many methods: SAGE's Table 1 in miniature.

Each method trained on the same data with the same seed, all evaluated on the same held-out items, each paired with
the untrained model and with every other method.

    .venv/bin/python benchmarks/ablations/compare.py --methods sage,azr,mae,grpo --preset cpu-learn   # hours here
    .venv/bin/python benchmarks/ablations/compare.py --preset cpu-learn --out runs/effect    # effect.py's runs too
    .venv/bin/python benchmarks/ablations/compare.py --methods sage,azr,mae --preset paper   # GPUs: Table 1's nine
    .venv/bin/python benchmarks/ablations/compare.py --preset cpu-learn --table-only         # rebuild from the JSON

SAGE's Table 1 (papers/003, Sec. 5.1): on Qwen2.5-3B-Instruct (also Qwen2.5-7B-Instruct and Qwen3-4B-Base), the base
model, AZR (200 steps), MAE (half reference, 200 steps) and SAGE (200 steps), pass@1 with greedy decoding on
HumanEval+, MBPP+, LiveCodeBench v1-v5, GSM8K, MATH, AIME 2024, AIME 2025, AMC 2023 and OlympiadBench. GRPO (plain
RL on the verifier's reward, DeepSeekMath) is not in that table; it is here as the baseline that learns on the CPU.

What ``--preset`` means (:data:`SCALES`), for every method at once:

* ``cpu-learn``: each method's ``cpu-learn`` preset (the embedded SmolLM2-135M-Instruct, the ``arith`` curriculum;
  ``selfevo/configs/<method>/cpu-learn.yaml``), evaluated as ``effect.py`` evaluates: the first ``--n`` (500)
  held-out ``arith`` items, greedy, 256 new tokens. The runs are ``effect.py``'s rows ``sage``, ``azr``, ``mae`` and
  ``grpo``, the same commands in the same folders (``<out>/<method>/seed<S>``, ``<out>/base``): ``--out runs/effect``
  reuses what ``effect.py`` trained and evaluated there, and the reverse: this script writes only
  ``compare_<preset>.json``; ``effect.py --rows mae --seeds 0 --out runs/effect`` (the same ``--set`` and
  ``--eval-set``) then merges a run into ``effect.json`` without training or evaluating it again.
* ``paper``: each method's ``paper`` preset on Qwen2.5-3B-Instruct (Table 1's first backbone), AZR moved to the
  setting of SAGE's Table 1 (its own preset is the AZR paper's: Qwen2.5-7B base, 500 steps); evaluated on Table 1's
  nine benchmarks (all items; ``--benchmark`` picks some), greedy, vLLM, answers up to 8192 tokens (SAGE Table 4).
  Folders ``<out>/<method>_paper/seed<S>``, ``<out>/base_paper``. Where this is not Table 1: MATH is ``math500``
  (the paper does not say which), the local LiveCodeBench is another slice (docs/papers.md), the final adapter is
  evaluated (SAGE reports its checkpoint "around step 100"), and the adapters are LoRA (as SAGE; AZR and MAE trained
  all weights). GRPO has no paper preset.

Per method and seed: its training command (``effect.Row``) with ``seed=S``, resumable (a stopped run continues with
``resume=true``; a finished one is reused; a folder trained by another command is refused), then ``selfevo eval``
of its final adapter on every benchmark; the untrained model once per benchmark. ``--set [METHOD:|eval:]KEY=VALUE``
adds a key to every method's training, to one method's, or to every evaluation. Evaluations with ``eval:`` keys go
where ``effect.py --eval-set`` puts them (``<out>/base-<keys>``, ``<run>/eval-<keys>``, e.g. ``eval-model.dtype-float32``),
so either script reuses the other's; an evaluation already in a folder is reused only with the keys it was run with
(others are a one-line error).

Writes ``benchmarks/results/compare_<preset>.{json,md}``: per benchmark and method the seed-averaged accuracy with
its Wilson interval, the paired change from the untrained model with its 95% interval, items turned right / wrong,
mean answer characters, training seconds; every pair of methods paired on the same items (seeds both have); the
per-item lists, commands and training curves it is built from, so ``--table-only`` rebuilds the Markdown from the
JSON alone. Intervals: 95% Wilson for accuracies, normal on the paired per-item differences for a change.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import effect  # noqa: E402

from selfevo.config import presets  # noqa: E402
from selfevo.errors import OneLineParser, UsageError  # noqa: E402
from selfevo.tasks import task_names  # noqa: E402

METHODS = ("sage", "azr", "mae", "grpo")  # effect.ROWS names; a method's cpu-learn row is effect.ROWS[method]
PAPER_MODEL = "Qwen/Qwen2.5-3B-Instruct"
TABLE1 = ("humanevalplus", "mbppplus", "livecodebench", "gsm8k", "math500", "aime2024", "aime2025", "amc2023",
          "olympiadbench")


@dataclasses.dataclass
class Scale:
    """What ``--preset`` sets besides each method's preset: the default benchmarks and items per benchmark (0: all),
    the evaluation's keys, per method the training keys that put every method on one backbone and schedule, and the
    suffix of the run folders (``""``: effect.py's)."""

    benchmarks: tuple[str, ...]
    eval: tuple[str, ...]
    n: int
    train: dict[str, tuple[str, ...]]
    suffix: str


SCALES = {
    "cpu-learn": Scale(("arith",), tuple(effect.EVAL), 500, {}, ""),
    "paper": Scale(TABLE1, ("setup=vanilla", f"model.backbones=[{PAPER_MODEL}]", "engine.name=vllm",
                            "engine.max_model_len=16384", "engine.gpu_memory_utilization=0.85",
                            "sampling.max_new_tokens=8192", "sampling.temperature=0"), 0,
                   {"azr": (f"model.backbones=[{PAPER_MODEL}]", "trainer.max_steps=200")}, "_paper"),
}


# ---- the command line, checked before any work ------------------------------------------------------------------
def parse_methods(text: str) -> list[str]:
    names = [m.strip() for m in text.split(",") if m.strip()]
    for name in names:
        if name not in METHODS:
            raise UsageError(f"unknown method '{name}'; valid: {', '.join(METHODS)}")
    if not names or len(set(names)) != len(names):
        raise UsageError(f"--methods needs distinct methods, got '{text}'; valid: {', '.join(METHODS)}")
    return names


def check_preset(methods: list[str], preset: str) -> None:
    """Every method has ``preset`` (``selfevo/configs/<method>/<preset>.yaml``) and this script knows its scale."""
    common = sorted(set.intersection(*(set(presets(m)) for m in methods)) & set(SCALES))
    if preset not in SCALES:
        raise UsageError(f"preset '{preset}' is not one of {', '.join(SCALES)}; of these, {', '.join(methods)} "
                         f"{_has(methods)}: {', '.join(common) or 'none'}")
    missing = [m for m in methods if preset not in presets(m)]
    if missing:
        raise UsageError(f"{', '.join(missing)} {_has(missing)} no preset '{preset}' (selfevo/configs/{missing[0]}/"
                         f"{preset}.yaml); presets {'all of ' * (len(methods) > 1)}{', '.join(methods)} "
                         f"{_has(methods)} here: {', '.join(common) or 'none'}")


def _has(names: list[str]) -> str:
    return "has" if len(names) == 1 else "have"


def parse_benchmarks(text: str | None, scale: Scale) -> list[str]:
    names = [b.strip() for b in text.split(",") if b.strip()] if text else list(scale.benchmarks)
    known = task_names()
    for name in names:
        if name not in known:
            raise UsageError(f"unknown benchmark '{name}' (selfevo ls lists them)")
    return names


def parse_sets(items: list[str], methods: list[str]) -> tuple[dict[str, list[str]], list[str]]:
    """``--set [METHOD:|eval:]KEY=VALUE`` → (training keys per method, evaluation keys)."""
    train: dict[str, list[str]] = {m: [] for m in methods}
    evals: list[str] = []
    for item in items:
        key = item.split("=", 1)[0]
        if "=" not in item or not key.split(":")[-1]:
            raise UsageError(f"--set '{item}' is not [METHOD:|eval:]KEY=VALUE")
        scope, item = (item.split(":", 1) if ":" in key else ("", item))
        if scope == "eval":
            evals.append(item)
        elif scope in train:
            train[scope].append(item)
        elif scope:
            raise UsageError(f"--set '{scope}:...': '{scope}' is not eval or one of {', '.join(methods)}")
        else:
            for m in methods:
                train[m].append(item)
    return train, evals


def method_row(method: str, preset: str, extra: list[str] = ()) -> effect.Row:
    """``effect.ROWS[method]`` trained with ``preset``, the scale's keys for it and ``extra``."""
    row = effect.ROWS[method]
    return dataclasses.replace(row, preset=preset,
                               overrides=(*row.overrides, *SCALES[preset].train.get(method, ()), *extra))


# ---- runs -------------------------------------------------------------------------------------------------------
def run_all(methods: list[str], preset: str, seeds: list[int], n: int, benchmarks: list[str], out: Path,
            train: dict[str, list[str]], evals: list[str]) -> dict:
    """Train every method per seed, evaluate the untrained model and every adapter on every benchmark: the record,
    its ``benchmarks`` as :func:`build` makes them from each benchmark's base and seed records."""
    scale = SCALES[preset]
    settings = [*scale.eval, *evals]
    rows = {m: method_row(m, preset, train[m]) for m in methods}
    runs = [(m, seed, out / (m + scale.suffix) / f"seed{seed}") for m in methods for seed in seeds]
    commands = {}
    for m, seed, where in runs:
        effect.check_same_command(where, rows[m].command(where, seed))
        commands[m, seed] = effect.train(rows[m], where, seed, True)
    # one selfevo eval (one model load) per model over every benchmark it lacks
    base = effect.evaluate_all(out / effect.eval_folder("base" + scale.suffix, evals), n, [], True, benchmarks,
                               settings)
    folder = effect.eval_folder("eval", evals)  # effect.py's --eval-set folders: its evaluations are reused
    for m, seed, where in runs:
        effect.evaluate_all(where / folder, n, effect.adapter_args(rows[m], where), rows[m].finished(where),
                            benchmarks, settings)
    raw = {}
    for bench in benchmarks:
        per_seed: dict[str, dict] = {m: {} for m in methods}
        for m, seed, where in runs:
            done = effect.after_record(rows[m], where, n, base[bench], commands[m, seed], bench, settings, folder)
            if done is not None:
                per_seed[m][str(seed)] = done
        raw[bench] = {"base": effect.base_record(base[bench], n, bench, settings), "per_seed": per_seed}
    return {"preset": preset, "methods": methods, "seeds": seeds, "n": n, "eval": settings, "benchmarks": build(raw)}


# ---- tables (pure: from the record) -----------------------------------------------------------------------------
def build(raw: dict) -> dict:
    """From ``{benchmark: {"base": base record, "per_seed": {method: {seed: seed record}}}}``, per benchmark: the
    base record, each method's row over its seeds (``effect.row_summary``) and every pair of methods ``a − b``
    (``effect.head_to_head``, ``a`` before ``b`` in ``--methods`` order)."""
    out = {}
    for bench, r in raw.items():
        rows = {m: effect.row_summary(r["base"], seeds, effect.ROWS[m].about, effect.ROWS[m].adapter.rsplit("/")[-1])
                for m, seeds in r["per_seed"].items() if seeds}
        names = list(rows)
        pairs = {f"{a} − {b}": effect.head_to_head(rows[a], rows[b])
                 for i, a in enumerate(names) for b in names[i + 1:]}
        out[bench] = {"base": r["base"], "methods": rows, "pairwise": {k: v for k, v in pairs.items() if v}}
    return out


def table(record: dict) -> str:
    """The Markdown of a record (:func:`run_all`'s, or the JSON's)."""
    built = record["benchmarks"]
    lines = [f"# compare.py --preset {record['preset']}: {', '.join(record['methods'])} on the same held-out items",
             "", f"Seeds {', '.join(map(str, record['seeds']))}; evaluation `selfevo eval {' '.join(record['eval'])}`"
             f" ({'the first ' + str(record['n']) if record['n'] else 'all'} items of each benchmark).", "",
             summary(built, record["methods"])]
    for bench, b in built.items():
        lines += ["", f"## {bench} ({len(b['base']['items'])} items)", "", effect.table(b["methods"]).rstrip(),
                  "", pairwise(b["pairwise"])]
    lines += ["", "Accuracies: seed-averaged per-item accuracy, greedy, with the 95% Wilson interval; changes: paired "
              "on the same items, 95% normal interval; +/−: items turned right / wrong."]
    return "\n".join(lines) + "\n"


def summary(built: dict, methods: list[str]) -> str:
    """Table 1's shape: one line per model, one column per benchmark (and their mean over benchmarks)."""
    benches = list(built)
    head = "| model | " + " | ".join(benches) + (" | mean |" if len(benches) > 1 else " |")
    lines = [head, "|---" * (len(benches) + 1 + (len(benches) > 1)) + "|"]
    accs = {"base (untrained)": [sum(b["base"]["items"]) / len(b["base"]["items"]) for b in built.values()]}
    for m in methods:
        accs[m] = [b["methods"][m]["after"] if m in b["methods"] else None for b in built.values()]
    for name, xs in accs.items():
        cells = ["–" if x is None else f"{x:.3f}" for x in xs]
        if len(benches) > 1:
            cells.append("–" if None in xs else f"{sum(xs) / len(xs):.3f}")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def pairwise(pairs: dict) -> str:
    lines = ["| a − b | seeds | difference (paired 95%) | items a ahead / b ahead |", "|---|---|---|---|"]
    for name, h in pairs.items():
        lines.append(f"| {name} | {', '.join(h['seeds'])} | {h['diff']:+.3f} [{h['low']:+.3f}, {h['high']:+.3f}] | "
                     f"+{h['improved']}/−{h['worsened']} |")
    return "\n".join(lines)


# ---- main -------------------------------------------------------------------------------------------------------
def parser() -> argparse.ArgumentParser:
    ap = OneLineParser(description=__doc__.splitlines()[0])
    ap.add_argument("--methods", default=None, help=f"comma list of {', '.join(METHODS)} (default: those with the "
                                                     "preset: cpu-learn all four, paper sage,azr,mae)")
    ap.add_argument("--preset", default="cpu-learn", help=f"one of {', '.join(SCALES)} (every method must have it)")
    ap.add_argument("--seed", nargs="+", type=int, default=[0], help="seeds (each method trains once per seed)")
    ap.add_argument("--n", type=int, default=None, help="held-out items per benchmark (0: all; default: the "
                                                        "preset's, cpu-learn 500, paper all)")
    ap.add_argument("--benchmark", default=None, help="comma list (default: cpu-learn arith; paper Table 1's nine)")
    ap.add_argument("--out", default="runs/compare", help="run folder (runs/effect: effect.py's runs)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="a training key for every method; METHOD:KEY=VALUE for one method's, eval:KEY=VALUE for "
                         "every evaluation (repeatable)")
    ap.add_argument("--results", default="benchmarks/results", help="where compare_<preset>.{json,md} go")
    ap.add_argument("--table-only", action="store_true", help="rebuild compare_<preset>.md from its JSON alone")
    return ap


def main(argv: list[str] | None = None) -> None:
    args = parser().parse_args(argv)
    methods = parse_methods(args.methods) if args.methods else [m for m in METHODS if args.preset in presets(m)]
    check_preset(methods or list(METHODS), args.preset)
    results = Path(args.results)
    path = results / f"compare_{args.preset}.json"
    if args.table_only:  # the methods are the JSON's
        if not path.exists():
            raise UsageError(f"no {path}: run without --table-only first")
        record = json.loads(path.read_text())
    else:
        scale = SCALES[args.preset]
        benchmarks = parse_benchmarks(args.benchmark, scale)
        train, evals = parse_sets(args.set, methods)
        n = scale.n if args.n is None else args.n
        if n < 0 or any(s < 0 for s in args.seed):
            raise UsageError("--n and --seed take numbers >= 0")
        record = run_all(methods, args.preset, list(dict.fromkeys(args.seed)), n, benchmarks, Path(args.out), train,
                         evals)
        results.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(record) + "\n")
    md = table(record)
    path.with_suffix(".md").write_text(md)
    print(md)


if __name__ == "__main__":
    sys.exit(effect.one_line(main))
