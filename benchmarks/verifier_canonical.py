"""Run reference solutions through the code verifier's path and report pass rates and sandbox overhead.

Benchmarks:
* ``humaneval``: the 164 HumanEval canonical solutions (prompt + body) against the original ``check`` tests.
* ``humaneval_plus``: the same solutions against every HumanEval+ base and plus input (EvalPlus ground truth).
* ``mbpp_plus``: the 378 MBPP+ canonical solutions against every base and plus input.
* ``livecodebench_public``: the data has no reference solutions, so each problem gets an *oracle* program that
  looks up the expected output of its public tests (stdin) or returns the expected JSON (functional). It checks
  the plumbing (input passing, program loading, output parsing and comparison), not a solver.
  ``livecodebench_negative_control`` runs oracles that answer wrongly; its pass rate must be 0.

Each task goes through the same calls as ``verify_code`` (``extract_code`` -> ``build_steps`` -> ``run_program``
-> ``verdict_from``), keeping the sandbox result to measure overhead: wall time of a job minus the time spent
inside its steps (process start, isolation, config transfer, loading the program, reporting), summed and divided
by the number of tests (``sandbox_overhead_ms_per_test``), and its mean and median per job.

Usage: ``python -m benchmarks.verifier_canonical [--data-root ../shared/data] [--limit N] [--workers 1]``.
Prints one JSON line and saves it to ``benchmarks/results/verifier_canonical.json``.
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor


from selfevo.types import Task
from selfevo.verifiers.code import (build_steps, evalplus_data, evalplus_tasks, extract_code, lcb_task,
                                    limits_for, program_prefix, verdict_from)
from selfevo.verifiers.sandbox import run_program

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def read_jsonl_gz(path: str) -> list[dict]:
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def humaneval_cases(root: str) -> list[tuple[Task, str]]:
    """(task, response) pairs: the original HumanEval tests, canonical body as the response."""
    cases = []
    for p in read_jsonl_gz(os.path.join(root, "humaneval", "HumanEval.jsonl.gz")):
        task = Task(id=p["task_id"], domain="code", question=p["prompt"], tests=p["test"],
                    entry_point=p["entry_point"], meta={"prompt": p["prompt"]})
        cases.append((task, p["canonical_solution"]))
    return cases


def evalplus_cases(dataset: str, path: str) -> list[tuple[Task, str]]:
    """(task, response) pairs for HumanEval+ or MBPP+, canonical solution as the response."""
    problems, _ = evalplus_data(dataset, path)
    return [(task, problems[task.id]["canonical_solution"]) for task in evalplus_tasks(dataset, path)]


def lcb_cases(root: str, wrong: bool = False) -> list[tuple[Task, str]]:
    """(task, oracle program) pairs for LiveCodeBench public tests; ``wrong`` oracles answer incorrectly."""
    with open(os.path.join(root, "livecodebench", "lcb_2408_2501_public_tests.json"), encoding="utf-8") as fh:
        items = json.load(fh)
    cases = []
    for i, item in enumerate(items):
        task = lcb_task(item, f"lcb/{i}")
        cases.append((task, lcb_oracle(task, wrong)))
    return cases


def lcb_oracle(task: Task, wrong: bool) -> str:
    """A program answering the task's public tests from a lookup table (shifted by one when ``wrong``)."""
    if "calls" in task.meta:
        table = {json.dumps(c["args"]): c["expected"] for c in task.meta["calls"]["cases"]}
        if wrong:
            table = {k: ["wrong", v] for k, v in table.items()}
        method = task.meta["calls"]["target"].split(".", 1)[1]
        return (f"import json\n_TABLE = json.loads({json.dumps(json.dumps(table))})\n\nclass Solution:\n"
                f"    def {method}(self, *args):\n        return _TABLE[json.dumps(list(args))]\n")
    table = {c["input"]: c["output"] + (" 0" if wrong else "") for c in task.meta["io"]}
    return (f"import sys, json\n_TABLE = json.loads({json.dumps(json.dumps(table))})\n"
            "sys.stdout.write(_TABLE[sys.stdin.read()])\n")


def score(case: tuple[Task, str]) -> dict:
    """The verifier path on one case, with timing."""
    task, response = case
    program = extract_code(response)
    steps = build_steps(task)
    result = run_program(program, steps, limits_for(task), prefix=program_prefix(task))
    verdict = verdict_from(result, program)
    return {"id": task.id, "score": verdict.score, "reason": verdict.reason, "tests": result.n_units,
            "wall_ms": result.wall_ms, "exec_ms": result.exec_ms, "isolation": result.isolation}


def run_benchmark(name: str, cases: list[tuple[Task, str]], workers: int,
                  expect_fail: bool = False) -> tuple[dict, list[dict]]:
    """Score all cases; return the summary and the per-case records (a negative control lists passes instead)."""
    start = time.monotonic()
    with ThreadPoolExecutor(max_workers=workers) as pool:
        records = list(pool.map(score, cases))
    failures = [r for r in records if r["score"] < 1.0]
    summary = {"tasks": len(records), "tests": sum(r["tests"] for r in records),
               "pass_rate": round(1 - len(failures) / max(1, len(records)), 4), "n_failures": len(failures)}
    if expect_fail:
        summary["unexpected_passes"] = [r["id"] for r in records if r["score"] > 0.0]
    else:
        summary["failures"] = [r["id"] for r in failures]
        summary["failure_reasons"] = {r["id"]: r["reason"][:300] for r in failures}
    summary.update(overhead(records))
    summary["seconds"] = round(time.monotonic() - start, 1)
    print(f"[{name}] pass rate {summary['pass_rate']} ({summary['tasks']} tasks, {summary['tests']} tests, "
          f"{summary['seconds']} s)", file=sys.stderr)
    return summary, records


def overhead(records: list[dict]) -> dict:
    """Sandbox time outside the steps themselves: per test (total / tests) and per job (mean, median)."""
    per_job = sorted(r["wall_ms"] - r["exec_ms"] for r in records) or [0.0]
    tests = sum(r["tests"] for r in records)
    return {"sandbox_overhead_ms_per_test": round(sum(per_job) / max(1, tests), 3),
            "sandbox_overhead_ms_per_job_mean": round(sum(per_job) / len(per_job), 1),
            "sandbox_overhead_ms_per_job_median": round(per_job[len(per_job) // 2], 1)}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data-root", default=os.path.join(REPO, "..", "shared", "data"))
    parser.add_argument("--output", default=os.path.join(REPO, "benchmarks", "results", "verifier_canonical.json"))
    parser.add_argument("--limit", type=int, default=0, help="only the first N tasks of each benchmark")
    parser.add_argument("--workers", type=int, default=1, help="jobs run concurrently (default 1)")
    args = parser.parse_args(argv)
    root = os.path.abspath(args.data_root)
    suites = {
        "humaneval": lambda: humaneval_cases(root),
        "humaneval_plus": lambda: evalplus_cases("humaneval", os.path.join(root, "humanevalplus",
                                                                           "HumanEvalPlus.jsonl.gz")),
        "mbpp_plus": lambda: evalplus_cases("mbpp", os.path.join(root, "mbppplus", "MbppPlus.jsonl.gz")),
        "livecodebench_public": lambda: lcb_cases(root),
        "livecodebench_negative_control": lambda: lcb_cases(root, wrong=True),
    }
    report: dict = {}
    all_records: list[dict] = []
    start = time.monotonic()
    for name, load in suites.items():
        cases = load()
        cases = cases[:args.limit] if args.limit else cases
        report[name], records = run_benchmark(name, cases, args.workers, expect_fail=name.endswith("control"))
        all_records += records
    report.update(overhead(all_records))
    report["isolation"] = all_records[0]["isolation"] if all_records else {}
    report["seconds"] = round(time.monotonic() - start, 1)
    line = json.dumps(report)
    os.makedirs(os.path.dirname(os.path.abspath(args.output)), exist_ok=True)
    with open(args.output, "w", encoding="utf-8") as fh:
        fh.write(line + "\n")
    print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
