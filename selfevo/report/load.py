"""Reading run directories and ``selfevo eval`` output directories into plain, JSON-able records for the report.

A run directory (``selfevo run``) holds ``config.yaml``, ``run.json`` (one record per launch), ``metrics.jsonl``
(one JSON object per step) and ``episodes.jsonl`` (one JSON object per episode); an eval directory holds
``summary.json``, ``table.md`` and one ``<benchmark>-<setup>/`` folder per combination with ``results.json`` and
``items.jsonl`` (a single combination folder is accepted too). Problems are one-line :class:`ReportError`\\ s.
MAESTRO runs and evals (episodes or items with round records) also get the flow of answers between rounds
(:func:`selfevo.setups.maestro_rounds.round_flows`), over all steps and per step for a run, per combination for an eval.
"""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Iterator

from selfevo.algorithms import new_task_labels
from selfevo.algorithms.pool import NEW_TASK
from selfevo.errors import SelfevoError
from selfevo.setups.maestro_rounds import FLOW_KEYS, ROUNDS, round_flows
from selfevo.tasks import get_task_spec
from selfevo.types import Task
from selfevo.verifiers import verifier_names, verify

RUN_FILES = ("metrics.jsonl", "config.yaml", "run.json", "episodes.jsonl")

# Turn labels whose text answers the episode's task (CoMAS solver, SAGE solver, MAESTRO executors, generic final
# answers); the labels whose text answers an episode's generated task are the run's recipe's (new_task_labels).
SOLVER_LABELS = frozenset({"solver", "execution", "final", "answer", "solution"})
CHEAP_VERIFIERS = frozenset({"math", "mcq", "numeric"})  # code runs a sandboxed subprocess per turn: not cheap
VERIFY_LIMIT = 2000  # default: at most this many turns are verified per report (~5 ms each; the rest say so)


class ReportError(SelfevoError, ValueError):
    """A directory or file the report cannot read, said in one line."""


# ---- small helpers -----------------------------------------------------------------------------------------------


def clean(value: Any) -> Any:
    """``value`` with every non-finite float replaced by None (JSON has no NaN; ``JSON.parse`` rejects it)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [clean(v) for v in value]
    return value


def flatten(record: dict, prefix: str = "") -> Iterator[tuple[str, float | None]]:
    """The numeric leaves of a (nested) metrics record as ``(dotted.name, value)``; bools and strings are left out,
    ``null`` leaves are kept as None (a gap), non-finite numbers become None."""
    for key, value in record.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            yield from flatten(value, name + ".")
        elif isinstance(value, bool) or isinstance(value, str) or isinstance(value, list):
            continue
        elif value is None:
            yield name, None
        elif isinstance(value, (int, float)):
            yield name, float(value) if math.isfinite(value) else None


def read_jsonl(path: Path, what: str) -> list[dict]:
    """Every non-empty line of ``path`` as a JSON object; a bad line is a one-line :class:`ReportError`."""
    records = []
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ReportError(f"{path}:{number}: bad {what} line ({exc.msg} at column {exc.colno})") from None
            if not isinstance(record, dict):
                raise ReportError(f"{path}:{number}: bad {what} line (a JSON {type(record).__name__}, "
                                  f"not an object)")
            records.append(record)
    return records


def read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ReportError(f"{path}: not valid JSON ({exc.msg} at line {exc.lineno})") from None


# ---- what a directory is -----------------------------------------------------------------------------------------


def eval_combos(path: Path) -> list[Path]:
    """The ``<benchmark>-<setup>`` folders of an eval directory (or the directory itself when it is one)."""
    if (path / "results.json").is_file():
        return [path]
    return sorted(p for p in path.iterdir() if p.is_dir() and (p / "results.json").is_file())


def kind_of(path: Path) -> str:
    """``"run"`` or ``"eval"``; anything else is a one-line :class:`ReportError`."""
    if not path.exists():
        raise ReportError(f"{path}: no such directory")
    if not path.is_dir():
        raise ReportError(f"{path}: not a directory (give a run directory or a selfevo eval output directory)")
    if (path / "summary.json").is_file() or eval_combos(path):
        return "eval"
    if any((path / name).is_file() for name in RUN_FILES):
        return "run"
    raise ReportError(f"{path}: neither a run directory (config.yaml, run.json, metrics.jsonl) nor an eval "
                      f"directory (summary.json, <benchmark>-<setup>/results.json)")


# ---- runs --------------------------------------------------------------------------------------------------------


def load_metrics(path: Path) -> dict[str, Any]:
    """``metrics.jsonl`` in columns: ``steps`` (x values) and ``series`` (dotted name → values, None where a line
    lacks it), in the order names first appear."""
    lines = read_jsonl(path, "metrics") if path.is_file() else []
    steps: list[float] = []
    rows: list[dict[str, float | None]] = []
    names: dict[str, None] = {}
    for index, record in enumerate(lines):
        step = record.get("step", index)
        if isinstance(step, bool) or not isinstance(step, (int, float)):
            raise ReportError(f"{path}:{index + 1}: bad metrics line ('step' is {step!r}, not a number)")
        row = {k: v for k, v in flatten(record) if k != "step"}
        names.update(dict.fromkeys(row))
        steps.append(step)
        rows.append(row)
    series = {name: [row.get(name) for row in rows] for name in names
              if any(row.get(name) is not None for row in rows)}
    return {"steps": steps, "series": series}


def read_launches(path: Path) -> list[dict]:
    if not path.is_file():
        return []
    data = read_json(path)
    return [clean(r) for r in (data if isinstance(data, list) else [data]) if isinstance(r, dict)]


def recipe_of(config_text: str) -> str | None:
    for line in config_text.splitlines():
        if line.startswith("recipe:"):
            return line.split(":", 1)[1].strip() or None
    return None


def load_run(path: Path, verify: bool = True, budget: list[int] | None = None,
             limit: int = VERIFY_LIMIT) -> dict[str, Any]:
    """A run directory as a record: config text, launches, metrics in columns, and episodes grouped by step
    (``episodes``: step → list, each solver-like turn with a ``verdict`` when one was computed)."""
    config = (path / "config.yaml").read_text(encoding="utf-8") if (path / "config.yaml").is_file() else ""
    episodes_path = path / "episodes.jsonl"
    episodes = [clean(e) for e in read_jsonl(episodes_path, "episodes")] if episodes_path.is_file() else []
    by_step: dict[Any, list[dict]] = {}
    for index, episode in enumerate(episodes):
        step = episode.get("step", 0)
        by_step.setdefault(step if isinstance(step, (int, float, str)) else str(step), []).append(episode)
        if not isinstance(episode.get("turns", []), list):
            raise ReportError(f"{episodes_path}:{index + 1}: bad episodes line ('turns' is not a list)")
    stats = attach_verdicts(episodes, budget if budget is not None else [limit], enabled=verify, limit=limit,
                            new_task=new_task_labels(recipe_of(config)))
    return {
        "kind": "run", "path": str(path), "recipe": recipe_of(config), "config": config,
        "launches": read_launches(path / "run.json"), "metrics": load_metrics(path / "metrics.jsonl"),
        "episodes": by_step, "n_episodes": len(episodes), "verify": stats,
        "files": sorted(p.name for p in path.iterdir()), "flows": run_flows(by_step),
    }


def round_records(value: Any) -> list[dict] | None:
    """``value`` when it is one question's MAESTRO round records (a non-empty list of objects with the keys a flow
    reads, :data:`~selfevo.setups.maestro_rounds.FLOW_KEYS`), else None."""
    if isinstance(value, list) and value and all(isinstance(r, dict) and FLOW_KEYS <= r.keys() for r in value):
        return value
    return None


def flows_of(records: list[Any]) -> dict[str, Any] | None:
    """:func:`round_flows` over the questions whose round records are well formed; None when none is."""
    kept = [r for r in map(round_records, records) if r is not None]
    return round_flows(kept) if kept else None


def run_flows(by_step: dict[Any, list[dict]]) -> dict[str, Any] | None:
    """A MAESTRO run's flows between rounds (the episodes' round records, under ``ROUNDS``): ``all`` steps together
    and per step (``steps``: ``{"step", "flow"}``); None for a run whose episodes have no round records."""
    every = flows_of([e.get(ROUNDS) for episodes in by_step.values() for e in episodes])
    if every is None:
        return None
    steps = [{"step": step, "flow": flows_of([e.get(ROUNDS) for e in episodes])}
             for step, episodes in by_step.items()]
    return {"all": every, "steps": [s for s in steps if s["flow"] is not None]}


def _verifier_name(task_id: str, domain: str) -> str | None:
    """The verifier the task's benchmark names (from the id's first part), else the one its domain names."""
    try:
        return get_task_spec(str(task_id).split("/", 1)[0]).verifier
    except Exception:  # not a benchmark id (generated tasks, JSONL files): fall back on the domain
        pass
    if domain in verifier_names():
        return domain
    return "numeric" if domain == "science" else None


def attach_verdicts(episodes: list[dict], budget: list[int] | None, enabled: bool = True,
                    limit: int = VERIFY_LIMIT, new_task: frozenset[str] = frozenset()) -> dict[str, Any]:
    """Give each solver-like turn (labels :data:`SOLVER_LABELS`; the labels in ``new_task``, the run's recipe's
    :func:`~selfevo.algorithms.new_task_labels`, against the episode's generated task) of a math/MCQ/numeric task
    with a reference a ``verdict`` {score, reason, extracted} from :func:`selfevo.verifiers.verify`, or
    ``verdict_note`` saying why there is none. ``budget`` is a one-item list: verifications left for the whole
    report. Returns counts for the page."""
    stats = {"enabled": enabled, "verified": 0, "code": 0, "no_reference": 0, "over_limit": 0, "errors": 0,
             "limit": limit}
    for episode in episodes:
        for turn in episode.get("turns") or []:
            if not isinstance(turn, dict):
                continue
            label = turn.get("role")  # episodes.jsonl records a turn's label under the key role (Turn.to_json)
            if label in SOLVER_LABELS:
                task = {"id": episode.get("task_id", ""), "question": episode.get("question", ""),
                        "reference": episode.get("reference", "")}
            elif label in new_task and isinstance(episode.get(NEW_TASK), dict):
                task = episode[NEW_TASK]
            else:
                continue
            if not enabled:
                turn["verdict_note"] = "not computed (selfevo report --no-verify)"
                continue
            domain = str(episode.get("domain", ""))
            name = _verifier_name(str(task.get("id", "")), domain)
            if name == "code" or domain == "code":
                stats["code"] += 1
                turn["verdict_note"] = "code: not verified at report time (sandboxed tests per turn are not cheap)"
                continue
            if name not in CHEAP_VERIFIERS or not str(task.get("reference") or "").strip():
                stats["no_reference"] += 1
                turn["verdict_note"] = "no reference answer to verify against"
                continue
            if budget is not None and budget[0] <= 0:
                stats["over_limit"] += 1
                turn["verdict_note"] = (f"not computed (over the report's limit of {limit} verified turns; "
                                        f"selfevo report --verify-limit N)")
                continue
            if budget is not None:
                budget[0] -= 1
            try:
                verdict = verify(Task(id=str(task.get("id", "")), domain=domain, question=str(task.get("question")),
                                      reference=str(task.get("reference")), meta={"verifier": name}),
                                 str(turn.get("text") or ""))
            except Exception as exc:  # a verifier failure is shown on the turn, not fatal for the report
                stats["errors"] += 1
                turn["verdict_note"] = f"verifier error: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}"
                continue
            stats["verified"] += 1
            turn["verdict"] = {"score": verdict.score, "reason": verdict.reason, "extracted": verdict.extracted,
                               "verifier": name, "against": NEW_TASK if label in new_task else "task"}
    return stats


# ---- eval directories --------------------------------------------------------------------------------------------


def load_eval(path: Path) -> dict[str, Any]:
    """An eval directory as a record: the summary records, table.md, and per combination its results and items."""
    combos = []
    for folder in eval_combos(path):
        results = read_json(folder / "results.json")
        if not isinstance(results, dict):
            raise ReportError(f"{folder / 'results.json'}: not a JSON object")
        items_path = folder / "items.jsonl"
        items = [clean(i) for i in read_jsonl(items_path, "items")] if items_path.is_file() else []
        infos = [i.get("info") for i in items]
        flows = flows_of([info.get(ROUNDS) if isinstance(info, dict) else None for info in infos])
        combos.append({"name": folder.name if folder != path else path.name, "results": clean(results),
                       "items": items, "flows": flows})
    summary = read_json(path / "summary.json") if (path / "summary.json").is_file() else None
    if summary is not None and not isinstance(summary, list):
        raise ReportError(f"{path / 'summary.json'}: not a JSON list of results")
    records = clean(summary) if summary is not None else [c["results"] for c in combos]
    table = (path / "table.md").read_text(encoding="utf-8") if (path / "table.md").is_file() else ""
    return {"kind": "eval", "path": str(path), "records": records, "table": table, "combos": combos}
