"""Knowledge and science benchmarks: MMLU, GPQA-diamond (user-supplied CSV), SciBench, SciBench worked solutions,
WebInstruct-verified (hub only)."""
from __future__ import annotations

import csv
import math
import os
import random
import re
from typing import Any

from selfevo.tasks.base import (HubSource, LoadContext, MissingDataError, TaskDataError, TaskSpec, read_json_list,
                                read_jsonl, register_task)
from selfevo.tasks.prompts import LETTERS, lettered_options
from selfevo.types import Task
from selfevo.verifiers.numeric import clean_latex, parse_number


def mcq_task(task_id: str, question: str, choices: list[str], answer_index: int, **meta: Any) -> Task:
    if not str(question).strip() or not choices or not 0 <= answer_index < len(choices):
        raise ValueError(f"{task_id}: empty question/choices or answer index {answer_index} out of range")
    return Task(id=task_id, domain="mcq", question=f"{str(question).strip()}\n\n{lettered_options(choices)}",
                reference=LETTERS[answer_index],
                meta={"choices": [str(c) for c in choices], "answer_index": answer_index,
                      "n_choices": len(choices), **meta})


# ---- MMLU -------------------------------------------------------------------------------------------------------


def _mmlu_task(row: dict, index: int, ctx: LoadContext) -> Task | None:
    subjects = ctx.options.get("subjects")
    if subjects is not None:
        subjects = {subjects} if isinstance(subjects, str) else set(subjects)
        if row["subject"] not in subjects:
            return None
    return mcq_task(f"mmlu/{ctx.split}/{index}", row["question"], list(row["choices"]), int(row["answer"]),
                    subject=row["subject"])


register_task(TaskSpec(
    name="mmlu", description="MMLU, 57 subjects, 4 options (answer index -> letter A-D); option subjects=[...]",
    domain="mcq", verifier="mcq", prompt_format="mcq", splits=("test", "dev"), default_split="test",
    to_task=_mmlu_task, read_local=lambda ctx: read_jsonl(ctx.path("mmlu", f"{ctx.split}.jsonl")),
    hub=HubSource("cais/mmlu", "all"), options={"subjects": None}, counts={"test": 14042, "dev": 285}))


# ---- GPQA diamond -----------------------------------------------------------------------------------------------

GPQA_COLUMNS = ("Question", "Correct Answer", "Incorrect Answer 1", "Incorrect Answer 2", "Incorrect Answer 3")


def _gpqa_local(ctx: LoadContext) -> list[dict]:
    path = ctx.options.get("path")
    if path is None:
        path = ctx.find("gpqa", "gpqa_diamond.csv")
        if path is None:
            where = os.path.join(ctx.places[0].path, "gpqa", "gpqa_diamond.csv")
            raise MissingDataError(f"gpqa_diamond is not shipped (its authors ask that it stay off the open web): "
                                   f"pass path= to the official gpqa_diamond.csv (or put it at {where})")
    if not os.path.exists(path):
        raise TaskDataError(f"gpqa_diamond: CSV file not found: {path}")
    try:
        with open(path, newline="", encoding="utf-8-sig") as handle:
            reader = csv.DictReader(handle)
            missing = [c for c in GPQA_COLUMNS if c not in (reader.fieldnames or [])]
            if missing:
                raise TaskDataError(f"gpqa_diamond: {path} lacks column(s) {', '.join(missing)}; expected the "
                                    f"official columns {', '.join(GPQA_COLUMNS)}")
            return list(reader)
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise TaskDataError(f"gpqa_diamond: cannot read {path}: {type(exc).__name__}: {exc}") from None


def gpqa_shuffle(options: list[str], seed: int, key: str) -> tuple[list[str], int]:
    """Options in a fixed pseudo-random order per item; returns (shuffled, index of the first = correct one)."""
    order = list(range(len(options)))
    random.Random(f"gpqa:{seed}:{key}").shuffle(order)
    return [options[i] for i in order], order.index(0)


def _gpqa_task(row: dict, index: int, ctx: LoadContext) -> Task:
    options = [str(row[c]).strip() for c in GPQA_COLUMNS[1:]]
    record = str(row.get("Record ID") or index).strip()
    shuffled, answer = gpqa_shuffle(options, int(ctx.options.get("seed", 0)), record)
    return mcq_task(f"gpqa_diamond/{record}", row["Question"], shuffled, answer, record_id=record,
                    high_level_domain=row.get("High-level domain", ""), subdomain=row.get("Subdomain", ""))


register_task(TaskSpec(
    name="gpqa_diamond", description="GPQA diamond (198 items) from the official CSV given as path=; options "
    "shuffled per item with a fixed seed (option seed=0)", domain="mcq", verifier="mcq", prompt_format="mcq",
    splits=("test",), default_split="test", to_task=_gpqa_task, read_local=_gpqa_local,
    hub=HubSource("Idavidrein/gpqa", "gpqa_diamond", splits={"test": "train"}),
    options={"path": None, "seed": 0}, counts={"test": 198}))


# ---- SciBench ---------------------------------------------------------------------------------------------------

SCIBENCH_TEXTBOOKS = ("atkins", "calculus", "chemmc", "class", "diff", "fund", "matter", "quan", "stat", "thermo")


def _scibench_reader(solutions: bool):
    def read(ctx: LoadContext) -> list[dict]:
        books = [ctx.split] if ctx.split in SCIBENCH_TEXTBOOKS else list(SCIBENCH_TEXTBOOKS)
        suffix = "_sol" if solutions else ""
        rows = []
        for book in books:
            rows.extend(read_json_list(ctx.path("scibench", f"{book}{suffix}.json")))
        return rows

    return read


def _scibench_task(row: dict, index: int, ctx: LoadContext) -> Task | None:
    book = str(row.get("source", "")).strip()
    if ctx.split in SCIBENCH_TEXTBOOKS and book != ctx.split:
        return None  # hub rows of other textbooks
    question, reference = str(row["problem_text"]).strip(), str(row["answer_number"]).strip()
    if not question or not reference:
        raise ValueError("empty problem_text or answer_number")
    problem_id = str(row.get("problemid", index)).strip()
    return Task(id=f"{ctx.spec.name}/{book}/{problem_id}", domain="science", question=question,
                reference=reference, meta={"unit": str(row.get("unit") or "").strip(),
                                           "answer_latex": str(row.get("answer_latex") or "").strip(),
                                           "textbook": book, "problemid": problem_id,
                                           "solution": str(row.get("solution") or "")})


register_task(TaskSpec(
    name="scibench", description="SciBench evaluation problems (10 textbooks; split = 'test' or a textbook); gold "
    "= answer_number in meta['unit'], numeric verifier (5% relative tolerance)", domain="science",
    verifier="numeric", prompt_format="numeric", splits=("test",) + SCIBENCH_TEXTBOOKS, default_split="test",
    to_task=_scibench_task, read_local=_scibench_reader(solutions=False),
    hub=HubSource("xw27/scibench", splits={"test": "train", **{b: "train" for b in SCIBENCH_TEXTBOOKS}}),
    counts={"test": 580, "atkins": 105, "calculus": 42, "chemmc": 38, "class": 56, "diff": 50, "fund": 71,
            "matter": 47, "quan": 33, "stat": 72, "thermo": 66}))

register_task(TaskSpec(
    name="scibench_sol", description="SciBench worked-solution subset (*_sol.json; meta['solution']), the local "
    "stand-in for CoMAS science training data; numeric verifier", domain="science", verifier="numeric",
    prompt_format="numeric", splits=("train",) + SCIBENCH_TEXTBOOKS, default_split="train",
    to_task=_scibench_task, read_local=_scibench_reader(solutions=True),
    hub_note="the worked-solution files exist only in the mandyyyyii/scibench GitHub repo",
    counts={"train": 112, "atkins": 16, "calculus": 10, "chemmc": 9, "class": 7, "diff": 5, "fund": 10,
            "matter": 10, "quan": 8, "stat": 20, "thermo": 17}))


# ---- WebInstruct-verified (hub only) ----------------------------------------------------------------------------
#
# Hub rows (TIGER-Lab/WebInstruct-verified, the General-Reasoner data) carry ``id``, ``question``, ``answer``,
# ``answer_type`` (e.g. "Float", "Integer", "Expression", "Multiple Choice", "Boolean", ...), ``category`` (e.g.
# "Physics", "Chemistry", "Biology", "Mathematics", "Finance", ...) and ``difficulty`` ("Senior High School",
# "University", "PhD", ...). CoMAS (Sec. 4.1) trains on the physics, chemistry and biology items with numeric
# answers; its released science items (research/comas_marti.md Sec. 6) keep a plain number as the answer
# ("11.07") and end the prompt with ``The unit of the answer should be "inch".``, checked within 5% relative
# tolerance. The defaults below rebuild exactly that.

COMAS_SCIENCE_CATEGORIES = ("Physics", "Chemistry", "Biology")
NUMERIC_ANSWER_TYPES = ("Float", "Integer")
UNIT_HINT = 'The unit of the answer should be "{unit}".'  # the released CoMAS science prompts end with this

_LEADING_NUMBER = re.compile(r"[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d*)?(?![\d,])|[-+]?\.\d+")
_EXPONENT = re.compile(r"\s*(?:[eE]\s*[-+]?\d+|(?:\\times|\\cdot|×|\*|x)\s*10\s*\^\s*\{?\s*[-+]?\d+\s*\}?)")
_UNIT_WRAPPER = re.compile(r"\\(?:mathrm|text|textrm|rm|operatorname)\s*\{([^{}]*)\}")
_UNIT_SYMBOLS = ((r"\^\s*\{?\s*\\circ\s*\}?", "°"), (r"\\circ", "°"), (r"\\%", "%"), (r"\\mu\b\s*", "μ"),
                 (r"\\Omega\b", "Ω"), (r"\\AA\b", "Å"))


def _keep(value: Any, option: Any) -> bool:
    """Whether ``value`` passes a filter option (None = keep all; a string or several; case-insensitive)."""
    if option is None:
        return True
    wanted = {option} if isinstance(option, str) else set(option)
    return str(value).strip().casefold() in {str(w).strip().casefold() for w in wanted}


def clean_unit(unit: str) -> str:
    """A unit as plain text: ``$\\mathrm{m/s}$`` -> ``m/s``, ``\\,`` / ``~`` spacing -> spaces."""
    unit = unit.replace("$", "")
    previous = None
    while previous != unit:
        previous, unit = unit, _UNIT_WRAPPER.sub(r"\1", unit)
    unit = re.sub(r"\\[,;!: ]|~", " ", unit)
    for pattern, symbol in _UNIT_SYMBOLS:
        unit = re.sub(pattern, symbol, unit)
    return " ".join(unit.split()).strip().rstrip(".").strip()


def split_numeric_answer(answer: str) -> tuple[str, str] | None:
    """A WebInstruct short answer as (number, unit): ``"11.07 inches"`` -> ``("11.07", "inches")``,
    ``"$1.59 \\times 10^{-3}$ V"`` -> ``("0.00159", "V")``, ``"42"`` -> ``("42", "")``; None when the answer
    is not one number optionally followed by a unit (an expression, several values, a word, ...)."""
    text = clean_latex(str(answer)).strip()
    if text.startswith("=") or text.startswith("\\approx"):
        text = text.lstrip("=").replace("\\approx", "", 1).strip()
    number = _LEADING_NUMBER.match(text)
    if number is None or not number.group(0):
        return None
    end = number.end()
    exponent = _EXPONENT.match(text, end)
    if exponent:
        end = exponent.end()
    span = text[:end]
    value = parse_number(span)
    if value is None or not math.isfinite(value):
        return None
    unit = clean_unit(text[end:])
    # a unit is words/symbols with at most exponent digits (kg/m^3, s^-1, cm2): a further free-standing number,
    # an operator or an equals sign means the answer is not a single quantity
    if (len(unit) > 40 or re.search(r"(?:^|[\s,;(=])[-+]?\.?\d", unit) or re.match(r"[/*^+\-=]", unit)
            or re.search(r"[=<>]|\b(?:and|or)\b", unit)):
        return None
    if exponent:
        reference = repr(value)
    else:
        reference = span.replace(",", "").lstrip("+")
        reference = reference[:-1] if reference.endswith(".") else reference
    return reference, unit


def _webinstruct_task(row: dict, index: int, ctx: LoadContext) -> Task | None:
    opts = ctx.options
    if not (_keep(row.get("difficulty"), opts.get("difficulties"))
            and _keep(row.get("category"), opts.get("categories"))
            and _keep(row.get("answer_type"), opts.get("answer_types"))):
        return None
    question, answer = str(row["question"]).strip(), str(row["answer"]).strip()
    if not question or not answer:
        return None
    meta: dict[str, Any] = {"answer_type": row.get("answer_type"), "category": row.get("category"),
                            "difficulty": row.get("difficulty")}
    task_id = f"webinstruct/{row.get('id', index)}"
    if not opts.get("numeric", True):  # the short answer as is, math-verify equivalence
        return Task(id=task_id, domain="science", question=question, reference=answer,
                    meta={**meta, "verifier": "math", "prompt_format": "math"})
    split = split_numeric_answer(answer)
    if split is None:
        return None  # not a plain number (+ unit): CoMAS keeps numeric answers only
    reference, unit = split
    unit = clean_unit(str(row["unit"])) if row.get("unit") else unit
    hinted = bool(unit) and bool(opts.get("unit_hint", True))
    if hinted:
        question = f"{question}\n\n{UNIT_HINT.format(unit=unit)}"
    return Task(id=task_id, domain="science", question=question, reference=reference,
                meta={**meta, "answer": answer, "unit": unit, "unit_in_question": hinted})


register_task(TaskSpec(
    name="webinstruct", description="TIGER-Lab/WebInstruct-verified (CoMAS science training data; hub only): by "
    "default the Physics/Chemistry/Biology items with Float/Integer answers (options categories/answer_types/"
    "difficulties filter, case-insensitive, None = all), the answer split into number + unit, the unit hint "
    "appended to the question as in the released CoMAS data (unit_hint=True) and checked by the numeric verifier "
    "(5% relative tolerance); numeric=False keeps the raw short answer with the math verifier",
    domain="science", verifier="numeric", prompt_format="numeric", splits=("train", "test"), default_split="train",
    to_task=_webinstruct_task, hub=HubSource("TIGER-Lab/WebInstruct-verified"),
    options={"difficulties": None, "categories": COMAS_SCIENCE_CATEGORIES, "answer_types": NUMERIC_ANSWER_TYPES,
             "numeric": True, "unit_hint": True},
    local_note="WebInstruct-verified is only on the Hugging Face hub; scibench_sol is the local stand-in"))
