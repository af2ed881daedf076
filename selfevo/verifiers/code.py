"""Code verifier: extract the program from a response and score it by the fraction of unit tests it passes.

The program is the last fenced code block (```` ```python ```` preferred, then an untagged fence, then any), the
rest of an unterminated final fence, or the raw response. Tests come from the task, in any combination:

* ``task.tests``: Python test code. Each top-level statement containing an ``assert`` is one test, as is a call
  of a test function defined there; ``def test_*`` functions and ``Test*`` classes are pytest-style tests (a
  ``pytest.mark.parametrize`` function counts as one test; fixtures are not supported); HumanEval's
  ``def check(candidate)`` is split into one test per assert of its body, with ``candidate`` bound to
  ``task.entry_point``. Everything else is setup.
* ``task.meta["io"]``: ``[{"input", "output"}]`` stdin/stdout cases (whitespace-tolerant comparison).
* ``task.meta["calls"]``: ``{"target": "Solution().f", "cases": [{"args": [...], "expected": ...}]}``
  (LiveCodeBench functional tests, compared after JSON normalisation).
* ``task.meta["evalplus"]``: ``{"dataset": "humaneval"|"mbpp", "path": ...}``: the HumanEval+/MBPP+ base and
  plus inputs, with expected outputs and time limits from EvalPlus (see :func:`evalplus_steps`).

``task.meta["prompt"]`` (e.g. a HumanEval prompt) and ``task.meta["code_prefix"]`` (e.g. LiveCodeBench imports)
are prepended; if that does not compile, only their import lines are. ``task.meta["limits"]`` overrides
:data:`DEFAULT_LIMITS` field by field. Everything runs in :mod:`selfevo.verifiers.sandbox`, which decides each test
on values the program does not control: comparisons, truth tests and returned values are judged on plain built-in
data, never through special methods the program wrote (an object whose ``__eq__`` says yes to everything fails);
the tests see their own builtins and the prefix's own helpers; changes the program makes to modules, the harness
or the tests' helpers are undone and fail the step. ``docs/sandbox.md`` states what is and is not guaranteed.
"""
from __future__ import annotations

import ast
import contextlib
import json
import os
import re
import sys
import textwrap
import threading
from dataclasses import replace
from typing import Any

from selfevo.types import Task
from selfevo.verifiers.base import Verdict, fail, register_verifier
from selfevo.verifiers.sandbox import (Limits, SandboxResult, call_step, exec_step, io_step, pytest_step,
                                       run_program)

DEFAULT_LIMITS = Limits(wall_s=60.0, cpu_s=60.0, unit_s=5.0, load_s=10.0, memory_mb=4096)  # EvalPlus's 4 GiB
# LeetCode-style helpers a functional LiveCodeBench solution may use without importing; ``builtins`` last so that
# ``math``'s ``pow`` does not shadow the built-in three-argument ``pow``.
LCB_PREFIX = ("from typing import *\nfrom collections import *\nfrom functools import *\nfrom itertools import *\n"
              "from heapq import *\nfrom bisect import *\nfrom math import *\nfrom builtins import *\n"
              "import math, heapq, bisect, itertools, functools, collections, string, re, sys\n")
_PYTHON_TAGS = {"python", "py", "python3", "py3"}
_FENCE_RE = re.compile(r"^[ \t]*```[ \t]*([\w+#.-]*)[^\n]*\n(.*?)^[ \t]*```", re.S | re.M)


# ----------------------------------------------------------------------------------------------------------------
# Extraction and test splitting (pure)
# ----------------------------------------------------------------------------------------------------------------


def extract_code(response: str) -> str:
    """The program in a response: last python fence, else last untagged fence, else last fence, else raw text."""
    blocks = [(tag.lower(), textwrap.dedent(body)) for tag, body in _FENCE_RE.findall(response)]
    for wanted in (lambda t: t in _PYTHON_TAGS, lambda t: t == "", lambda t: True):
        chosen = [body for tag, body in blocks if wanted(tag)]
        if chosen:
            return chosen[-1]
    opening = re.search(r"^[ \t]*```[ \t]*[\w+#.-]*[^\n]*\n", response, re.M)
    if opening:  # an unterminated fence (the generation was cut off): take the rest
        return textwrap.dedent(response[opening.end():])
    return response


def split_tests(source: str, entry_point: str = "") -> list[dict]:
    """Turn test code into sandbox steps: setup steps and one unit step per test (see the module docstring)."""
    tree = ast.parse(source)
    defined = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    called = _called_at_top_level(tree)
    steps, pytest_units = [], []
    for node in tree.body:
        if _is_main_guard(node):
            continue
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            steps.append(exec_step(ast.unparse(node), unit=False, label=f"def {node.name}"))
            if node.name == "check" and entry_point and "check" not in called:
                steps.extend(_expand_check(node, entry_point))
            elif node.name.startswith("test") and node.name not in called:
                pytest_units.append(pytest_step(node.name))
        elif isinstance(node, ast.ClassDef):
            steps.append(exec_step(ast.unparse(node), unit=False, label=f"class {node.name}"))
            pytest_units.extend(_test_methods(node))
        else:
            steps.append(exec_step(ast.unparse(node), unit=_is_test_statement(node, defined)))
    return steps + pytest_units


def _called_at_top_level(tree: ast.Module) -> set[str]:
    """Names of functions called by top-level expression statements (``check(f)``, ``test_x()``)."""
    return {n.value.func.id for n in tree.body
            if isinstance(n, ast.Expr) and isinstance(n.value, ast.Call) and isinstance(n.value.func, ast.Name)}


def _is_main_guard(node: ast.stmt) -> bool:
    """``if __name__ == "__main__":`` (never runs in the test namespace, so it is not a test)."""
    return (isinstance(node, ast.If) and isinstance(node.test, ast.Compare)
            and isinstance(node.test.left, ast.Name) and node.test.left.id == "__name__")


def _is_test_statement(node: ast.stmt, defined: set[str]) -> bool:
    """A statement that tests something: it holds a non-trivial assert or calls a test function defined here."""
    if any(isinstance(n, ast.Assert) and not isinstance(n.test, ast.Constant) for n in ast.walk(node)):
        return True
    return (isinstance(node, ast.Expr) and isinstance(node.value, ast.Call)
            and isinstance(node.value.func, ast.Name) and node.value.func.id in defined)


def _expand_check(check: ast.FunctionDef, entry_point: str) -> list[dict]:
    """HumanEval's ``check(candidate)``: one step per statement of its body, asserts as units."""
    whole = [exec_step(f"check({entry_point})", unit=True, label=f"check({entry_point})")]
    if not entry_point.isidentifier() or len(check.args.args) != 1 or _escapes(check):
        return whole
    param = check.args.args[0].arg
    body = [s for s in check.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
    steps = [exec_step(f"{param} = {entry_point}", unit=False, label=f"{param} = {entry_point}")]
    steps += [exec_step(ast.unparse(s), unit=_is_test_statement(s, set())) for s in body]
    return steps if any(s["unit"] for s in steps) else whole


def _escapes(func: ast.FunctionDef) -> bool:
    """Whether the body uses return/yield/global/nonlocal, which cannot run at module level."""
    kinds = (ast.Return, ast.Yield, ast.YieldFrom, ast.Global, ast.Nonlocal)
    return any(isinstance(n, kinds) for stmt in func.body for n in ast.walk(stmt))


def _test_methods(cls: ast.ClassDef) -> list[dict]:
    """pytest steps for the ``test*`` methods of a ``Test*`` class."""
    if not cls.name.startswith("Test"):
        return []
    return [pytest_step(f"{cls.name}.{m.name}") for m in cls.body
            if isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef)) and m.name.startswith("test")]


def io_steps(cases: list[dict], timeout: float | None = None) -> list[dict]:
    """Stdin/stdout steps from ``[{"input", "output"}]``."""
    return [io_step(str(c["input"]), str(c["output"]), label=f"io[{i}]", timeout=timeout)
            for i, c in enumerate(cases)]


def functional_steps(spec: dict, timeout: float | None = None) -> list[dict]:
    """JSON-compared call steps from ``{"target", "cases": [{"args", "expected"}]}``."""
    return [call_step(spec["target"], list(c["args"]), c["expected"], {"kind": "json"}, label=f"call[{i}]",
                      timeout=timeout) for i, c in enumerate(spec["cases"])]


def program_prefix(task: Task) -> str:
    """Code placed before the candidate: ``meta["code_prefix"]`` then ``meta["prompt"]``."""
    parts = [str(task.meta.get("code_prefix", "")), str(task.meta.get("prompt", ""))]
    return "\n".join(p for p in parts if p)


def limits_for(task: Task) -> Limits:
    """:data:`DEFAULT_LIMITS` with the task's ``meta["limits"]`` overrides."""
    overrides = task.meta.get("limits") or {}
    unknown = set(overrides) - set(Limits.__dataclass_fields__)
    if unknown:
        raise ValueError(f"unknown sandbox limit(s) {sorted(unknown)}; known: {sorted(Limits.__dataclass_fields__)}")
    return replace(DEFAULT_LIMITS, **overrides)


def build_steps(task: Task) -> list[dict]:
    """All sandbox steps for a task, from every test source it carries."""
    steps: list[dict] = []
    if task.tests.strip():
        steps += split_tests(task.tests, task.entry_point)
    if task.meta.get("io"):
        steps += io_steps(task.meta["io"])
    if task.meta.get("calls"):
        steps += functional_steps(task.meta["calls"])
    if task.meta.get("evalplus"):
        steps += evalplus_steps(task)
    return steps


# ----------------------------------------------------------------------------------------------------------------
# The verifier
# ----------------------------------------------------------------------------------------------------------------


@register_verifier("code")
def verify_code(task: Task, response: str) -> Verdict:
    """Fraction of the task's tests the response's program passes (0 unless the sandbox harness completed)."""
    program = extract_code(response)
    if not program.strip():
        return fail("no code in the response", program)
    try:
        steps = build_steps(task)
    except SyntaxError as exc:
        return fail(f"the task's test code does not parse: {exc}", program)
    if not any(s["unit"] for s in steps):
        return fail("the task has no tests", program)
    result = run_program(program, steps, limits_for(task), prefix=program_prefix(task),
                         entry_point=task.entry_point)
    return verdict_from(result, program)


def verdict_from(result: SandboxResult, program: str) -> Verdict:
    """Score and one-line reason from a sandbox result."""
    total = result.n_units
    if not result.completed:
        partial = f" ({result.passed} passed before it stopped)" if result.passed else ""
        return fail(f"0/{total} tests: {result.detail}{partial}", program)
    if result.load_error:
        return fail(f"0/{total} tests: {result.load_error}", program)
    reason = f"passed {result.passed}/{total} tests"
    failures = [u for u in result.units if not u.passed]
    if failures:
        first = failures[0]
        reason += f"; first failure {first.label!r}: {first.error}"
    return Verdict(result.score, reason[:600], program)


# ----------------------------------------------------------------------------------------------------------------
# LiveCodeBench
# ----------------------------------------------------------------------------------------------------------------


def lcb_task(item: dict, task_id: str) -> Task:
    """A code task from a LiveCodeBench record (``problem``, ``starter_code``, ``tests``)."""
    tests = item["tests"]
    meta: dict[str, Any] = {"starter_code": item.get("starter_code", "")}
    stdin_cases = [{"input": t["input"], "output": t["output"]} for t in tests if t["testtype"] == "stdin"]
    functional = [t for t in tests if t["testtype"] == "functional"]
    if stdin_cases:
        meta["io"] = stdin_cases
    if functional:
        meta["calls"] = {"target": f"Solution().{lcb_method_name(item['starter_code'])}",
                         "cases": [lcb_functional_case(t) for t in functional]}
        meta["code_prefix"] = LCB_PREFIX
    return Task(id=task_id, domain="code", question=item["problem"], meta=meta)


def lcb_method_name(starter_code: str) -> str:
    """The method a LeetCode-style starter defines (``def name(self, ...)``)."""
    match = re.search(r"def\s+(\w+)\s*\(\s*self", starter_code)
    if not match:
        raise ValueError(f"no 'def name(self, ...)' in starter code {starter_code[:80]!r}")
    return match.group(1)


def lcb_functional_case(test: dict) -> dict:
    """Arguments (one JSON value per input line) and expected JSON output of a functional test."""
    args = [json.loads(line) for line in test["input"].split("\n") if line.strip()]
    return {"args": args, "expected": json.loads(test["output"])}


# ----------------------------------------------------------------------------------------------------------------
# EvalPlus (HumanEval+ / MBPP+)
# ----------------------------------------------------------------------------------------------------------------
#
# Why EvalPlus does not execute candidates here: ``evalplus.eval.untrusted_check`` runs the candidate in a
# ``multiprocessing`` child that only applies ``reliability_guard`` (rlimits and monkey-patched os/shutil/
# subprocess functions in the same interpreter, with the parent's uid, filesystem and network). Its own docs call
# it "not a security sandbox". So we use EvalPlus for what it is authoritative on (the problems read through
# ``HUMANEVAL_OVERRIDE_PATH``/``MBPP_OVERRIDE_PATH``, the expected outputs and reference times from
# ``evalplus.evaluate.get_groundtruth``, cached under ``~/.cache/evalplus``, and its output oracles, mirrored in
# the harness) and run the candidate in our sandbox. Ground truth comes from running the datasets' canonical
# solutions in-process (EvalPlus's ``trusted_exec``); that is trusted dataset code.

EVALPLUS_MIN_TIME_S = 1.0  # EvalPlus DEFAULT_MIN_TIME_LIMIT
EVALPLUS_TIME_FACTOR = 4.0  # EvalPlus DEFAULT_GT_TIME_LIMIT_FACTOR
_EVALPLUS_LOCK = threading.Lock()
_EVALPLUS_CACHE: dict[tuple[str, str], tuple[dict, dict]] = {}


def evalplus_data(dataset: str, path: str) -> tuple[dict, dict]:
    """(problems by task id, ground truth by task id) for ``dataset`` ("humaneval"|"mbpp") read from ``path``."""
    key = (dataset, os.path.abspath(path))
    with _EVALPLUS_LOCK:
        if key not in _EVALPLUS_CACHE:
            _EVALPLUS_CACHE[key] = _load_evalplus(dataset, key[1])
        return _EVALPLUS_CACHE[key]


def _load_evalplus(dataset: str, path: str) -> tuple[dict, dict]:
    """Point EvalPlus at the local file (env var and module attribute) and load problems and ground truth."""
    if not os.path.exists(path):
        raise FileNotFoundError(f"EvalPlus data file not found: {path}")
    var = {"humaneval": "HUMANEVAL_OVERRIDE_PATH", "mbpp": "MBPP_OVERRIDE_PATH"}.get(dataset)
    if var is None:
        raise ValueError(f"unknown EvalPlus dataset {dataset!r}; known: humaneval, mbpp")
    os.environ[var] = path  # read at import time by evalplus.data.*
    import evalplus.data.humaneval as he_module
    import evalplus.data.mbpp as mbpp_module
    from evalplus.eval._special_oracle import MBPP_OUTPUT_NOT_NONE_TASKS
    from evalplus.evaluate import get_groundtruth

    with contextlib.redirect_stdout(sys.stderr):  # get_groundtruth prints progress
        if dataset == "humaneval":
            he_module.HUMANEVAL_OVERRIDE_PATH = path  # in case evalplus was imported before the env var was set
            problems = he_module.get_human_eval_plus()
            truth = get_groundtruth(problems, he_module.get_human_eval_plus_hash(), [])
        else:
            mbpp_module.MBPP_OVERRIDE_PATH = path
            problems = mbpp_module.get_mbpp_plus()
            truth = get_groundtruth(problems, mbpp_module.get_mbpp_plus_hash(), MBPP_OUTPUT_NOT_NONE_TASKS)
    return problems, truth


def evalplus_tasks(dataset: str, path: str) -> list[Task]:
    """One code task per EvalPlus problem; HumanEval+ tasks carry the prompt as ``meta["prompt"]``."""
    problems, _ = evalplus_data(dataset, path)
    tasks = []
    for task_id, problem in problems.items():
        meta: dict[str, Any] = {"evalplus": {"dataset": dataset, "path": path}}
        if dataset == "humaneval":
            meta["prompt"] = problem["prompt"]
        tasks.append(Task(id=task_id, domain="code", question=problem["prompt"], entry_point=problem["entry_point"],
                          meta=meta))
    return tasks


def evalplus_steps(task: Task) -> list[dict]:
    """Call steps for every base and plus input of an EvalPlus task, with EvalPlus's oracle and time limits."""
    spec = task.meta["evalplus"]
    problems, truth = evalplus_data(spec["dataset"], spec["path"])
    if task.id not in problems:
        raise KeyError(f"{task.id} is not an EvalPlus {spec['dataset']} task")
    problem, expected = problems[task.id], truth[task.id]
    steps = []
    for split in ("base", "plus"):
        for i, (args, out, seconds) in enumerate(zip(problem[f"{split}_input"], expected[split],
                                                     expected[f"{split}_time"])):
            compare = evalplus_compare(spec["dataset"], problem["entry_point"], problem["atol"], args)
            limit = max(EVALPLUS_MIN_TIME_S, EVALPLUS_TIME_FACTOR * seconds)
            steps.append(call_step(problem["entry_point"], list(args), out, compare, label=f"{split}[{i}]",
                                   timeout=limit))
    return steps


def evalplus_compare(dataset: str, entry_point: str, atol: float, args) -> dict:
    """The harness's comparison spec reproducing EvalPlus's oracle for one input (special cases included)."""
    from evalplus.eval._special_oracle import (MBPP_OUTPUT_NOT_NONE_TASKS, MBPP_OUTPUT_SET_EQ_TASKS,
                                               _digit_distance_nums, _surface_Area)

    spec: dict[str, Any] = {"kind": "evalplus", "mode": "exact", "atol": atol}
    if dataset == "humaneval" and entry_point == "find_zero":
        spec["mode"] = "poly"
    elif dataset == "mbpp":
        if entry_point == "are_equivalent":  # Mbpp/164
            spec["mode"] = "always"
        elif entry_point == "sum_div":  # Mbpp/295
            spec.update(mode="alt", alt=0)
        elif entry_point == "surface_Area":  # Mbpp/581
            spec.update(mode="alt_close", alt=_surface_Area(*args))
        elif entry_point == "digit_distance_nums":  # Mbpp/558
            spec.update(mode="alt", alt=_digit_distance_nums(*args))
        elif entry_point in MBPP_OUTPUT_SET_EQ_TASKS:
            spec["mode"] = "set"
        elif entry_point in MBPP_OUTPUT_NOT_NONE_TASKS:
            spec["mode"] = "not_none"
    return spec
