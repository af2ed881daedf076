"""Math benchmarks: GSM8K, MATH (with a level filter), MATH-500, AIME 2024/2025, AMC 2023, OlympiadBench."""
from __future__ import annotations

import ast
import re
from typing import Any

from selfevo.tasks.base import HubSource, LoadContext, SkipItem, TaskDataError, TaskSpec, read_jsonl, register_task
from selfevo.types import Task
from selfevo.verifiers.math import last_boxed


def _first(row: dict, *keys: str, default: Any = None) -> Any:
    """The value of the first of ``keys`` present (and not None) in ``row`` (hub copies name fields differently)."""
    for key in keys:
        if row.get(key) is not None:
            return row[key]
    if default is not None:
        return default
    raise KeyError(f"none of the fields {', '.join(keys)} in the record (it has: {', '.join(sorted(row))})")


def math_task(task_id: str, question: str, reference: str, **meta: Any) -> Task:
    question, reference = str(question).strip(), str(reference).strip()
    if not question or not reference:
        raise ValueError(f"{task_id}: empty question or reference")
    return Task(id=task_id, domain="math", question=question, reference=reference, meta=meta)


def _jsonl_reader(*parts: str):
    return lambda ctx: read_jsonl(ctx.path(*parts))


# ---- GSM8K ------------------------------------------------------------------------------------------------------


def gsm8k_reference(answer: str) -> str:
    """The gold number of a GSM8K solution: the text after the last ``####``, commas removed."""
    if "####" not in answer:
        raise ValueError("GSM8K answer has no '####'")
    return answer.split("####")[-1].strip().replace(",", "")


def _gsm8k_task(row: dict, index: int, ctx: LoadContext) -> Task:
    return math_task(f"gsm8k/{ctx.split}/{index}", row["question"], gsm8k_reference(row["answer"]),
                     solution=row["answer"])


register_task(TaskSpec(
    name="gsm8k", description="GSM8K grade-school math word problems (gold = number after ####)",
    domain="math", verifier="math", prompt_format="math", splits=("train", "test"), default_split="test",
    to_task=_gsm8k_task, read_local=lambda ctx: read_jsonl(ctx.path("gsm8k", f"{ctx.split}.jsonl")),
    hub=HubSource("openai/gsm8k", "main"), counts={"train": 7473, "test": 1319}))


# ---- MATH -------------------------------------------------------------------------------------------------------


def math_solution_answer(solution: str) -> str:
    """The last ``\\boxed{...}`` of a MATH solution (also ``\\boxed 5`` without braces)."""
    boxed = last_boxed(solution)
    if boxed is None:
        bare = re.findall(r"\\boxed\s+([^\s$]+)", solution)
        boxed = bare[-1] if bare else None
    if not boxed:
        raise SkipItem("no (or an empty) \\boxed{} answer in the solution")
    return boxed


def math_level(level: Any) -> int | None:
    """``"Level 5"`` / ``5`` -> 5; ``"Level ?"`` -> None."""
    match = re.search(r"\d+", str(level))
    return int(match.group()) if match else None


def _levels(option: Any) -> set[int] | None:
    if option is None:
        return None
    if isinstance(option, (int, str)):
        option = [option]
    try:
        return {int(level) for level in option}
    except (TypeError, ValueError):
        raise TaskDataError(f"levels must be integers 1-5 (e.g. levels=[4, 5]), got {option!r}") from None


def _math_task(row: dict, index: int, ctx: LoadContext) -> Task | None:
    level = math_level(row.get("level"))
    wanted = _levels(ctx.options.get("levels"))
    if wanted is not None and level not in wanted:
        return None
    uid = row.get("unique_id") or f"{ctx.split}/{index}"
    return math_task(f"math/{uid}", row["problem"], math_solution_answer(row["solution"]), level=level,
                     type=row.get("type", ""), solution=row["solution"])


register_task(TaskSpec(
    name="math", description="MATH competition problems (Hendrycks); gold = last \\boxed{} of the solution; "
    "option levels=[4, 5] keeps those levels",
    domain="math", verifier="math", prompt_format="math", splits=("train", "test"), default_split="test",
    to_task=_math_task,
    read_local=lambda ctx: read_jsonl(ctx.path("math", "train.jsonl" if ctx.split == "train" else "test_full.jsonl")),
    hub=HubSource("DigitalLearningGmbH/MATH-lighteval", "default"), options={"levels": None},
    counts={"train": 7498, "test": 5000}))  # train: 7500 in the file, 2 have an empty \boxed{}


def _math500_task(row: dict, index: int, ctx: LoadContext) -> Task:
    return math_task(f"math500/{row.get('unique_id') or index}", row["problem"], row["answer"],
                     level=math_level(row.get("level")), type=row.get("subject", ""), solution=row.get("solution", ""))


register_task(TaskSpec(
    name="math500", description="MATH-500 (the PRM800K test subset of MATH); gold = answer field",
    domain="math", verifier="math", prompt_format="math", splits=("test",), default_split="test",
    to_task=_math500_task, read_local=_jsonl_reader("math500", "test.jsonl"),
    hub=HubSource("HuggingFaceH4/MATH-500"), counts={"test": 500}))


# ---- competitions -----------------------------------------------------------------------------------------------


def integral_text(answer: Any) -> str:
    """``'27.0'`` -> ``'27'`` (AMC answers are floats written as strings); anything else unchanged."""
    text = str(answer).strip()
    if re.fullmatch(r"-?\d+\.0+", text):
        return text.split(".")[0]
    return text


def _competition(name: str, description: str, folder: str, hub: HubSource, count: int) -> None:
    def to_task(row: dict, index: int, ctx: LoadContext) -> Task:
        native = row.get("id", row.get("ID", index))
        answer = _first(row, "answer", "Answer")
        return math_task(f"{name}/{native}", _first(row, "problem", "question", "Problem"),
                         integral_text(answer), raw_answer=str(answer),
                         solution=str(row.get("solution") or row.get("Solution") or ""), url=row.get("url") or "")

    register_task(TaskSpec(
        name=name, description=description, domain="math", verifier="math", prompt_format="math",
        splits=("test",), default_split="test", to_task=to_task, read_local=_jsonl_reader(folder, "test.jsonl"),
        hub=hub, counts={"test": count}))


_competition("aime2024", "AIME 2024 (I and II), integer answers", "aime2024",
             HubSource("HuggingFaceH4/aime_2024", splits={"test": "train"}), 30)
_competition("aime2025", "AIME 2025 (I-1..I-15, II-1..II-15), integer answers", "aime2025",
             HubSource("math-ai/aime25"), 30)
_competition("amc2023", "AMC 2023 (40 problems); float-string answers like '27.0' become '27'", "amc2023",
             HubSource("math-ai/amc23"), 40)


# ---- OlympiadBench ----------------------------------------------------------------------------------------------


def olympiad_answers(final_answer: Any) -> list[str]:
    """``final_answer`` as a list of strings (it may be a list or a stringified Python list)."""
    if isinstance(final_answer, str):
        text = final_answer.strip()
        final_answer = ast.literal_eval(text) if text.startswith("[") else [text]
    return [str(a) for a in final_answer]


def olympiad_reference(answers: list[str]) -> str:
    """One reference string: each answer without ``$`` delimiters, joined by ``", "``."""
    return ", ".join(a.replace("$", "").strip() for a in answers)


def _none_text(value: Any) -> str:
    return "" if value is None or str(value).strip() in ("", "None") else str(value).strip()


def _olympiad_task(row: dict, index: int, ctx: LoadContext) -> Task:
    answers = olympiad_answers(row["final_answer"])
    context = _none_text(row.get("context"))
    question = f"{context}\n\n{row['question']}" if context else row["question"]
    multiple = row.get("is_multiple_answer")
    return math_task(f"olympiadbench/{row.get('id', index)}", question, olympiad_reference(answers),
                     final_answer=answers, is_multiple_answer=str(multiple).strip().lower() == "true",
                     unit=_none_text(row.get("unit")), answer_type=_none_text(row.get("answer_type")),
                     error=_none_text(row.get("error")), subfield=_none_text(row.get("subfield")),
                     solution=row.get("solution") or "")


register_task(TaskSpec(
    name="olympiadbench", description="OlympiadBench OE_TO_maths_en_COMP (text-only English open-ended math); "
    "gold = final_answer list joined by ', '",
    domain="math", verifier="math", prompt_format="math", splits=("test",), default_split="test",
    to_task=_olympiad_task, read_local=_jsonl_reader("olympiadbench", "test.jsonl"),
    hub=HubSource("Hothan/OlympiadBench", "OE_TO_maths_en_COMP", splits={"test": "train"}), counts={"test": 675}))
