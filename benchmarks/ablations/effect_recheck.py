"""Re-check effect.json on this machine: the untrained model and the committed adapters, evaluated again under the
same command and under other batch and kernel settings, compared item by item with the committed records.

    .venv/bin/python benchmarks/ablations/effect_recheck.py [--rows base grpo trl_grpo] [--settings same max_batch_16
        aten_default threads_1] [--n 500] [--out runs/recheck] [--eval-set KEY=VALUE ...]
    .venv/bin/python benchmarks/ablations/effect_recheck.py --table-only   # rebuild effect_recheck.md from the JSON

Greedy decoding is deterministic for one machine, one batch composition and one set of kernels; a float that rounds
the other way in a long prompt's attention or a GEMM's blocking can turn one argmax and, from there, the whole
answer. Within one comparison the before and after evaluations share the machine, the requests, their order and
``engine.max_batch`` (``effect.py`` runs both with one command), so the adapter is the only difference between
them. This script measures what that leaves out, the residual spread an effect must clear to survive another
machine or setting:

- ``base`` is the untrained model, compared with ``effect.json``'s ``base`` items; a row name (``grpo``...) is its
  seed-0 adapter (``benchmarks/results/adapters/<row>``, bf16, not in git: ``effect.py --adapters`` makes it, and
  ``benchmarks/results/adapters.json`` holds its SHA-256) compared with that row's seed-0 items
  (evaluated where it trained, with the full-precision adapter).
- a setting (:data:`SETTINGS`) is the effect command plus overrides or environment: ``same`` (nothing: another machine
  alone), ``max_batch_16`` (rows per forward pass 64 -> 16: another batch composition), ``aten_default`` (ATen's
  plain kernels instead of AVX2/AVX-512: ``ATEN_CPU_CAPABILITY=default``), ``threads_1`` (one torch thread: other
  reduction splits).

Per (row, setting): accuracy here and in the record, items that agree, items that turned right / wrong, and the
paired difference (95%) against the record, whether the answers are the recorded ones character for character
(where the record has their SHA-256, ``answers_sha256``: records since the twenty-fourth sitting); for a setting
other than ``same``, the same against this machine's ``same`` evaluation when it exists (``vs_same_here``: the
setting alone, without the machine's change). Writes ``benchmarks/results/effect_recheck.{json,md}``; a rerun adds
its cells (keyed by row and setting) and keeps the others.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from effect import RESULTS, answers_sha256, evaluate  # noqa: E402

from selfevo.stats import paired_difference  # noqa: E402

SETTINGS: dict[str, tuple[tuple[str, ...], dict[str, str]]] = {
    "same": ((), {}),
    "max_batch_16": (("engine.max_batch=16",), {}),
    "aten_default": ((), {"ATEN_CPU_CAPABILITY": "default"}),
    "threads_1": ((), {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}),
}


@contextmanager
def environment(env: dict[str, str]):
    """``env`` set for the evaluations started inside (they are subprocesses), restored after."""
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for k, v in old.items():
            os.environ.pop(k) if v is None else os.environ.__setitem__(k, v)


def machine() -> dict:
    """What makes this machine's floats its own: the CPU model and its flags' vector width, the platform."""
    info = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    model = next((line.split(":", 1)[1].strip() for line in info.splitlines() if line.startswith("model name")), "")
    return {"cpu": model or platform.processor(), "cpu_count": os.cpu_count(), "avx512": " avx512f" in info,
            "platform": platform.platform()}


def _reference_record(record: dict, row: str) -> dict:
    """The committed evaluation that ``row`` is compared with: ``base``, or a row's seed 0."""
    if row == "base":
        return record["base"]
    try:
        return record["methods"][row]["per_seed"]["0"]
    except KeyError:
        raise SystemExit(f"effect.json has no seed-0 items for row {row!r}") from None


def reference(record: dict, row: str) -> list[float]:
    """The committed per-item 0/1 list that ``row`` is compared with (``base``, or a row's seed 0)."""
    return _reference_record(record, row)["items"]


def reference_digest(record: dict, row: str) -> str | None:
    """The committed SHA-256 of the answers behind :func:`reference` (effect.py's ``answers_sha256``); None for a
    record made before evaluations carried it."""
    return _reference_record(record, row).get("answers_sha256")


def same_answers(recorded: str | None, items: list[dict]) -> bool | None:
    """Whether an evaluation here gave the recorded answers character for character (the verdicts can agree while
    the texts differ); None where the record has no digest."""
    return None if recorded is None else answers_sha256(items).get("answers_sha256") == recorded


def compare(ref: list[float], here: list[float]) -> dict:
    """Item-by-item agreement of an evaluation here with the committed one (pure)."""
    if len(ref) != len(here):
        raise ValueError(f"{len(here)} items here, {len(ref)} in the record")
    d = paired_difference(ref, here)
    n = len(ref)
    return {"n": n, "accuracy": sum(here) / n, "accuracy_record": sum(ref) / n,
            "agree": sum(a == b for a, b in zip(ref, here)), "turned_right": d["improved"],
            "turned_wrong": d["worsened"], "diff": d["diff"], "diff_low": d["low"], "diff_high": d["high"]}


TEXTS = {True: "the same", False: "differ", None: "– (not recorded)"}


def table(cells: dict) -> str:
    lines = ["| row | setting | accuracy here | in the record | items that agree | turned right / wrong | "
             "here − record (paired 95%) | answers as recorded (SHA-256) | against `same` here: agree, right / "
             "wrong, paired 95% |", "|---" * 9 + "|"]
    for key, c in cells.items():
        row, setting = key.split("/")
        s = c.get("vs_same_here")
        here = (f"{s['agree']}/{s['n']}, +{s['turned_right']}/−{s['turned_wrong']}, {s['diff']:+.3f} "
                f"[{s['diff_low']:+.3f}, {s['diff_high']:+.3f}]" if s else "–")
        lines.append(f"| {row} | {setting} | {c['accuracy']:.3f} | {c['accuracy_record']:.3f} | {c['agree']}/{c['n']} "
                     f"| +{c['turned_right']}/−{c['turned_wrong']} | {c['diff']:+.3f} [{c['diff_low']:+.3f}, "
                     f"{c['diff_high']:+.3f}] | {TEXTS[c.get('same_answers')]} | {here} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", nargs="+", default=["base", "grpo"])
    ap.add_argument("--settings", nargs="+", default=["same"], choices=list(SETTINGS))
    ap.add_argument("--n", type=int, default=500)
    ap.add_argument("--out", default="runs/recheck")
    ap.add_argument("--eval-set", nargs="+", default=[], metavar="KEY=VALUE",
                    help="extra selfevo eval keys for every evaluation (e.g. model.dtype=float32 where bf16 is "
                         "emulated: then 'here - record' also holds the dtype; 'vs_same_here' does not)")
    ap.add_argument("--table-only", action="store_true")
    args = ap.parse_args()
    path = RESULTS / "effect_recheck.json"
    saved = json.loads(path.read_text()) if path.exists() else {"cells": {}}
    if not args.table_only:
        record = json.loads((RESULTS / "effect.json").read_text())
        for row in args.rows:
            adapter = [*args.eval_set, *([] if row == "base" else [f"adapters=[{RESULTS / 'adapters' / row}]"])]
            if row != "base" and not (RESULTS / "adapters" / row / "adapter_config.json").exists():
                raise SystemExit(f"no committed adapter for row {row!r} under {RESULTS / 'adapters'}")
            ref, digest = reference(record, row), reference_digest(record, row)
            for setting in args.settings:
                overrides, env = SETTINGS[setting]
                with environment(env):
                    items = evaluate(Path(args.out) / row / setting, args.n, [*adapter, *overrides], True)
                cell = {**compare(ref[:args.n], [i["correct"] for i in items]),
                        "same_answers": same_answers(digest if args.n == len(ref) else None, items),
                        "overrides": [*args.eval_set, *overrides], "env": env}
                if setting != "same" and (same := evaluate(Path(args.out) / row / "same", args.n, adapter, False)):
                    cell["vs_same_here"] = compare([i["correct"] for i in same], [i["correct"] for i in items])
                label = f"{setting} ({' '.join(args.eval_set)})" if args.eval_set else setting
                saved["cells"][f"{row}/{label}"] = cell
        saved["machine"] = machine()
        path.write_text(json.dumps(saved) + "\n")
    md = table(saved["cells"])
    (RESULTS / "effect_recheck.md").write_text(md)
    print(md)


if __name__ == "__main__":
    main()
