"""Does self-evolution work here? Untrained vs trained on the same held-out items, per method and seed, paired.

    .venv/bin/python benchmarks/ablations/effect.py [--rows grpo trl_grpo] [--seeds 0 1 2] [--n 500] [--set K=V ...]
                                                    [--eval-set K=V ...]
    .venv/bin/python benchmarks/ablations/effect.py --table-only      # rebuild the table and plot from effect.json
    .venv/bin/python benchmarks/ablations/effect.py --list            # the rows and their training commands
    .venv/bin/python benchmarks/ablations/effect.py --todo [3]        # the row:seed runs each row lacks for 3 seeds,
                                                                      # with what of them is on disk

1. *Before*, once: ``selfevo eval benchmark=arith setup=vanilla`` of the untrained embedded model on the first
   ``--n`` held-out ``arith`` test items, greedy (``<out>/base``).
2. Per row (:data:`ROWS`) and seed: its training command with ``seed=S`` in ``<out>/<row>/seed<S>`` (resumable:
   a run that stopped is continued with ``resume=true``; a finished one is reused; a folder started by another
   command is a one-line error). A row that continues another (``sage_64``) starts from a copy of that row's run of
   the same seed where one is in ``--out``. All train on ``arith:train``, disjoint from the held-out items by
   construction.
3. *After*: the same evaluation with the run's final adapter (``<out>/<row>/seed<S>/eval``).

A row's result is over its seeds: each seed's accuracy and paired change, and the paired change of the
seed-averaged per-item accuracy (the headline interval). ``benchmarks/results/effect.json`` keeps everything the
table and the plot are built from — per-item 0/1 lists of the base model and of every seed, each seed's command,
steps, training seconds, mean answer length, the SHA-256 of its answers (``answers_sha256``, records since the
twenty-fourth sitting) and its training curve — so ``--table-only`` rebuilds
``effect.{md,png}`` from committed files alone. Rows a run does not name are kept as they are; a run merges
its seeds into effect.json as the file is when the run ends (under a lock), so runs of other seeds of one row
may overlap in separate processes. MAESTRO's selectors are
compared on fixed held-out slates by ``maestro_selectors.py`` (its row is read from ``maestro_selectors.json``).
``--eval-set`` adds keys to every evaluation of the run, base and rows (``model.dtype=float32`` on a CPU
that emulates bf16, where 500 long greedy answers take hours): those rows pair with a base evaluated under the same
keys (``effect.json``'s ``bases``; folders ``base-<keys>``, ``seed<S>/eval-<keys>``), and the table names the keys.
``--adapters`` copies each row's seed-0 adapter to ``benchmarks/results/adapters/<row>/`` (PEFT format, bf16; kept
out of git: ``benchmarks/results/adapters.json`` holds each one's command, seed and SHA-256).
Intervals: 95% Wilson for accuracies, the normal interval of the paired per-item differences for a change.
``compare.py`` runs the rows ``sage``, ``azr``, ``mae`` and ``grpo`` side by side with these functions (the same
folders under the same ``--out``).
"""
from __future__ import annotations

import argparse
import fcntl
import hashlib
import json
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from selfevo.errors import UsageError  # noqa: E402
from selfevo.loop.checkpoint import atomic_write_text  # noqa: E402
from selfevo.stats import paired_difference, seed_interval, wilson  # noqa: E402
from selfevo.sweep.table import metric_value  # noqa: E402

BENCH = "arith"
EVAL = ["setup=vanilla", "sampling.max_new_tokens=256", "sampling.temperature=0"]
RESULTS = Path("benchmarks/results")


@dataclass(frozen=True)
class Row:
    """One trained variant: ``selfevo run <recipe> --preset <preset> <overrides>`` (or ``script`` run with the run
    directory and seed), evaluated with ``adapter`` (relative to the run directory); ``curve`` names its per-step
    training metrics for the plot, ``about`` what it tests. A row that ``continues`` another (``sage_64``: the
    ``sage`` command with more steps) starts from a copy of that row's run of the same seed (:func:`start_from`)."""

    recipe: str
    overrides: tuple[str, ...] = ()
    preset: str = "cpu-learn"
    adapter: str = "adapters/final/agent0"
    curve: tuple[str, ...] = ("reward.agent0",)
    about: str = ""
    script: tuple[str, ...] = ()
    continues: str = ""  # a row whose run of the same seed this one continues (a longer run of the same command)

    def command(self, out: Path, seed: int, extra: tuple[str, ...] = ()) -> list[str]:
        """The training command of one seed; ``extra`` (``--set``) follows the row's own overrides."""
        if self.script:
            return [sys.executable, *self.script, str(out), str(seed), *self.overrides, *extra]
        return [sys.executable, "-m", "selfevo.cli", "run", self.recipe, "--preset", self.preset, *self.overrides,
                *extra, f"seed={seed}", f"output_dir={out}"]

    def finished(self, out: Path) -> bool:
        return (out / self.adapter / "adapter_config.json").exists()


COMAS_CURVE = ("verified_accuracy", "precision", "recall")
SAGE = dict(adapter="adapters/final/sage", curve=("solver_accuracy", "acceptance_rate"))
AZR = dict(adapter="adapters/final/azr", curve=("valid.deduction", "valid.abduction", "valid.induction",
                                                "accuracy.deduction"))
MAE = dict(adapter="adapters/final/mae", curve=("acceptance_rate", "proposer_reward", "reward_by_role.solver"))


def comas_judge(p: str, *extra: str, about: str) -> Row:
    """CoMAS with ``noisy_judge`` of accuracy ``p`` in the scorer's place, plus ``extra`` keys."""
    return Row("comas", ("reward.judge=noisy_judge", f"reward.judge_accuracy={p}", *extra), curve=COMAS_CURVE,
               about=about)


# the setting at which a perfect judge teaches CoMAS (comas_judge_1.0_lr5e-4_role): the judge curve's other points
LEARNS = ("trainer.lr=5e-4", "reward.normalise=agent_role")

ROWS: dict[str, Row] = {
    "comas": Row("comas", curve=COMAS_CURVE, about="CoMAS, the agents' own scores (Eq. 7-8)"),
    "comas_judge_1.0": comas_judge("1.0", about="CoMAS with a perfect judge in the scorer's place"),
    "comas_judge_1.0_lr5e-4": comas_judge("1.0", "trainer.lr=5e-4",
                                          about="CoMAS, a perfect judge, at GRPO's LoRA rate (5e-4)"),
    "comas_judge_1.0_lr5e-4_role": comas_judge("1.0", *LEARNS, about="the same, advantages whitened per role (not "
                                                                      "across roles)"),
    **{f"comas_judge_{p}_lr5e-4_role": comas_judge(p, *LEARNS, about=f"a judge of accuracy {p}, lr 5e-4, per-role "
                                                                     f"whitening") for p in ("0.8", "0.65")},
    "comas_lr5e-4_role": Row("comas", LEARNS, curve=COMAS_CURVE,
                             about="CoMAS, the agents' own scores, lr 5e-4, per-role whitening"),
    "sage": Row("sage", about="SAGE, all four roles", **SAGE),
    "sage_64": Row("sage", ("trainer.max_steps=64",), about="SAGE to 64 steps", continues="sage", **SAGE),
    "sage_no_challenger": Row("sage", ("protocol.train_challenger=false",), about="no Challenger training", **SAGE),
    "sage_no_critic": Row("sage", ("protocol.train_critic=false",), about="no Critic training", **SAGE),
    "sage_no_planner": Row("sage", ("protocol.plan=false",), about="no Planner (the Solver answers alone)", **SAGE),
    "sage_solver_verifier": Row("sage", ("protocol.train_challenger=false", "protocol.train_planner=false",
                                         "protocol.train_critic=false", "protocol.w_plan=0", "protocol.w_correct=1",
                                         "protocol.w_format=0"),
                                about="only the Solver trained, on its verifier reward alone", **SAGE),
    "azr": Row("azr", about="AZR, self-proposed code reasoning tasks (no data)", **AZR),
    "mae": Row("mae", about="MAE, half reference, the Judge's scores alone", **MAE),
    "grpo": Row("grpo", about="plain GRPO, verifier reward (selfevo)"),
    "trl_grpo": Row("grpo", adapter="adapter", script=("benchmarks/ablations/grpo_vs_trl.py", "--trl-run"),
                    about="plain GRPO, verifier reward (TRL's GRPOTrainer, the same settings)"),
}


def sh(cmd: list[str]) -> None:
    print("+", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True)


def shown(cmd: list[str]) -> str:
    """A command as a user types it (``selfevo ...`` / ``python script ...``)."""
    return "selfevo " + " ".join(cmd[3:]) if cmd[1:3] == ["-m", "selfevo.cli"] else "python " + " ".join(cmd[1:])


# ---- evaluations and runs ---------------------------------------------------------------------------------------
def check_same_command(where: Path, cmd: list[str]) -> None:
    """A run folder is reused only by the command that started it (its first ``run.json`` launch, ``output_dir``
    and ``resume`` aside); a script's folder (``trl_grpo``) has no ``run.json`` to check."""
    path = where / "run.json"
    if not path.exists() or cmd[1:3] != ["-m", "selfevo.cli"]:
        return
    keep = lambda args: [a for a in args if not a.startswith(("output_dir=", "resume="))]  # noqa: E731
    first = json.loads(path.read_text())[0]["argv"][1:]
    if keep(first) != keep(cmd[3:]):
        raise UsageError(f"{where} was trained by `selfevo {' '.join(first)}`, not `{shown(cmd)}`: "
                         f"use another --out")


def start_from(source: Path, where: Path) -> bool:
    """Begin the run folder ``where`` as a copy of ``source``, a run of the row it continues (``sage`` for
    ``sage_64``), without ``source``'s final adapter and evaluations: the longer command then resumes it from its
    last checkpoint, which computes what one longer run computes where the rate is constant and data and sampling
    are seeded by step (tests/algorithms/test_sage.py: a run resumed to more steps is the uninterrupted run). False,
    and nothing copied, where ``where`` exists or ``source`` has no checkpoint."""
    if where.exists() or not (source / "checkpoint" / "state.json").exists():
        return False

    def skip(folder: str, names: list[str]) -> list[str]:
        here = Path(folder)
        return [n for n in names if (here == source and n.startswith("eval")) or
                (here == source / "adapters" and n == "final")]

    partial = where.with_name(where.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    shutil.copytree(source, partial, ignore=skip)
    partial.rename(where)  # a copy cut short is never taken for a run
    return True


def seed_folder(out: Path, name: str, seed: int) -> Path:
    """The run folder of row ``name``'s seed ``seed`` under ``out``."""
    return out / name / f"seed{seed}"


def first_command(row: Row, out: Path, name: str, seed: int, extra: tuple[str, ...] = ()) -> list[str]:
    """The command the seed folder of ``row`` (``out/name/seed<S>``) must have been started by: its own, or for a
    row that continues another, that row's where :func:`start_from` copied (or had copied) a run of it."""
    where = seed_folder(out, name, seed)
    own = row.command(where, seed, extra)
    if not row.continues:
        return own
    source = seed_folder(out, row.continues, seed)
    theirs = ROWS[row.continues].command(source, seed, extra)
    if (source / "run.json").exists() and _launched_by(source, theirs):
        start_from(source, where)
    return theirs if (where / "run.json").exists() and _launched_by(where, theirs) else own


def _launched_by(where: Path, cmd: list[str]) -> bool:
    try:
        check_same_command(where, cmd)
    except UsageError:
        return False
    return True


def eval_args(n: int, bench: str = BENCH, settings: list[str] | tuple[str, ...] = EVAL) -> list[str]:
    """``selfevo eval``'s keys for the first ``n`` held-out items of ``bench`` (``n`` 0: all of them)."""
    return [f"benchmark={bench}", *([f"limit={n}"] if n else []), *settings]


def eval_command(n: int, bench: str = BENCH, settings: list[str] | tuple[str, ...] = EVAL) -> str:
    """The evaluation as recorded in effect.json (a base's ``command``, a seed's ``eval``)."""
    return "selfevo eval " + " ".join(eval_args(n, bench, settings))


def evaluate(out: Path, n: int, extra: list[str], run: bool, bench: str = BENCH,
             settings: list[str] | tuple[str, ...] = EVAL) -> list[dict] | None:
    """Per-item records (held-out order: ``correct`` 0/1, ``chars`` of the answer) of one evaluation, running it
    first if needed. An evaluation already there of more than ``n`` items is an error (another ``--n``)."""
    return evaluate_all(out, n, extra, run, [bench], settings)[bench]


def evaluate_all(out: Path, n: int, extra: list[str], run: bool, benches: list[str],
                 settings: list[str] | tuple[str, ...] = EVAL) -> dict[str, list[dict] | None]:
    """:func:`evaluate` per benchmark; those not yet in ``out`` run first in one ``selfevo eval`` (one model load).
    Each evaluation keeps its keys (``settings`` and ``extra``) in ``eval_keys.json`` beside its items: one already
    there is reused only with the same keys (else a one-line error: another ``--out``)."""
    items = {bench: out / f"{bench}-vanilla" / "items.jsonl" for bench in benches}
    keys = [*settings, *extra]
    for path in items.values():
        check_eval_keys(path.parent, keys)
    missing = [bench for bench, path in items.items() if not path.exists()]
    if run and missing:
        sh([sys.executable, "-m", "selfevo.cli", "eval", *eval_args(n, ",".join(missing), settings),
            f"output_dir={out}", *extra])
        for bench in missing:
            if items[bench].exists():
                (items[bench].parent / "eval_keys.json").write_text(json.dumps(keys) + "\n")
    return {bench: _records(path, n) for bench, path in items.items()}


def check_eval_keys(folder: Path, keys: list[str]) -> None:
    """An evaluation in ``folder`` is reused only with the keys it was run with (``eval_keys.json``; a folder
    evaluated before that file was written is reused with a printed note, as its keys cannot be checked)."""
    path = folder / "eval_keys.json"
    if path.exists():
        had = json.loads(path.read_text())
        if had != keys:
            raise UsageError(f"{folder} was evaluated with {' '.join(had) or 'no extra keys'}, not "
                             f"{' '.join(keys) or 'no extra keys'}: use another --out")
    elif (folder / "items.jsonl").exists():
        print(f"note: {folder} has no eval_keys.json (evaluated before it was kept): reused unchecked", flush=True)


def _records(items: Path, n: int) -> list[dict] | None:
    if not items.exists():
        return None
    records = [json.loads(line) for line in items.read_text().splitlines()]
    if n and len(records) > n:
        raise UsageError(f"{items} holds {len(records)} items, not the first {n}: it was evaluated with another --n "
                         f"(pass --n {len(records)}, or remove the folder)")
    return [{"correct": float(r["correct"]), "chars": len(r["final_response"] or ""),
             "answer": r["final_response"] or ""} for r in records]


def answers_sha256(items: list[dict]) -> dict:
    """``{"answers_sha256": hex}`` of an evaluation's answers in held-out order, joined by ``"\\n\\x00"`` (so that
    one machine's evaluation can be checked character for character against another's, which the verdicts and the
    mean length cannot); empty for items without their texts (a base read back from effect.json)."""
    if not items or any("answer" not in x for x in items):
        return {}
    return {"answers_sha256": hashlib.sha256("\n\x00".join(x["answer"] for x in items).encode()).hexdigest()}


def base_record(base: list[dict], n: int, bench: str = BENCH, settings: list[str] | tuple[str, ...] = EVAL) -> dict:
    """The untrained model's record: per-item 0/1, mean answer characters, the command."""
    return {"items": [b["correct"] for b in base], "answer_chars": round(sum(b["chars"] for b in base) / len(base), 1),
            "command": eval_command(n, bench, settings), **answers_sha256(base)}


def recorded_base(record: dict, n: int, settings: list[str] | tuple[str, ...] = EVAL) -> list[dict] | None:
    """The untrained model's per-item records from effect.json when it holds the same evaluation of ``n`` items
    (``base``, or for other evaluation keys ``bases[command]``; rows are paired with the base they were recorded
    with; a new machine need not re-evaluate it), else None."""
    command = eval_command(n, BENCH, settings)
    base = record.get("base") or {}
    if base.get("command") != command:
        base = (record.get("bases") or {}).get(command) or {}
    if base.get("command") != command or len(base["items"]) != n:
        return None
    return [{"correct": c, "chars": base["answer_chars"]} for c in base["items"]]


def eval_extra(command: str) -> list[str]:
    """The keys of an evaluation ``command`` (:func:`base_record`'s) beyond :func:`eval_args`' defaults: its
    ``--eval-set``."""
    return [k for k in command.split()[2:] if k not in EVAL and not k.startswith(("benchmark=", "limit="))]


def eval_folder(name: str, eval_set: list[str] | tuple[str, ...]) -> str:
    """The folder of an evaluation (``base``, a run's ``eval``) under extra keys ``eval_set``: ``name`` for none,
    else ``name-`` and the keys (``eval-model.dtype-float32``), so evaluations of other keys sit side by side."""
    return "-".join([name, *(k.replace("=", "-").replace("/", "_") for k in eval_set)])


def train(row: Row, out: Path, seed: int, run: bool, extra: tuple[str, ...] = ()) -> str:
    cmd = row.command(out, seed, extra)
    if run and not row.finished(out):
        resume = ["resume=true"] if (out / "metrics.jsonl").exists() and not row.script else []
        sh(cmd + resume)
    return shown(cmd)


def curve(out: Path, keys: tuple[str, ...]) -> list[dict]:
    """The run's per-step values of ``keys`` (dotted paths into metrics.jsonl), plus its wall seconds."""
    path = out / "metrics.jsonl"
    if not path.exists():
        return []
    lines = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
    return [{"step": m["step"], "step_s": m.get("step_s"), **{k: metric_value(m, k) for k in keys}} for m in lines]


def seed_record(before: list[dict], after: list[dict], command: str, steps: list[dict]) -> dict:
    if len(before) != len(after):
        raise UsageError(f"{len(after)} items after training, {len(before)} before: the evaluations were run with "
                         f"different --n")
    correct = [a["correct"] for a in after]
    d = paired_difference([b["correct"] for b in before], correct)
    seconds = [s["step_s"] for s in steps if s.get("step_s")]
    return {"items": correct, "accuracy": sum(correct) / len(correct), "diff": d["diff"], "diff_low": d["low"],
            "diff_high": d["high"], "command": command, "steps": len(steps), "train_s": round(sum(seconds), 1),
            "answer_chars": round(sum(a["chars"] for a in after) / len(after), 1), **answers_sha256(after),
            "curve": steps}


def after_record(row: Row, where: Path, n: int, base: list[dict], command: str, bench: str = BENCH,
                 settings: list[str] | tuple[str, ...] = EVAL, folder: str = "eval") -> dict | None:
    """The seed record of the run in ``where``: its final adapter evaluated (once it finished) into
    ``where/folder`` and paired with ``base``; None while it has no evaluation."""
    after = evaluate(where / folder, n, adapter_args(row, where), row.finished(where), bench, settings)
    return None if after is None else seed_record(base, after, command, curve(where, row.curve))


def adapter_args(row: Row, where: Path) -> list[str]:
    """The ``selfevo eval`` key that loads the final adapter of ``row``'s run in ``where``."""
    return [f"adapters=[{where / row.adapter}]"]


# ---- rows (pure: from effect.json's records) --------------------------------------------------------------------
def merge_seeds(name: str, old: dict[str, dict], new: dict[str, dict], command: str, default: str) -> dict[str, dict]:
    """A row's recorded seeds with this run's (``new`` wins); every seed must have been evaluated with ``command``
    (a seed's ``eval``; one recorded before evaluations carried it: ``default``), as one row pairs with one base."""
    merged = {**old, **new}
    if other := sorted((s for s, r in merged.items() if r.get("eval", default) != command), key=int):
        raise UsageError(f"row {name}: seeds {', '.join(other)} were evaluated with other keys than {command!r} "
                         f"(--eval-set): one row pairs with one base")
    return merged


def refresh_over_seeds(methods: dict) -> list[str]:
    """Set each row's :func:`over_seeds` from its seeds (rows merged before the key existed, or by an older copy of
    this script, lack it); the names of the rows it changed."""
    changed = []
    for name, row in methods.items():
        if row.get("per_seed") and row.get("over_seeds") != (fresh := over_seeds(row["per_seed"])):
            row["over_seeds"] = fresh
            changed.append(name)
    return changed


def merge_record(record: dict, base_rec: dict, other_keys: bool, new: dict[str, dict[str, dict]],
                 maestro: dict | None) -> None:
    """Merge one run of this script into ``record``, effect.json as it is when the run ends (read then, not when the
    run started: another run of the script may have merged seeds of the same row meanwhile, and the last to write
    must keep them): ``base_rec`` as the base (under ``bases`` when ``other_keys``: --eval-set), each row of ``new``
    (name: this run's seeds) merged seed by seed into the row's recorded seeds (:func:`merge_seeds`; a seed run
    again replaces its record) and summed up again over all of them, and the MAESTRO row when there is one."""
    bases = record.setdefault("bases", {}) if other_keys else record
    key = base_rec["command"] if other_keys else "base"
    had = bases.get(key) or {}
    if had.get("command") == base_rec["command"]:  # a base read back has no texts: it keeps its recorded digest
        base_rec = {**{k: v for k, v in had.items() if k == "answers_sha256"}, **base_rec}
    bases[key] = base_rec
    default = default_eval(record, base_rec["command"])
    for name, seeds in new.items():
        row = ROWS[name]
        merged = merge_seeds(name, (record["methods"].get(name) or {}).get("per_seed", {}), seeds,
                             base_rec["command"], default)
        record["methods"][name] = row_summary(base_rec, merged, row.about, row.adapter.rsplit("/", 1)[-1])
    if maestro is not None:
        record["methods"]["maestro"] = maestro


def update_record(path: Path, change) -> dict:
    """Read effect.json, ``change`` it in place and write it back (a temporary file and a rename), holding an
    exclusive lock on a file beside it from the read to the rename, so that runs ending together do not write over
    each other's rows; the record written."""
    with open(path.with_name("." + path.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        record = json.loads(path.read_text()) if path.exists() else empty_record()
        change(record)
        atomic_write_text(path, json.dumps(record) + "\n")
    return record


def empty_record() -> dict:
    return {"benchmark": BENCH, "eval": EVAL, "methods": {}}


def default_eval(record: dict, command: str) -> str:
    """The evaluation a recorded seed without its own ``eval`` key was paired with: effect.json's ``base`` (the
    rows before ``--eval-set`` existed), or ``command`` for a record without one."""
    return (record.get("base") or {}).get("command", command)


def check_rows_pair(record: dict, rows: list[str], seeds: list[int], command: str) -> None:
    """Before any evaluation or training: the seeds each of ``rows`` keeps (those not run now) must have been
    evaluated with ``command``, this run's base, as :func:`merge_seeds` would refuse them only after the work."""
    default = default_eval(record, command)
    for name in rows:
        kept = {s: r for s, r in record["methods"].get(name, {}).get("per_seed", {}).items() if int(s) not in seeds}
        merge_seeds(name, kept, {}, command, default)


def row_summary(base: dict, seeds: dict[str, dict], about: str = "", agent: str = "") -> dict:
    """A row over its seeds: ``before``/``after`` (the seed-averaged per-item accuracy) with Wilson intervals (the
    after interval: over the rounded count), the paired change of the seed-averaged items, the t interval of the
    seeds' own changes (:func:`over_seeds`), and the seeds' records."""
    before = base["items"]
    avg = _item_mean([s["items"] for s in seeds.values()])
    n, d = len(before), paired_difference(before, avg)
    return {"n": n, "about": about, "agent": agent, "seeds": sorted(int(s) for s in seeds),
            "before": sum(before) / n, "after": sum(avg) / n, "before_ci": wilson(int(sum(before)), n),
            "after_ci": wilson(int(round(sum(avg))), n), "diff": d["diff"], "diff_low": d["low"],
            "diff_high": d["high"], "improved": d["improved"], "worsened": d["worsened"],
            "chars_before": base.get("answer_chars"),
            "chars_after": _mean([s.get("answer_chars") for s in seeds.values()]),
            "train_s": _mean([s.get("train_s") for s in seeds.values()]), "eval": base.get("command"),
            "over_seeds": over_seeds(seeds), "per_seed": seeds}


def over_seeds(seeds: dict[str, dict]) -> dict | None:
    """:func:`seed_interval` of the seeds' own changes (each seed's ``diff``): how far the effect moves from one
    training run to the next, which the paired interval of the seed-averaged items does not count; None without
    seeds."""
    return seed_interval([s["diff"] for s in seeds.values()]) if seeds else None


def spread_cell(spread: dict | None) -> str | None:
    """``"[low, high]"`` of an :func:`over_seeds` interval; None for no seeds or one (no spread to estimate)."""
    return f"[{spread['low']:+.3f}, {spread['high']:+.3f}]" if spread and spread["k"] > 1 else None


def seed_average(row: dict, seeds: list[str]) -> list[float]:
    """The per-item accuracy of ``row`` (a :func:`row_summary`) averaged over ``seeds``."""
    return _item_mean([row["per_seed"][s]["items"] for s in seeds])


def missing_seeds(methods: dict, rows, want: int = 3) -> list[tuple[str, int, float | None]]:
    """``(row, seed, seconds)`` for each run that ``rows`` (names) lack in ``methods`` (effect.json's) to have
    ``want`` seeds: the lowest seeds not recorded; ``seconds`` is the row's mean recorded training time (None for a
    row without one)."""
    todo = []
    for name in rows:
        per = (methods.get(name) or {}).get("per_seed") or {}
        have = {int(s) for s in per}
        seconds = _mean([r.get("train_s") for r in per.values()])
        free = (s for s in range(want + len(have)) if s not in have)
        todo += [(name, next(free), seconds) for _ in range(max(0, want - len(have)))]
    return todo


def steps_on_disk(where: Path) -> tuple[int, int | None] | None:
    """``(steps done, steps planned or None)`` a run folder holds: selfevo's ``checkpoint/state.json`` or, for the
    TRL script (``trl_grpo``), the newest complete Trainer checkpoint ``trainer/checkpoint-N`` (its
    ``trainer_state.json`` is written last); None without either."""
    state_file = where / "checkpoint" / "state.json"
    if state_file.exists():
        state = json.loads(state_file.read_text())
        return state["step"] + 1, state.get("config", {}).get("trainer", {}).get("max_steps")
    newest = last_checkpoint(where / "trainer")
    if newest is None:
        return None
    return checkpoint_step(newest), json.loads((newest / "trainer_state.json").read_text()).get("max_steps")


def last_checkpoint(folder: Path) -> Path | None:
    """The newest complete ``checkpoint-N`` of a TRL run (saved after every step, the one before removed), or None.
    A checkpoint is complete once the Trainer wrote its ``trainer_state.json``, which comes last."""
    done = [d for d in folder.glob("checkpoint-*") if d.name.split("-")[-1].isdigit()
            and (d / "trainer_state.json").exists()] if folder.is_dir() else []
    return max(done, key=checkpoint_step, default=None)


def checkpoint_step(checkpoint: Path | None) -> int:
    """Optimizer steps a checkpoint holds (0 without one)."""
    return int(checkpoint.name.split("-")[-1]) if checkpoint else 0


def todo_line(name: str, seed: int, seconds: float | None, methods: dict, out: Path) -> str:
    """One ``--todo`` line: the run, its row's recorded mean training time, and the part of it already on disk: the
    steps its own run folder in ``out`` holds (a stopped run resumes there, a trained one is only evaluated), or for a
    row that continues another the part that row's run of the same seed holds (:func:`start_from` reuses it)."""
    line = f"{name}:{seed}" + (f"  ~{seconds / 60:.0f} min training" if seconds else "  (no recorded run)")
    where, src = seed_folder(out, name, seed), ROWS[name].continues
    on_disk = steps_on_disk(where)
    if on_disk:
        done = f"{on_disk[0]}" + (f" of {on_disk[1]}" if on_disk[1] else "")
        if ROWS[name].finished(where):
            return line + f", trained ({done} steps on disk): only its evaluation is left, in {where}"
        return line + f", {done} steps on disk: it resumes {where}"
    done = ((methods.get(src) or {}).get("per_seed") or {}).get(str(seed), {}).get("train_s")
    source = seed_folder(out, src, seed) if src else None
    if source and done and (source / "checkpoint" / "state.json").exists():
        line += f", ~{done / 60:.0f} of them done: it continues {source}"
    return line


def _item_mean(lists: list[list[float]]) -> list[float]:
    return [sum(col) / len(col) for col in zip(*lists)]


def head_to_head(a: dict, b: dict) -> dict | None:
    """``a − b`` (two :func:`row_summary` rows) on the seed-averaged items, over the seeds both have: ``{"seeds",
    "n", "diff", "low", "high", "improved", "worsened", "over_seeds"}`` (improved: items where ``a`` is ahead;
    over_seeds: :func:`seed_interval` of the per-seed gaps, seed s of ``a`` against seed s of ``b``, which train on
    the same task batches); None without a common seed."""
    both = sorted(set(a["per_seed"]) & set(b["per_seed"]), key=int)
    if not both:
        return None
    gaps = [a["per_seed"][s]["diff"] - b["per_seed"][s]["diff"] for s in both]
    return {"seeds": both, **paired_difference(seed_average(b, both), seed_average(a, both)),
            "over_seeds": seed_interval(gaps)}


def _mean(xs):
    xs = [x for x in xs if x is not None]
    return round(sum(xs) / len(xs), 1) if xs else None


def table(methods: dict) -> str:
    lines = ["| row | seeds | before | after (seed-avg) | after − before (paired 95%) | items +/− | per seed: after − "
             "before | over seeds (t 95%) | answer chars before → after | training s (mean) |", "|---" * 10 + "|"]
    ci = lambda x: f"[{x[0]:.3f}, {x[1]:.3f}]"  # noqa: E731
    for name, r in methods.items():
        extra = eval_extra(r.get("eval") or "")
        name = f"{name} (eval {' '.join(extra)})" if extra else name
        per = r.get("per_seed") or {}
        seeds = ", ".join(f"{p['diff']:+.3f}" for p in per.values()) or "–"
        chars = f"{r['chars_before']} → {r['chars_after']}" if r.get("chars_after") else "–"
        spread = spread_cell(over_seeds(per)) or "–"
        lines.append(f"| {name} | {len(per) or '–'} | {r['before']:.3f} {ci(r['before_ci'])} | {r['after']:.3f} "
                     f"{ci(r['after_ci'])} | {r['diff']:+.3f} [{r['diff_low']:+.3f}, {r['diff_high']:+.3f}] | "
                     f"+{r['improved']}/−{r['worsened']} | {seeds} | {spread} | {chars} | {r.get('train_s') or '–'} |")
    return "\n".join(lines) + "\n"


def plot(methods: dict, path: Path) -> None:
    """One panel per row with curves: each key of its training curve per step, mean over seeds (band: 95%)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from common import plot_bands

    rows = {k: r for k, r in methods.items() if any(s.get("curve") for s in (r.get("per_seed") or {}).values())}
    if not rows:
        return
    cols = min(4, len(rows))
    lines = (len(rows) + cols - 1) // cols
    fig, axes = plt.subplots(lines, cols, figsize=(5 * cols, 3.6 * lines), squeeze=False)
    for ax, (name, r) in zip(axes.flat, rows.items()):
        runs = [s["curve"] for s in r["per_seed"].values() if s.get("curve")]
        for key in [k for k in runs[0][0] if k not in ("step", "step_s")]:
            plot_bands(ax, runs, lambda m, k=key: m.get(k), key)
        ax.set_title(name, fontsize=10)
        ax.set_xlabel("step")
        ax.set_ylim(-0.02, 1.02)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    for ax in list(axes.flat)[len(rows):]:
        ax.axis("off")
    fig.tight_layout()
    fig.savefig(path, dpi=90)


def maestro_row() -> dict | None:
    path = RESULTS / "maestro_selectors.json"
    if not path.exists():
        return None
    record = json.loads(path.read_text())
    centrals, meta = record["centrals"], record["meta"]
    if "prompt_only" not in centrals or "clpo" not in centrals:
        return None
    before, after = centrals["prompt_only"]["items"], centrals["clpo"]["items"]
    n, d = len(before), paired_difference(before, after)
    return {"n": n, "agent": "central", "about": "MAESTRO central agent on fixed held-out slates (accuracy = the "
            "chosen candidate is correct)", "before": sum(before) / n, "after": sum(after) / n,
            "before_ci": wilson(int(sum(before)), n), "after_ci": wilson(int(sum(after)), n), "diff": d["diff"],
            "diff_low": d["low"], "diff_high": d["high"], "improved": d["improved"], "worsened": d["worsened"],
            "command": f"benchmarks/ablations/maestro_selectors.py --n {meta['n']} --steps {meta['steps']} "
                       f"--benchmark {meta['benchmark']}", "train_s": centrals["clpo"].get("train_s")}


def copy_adapter(src: Path, dst: Path) -> None:
    """The adapter at ``src`` as PEFT files in ``dst``, its tensors cast to bf16 (half the size; how it trained)."""
    import torch
    from safetensors.torch import load_file, save_file

    dst.mkdir(parents=True, exist_ok=True)
    (dst / "adapter_config.json").write_text((src / "adapter_config.json").read_text())
    tensors = {k: v.to(torch.bfloat16) for k, v in load_file(str(src / "adapter_model.safetensors")).items()}
    save_file(tensors, str(dst / "adapter_model.safetensors"))


# ---- main -------------------------------------------------------------------------------------------------------
def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", nargs="+", default=["grpo", "trl_grpo"], choices=list(ROWS), metavar="ROW")
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    ap.add_argument("--n", type=int, default=500)
    ap.add_argument("--out", default="runs/effect")
    ap.add_argument("--set", nargs="+", default=[], metavar="KEY=VALUE",
                    help="training overrides for every row run now, recorded in each seed's command (e.g. "
                         "model.dtype=float32 on a CPU without native bf16; evaluations are unchanged)")
    ap.add_argument("--eval-set", nargs="+", default=[], metavar="KEY=VALUE",
                    help="extra selfevo eval keys for every evaluation run now, base and rows (e.g. "
                         "model.dtype=float32 where bf16 is emulated and long answers take hours): the rows are "
                         "paired with a base evaluated under the same keys (effect.json's bases), each evaluation "
                         "in a folder named after its keys")
    ap.add_argument("--table-only", action="store_true",
                    help="rebuild effect.{md,png} from effect.json alone (and each row's over_seeds, from its seeds)")
    ap.add_argument("--adapters", action="store_true", help="copy each row's seed-0 adapter into the results")
    ap.add_argument("--list", action="store_true", help="print the rows and their commands")
    ap.add_argument("--todo", type=int, nargs="?", const=3, default=None, metavar="SEEDS",
                    help="print the row:seed runs each row lacks for SEEDS seeds (default 3), with their recorded "
                         "mean training time")
    args = ap.parse_args()
    if bad := [x for x in [*args.set, *args.eval_set] if "=" not in x]:
        raise UsageError(f"--set and --eval-set take KEY=VALUE, not {bad[0]!r}")
    if args.list:
        for name, row in ROWS.items():
            command = shown(row.command(Path(args.out) / name / "seed0", 0))
            print(f"{name:22s} {row.about}\n{'':22s} {command}")
        return
    path = RESULTS / "effect.json"
    record = json.loads(path.read_text()) if path.exists() else empty_record()
    if args.todo is not None:
        if args.todo < 1:
            raise UsageError(f"--todo takes a number of seeds >= 1, not {args.todo}")
        todo = missing_seeds(record["methods"], ROWS, args.todo)
        for name, seed, seconds in todo:
            print(todo_line(name, seed, seconds, record["methods"], Path(args.out)))
        known = [s for _, _, s in todo if s]
        print(f"{len(todo)} runs; {sum(known) / 3600:.1f} h of recorded training time for {len(known)} of them")
        return
    if not args.table_only:
        out, settings = Path(args.out), (*EVAL, *args.eval_set)
        check_rows_pair(record, args.rows, args.seeds, eval_command(args.n, BENCH, settings))
        base = recorded_base(record, args.n, settings) or evaluate(out / eval_folder("base", args.eval_set), args.n,
                                                                   [], True, BENCH, settings)
        base_rec = base_record(base, args.n, BENCH, settings)
        new: dict[str, dict[str, dict]] = {}
        for name in args.rows:
            row, seeds = ROWS[name], {}
            for seed in args.seeds:
                where = seed_folder(out, name, seed)
                check_same_command(where, first_command(row, out, name, seed, tuple(args.set)))
                command = train(row, where, seed, True, tuple(args.set))
                done = after_record(row, where, args.n, base, command, BENCH, settings,
                                    eval_folder("eval", args.eval_set))
                if done is not None:
                    seeds[str(seed)] = {**done, "eval": base_rec["command"]}
                if args.adapters and seed == 0 and row.finished(where):
                    copy_adapter(where / row.adapter, RESULTS / "adapters" / name)
            if seeds:
                new[name] = seeds
        maestro = maestro_row()
        record = update_record(path, lambda now: merge_record(now, base_rec, bool(args.eval_set), new, maestro))
    if args.table_only and refresh_over_seeds(record["methods"]):
        record = update_record(path, lambda now: refresh_over_seeds(now["methods"]))
    md = table(record["methods"])
    (RESULTS / "effect.md").write_text(md)
    plot(record["methods"], RESULTS / "effect.png")
    print(md)


def one_line(main) -> int:
    """Run ``main``; a :class:`UsageError` is one line on stderr and exit code 2."""
    try:
        main()
    except UsageError as e:
        print(f"{Path(sys.argv[0]).name}: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(one_line(main))
