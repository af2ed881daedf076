"""Code benchmarks: HumanEval(+), MBPP (sanitized and full), MBPP+, KodCode, LiveCodeBench.

How each one is verified by :mod:`selfevo.verifiers.code`:

* HumanEval: ``tests`` = the dataset's ``test`` code + ``check(entry_point)``; ``meta["prompt"]`` (the signature
  and docstring) is prepended to the candidate, so a body-only completion works too.
* HumanEval+ / MBPP+: no ``tests``; ``meta["evalplus"] = {"dataset", "path"}`` points the verifier at the local
  EvalPlus file, from which it takes the base and plus inputs, ``atol`` and EvalPlus's expected outputs (computed
  by EvalPlus from the canonical solutions on first use and cached under ``~/.cache/evalplus``). Nothing is run at
  load time.
* MBPP: ``tests`` = ``test_imports`` (or ``test_setup_code``) + the ``test_list`` asserts.
* KodCode: ``tests`` = the pytest ``test_code``, which does ``from solution import ...``; the code verifier runs the
  candidate as a module named ``solution`` (``meta["module_name"]`` records that). With ``tests_in_question=True``
  (what the CoMAS training mix uses) the question also shows the tests, as the released CoMAS coding items do:
  ``Your code should pass the following unit tests:`` and a ```python block with the test functions (the
  ``solution`` import dropped) followed by explicit calls of each test. The verifier still runs ``tests``.
* LiveCodeBench: public tests as ``meta["io"]`` (stdin) or ``meta["calls"]`` (functional, ``Solution().f``).
"""
from __future__ import annotations

import ast
import builtins
import glob
import gzip
import hashlib
import json
import os
import re
from typing import Any

from selfevo.tasks.base import (HubSource, LoadContext, TaskDataError, TaskSpec, hub_rows, read_json_list, read_jsonl,
                                register_task)
from selfevo.models import cache_root
from selfevo.tasks.prompts import fenced
from selfevo.types import Task
from selfevo.verifiers.code import lcb_task


def _nonempty(task: Task) -> Task:
    if not task.question.strip():
        raise ValueError(f"{task.id}: empty question")
    return task


# ---- HumanEval / HumanEval+ -------------------------------------------------------------------------------------


def humaneval_question(prompt: str) -> str:
    return fenced(prompt, "Complete the following Python function:")


def humaneval_tests(test: str, entry_point: str) -> str:
    return f"{test.rstrip()}\n\n\ncheck({entry_point})\n"


def _humaneval_task(row: dict, index: int, ctx: LoadContext) -> Task:
    entry = row["entry_point"]
    return _nonempty(Task(id=row["task_id"], domain="code", question=humaneval_question(row["prompt"]),
                          tests=humaneval_tests(row["test"], entry), entry_point=entry,
                          meta={"prompt": row["prompt"], "solution": row.get("canonical_solution", "")}))


register_task(TaskSpec(
    name="humaneval", description="HumanEval (164 Python functions); tests = test code + check(entry_point)",
    domain="code", verifier="code", prompt_format="code", splits=("test",), default_split="test",
    to_task=_humaneval_task, read_local=lambda ctx: read_jsonl(ctx.path("humaneval", "HumanEval.jsonl.gz")),
    hub=HubSource("openai/openai_humaneval"), counts={"test": 164}))


def _evalplus_meta(row: dict, dataset: str, path: str) -> dict[str, Any]:
    def count(key: str) -> int:
        value = row.get(key)
        if isinstance(value, str):  # some hub copies store the inputs JSON-encoded
            return len(json.loads(value)) if value.strip() else 0
        return len(value or [])

    return {"evalplus": {"dataset": dataset, "path": path}, "solution": row.get("canonical_solution", ""),
            "atol": float(row.get("atol") or 0), "n_base_inputs": count("base_input"),
            "n_plus_inputs": count("plus_input")}


def _evalplus_path(ctx: LoadContext, row: dict, *local: str) -> str:
    return row.get("_evalplus_path") or os.path.abspath(ctx.path(*local))


def _evalplus_hub_reader(ctx: LoadContext) -> list[dict]:
    """Hub rows; rows in EvalPlus's own format (with ``plus_input``) are also written to a ``.jsonl.gz`` in
    ``evalplus/`` of the cache folder (``$SELFEVO_CACHE``), since the verifier reads EvalPlus data from a file.
    (The hub copies evalplus/humanevalplus and evalplus/mbppplus instead embed the inputs and expected outputs in a
    ``test`` string: see :func:`_evalplus_test_fallback`.)"""
    rows = hub_rows(ctx)
    if not rows or not all("plus_input" in r for r in rows):
        return rows
    payload = "".join(json.dumps(r, default=str) + "\n" for r in rows).encode()
    cache = str(cache_root() / "evalplus")
    os.makedirs(cache, exist_ok=True)
    path = os.path.join(cache, f"{ctx.spec.name}-{hashlib.sha256(payload).hexdigest()[:16]}.jsonl.gz")
    if not os.path.exists(path):
        with gzip.open(path + ".tmp", "wb") as handle:
            handle.write(payload)
        os.replace(path + ".tmp", path)
    for row in rows:
        row["_evalplus_path"] = path
    return rows


def _uses_evalplus_file(row: dict, ctx: LoadContext) -> bool:
    return ctx.source == "local" or "_evalplus_path" in row


def _evalplus_test_fallback(test: str, imports: list[str] | None = None) -> str:
    """A hub ``test`` string (module-level inputs/results loop) as one pytest-style unit the verifier runs."""
    body = "\n".join(list(imports or []) + [test.rstrip()])
    return "def test_evalplus_inputs():\n" + "\n".join(("    " + line) if line.strip() else "" for line in
                                                     body.splitlines()) + "\n"


def _humanevalplus_task(row: dict, index: int, ctx: LoadContext) -> Task:
    entry = row["entry_point"]
    if _uses_evalplus_file(row, ctx):
        name = "HumanEvalPlus-Mini.jsonl.gz" if ctx.options.get("mini") else "HumanEvalPlus.jsonl.gz"
        meta = _evalplus_meta(row, "humaneval", _evalplus_path(ctx, row, "humanevalplus", name))
        tests = ""
    else:  # hub copy: `test` holds def check(candidate) over all base+plus inputs
        meta = {"solution": row.get("canonical_solution", "")}
        tests = humaneval_tests(row["test"], entry)
    meta["prompt"] = row["prompt"]
    # task.id must stay the EvalPlus task id: the verifier looks the inputs up by it.
    return _nonempty(Task(id=row["task_id"], domain="code", question=humaneval_question(row["prompt"]),
                          tests=tests, entry_point=entry, meta=meta))


register_task(TaskSpec(
    name="humanevalplus", description="HumanEval+ (EvalPlus v0.1.10): base + plus inputs checked by the code "
    "verifier through meta['evalplus']; option mini=True reads the reduced Mini suite",
    domain="code", verifier="code", prompt_format="code", splits=("test",), default_split="test",
    to_task=_humanevalplus_task,
    read_local=lambda ctx: read_jsonl(ctx.path("humanevalplus", "HumanEvalPlus-Mini.jsonl.gz" if ctx.options.get(
        "mini") else "HumanEvalPlus.jsonl.gz")),
    hub=HubSource("evalplus/humanevalplus"), read_hub=_evalplus_hub_reader, options={"mini": False},
    counts={"test": 164}))


# ---- MBPP -------------------------------------------------------------------------------------------------------

# The standard MBPP split by task_id (the same ranges select from the sanitized set).
MBPP_RANGES = {"prompt": (1, 10), "test": (11, 510), "validation": (511, 600), "train": (601, 974)}


def mbpp_entry_point(code: str, tests: list[str]) -> str:
    """The function the tests call: the first name defined in ``code`` that the tests use, else the first called."""
    joined = "\n".join(tests)
    for name in re.findall(r"^def\s+(\w+)\s*\(", code, re.M):
        if re.search(rf"\b{re.escape(name)}\s*\(", joined):
            return name
    called = [n for n in re.findall(r"(?<![.\w])(\w+)\s*\(", joined) if not hasattr(builtins, n) and n != "math"]
    return called[0] if called else ""


def mbpp_question(text: str, tests: list[str]) -> str:
    return f"{text.strip()}\n\nYour code should pass these tests:\n\n" + fenced("\n".join(tests))


def _in_split(task_id: int, split: str) -> bool:
    if split == "all":
        return True
    low, high = MBPP_RANGES[split]
    return low <= task_id <= high


def _mbpp_task(row: dict, index: int, ctx: LoadContext) -> Task | None:
    task_id = int(row["task_id"])
    if not _in_split(task_id, ctx.split):
        return None
    tests = list(row["test_list"])
    imports = list(row.get("test_imports") or [])
    code = row.get("code", "")
    return _nonempty(Task(id=f"mbpp/{task_id}", domain="code", question=mbpp_question(row["prompt"], tests),
                          tests="\n".join(imports + tests) + "\n", entry_point=mbpp_entry_point(code, tests),
                          meta={"solution": code, "test_imports": imports, "task_id": task_id}))


_MBPP_SPLITS = ("test", "train", "validation", "prompt", "all")
_MBPP_HUB_SPLITS = {"all": ("train", "test", "validation", "prompt")}

register_task(TaskSpec(
    name="mbpp", description="MBPP sanitized (427 hand-verified tasks; splits by task_id: test 11-510, validation "
    "511-600, train 601-974, prompt 1-10, all); tests = test_imports + test_list asserts",
    domain="code", verifier="code", prompt_format="code", splits=_MBPP_SPLITS, default_split="test",
    to_task=_mbpp_task, read_local=lambda ctx: read_json_list(ctx.path("mbpp", "sanitized-mbpp.json")),
    hub=HubSource("google-research-datasets/mbpp", "sanitized", splits=_MBPP_HUB_SPLITS),
    counts={"all": 427, "test": 257, "train": 120, "validation": 43, "prompt": 7}))


def _mbpp_full_task(row: dict, index: int, ctx: LoadContext) -> Task | None:
    task_id = int(row["task_id"])
    if not _in_split(task_id, ctx.split):
        return None
    tests = list(row["test_list"])
    setup = (row.get("test_setup_code") or "").replace("\r\n", "\n").strip()
    code = row.get("code", "").replace("\r\n", "\n")
    return _nonempty(Task(id=f"mbpp_full/{task_id}", domain="code", question=mbpp_question(row["text"], tests),
                          tests=(setup + "\n" if setup else "") + "\n".join(tests) + "\n",
                          entry_point=mbpp_entry_point(code, tests),
                          meta={"solution": code, "task_id": task_id, "test_setup_code": setup,
                                "challenge_test_list": list(row.get("challenge_test_list") or [])}))


register_task(TaskSpec(
    name="mbpp_full", description="MBPP original 974 tasks (splits by task_id as for mbpp); tests = "
    "test_setup_code + test_list", domain="code", verifier="code", prompt_format="code", splits=_MBPP_SPLITS,
    default_split="test", to_task=_mbpp_full_task, read_local=lambda ctx: read_jsonl(ctx.path("mbpp", "mbpp.jsonl")),
    hub=HubSource("google-research-datasets/mbpp", "full", splits=_MBPP_HUB_SPLITS),
    counts={"all": 974, "test": 500, "train": 374, "validation": 90, "prompt": 10}))


def mbppplus_question(prompt: str) -> str:
    """MBPP+'s docstring prompt (description + one assert) as a question."""
    text = prompt.strip().strip('"').strip()
    lines = text.splitlines()
    asserts = [line for line in lines if line.strip().startswith("assert")]
    description = "\n".join(line for line in lines if not line.strip().startswith("assert")).strip()
    return mbpp_question(description, asserts) if asserts else description


def _mbppplus_task(row: dict, index: int, ctx: LoadContext) -> Task:
    if _uses_evalplus_file(row, ctx):
        meta = _evalplus_meta(row, "mbpp", _evalplus_path(ctx, row, "mbppplus", "MbppPlus.jsonl.gz"))
        meta["base_tests"] = row.get("assertion", "")
        return _nonempty(Task(id=row["task_id"], domain="code", question=mbppplus_question(row["prompt"]),
                              entry_point=row["entry_point"], meta=meta))
    # hub copy: sanitized-MBPP fields plus a `test` string looping over all base+plus inputs
    base = list(row.get("test_list") or [])
    code = row.get("code", "")
    task_id = str(row["task_id"])
    task_id = task_id if task_id.startswith("Mbpp/") else f"Mbpp/{task_id}"
    return _nonempty(Task(id=task_id, domain="code", question=mbpp_question(row["prompt"], base[:1]),
                          tests=_evalplus_test_fallback(row["test"], row.get("test_imports")),
                          entry_point=row.get("entry_point") or mbpp_entry_point(code, base),
                          meta={"solution": code, "base_tests": "\n".join(base)}))


register_task(TaskSpec(
    name="mbppplus", description="MBPP+ (EvalPlus v0.2.0, 378 tasks): base + plus inputs checked by the code "
    "verifier through meta['evalplus']", domain="code", verifier="code", prompt_format="code", splits=("test",),
    default_split="test", to_task=_mbppplus_task,
    read_local=lambda ctx: read_jsonl(ctx.path("mbppplus", "MbppPlus.jsonl.gz")),
    hub=HubSource("evalplus/mbppplus"), read_hub=_evalplus_hub_reader, counts={"test": 378}))


# ---- KodCode ----------------------------------------------------------------------------------------------------


def _is_python(text: str) -> bool:
    try:
        ast.parse(text)
    except (SyntaxError, ValueError):
        return False
    return True


def kodcode_question(instruction: str) -> str:
    """KodCode's instruction; a bare code stub (signature + docstring) is fenced with a lead-in."""
    text = instruction.strip()
    return fenced(text, "Complete the following Python code:") if _is_python(text) else text


KODCODE_TESTS_LEAD = "Your code should pass the following unit tests:"  # the released CoMAS coding prompts


def _imports_solution(node: ast.stmt) -> bool:
    if isinstance(node, ast.ImportFrom):
        return node.module == "solution" and not node.level
    return isinstance(node, ast.Import) and any(alias.name == "solution" for alias in node.names)


def kodcode_shown_tests(test_code: str) -> str:
    """KodCode's pytest code as the released CoMAS data shows it in a prompt: the module-level
    ``from solution import ...`` dropped (the solver's code defines those names) and each module-level ``test*``
    function that needs no argument called explicitly at the end (``def test_a(): ...`` ... ``test_a()``)."""
    try:
        module = ast.parse(test_code)
    except (SyntaxError, ValueError):
        lines = [line for line in test_code.splitlines()
                 if not re.match(r"(?:from\s+solution\s+import\s+[^(]*|import\s+solution)\s*$", line)]
        calls = re.findall(r"^def\s+(test\w*)\s*\(\s*\)\s*(?:->[^:]*)?:", test_code, re.M)
    else:
        drop = set()
        for node in module.body:
            if _imports_solution(node):
                drop.update(range(node.lineno - 1, (node.end_lineno or node.lineno)))
        lines = [line for i, line in enumerate(test_code.splitlines()) if i not in drop]
        calls = [node.name for node in module.body
                 if isinstance(node, ast.FunctionDef) and node.name.startswith("test")
                 and len(node.args.posonlyargs) + len(node.args.args) == len(node.args.defaults)
                 and all(d is not None for d in node.args.kw_defaults)]
    body = "\n".join(lines).strip("\n").rstrip()
    return body + ("\n\n" + "\n".join(f"{name}()" for name in calls) if calls else "")


def kodcode_question_with_tests(instruction: str, test_code: str) -> str:
    """:func:`kodcode_question` followed by the tests the way the released CoMAS coding items show them."""
    return f"{kodcode_question(instruction)}\n\n" + fenced(kodcode_shown_tests(test_code), KODCODE_TESTS_LEAD)


def _kodcode_local(ctx: LoadContext) -> list[dict]:
    folder = ctx.path("kodcode")
    files = sorted(glob.glob(os.path.join(folder, "*.json")))
    if not files:
        raise TaskDataError(f"kodcode: no *.json files in {folder}")
    rows = []
    for path in files:
        for row in read_json_list(path):
            rows.append({**row, "_file": os.path.basename(path)})
    return rows


def _difficulties(option: Any) -> set[str] | None:
    if option is None:
        return None
    return {str(option).lower()} if isinstance(option, str) else {str(d).lower() for d in option}


def _kodcode_task(row: dict, index: int, ctx: LoadContext) -> Task | None:
    metadata = row.get("metadata") if isinstance(row.get("metadata"), dict) else {}
    difficulty = row.get("gpt_difficulty") or metadata.get("gpt_difficulty")
    wanted = _difficulties(ctx.options.get("difficulties"))
    if wanted is not None and difficulty is not None and str(difficulty).lower() not in wanted:
        return None
    instruction = row.get("question") or row["instruction"]
    tests = row.get("test") or row["test_code"]
    native = row.get("question_id") or f"{metadata.get('mode', 'x')}/{metadata.get('prompt_id', index)}"
    shown = bool(ctx.options.get("tests_in_question"))
    question = kodcode_question_with_tests(instruction, tests) if shown else kodcode_question(instruction)
    return _nonempty(Task(id=f"kodcode/{native}", domain="code", question=question,
                          tests=tests, meta={"tests_in_question": shown,
                              "module_name": "solution",  # test code does `from solution import ...`
                              "solution": row.get("solution") or row.get("response") or "",
                              "difficulty": difficulty, "subset": row.get("subset") or metadata.get("mode"),
                              "style": row.get("style"), "file": row.get("_file")}))


register_task(TaskSpec(
    name="kodcode", description="KodCode verified coding questions with pytest tests (`from solution import ...`); "
    "local = the 3 demo files (109 items, no difficulty field); hub = KodCode/KodCode-V1; option "
    "difficulties=('medium', 'hard') filters where gpt_difficulty exists; tests_in_question=True also shows the "
    "tests in the question as the released CoMAS data does (the CoMAS mix sets it)",
    domain="code", verifier="code", prompt_format="code", splits=("train",), default_split="train",
    to_task=_kodcode_task, read_local=_kodcode_local, hub=HubSource("KodCode/KodCode-V1"),
    options={"difficulties": None, "tests_in_question": False}, counts={"train": 109}))


# ---- LiveCodeBench ----------------------------------------------------------------------------------------------


def lcb_question(problem: str, starter_code: str) -> str:
    if starter_code.strip():
        return f"{problem.rstrip()}\n\n" + fenced(starter_code, "Use the following starter code:")
    return f"{problem.rstrip()}\n\nRead the input from standard input and write the answer to standard output."


def _lcb_task(row: dict, index: int, ctx: LoadContext) -> Task:
    tests = row["tests"]
    if isinstance(tests, str):  # hub copies store them JSON-encoded
        tests = json.loads(tests)
    item = {"problem": row.get("problem") or row["question_content"], "starter_code": row.get("starter_code") or "",
            "tests": [t for t in tests if t.get("testtype") in ("stdin", "functional")]}
    if not item["tests"]:
        raise ValueError("no stdin or functional tests")
    task = lcb_task(item, f"livecodebench/{index}")
    task.question = lcb_question(item["problem"], item["starter_code"])
    task.meta["testtype"] = "functional" if task.meta.get("calls") else "stdin"
    return _nonempty(task)


register_task(TaskSpec(
    name="livecodebench", description="LiveCodeBench 2024-08..2025-01 (rLLM/DeepCoder test split), PUBLIC tests "
    "only: stdin problems as meta['io'], functional (LeetCode-style, starter_code) as meta['calls']",
    domain="code", verifier="code", prompt_format="code", splits=("test",), default_split="test",
    to_task=_lcb_task,
    read_local=lambda ctx: read_json_list(ctx.path("livecodebench", "lcb_2408_2501_public_tests.json")),
    hub=HubSource("agentica-org/DeepCoder-Preview-Dataset", "lcbv5"), counts={"test": 279}))
