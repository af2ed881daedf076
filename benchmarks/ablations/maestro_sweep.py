"""MAESTRO's sizes swept one at a time at inference (paper Figs. 4 and 6): accuracy, coverage and identification
against the number of execution agents N, the candidates each agent samples K, and the rounds R.

    .venv/bin/python benchmarks/ablations/maestro_sweep.py [--sweep N K R] [--N 1 2 3 4] [--K 1 2 3 4] [--R 1 2 3]
        [--at 2 2 2] [--benchmark arith] [--limit 20] [--seeds 0] [--central-adapter DIR]
        [--out runs/maestro_sweep] [--results benchmarks/results/maestro_sweep] [--table-only] [key=value ...]

Each value of a swept size, the other two held at ``--at`` (N K R), is one ``selfevo eval setup=maestro_select``
process per seed on the first ``--limit`` items of ``--benchmark``, in ``<out>/N<n>-K<k>-R<r>/seed<S>``: a setting
two sweeps share (the ``--at`` point) runs once, and one whose ``results.json`` exists is not run again (resumable).
The central agent is the base model (prompt only), or with ``--central-adapter DIR`` a trained one
(``RUN_DIR/adapters/final/central`` of ``selfevo run maestro``). Every eval gets :data:`SETTINGS` (the small-model
protocol of ``maestro_selectors.py``: the chained selection, 128-token candidates), then the extra ``key=value``
arguments (e.g. ``model.backbones=[...]``), then the setting's sizes and seed.

Per setting and seed the LAST round's records (``items.jsonl``) are counted (:func:`counts`); per swept value
(:func:`summarise`): coverage p (some candidate correct), identification q (the decision correct, of the covered
questions) and accuracy (the decision correct; a selection that does not parse is wrong, as in ``maestro_metrics``),
each with a 95% interval: Wilson over the items for one seed, the t-interval over the seeds' rates for several.
Writes ``<results>.json`` (the settings, per-seed counts, per-value rates and intervals), ``<results>.md`` (a table
per size) and ``<results>.png`` (a panel per size: the three rates against its values, intervals as error bars).
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Sequence

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from selfevo.stats import wilson  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import mean_ci  # noqa: E402

SIZES = {"N": "n_agents", "K": "k", "R": "rounds"}  # swept size -> its maestro_select option
NAMES = {"N": "execution agents N", "K": "candidates per agent K", "R": "rounds R"}
DEFAULT_VALUES = {"N": [1, 2, 3, 4], "K": [1, 2, 3, 4], "R": [1, 2, 3]}
SETTINGS = ["central_chain=true", "candidate_chars=400", "sampling.max_new_tokens=128"]
RATES = ("accuracy", "coverage", "identification")


# ---- settings and runs ------------------------------------------------------------------------------------------
def setting_of(size: str, value: int, at: Sequence[int]) -> dict[str, int]:
    """The (N, K, R) setting where ``size`` is ``value`` and the other two are as in ``at``."""
    setting = dict(zip(SIZES, at))
    setting[size] = value
    return setting


def setting_dir(out: Path, setting: dict[str, int], seed: int) -> Path:
    return out / f"N{setting['N']}-K{setting['K']}-R{setting['R']}" / f"seed{seed}"


def results_dir(where: Path, benchmark: str) -> Path:
    return where / f"{benchmark}-maestro_select"


def evaluate(where: Path, setting: dict[str, int], seed: int, args, overrides: list[str]) -> None:
    """One ``selfevo eval setup=maestro_select`` of ``setting`` with ``seed`` (skipped when its results exist)."""
    if (results_dir(where, args.benchmark) / "results.json").exists():
        return
    cmd = [sys.executable, "-m", "selfevo.cli", "eval", f"benchmark={args.benchmark}", "setup=maestro_select",
           f"limit={args.limit}", f"output_dir={where}", *SETTINGS, *overrides,
           *(f"{SIZES[s]}={v}" for s, v in setting.items()), f"seed={seed}"]
    if args.central_adapter:
        cmd.append(f"central_adapter={args.central_adapter}")
    print("+", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True)


def read_rounds(where: Path, benchmark: str) -> list[list[dict]] | None:
    """Each question's round records from the eval's ``items.jsonl`` (None when the eval is not there)."""
    path = results_dir(where, benchmark) / "items.jsonl"
    if not path.exists():
        return None
    return [json.loads(line)["info"]["rounds"] for line in path.read_text().splitlines() if line.strip()]


# ---- aggregation (pure) -----------------------------------------------------------------------------------------
def counts(rounds: Sequence[Sequence[dict]]) -> dict[str, int]:
    """Over the questions' LAST round: ``n`` questions, ``covered`` (a correct candidate on the slate),
    ``identified`` (covered and the decision correct), ``correct`` (the decision correct), ``no_answer`` (the
    selection did not parse)."""
    last = [r[-1] for r in rounds]
    return {"n": len(last), "covered": sum(bool(x["covered"]) for x in last),
            "identified": sum(bool(x["covered"] and x["chosen_correct"]) for x in last),
            "correct": sum(bool(x["chosen_correct"]) for x in last), "no_answer": sum(not x["parsed"] for x in last)}


def fractions(c: dict[str, int]) -> dict[str, tuple[int, int]]:
    """Each rate of :data:`RATES` as (successes, trials) of the counts ``c``."""
    return {"accuracy": (c["correct"], c["n"]), "coverage": (c["covered"], c["n"]),
            "identification": (c["identified"], c["covered"])}


def summarise(per_seed: Sequence[dict[str, int]]) -> dict[str, dict | None]:
    """Per rate of :data:`RATES`: ``{"value", "low", "high", "method", "seeds"}``. One seed: the rate and its
    Wilson interval; several: the mean of the seeds' rates and its 95% t-interval (clipped to [0, 1]); a rate with
    no trials (identification without coverage) leaves its seed out; None when no seed has one. Also
    ``no_answer_rate``: the share of questions without an answer, pooled over the seeds."""
    out: dict[str, dict | None] = {}
    for rate in RATES:
        pairs = [fractions(c)[rate] for c in per_seed]
        pairs = [(k, n) for k, n in pairs if n > 0]
        if not pairs:
            out[rate] = None
        elif len(per_seed) == 1:
            low, high = wilson(*pairs[0])
            out[rate] = {"value": pairs[0][0] / pairs[0][1], "low": low, "high": high, "method": "wilson", "seeds": 1}
        else:
            mean, half, n = mean_ci([k / n for k, n in pairs])
            half = half or 0.0
            out[rate] = {"value": mean, "low": max(0.0, mean - half), "high": min(1.0, mean + half),
                         "method": "t over seeds" if n > 1 else "one seed, no interval", "seeds": n}
    total = sum(c["n"] for c in per_seed)
    out["no_answer_rate"] = sum(c["no_answer"] for c in per_seed) / total if total else None
    return out


def cell(stat: dict | None) -> str:
    """``"0.550 [0.342, 0.742]"``, ``"–"`` when there is no value."""
    return "–" if stat is None else f"{stat['value']:.3f} [{stat['low']:.3f}, {stat['high']:.3f}]"


def table(sweeps: dict[str, list[dict]], meta: dict) -> str:
    """Markdown: one table per swept size (rows: its values; cells: rate [95% interval])."""
    at = ", ".join(f"{s}={v}" for s, v in zip(SIZES, meta["at"]))
    central = meta["central_adapter"] or "the base model (prompt only)"
    lines = [f"MAESTRO sizes at inference: first {meta['limit']} items of {meta['benchmark']}, seeds "
             f"{' '.join(map(str, meta['seeds']))}, central agent {central}; the other sizes at {at}."]
    for size, rows in sweeps.items():
        lines += ["", f"### {NAMES[size]}", "", f"| {size} | seeds | questions | accuracy | coverage | "
                  "identification (of covered) | no answer |", "|---|---|---|---|---|---|---|"]
        for row in rows:
            s, n = row["summary"], sum(c["n"] for c in row["seeds"].values())
            no_answer = "–" if s["no_answer_rate"] is None else f"{s['no_answer_rate']:.3f}"
            lines.append(f"| {row['value']} | {len(row['seeds'])} | {n} | {cell(s['accuracy'])} | "
                         f"{cell(s['coverage'])} | {cell(s['identification'])} | {no_answer} |")
    return "\n".join(lines) + ("\n\nLast round's decision. Intervals 95%: Wilson over the items (one seed), the "
                               "t-interval over the seeds' rates (several).\n")


def plot(sweeps: dict[str, list[dict]], meta: dict, path: Path) -> None:
    """One panel per swept size: accuracy, coverage and identification against its values, 95% error bars."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, max(len(sweeps), 1), figsize=(5.5 * max(len(sweeps), 1), 4), squeeze=False)
    for ax, (size, rows) in zip(axes[0], sweeps.items()):
        for i, (rate, marker) in enumerate(zip(RATES, "osD")):
            shown = [(r["value"], r["summary"][rate]) for r in rows if r["summary"][rate] is not None]
            if not shown:
                continue
            xs, stats = [x + (i - 1) * 0.04 for x, _ in shown], [s for _, s in shown]  # dodged: bars stay apart
            ys = [s["value"] for s in stats]
            err = [[y - s["low"] for y, s in zip(ys, stats)], [s["high"] - y for y, s in zip(ys, stats)]]
            ax.errorbar(xs, ys, yerr=err, marker=marker, capsize=3, label=rate)
        others = ", ".join(f"{s}={v}" for s, v in zip(SIZES, meta["at"]) if s != size)
        ax.set_title(f"{NAMES[size]} ({others})")
        ax.set_xlabel(size)
        ax.set_xticks([r["value"] for r in rows])
        ax.set_ylim(-0.02, 1.02)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(f"MAESTRO sizes at inference: {meta['benchmark']}, {meta['limit']} items, seeds "
                 f"{' '.join(map(str, meta['seeds']))} (last round, 95% intervals)")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


# ---- main -------------------------------------------------------------------------------------------------------
def collect(args, overrides: list[str]) -> dict[str, list[dict]]:
    """Per swept size, per value: its setting and per-seed counts (evaluating first unless --table-only); values
    with no finished eval are left out."""
    out = Path(args.out)
    sweeps: dict[str, list[dict]] = {}
    for size in args.sweep:
        sweeps[size] = []
        for value in getattr(args, size):
            setting = setting_of(size, value, args.at)
            seeds = {}
            for seed in args.seeds:
                where = setting_dir(out, setting, seed)
                if not args.table_only:
                    evaluate(where, setting, seed, args, overrides)
                rounds = read_rounds(where, args.benchmark)
                if rounds:
                    seeds[str(seed)] = counts(rounds)
            if seeds:
                sweeps[size].append({"value": value, "setting": setting, "seeds": seeds,
                                     "summary": summarise(list(seeds.values()))})
    return sweeps


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sweep", nargs="+", default=list(SIZES), choices=list(SIZES), help="the sizes to sweep")
    for size, values in DEFAULT_VALUES.items():
        ap.add_argument(f"--{size}", type=int, nargs="+", default=values, help=f"values of {NAMES[size]}")
    ap.add_argument("--at", type=int, nargs=3, default=[2, 2, 2], metavar=("N", "K", "R"),
                    help="the sizes held fixed while another is swept")
    ap.add_argument("--benchmark", default="arith")
    ap.add_argument("--limit", type=int, default=20, help="items of the benchmark's test split")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0])
    ap.add_argument("--central-adapter", default=None, help="a trained central agent (RUN_DIR/adapters/final/central)")
    ap.add_argument("--out", default="runs/maestro_sweep")
    ap.add_argument("--results", default="benchmarks/results/maestro_sweep", help="writes .json, .md, .png")
    ap.add_argument("--table-only", action="store_true", help="tabulate the evals already in --out")
    args, overrides = ap.parse_known_args(argv)
    if any(v < 1 for size in args.sweep for v in getattr(args, size)) or min(args.at) < 1:
        ap.error("every size must be >= 1")
    sweeps = collect(args, overrides)
    meta = {"benchmark": args.benchmark, "limit": args.limit, "seeds": args.seeds, "at": args.at,
            "central_adapter": args.central_adapter, "settings": SETTINGS, "overrides": overrides}
    Path(args.results).parent.mkdir(parents=True, exist_ok=True)
    md = table(sweeps, meta)
    Path(args.results + ".md").write_text(md)
    Path(args.results + ".json").write_text(json.dumps({"meta": meta, "sweeps": sweeps}, indent=1) + "\n")
    plot(sweeps, meta, Path(args.results + ".png"))
    print(md)


if __name__ == "__main__":
    main()
