"""MASLab's fixed evaluation samples (the items the CoMAS paper reports on): ``maslab/<Name>.json``.

Each item is ``{query, gt, tag, source}``; ``query`` already carries the answer-format instruction, so these use the
``raw`` prompt format. ``gt`` is the answer (math, MMLU letter, SciBench number) or the tests (HumanEval:
``{test, entry_point}``; MBPP: a list of asserts). Where the full benchmark file is found too (in the same order of
places as every local file), the items are matched to it to recover what MASLab dropped: HumanEval's prompt
(``meta["prompt"]``, so the prompt's imports are available to the candidate) and task id, MBPP's task id and
``test_setup_code``, SciBench's unit.
"""
from __future__ import annotations

import glob
import os
from typing import Any, Callable

from selfevo.tasks.base import LoadContext, TaskSpec, read_json_list, read_jsonl, register_task
from selfevo.tasks.code_sets import humaneval_tests, mbpp_entry_point
from selfevo.types import Task

_HUB_NOTE = "MASLab's fixed samples are files in the MASLab/CoMAS repositories, not hub datasets"


def _text(value: Any, what: str) -> str:
    text = str(value).strip()
    if not text:
        raise ValueError(f"empty {what}")
    return text


def _index(ctx: LoadContext, key: str, build: Callable[[LoadContext], dict]) -> dict:
    """A lookup table built from another local file, cached on the context (empty when the file is absent)."""
    if key not in ctx.cache:
        ctx.cache[key] = build(ctx)
    return ctx.cache[key]


def _humaneval_lookup(ctx: LoadContext) -> dict:
    path = ctx.find("humaneval", "HumanEval.jsonl.gz")
    if path is None:
        return {}
    return {(r["entry_point"], r["test"]): r for r in read_jsonl(path)}


def _mbpp_lookup(ctx: LoadContext) -> dict:
    path = ctx.find("mbpp", "mbpp.jsonl")
    if path is None:
        return {}
    table: dict = {}
    for row in read_jsonl(path):  # two MBPP tasks (199, 388) share a test list: keep both, pick by text
        table.setdefault(tuple(row["test_list"]), []).append(row)
    return table


def _scibench_lookup(ctx: LoadContext) -> dict:
    folder = ctx.find("scibench")
    rows = []
    for path in sorted(glob.glob(os.path.join(folder, "*.json"))) if folder else []:
        rows.extend(read_json_list(path))
    return {str(r["problem_text"]).strip(): r for r in rows if str(r.get("problem_text", "")).strip()}


def _math(row: dict, index: int, ctx: LoadContext) -> Task:
    return Task(id=f"{ctx.spec.name}/{index}", domain="math", question=_text(row["query"], "query"),
                reference=_text(row["gt"], "gt"), meta={"maslab_source": row.get("source")})


def _mmlu(row: dict, index: int, ctx: LoadContext) -> Task:
    return Task(id=f"{ctx.spec.name}/{index}", domain="mcq", question=_text(row["query"], "query"),
                reference=_text(row["gt"], "gt").strip("()"), meta={"n_choices": 4, "maslab_source": row.get("source")})


def _scibench(row: dict, index: int, ctx: LoadContext) -> Task:
    query = _text(row["query"], "query")
    meta: dict[str, Any] = {"maslab_source": row.get("source")}
    for text, original in _index(ctx, "scibench", _scibench_lookup).items():
        if text in query:
            meta.update(unit=str(original.get("unit") or "").strip(), textbook=str(original.get("source")).strip(),
                        problemid=str(original.get("problemid", "")).strip())
            break
    return Task(id=f"{ctx.spec.name}/{index}", domain="science", question=query, reference=_text(row["gt"], "gt"),
                meta=meta)


def _humaneval(row: dict, index: int, ctx: LoadContext) -> Task:
    gt = row["gt"]
    entry = _text(gt["entry_point"], "entry_point")
    meta: dict[str, Any] = {"maslab_source": row.get("source")}
    original = _index(ctx, "humaneval", _humaneval_lookup).get((entry, gt["test"]))
    if original is not None:
        meta.update(prompt=original["prompt"], task_id=original["task_id"],
                    solution=original.get("canonical_solution", ""))
    native = original["task_id"] if original is not None else index
    return Task(id=f"{ctx.spec.name}/{native}", domain="code", question=_text(row["query"], "query"),
                tests=humaneval_tests(gt["test"], entry), entry_point=entry, meta=meta)


def _mbpp(row: dict, index: int, ctx: LoadContext) -> Task:
    tests = [str(t) for t in row["gt"]]
    if not tests:
        raise ValueError("empty test list")
    meta: dict[str, Any] = {"maslab_source": row.get("source")}
    query = _text(row["query"], "query")
    candidates = _index(ctx, "mbpp", _mbpp_lookup).get(tuple(tests), [])
    original = next((c for c in candidates if c["text"].strip() in query), candidates[0] if candidates else None)
    setup = ""
    if original is not None:
        setup = (original.get("test_setup_code") or "").replace("\r\n", "\n").strip()
        meta.update(task_id=original["task_id"], solution=original.get("code", "").replace("\r\n", "\n"),
                    test_setup_code=setup)
    native = original["task_id"] if original is not None else index
    return Task(id=f"{ctx.spec.name}/{native}", domain="code", question=query,
                tests=(setup + "\n" if setup else "") + "\n".join(tests) + "\n",
                entry_point=mbpp_entry_point(meta.get("solution", ""), tests), meta=meta)


def _register(name: str, file: str, converter, domain: str, verifier: str, count: int, what: str) -> None:
    register_task(TaskSpec(
        name=name, description=f"MASLab {what} sample used by CoMAS ({count} items; query carries the instruction)",
        domain=domain, verifier=verifier, prompt_format="raw", splits=("test",), default_split="test",
        to_task=converter, read_local=lambda ctx: read_json_list(ctx.path("maslab", file)), hub_note=_HUB_NOTE,
        counts={"test": count}))


_register("maslab_gsm8k", "GSM8K.json", _math, "math", "math", 500, "GSM8K")
_register("maslab_math500", "MATH-500.json", _math, "math", "math", 500, "MATH-500")
_register("maslab_aime2024", "AIME-2024.json", _math, "math", "math", 30, "AIME-2024")
_register("maslab_amc2023", "AMC-2023.json", _math, "math", "math", 40, "AMC-2023")
_register("maslab_humaneval", "HumanEval.json", _humaneval, "code", "code", 164, "HumanEval")
_register("maslab_mbpp", "MBPP.json", _mbpp, "code", "code", 500, "MBPP (full-MBPP test ids 11-510)")
_register("maslab_mmlu", "MMLU.json", _mmlu, "mcq", "mcq", 500, "MMLU")
_register("maslab_scibench", "SciBench.json", _scibench, "science", "numeric", 499, "SciBench")
