"""``selfevo verify --input in.jsonl --output out.jsonl``: score responses line by line.

Each input line is a JSON object ``{"domain": "math"|"code"|"mcq"|"numeric", "response": str, "reference": str,
"tests": str (code, unless ``meta`` holds ``io``/``calls``/``evalplus`` tests), "entry_point": str (optional),
"meta": dict (optional, as ``Task.meta``)}``. Each output line is the input
object plus ``"score"`` and ``"reason"``. A line that is not valid JSON, is not an object, lacks a field, or
names an unknown domain gets score 0 and a reason saying why; processing never stops on one bad line. Blank
lines are skipped. ``--workers N`` scores N lines at a time (threads; order is preserved). When code was run, one
line on stderr says under which sandbox filesystem mode (``isolation["fs"]``, see ``docs/sandbox.md``), e.g.
``selfevo verify: sandbox filesystem: minimal-root x12``.
"""
from __future__ import annotations

import argparse
import json
import sys
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Iterator

from selfevo.types import Task
from selfevo.verifiers import get_verifier
from selfevo.verifiers.sandbox import take_fs_modes

_REQUIRED = {"math": ("response", "reference"), "mcq": ("response", "reference"),
             "numeric": ("response", "reference"), "code": ("response", "tests")}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="selfevo verify", description="Score responses with selfevo's verifiers.")
    parser.add_argument("--input", required=True, help="JSONL file of {domain, response, reference, tests, ...}")
    parser.add_argument("--output", required=True, help="JSONL file to write (input fields + score + reason)")
    parser.add_argument("--workers", type=int, default=1, help="lines scored concurrently (default 1)")
    return parser


def main(argv: list[str]) -> int:
    """Run the verify command; 0 on success (bad lines included), 2 on unusable arguments or files."""
    args = build_parser().parse_args(argv)
    if args.workers < 1:
        print("selfevo verify: --workers must be at least 1", file=sys.stderr)
        return 2
    try:
        with open(args.input, encoding="utf-8", errors="replace") as fh:
            lines = [line for line in fh if line.strip()]
    except OSError as exc:
        print(f"selfevo verify: cannot read --input {args.input}: {exc.strerror}", file=sys.stderr)
        return 2
    try:
        with open(args.output, "w", encoding="utf-8") as out:
            for record in _score_all(lines, args.workers):
                out.write(json.dumps(record, ensure_ascii=False) + "\n")
    except OSError as exc:
        print(f"selfevo verify: cannot write --output {args.output}: {exc.strerror}", file=sys.stderr)
        return 2
    _report_fs_modes(take_fs_modes())
    return 0


def _report_fs_modes(modes: dict[str, int]) -> None:
    """One stderr line: how many sandbox jobs ran under each filesystem mode (nothing when no code ran)."""
    if modes:
        text = ", ".join(f"{mode} x{count}" for mode, count in sorted(modes.items()))
        print(f"selfevo verify: sandbox filesystem: {text}", file=sys.stderr)


def _score_all(lines: list[str], workers: int) -> Iterator[dict]:
    if workers == 1:
        yield from map(score_line, lines)
        return
    with ThreadPoolExecutor(max_workers=workers) as pool:
        yield from pool.map(score_line, lines)


def score_line(line: str) -> dict[str, Any]:
    """One output record for one input line; never raises."""
    try:
        record = json.loads(line)
    except ValueError as exc:
        return {"raw": line.rstrip("\n"), "score": 0.0, "reason": f"invalid JSON: {exc}"}
    if not isinstance(record, dict):
        return {"raw": line.rstrip("\n"), "score": 0.0, "reason": "a line must be a JSON object"}
    problem = _problem(record)
    if problem:
        return {**record, "score": 0.0, "reason": problem}
    try:
        verdict = get_verifier(record["domain"])(_task(record), record["response"])
    except Exception as exc:  # noqa: BLE001 - one bad line must not stop the run
        return {**record, "score": 0.0, "reason": f"verifier error: {type(exc).__name__}: {exc}"}
    return {**record, "score": verdict.score, "reason": verdict.reason}


def _problem(record: dict) -> str:
    """Why a record cannot be scored, or "" if it can."""
    domain = record.get("domain")
    if not isinstance(domain, str):
        return "missing field 'domain'"
    if domain not in _REQUIRED:
        return f"unknown domain {domain!r}; known: {', '.join(sorted(_REQUIRED))}"
    if "meta" in record and not isinstance(record["meta"], dict):
        return "field 'meta' must be an object"
    required = list(_REQUIRED[domain])
    if domain == "code" and any(k in (record.get("meta") or {}) for k in ("io", "calls", "evalplus")):
        required.remove("tests")  # the tests are in meta
    missing = [f for f in required if not isinstance(record.get(f), str)]
    if missing:
        return f"missing or non-string field(s) {', '.join(repr(m) for m in missing)} for domain {domain!r}"
    return ""


def _task(record: dict) -> Task:
    return Task(id=str(record.get("id", "")), domain=record["domain"], question=str(record.get("question", "")),
                reference=str(record.get("reference", "")), tests=str(record.get("tests", "")),
                entry_point=str(record.get("entry_point", "") or ""), meta=dict(record.get("meta") or {}))
