"""A sweep's table and figure, rebuilt from its folders alone: ``OUT/table.json``, ``OUT/table.md``,
``OUT/curves.png``.

Every ``OUT/<row>/seed<k>/eval/`` that ``selfevo eval`` finished (its summary.json) gives that seed's per-item
verdicts (items.jsonl, in the benchmark's order) and answers; the run directory beside it gives the training time
(the sum of metrics.jsonl's ``step_s``), the steps, the curves and the command (run.json's first launch). The
statistics are :func:`selfevo.stats.row_summary`'s: the seed-averaged accuracy (Wilson 95%), the paired difference
of the seed-averaged items against the baseline row's (normal 95%; a row's own ``baseline`` where it names one), each
seed's own change and the t interval of those changes over seeds.

A carried-over evaluation (summary.json's record has ``carried_over``: numbers recorded elsewhere, converted into
this layout; docs/sweeps.md) holds the per-item verdicts without the answers: its answer length, answers' SHA-256,
steps, training seconds and command come from that record. A run directory beside it is a rerun whose own
evaluation has not replaced it yet: its steps, seconds, command and curves are left out until that evaluation is
there, so a seed's numbers never mix two runs.
"""
from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from selfevo.config import ConfigError
from selfevo.stats import contrast, item_mean, row_summary, seed_interval

from .spec import contrast_rows


def _seed_dirs(row_dir: Path) -> list[tuple[str, Path]]:
    """``(seed, folder)`` of every seed folder of a row whose evaluation finished, by seed."""
    found = [(d.name[4:], d) for d in row_dir.glob("seed*") if d.name[4:].isdigit() and
             (d / "eval" / "summary.json").exists()]
    return sorted(found, key=lambda x: int(x[0]))


def read_eval(eval_dir: Path) -> dict[str, Any]:
    """One finished evaluation: its record (summary.json's first: benchmark, setup, split, n, accuracy) and per item
    its id, 0/1 verdict and answer length; ``answers_sha256`` of the answers in order joined by ``"\\n\\x00"`` (as
    effect.json's)."""
    record = json.loads((eval_dir / "summary.json").read_text())[0]
    lines = (eval_dir / f"{record['benchmark']}-{record['setup']}" / "items.jsonl").read_text().splitlines()
    items = [json.loads(x) for x in lines if x.strip()]
    found = {"record": record, "ids": [it["id"] for it in items], "items": [float(it["correct"]) for it in items]}
    if "carried_over" in record:  # verdicts only: the rest as recorded
        carried = record["carried_over"]
        return {**found, **{k: carried.get(k) for k in ("answer_chars", "answers_sha256")},
                **{k: carried[k] for k in ("steps", "train_s", "command") if k in carried}}
    answers = [it["final_response"] or "" for it in items]
    return {**found, "answer_chars": round(sum(map(len, answers)) / len(answers), 1) if answers else None,
            "answers_sha256": hashlib.sha256("\n\x00".join(answers).encode()).hexdigest()}


def carried_over(eval_dir: Path) -> bool:
    """True where the evaluation in ``eval_dir`` is a carried-over one (summary.json's ``carried_over``)."""
    path = eval_dir / "summary.json"
    return path.exists() and any("carried_over" in r for r in json.loads(path.read_text()))


def read_run(run_dir: Path) -> dict[str, Any]:
    """The training side of a seed folder: steps, seconds (sum of ``step_s``), its command; empty for an
    evaluation-only row."""
    metrics = run_dir / "metrics.jsonl"
    if not metrics.exists():
        return {}
    lines = [json.loads(x) for x in metrics.read_text().splitlines() if x.strip()]
    launches = json.loads((run_dir / "run.json").read_text()) if (run_dir / "run.json").exists() else []
    return {"steps": len(lines), "train_s": round(sum(m.get("step_s") or 0 for m in lines), 1),
            "command": command_of(launches[0]) if launches else None}


def command_of(launch: dict[str, Any]) -> str | None:
    """A run.json launch as the command a user types: ``selfevo ...`` for the CLI (whatever path it ran from), ``python
    -m MODULE ...`` for a row's own ``command`` (``python -m`` records the module's file as ``argv[0]``), without
    ``resume=true``."""
    argv = [a for a in launch.get("argv") or [] if a != "resume=true"]
    if not argv:
        return None
    head = argv[0]
    if head.endswith(".py"):
        path, cwd = Path(head), Path(launch.get("cwd") or "/")
        path = path.relative_to(cwd) if path.is_absolute() and path.is_relative_to(cwd) else path
        head = f"python {head}" if path.is_absolute() else "python -m " + ".".join(path.with_suffix("").parts)
    elif Path(head).name == "selfevo":
        head = "selfevo"
    return " ".join([head, *argv[1:]])


def read_seed(seed_dir: Path) -> dict[str, Any]:
    """A seed folder's evaluation, with its run's training record where the evaluation is that run's own (a
    carried-over one keeps its recorded steps, seconds and command while a rerun beside it is unfinished)."""
    found = read_eval(seed_dir / "eval")
    return found if "carried_over" in found["record"] else {**found, **read_run(seed_dir)}


def _mean(xs: list[float | None]) -> float | None:
    xs = [x for x in xs if x is not None]
    return round(sum(xs) / len(xs), 1) if xs else None


def collect(cfg: DictConfig, rows: dict[str, DictConfig]) -> dict[str, Any]:
    """table.json's content: every row with at least one finished evaluation, in the file's order."""
    out = Path(cfg.output_dir)
    seeds = {name: {s: read_seed(d) for s, d in _seed_dirs(out / name)} for name in rows}
    seeds = {name: per for name, per in seeds.items() if per}
    first = next((p for per in seeds.values() for p in per.values()), None)
    ids = first["ids"] if first else []
    for name, per in seeds.items():
        for s, p in per.items():
            if p["ids"] != ids:
                raise ConfigError(f"{out / name / ('seed' + s) / 'eval'} holds other items than the rest of the "
                                  f"sweep ({len(p['ids'])} against {len(ids)}): another limit or split?")
    base = cfg.baseline if cfg.baseline in seeds else None
    base_items = {name: item_mean([p["items"] for p in per.values()]) for name, per in seeds.items()}
    table_rows = {}
    for name, per in seeds.items():
        row = rows[name]
        against = (row.get("baseline") or base) if (row.get("baseline") or base) in seeds else None
        stats = row_summary({s: p["items"] for s, p in per.items()},
                            None if name == against or against is None else base_items[against])
        table_rows[name] = {
            "about": row.about, "recipe": row.recipe, "setup": per[next(iter(per))]["record"]["setup"],
            "baseline": None if name == against else against,
            **{k: stats[k] for k in ("n", "accuracy", "accuracy_ci", "paired", "over_seeds")},
            "seeds": [int(s) for s in per], "answer_chars": _mean([p["answer_chars"] for p in per.values()]),
            "train_s": _mean([p.get("train_s") for p in per.values()]),
            "per_seed": {s: {**stats["per_seed"][s], **{k: p[k] for k in ("answer_chars", "answers_sha256")},
                             **{k: p[k] for k in ("steps", "train_s", "command") if k in p}, "items": p["items"]}
                         for s, p in per.items()}}
        carried = {int(s): "carried_over" in p["record"] for s, p in per.items()}
        if len(set(carried.values())) > 1:  # seeds rerun one by one: say so rather than average silently
            table_rows[name]["mixed"] = {"carried_over": [s for s, c in carried.items() if c],
                                         "rerun": [s for s, c in carried.items() if not c]}
    record = first["record"] if first else {}
    return {"benchmark": record.get("benchmark"), "split": record.get("split"), "n": len(ids),
            "sampling": record.get("sampling"), "baseline": base, "item_ids": ids, "rows": table_rows,
            **({"contrasts": contrasts(cfg, rows, seeds, table_rows)} if cfg.get("contrasts") else {})}


def contrasts(cfg: DictConfig, rows: dict[str, DictConfig], seeds: dict[str, dict[str, dict]],
              table_rows: dict[str, dict]) -> list[dict[str, Any]]:
    """The file's ``contrasts`` whose two rows both have finished evaluations: :func:`selfevo.stats.contrast` of
    their per-seed items, with the seeds each row has and those that mix carried-over and rerun seeds."""
    found = []
    for pair in cfg.get("contrasts") or ():
        a, b = contrast_rows(pair, rows)
        if a not in seeds or b not in seeds:
            continue
        got = contrast({s: p["items"] for s, p in seeds[a].items()}, {s: p["items"] for s, p in seeds[b].items()})
        found.append({"a": a, "b": b, "seeds": {a: [int(s) for s in seeds[a]], b: [int(s) for s in seeds[b]]},
                      **got, "mixed": [r for r in (a, b) if table_rows[r].get("mixed")]})
    return found


def _ci(pair) -> str:
    return f"[{pair[0]:.3f}, {pair[1]:.3f}]"


def _signed(x: dict | None, key: str = "diff") -> str:
    if not x or x.get("low") is None:
        return "–"
    return f"{x[key]:+.3f} [{x['low']:+.3f}, {x['high']:+.3f}]"


def markdown(table: dict[str, Any]) -> str:
    """table.md: a line naming the evaluation, then one row per sweep row."""
    s = table.get("sampling") or {}
    head = (f"{table['benchmark']} ({table['split']}), {table['n']} items, temperature {s.get('temperature')}, "
            f"max {s.get('max_new_tokens')} new tokens; paired against: {table['baseline'] or 'no baseline'}\n\n")
    lines = ["| row | setup | seeds | accuracy (seed-avg, Wilson 95%) | − baseline (paired 95%) | items +/− | per seed: "
             "accuracy (− baseline) | over seeds (t 95%) | answer chars | training s (mean) |", "|---" * 10 + "|"]
    for name, r in table["rows"].items():
        paired = r["paired"]
        per = ", ".join(f"{p['accuracy']:.3f}" + (f" ({p['diff']:+.3f})" if p["diff"] is not None else "")
                        for p in r["per_seed"].values())
        spread = r["over_seeds"] if r["over_seeds"] and r["over_seeds"]["k"] > 1 else None
        moved = f"+{paired['improved']}/−{paired['worsened']}" if paired else "–"
        vs = "baseline" if name == table["baseline"] else _signed(paired)
        if r.get("baseline") not in (None, table["baseline"]):
            vs += f" vs {r['baseline']}"
        seconds = r["train_s"] if r["train_s"] is not None else "–"
        label = name + (f" (mixes carried-over seeds {r['mixed']['carried_over']} with rerun {r['mixed']['rerun']})"
                        if r.get("mixed") else "")
        lines.append(f"| {label} | {r['setup']} | {len(r['seeds'])} | {r['accuracy']:.3f} {_ci(r['accuracy_ci'])} | "
                     f"{vs} | {moved} | {per} | {_signed(spread, 'mean')} | {r['answer_chars']} | {seconds} |")
    return head + "\n".join(lines) + "\n" + contrasts_markdown(table.get("contrasts") or [])


def contrasts_markdown(found: list[dict[str, Any]]) -> str:
    """table.md's second part: one line per contrast a − b (empty without contrasts)."""
    if not found:
        return ""
    lines = ["", "| a − b (same items) | seeds | difference (paired 95%) | items a ahead / b ahead | per seed: a − b | "
                 "over seeds (t 95%) |", "|---" * 6 + "|"]
    for c in found:
        paired, spread = c["paired"], c["over_seeds"]
        name = f"{c['a']} − {c['b']}" + (f" ({', '.join(c['mixed'])}: mixed seeds)" if c["mixed"] else "")
        shared = ", ".join(f"{d:+.3f}" for d in c["per_seed"].values()) or "– (no seed in common)"
        lines.append(f"| {name} | {len(c['seeds'][c['a']])} / {len(c['seeds'][c['b']])} | {_signed(paired)} | "
                     f"+{paired['improved']}/−{paired['worsened']} | {shared} | "
                     f"{_signed(spread if spread and spread['k'] > 1 else None, 'mean')} |")
    return "\n".join(lines) + "\n"


def curves(cfg: DictConfig, rows: dict[str, DictConfig]) -> dict[str, dict[str, list]]:
    """Per row with ``curve`` keys: per key ``[steps, mean, low, high]`` over the seeds (t 95%; one seed: its
    values), from each seed's metrics.jsonl."""
    out, result = Path(cfg.output_dir), {}
    for name, row in rows.items():
        runs = [[json.loads(x) for x in (d / "metrics.jsonl").read_text().splitlines() if x.strip()]
                for _, d in _seed_dirs(out / name)
                if (d / "metrics.jsonl").exists() and not carried_over(d / "eval")]
        if not row.curve or not runs:
            continue
        result[name] = {key: _band(runs, key) for key in row.curve}
    return result


def metric_value(m: dict, key: str):
    """A metrics.jsonl record's value at a dotted key (``train.agent0.kl``), or at a flat key that has a dot."""
    if key in m:  # a flat key with a dot (AZR's "valid.deduction")
        return m[key]
    for part in key.split("."):
        m = m.get(part) if isinstance(m, dict) else None
    return m


def _band(runs: list[list[dict]], key: str) -> list[list[float]]:
    values: dict[int, list[float]] = {}
    for run in runs:
        for m in run:
            if isinstance(x := metric_value(m, key), (int, float)):
                values.setdefault(m["step"], []).append(float(x))
    steps = sorted(values)
    spreads = [seed_interval(values[s]) for s in steps]
    return [steps, [x["mean"] for x in spreads], [x["low"] if x["low"] is not None else x["mean"] for x in spreads],
            [x["high"] if x["high"] is not None else x["mean"] for x in spreads]]


def plot(bands: dict[str, dict[str, list]], path: Path) -> bool:
    """curves.png: one panel per row, each curve key's mean over seeds per step with its 95% band; False (and no
    file) when no row has curves."""
    if not bands:
        return False
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cols = min(4, len(bands))
    lines = (len(bands) + cols - 1) // cols
    fig, axes = plt.subplots(lines, cols, figsize=(5 * cols, 3.6 * lines), squeeze=False)
    for ax, (name, keys) in zip(axes.flat, bands.items()):
        for key, (steps, mean, low, high) in keys.items():
            (line,) = ax.plot(steps, mean, marker="o", label=key)
            ax.fill_between(steps, low, high, color=line.get_color(), alpha=0.2, linewidth=0)
        ax.set_title(name, fontsize=10)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    for ax in list(axes.flat)[len(bands):]:
        ax.axis("off")
    fig.tight_layout()
    fig.savefig(path, dpi=90, metadata={"Software": None})  # no version stamp: a rebuild is byte for byte the same
    plt.close(fig)
    return True


_SCALARS = re.compile(r"\[\n\s*([^\[\]{}]*?)\n\s*\]")


def dumps(table: dict[str, Any]) -> str:
    """table.json's text: indented, but every list of plain values (item ids, verdicts) on one line."""
    return _SCALARS.sub(lambda m: "[" + " ".join(x.strip() for x in m.group(1).splitlines()) + "]",
                        json.dumps(table, indent=1)) + "\n"


def write(cfg: DictConfig, rows: dict[str, DictConfig]) -> str:
    """Rebuild table.json, table.md and curves.png in the sweep's output_dir; returns table.md's text."""
    out = Path(cfg.output_dir)
    table = collect(cfg, rows)
    out.mkdir(parents=True, exist_ok=True)
    (out / "table.json").write_text(dumps(table))
    md = markdown(table)
    (out / "table.md").write_text(md)
    png = out / "curves.png"
    if not plot(curves(cfg, rows), png):
        png.unlink(missing_ok=True)
    return md
