"""Benchmark registry: local counts, field mapping, hand-checked references, verifier round trips, errors, hub path."""
from __future__ import annotations

import csv
import json
import os
import re
import sys
import types
from collections import Counter
from functools import lru_cache

import pytest

from helpers.paths import DATA, needs_data
from selfevo.registry import RegistryError
from selfevo.tasks import (PROMPT_FORMATS, TASKS, HubUnavailableError, TaskDataError, comas_training_mix,
                           format_prompt, get_task_spec, load_tasks, mix_counts, task_names)
from selfevo.tasks.science_sets import GPQA_COLUMNS
from selfevo.verifiers import verifier_names, verify

FAST = {"wall_s": 20.0, "cpu_s": 20.0, "unit_s": 3.0, "load_s": 5.0, "memory_mb": 1024}

EXPECTED = {"gsm8k", "math", "math500", "aime2024", "aime2025", "amc2023", "olympiadbench", "humaneval",
            "humanevalplus", "mbpp", "mbpp_full", "mbppplus", "mmlu", "gpqa_diamond", "scibench", "scibench_sol",
            "kodcode", "livecodebench", "webinstruct", "maslab_gsm8k", "maslab_math500", "maslab_aime2024",
            "maslab_amc2023", "maslab_humaneval", "maslab_mbpp", "maslab_mmlu", "maslab_scibench"}
LOCAL_SPLITS = [(name, split) for name in sorted(EXPECTED) for split in get_task_spec(name).counts
                if name != "gpqa_diamond"]


@lru_cache(maxsize=None)
def _load(name: str, split: str | None = None, **options) -> tuple:
    return tuple(load_tasks(name, split, data_root=DATA, **options))


def tasks(name: str, split: str | None = None, **options) -> list:
    return list(_load(name, split, **options))


@pytest.fixture(autouse=True)
def _own_cache(tmp_path_factory, monkeypatch):
    """A data cache of this module's own ($SELFEVO_CACHE): a copy prepared on this machine never answers here."""
    monkeypatch.setenv("SELFEVO_CACHE", str(tmp_path_factory.mktemp("selfevo-cache")))


def one_line(exc: pytest.ExceptionInfo) -> str:
    message = str(exc.value)
    assert "\n" not in message and message
    return message


# ---- registry ---------------------------------------------------------------------------------------------------


def test_registry_entries_are_consistent():
    assert EXPECTED <= set(task_names())
    for name in task_names():
        spec = TASKS.get(name)
        assert spec.verifier in verifier_names(), name
        assert spec.prompt_format in PROMPT_FORMATS, name
        assert spec.default_split in spec.splits and set(spec.counts) <= set(spec.splits), name
        assert spec.read_local is not None or spec.local_note, name
        assert spec.hub is not None or spec.hub_note or spec.read_hub, name
    with pytest.raises(RegistryError, match="did you mean 'gsm8k'"):
        load_tasks("gsm8", data_root=DATA)


# ---- local loading ----------------------------------------------------------------------------------------------


@needs_data
@pytest.mark.parametrize("name,split", LOCAL_SPLITS)
def test_local_counts_and_fields(name, split):
    spec = get_task_spec(name)
    loaded = tasks(name, split)
    assert len(loaded) == spec.counts[split]
    assert len({t.id for t in loaded}) == len(loaded)
    for t in loaded:
        assert t.question.strip() and t.domain
        assert t.meta["verifier"] == spec.verifier and t.meta["benchmark"] == name and t.meta["split"] == split
        if spec.verifier == "code":
            assert t.tests.strip() or t.meta.get("io") or t.meta.get("calls") or t.meta.get("evalplus")
        else:
            assert t.reference.strip()


@needs_data
def test_hand_checked_references():
    gsm = tasks("gsm8k", "test")[0]
    assert gsm.reference == "18" and gsm.question.startswith("Janet")
    assert tasks("gsm8k", "train")[0].reference == "72"
    algebra = tasks("math", "train")[0]
    assert (algebra.id, algebra.reference, algebra.meta["level"], algebra.meta["type"]) == (
        "math/train/algebra/0.json", "0", 5, "Algebra")
    assert tasks("math500")[0].reference == "\\left( 3, \\frac{\\pi}{2} \\right)"
    assert [t.reference for t in tasks("aime2025")[:2]] == ["70", "588"]
    amc = tasks("amc2023")[0]
    assert (amc.reference, amc.meta["raw_answer"]) == ("27", "27.0")
    olympiad = {t.id: t for t in tasks("olympiadbench")}
    assert olympiad["olympiadbench/1606"].reference == "2"
    assert olympiad["olympiadbench/1618"].reference == "(1,8,19), (2,7,13), (4,5,7)"
    assert olympiad["olympiadbench/1618"].meta["is_multiple_answer"] is True
    mmlu = tasks("mmlu", "test")[0]
    assert mmlu.reference == "B" and "(B) 4" in mmlu.question and mmlu.meta["subject"] == "abstract_algebra"
    sci = tasks("scibench", "atkins")[0]
    assert (sci.reference, sci.meta["unit"], sci.domain) == ("50.7", "$\\mathrm{atm}$", "science")
    assert tasks("scibench_sol")[0].meta["solution"]


@pytest.mark.slow  # over 0.7 s on the AVX2 machine: out of the quick subset
@needs_data
def test_code_entries_mapping():
    he = tasks("humaneval")[0]
    assert (he.id, he.entry_point) == ("HumanEval/0", "has_close_elements")
    assert he.tests.rstrip().endswith("check(has_close_elements)") and "def check(candidate)" in he.tests
    assert he.meta["prompt"].startswith("from typing import List") and "```python" in he.question
    plus = tasks("humanevalplus")[0]
    assert plus.id == "HumanEval/0" and not plus.tests
    assert os.path.exists(plus.meta["evalplus"]["path"]) and plus.meta["evalplus"]["dataset"] == "humaneval"
    assert plus.meta["n_plus_inputs"] > 0 and plus.meta["prompt"] == he.meta["prompt"]
    assert tasks("humanevalplus", mini=True)[0].meta["evalplus"]["path"].endswith("HumanEvalPlus-Mini.jsonl.gz")
    mbppplus = tasks("mbppplus")[0]
    assert (mbppplus.id, mbppplus.entry_point, mbppplus.meta["evalplus"]["dataset"]) == ("Mbpp/2", "similar_elements",
                                                                                       "mbpp")
    mbpp = {t.id: t for t in tasks("mbpp", "all")}
    assert mbpp["mbpp/11"].entry_point == "remove_Occ"
    assert 'assert remove_Occ("hello","l") == "heo"' in mbpp["mbpp/11"].tests
    assert mbpp["mbpp/82"].tests.startswith("import math")
    kod = tasks("kodcode")
    assert Counter(t.meta["subset"] for t in kod) == {"prefill": 80, "algorithm": 15, "leetcode": 14}
    assert all(t.meta["module_name"] == "solution" for t in kod)
    assert "from solution import" in kod[0].tests
    lcb = tasks("livecodebench")
    assert Counter(t.meta["testtype"] for t in lcb) == {"stdin": 175, "functional": 104}
    functional = next(t for t in lcb if t.meta.get("calls"))
    assert functional.meta["calls"]["target"].startswith("Solution().") and "class Solution" in functional.question


@needs_data
def test_maslab_items_are_matched_to_the_full_benchmarks():
    he = tasks("maslab_humaneval")
    assert all(t.meta.get("prompt") and t.meta.get("task_id") for t in he)
    mbpp = tasks("maslab_mbpp")
    assert sorted(t.meta["task_id"] for t in mbpp) == list(range(11, 511))
    assert all(t.entry_point for t in mbpp)
    assert sum("textbook" in t.meta for t in tasks("maslab_scibench")) >= 490
    assert tasks("maslab_mmlu")[0].reference == "A"
    assert "\\boxed{}" in format_prompt(tasks("maslab_gsm8k")[0])


@pytest.mark.slow  # over 0.7 s on the AVX2 machine: out of the quick subset
@needs_data
def test_math_level_filter_and_options():
    hard = tasks("math", "train", levels=(4, 5))
    assert set(Counter(t.meta["level"] for t in hard)) == {4, 5} and len(hard) == 3992
    assert {t.meta["level"] for t in tasks("math", "test", levels=5)} == {5}
    with pytest.raises(TaskDataError, match="levels must be integers"):
        load_tasks("math", "test", data_root=DATA, levels=["hard"])
    with pytest.raises(TaskDataError, match="takes no option"):
        load_tasks("gsm8k", data_root=DATA, levels=[5])
    with pytest.raises(TaskDataError, match="no split 'dev'"):
        load_tasks("gsm8k", "dev", data_root=DATA)
    first = load_tasks("gsm8k", "test", data_root=DATA, limit=3)
    assert [t.id for t in first] == [t.id for t in tasks("gsm8k", "test")[:3]]
    assert load_tasks("mmlu", data_root=DATA, limit=0) == []
    assert {t.meta["subject"] for t in tasks("mmlu", "dev", subjects=("anatomy",))} == {"anatomy"}


# ---- prompt formats ---------------------------------------------------------------------------------------------


@needs_data
def test_prompt_formats():
    assert format_prompt(tasks("gsm8k", "test")[0]).endswith("put your final answer within \\boxed{}.")
    mcq = format_prompt(tasks("mmlu", "dev")[0])
    assert "(A) " in mcq and "(D) " in mcq and "(A, B, C or D) within \\boxed{}" in mcq
    sci = format_prompt(tasks("scibench", "atkins")[0])
    assert "decimal number within \\boxed{}" in sci and "$\\mathrm{atm}$" in sci
    code = format_prompt(tasks("humaneval")[0])
    assert "def has_close_elements" in code and code.endswith("in a single ```python code block.")
    raw = tasks("maslab_mmlu")[0]
    assert format_prompt(raw) == raw.question
    assert format_prompt(raw, "math").endswith("\\boxed{}.")


# ---- verifier round trips -----------------------------------------------------------------------------------------


@needs_data
@pytest.mark.parametrize("name,split", [
    ("gsm8k", "test"), ("math", "train"), ("math", "test"), ("math500", "test"), ("aime2024", "test"),
    ("aime2025", "test"), ("amc2023", "test"), ("olympiadbench", "test"), ("mmlu", "test"), ("mmlu", "dev"),
    ("scibench", "test"), ("scibench_sol", "train"), ("maslab_gsm8k", "test"), ("maslab_math500", "test"),
    ("maslab_aime2024", "test"), ("maslab_amc2023", "test"), ("maslab_mmlu", "test"), ("maslab_scibench", "test")])
def test_verifier_accepts_the_reference(name, split):
    loaded = tasks(name, split)
    for task in (loaded[0], loaded[len(loaded) // 2], loaded[-1]):
        verdict = verify(task, f"Reasoning ... so the answer is \\boxed{{{task.reference}}}.")
        assert verdict.score == 1.0, (task.id, task.reference, verdict.reason)


@needs_data
def test_verifier_rejects_a_wrong_answer():
    assert verify(tasks("gsm8k", "test")[0], "\\boxed{19}").score == 0.0
    assert verify(tasks("mmlu", "test")[0], "\\boxed{A}").score == 0.0
    assert verify(tasks("scibench", "atkins")[0], "\\boxed{60.0}").score == 0.0


def _fast(task):
    task.meta["limits"] = FAST
    return task


@pytest.mark.slow  # over 1 s on the AVX2 machine: out of the quick subset
@needs_data
def test_canonical_code_solutions_pass():
    for task in tasks("humaneval")[:3]:  # body-only completions: the verifier prepends meta["prompt"]
        verdict = verify(_fast(task), task.meta["solution"])
        assert verdict.score == 1.0, (task.id, verdict.reason)
    for task in tasks("mbpp", "test")[:3]:
        verdict = verify(_fast(task), f"```python\n{task.meta['solution']}\n```")
        assert verdict.score == 1.0, (task.id, verdict.reason)
    kod = tasks("kodcode")[0]  # pytest test code doing `from solution import ...`
    verdict = verify(_fast(kod), f"```python\n{kod.meta['solution']}\n```")
    assert verdict.score == 1.0, verdict.reason


# ---- errors -----------------------------------------------------------------------------------------------------


def test_bad_data_root_is_a_one_line_error(tmp_path, monkeypatch):
    with pytest.raises(TaskDataError) as exc:
        load_tasks("gsm8k", data_root=str(tmp_path / "nowhere"))
    assert "nowhere" in one_line(exc) and "SELFEVO_DATA" in one_line(exc)
    monkeypatch.delenv("SELFEVO_DATA", raising=False)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(TaskDataError) as exc:  # no local copy, no hub source: where it looked, how to get it
        load_tasks("maslab_gsm8k")
    message = one_line(exc)
    assert os.path.join(os.path.dirname(str(tmp_path)), "shared", "data") in message and "SELFEVO_DATA" in message
    assert "`selfevo prepare data maslab_gsm8k --from DIR`" in message
    monkeypatch.setenv("SELFEVO_DATA", str(tmp_path / "missing"))
    with pytest.raises(TaskDataError, match="from \\$SELFEVO_DATA"):
        load_tasks("gsm8k")
    with pytest.raises(TaskDataError) as exc:  # a root that exists but lacks the file
        load_tasks("gsm8k", data_root=str(tmp_path))
    assert os.path.join(str(tmp_path), "gsm8k", "test.jsonl") in one_line(exc)


def test_env_data_root_is_used(tmp_path, monkeypatch):
    (tmp_path / "gsm8k").mkdir()
    (tmp_path / "gsm8k" / "test.jsonl").write_text(json.dumps({"question": "1+1?", "answer": "2\n#### 1,002"}) + "\n")
    monkeypatch.setenv("SELFEVO_DATA", str(tmp_path))
    [task] = load_tasks("gsm8k")
    assert task.reference == "1002" and task.meta["source"] == "local"


def test_malformed_json_line_names_file_and_line(tmp_path):
    (tmp_path / "gsm8k").mkdir()
    good = json.dumps({"question": "q", "answer": "#### 1"})
    path = tmp_path / "gsm8k" / "test.jsonl"
    path.write_text(f"{good}\n{good}\n{{\"question\": \"q\", \"answer\": \n{good}\n")
    with pytest.raises(TaskDataError) as exc:
        load_tasks("gsm8k", data_root=str(tmp_path))
    assert str(path) in one_line(exc) and "line 3" in one_line(exc)
    (tmp_path / "maslab").mkdir()
    (tmp_path / "maslab" / "GSM8K.json").write_text('[\n  {"query": "q", "gt": "1"},\n  {"query": }\n]')
    with pytest.raises(TaskDataError) as exc:
        load_tasks("maslab_gsm8k", data_root=str(tmp_path))
    assert "GSM8K.json" in one_line(exc) and "line 3" in one_line(exc)


def test_item_that_does_not_map_is_a_one_line_error(tmp_path):
    (tmp_path / "gsm8k").mkdir()
    (tmp_path / "gsm8k" / "test.jsonl").write_text(json.dumps({"question": "q", "answer": "no marker"}) + "\n")
    with pytest.raises(TaskDataError, match="gsm8k: cannot map local item 0") as exc:
        load_tasks("gsm8k", data_root=str(tmp_path))
    one_line(exc)


# ---- hub (no network: a stand-in `datasets` module) -----------------------------------------------------------------


def _fake_datasets(monkeypatch, load_dataset):
    module = types.ModuleType("datasets")
    module.load_dataset = load_dataset
    monkeypatch.setitem(sys.modules, "datasets", module)


def test_hub_unreachable_is_a_one_line_error(monkeypatch):
    calls = []

    def unreachable(*args, **kwargs):
        calls.append((args, kwargs))
        raise ConnectionError("Couldn't reach 'openai/gsm8k' on the Hub (LocalEntryNotFoundError)\nmore detail")

    _fake_datasets(monkeypatch, unreachable)
    with pytest.raises(HubUnavailableError) as exc:
        load_tasks("gsm8k", "test", source="hub")
    message = one_line(exc)
    assert "openai/gsm8k" in message and "ConnectionError" in message and "source='local'" in message
    assert "`selfevo prepare data gsm8k --from DIR`" in message
    assert calls == [(("openai/gsm8k", "main"), {"split": "test"})]
    monkeypatch.setitem(sys.modules, "datasets", None)  # package not installed
    with pytest.raises(HubUnavailableError, match="needs the 'datasets' package") as exc:
        load_tasks("math500", source="hub")
    one_line(exc)


def test_entries_without_a_source_say_so():
    with pytest.raises(HubUnavailableError, match="maslab_mmlu has no Hugging Face hub source") as exc:
        load_tasks("maslab_mmlu", source="hub")
    one_line(exc)
    with pytest.raises(TaskDataError, match="webinstruct has no local copy") as exc:
        load_tasks("webinstruct", data_root=DATA)
    one_line(exc)
    with pytest.raises(TaskDataError, match="unknown source"):
        load_tasks("gsm8k", source="s3")


@needs_data
def test_hub_rows_map_like_local_rows(monkeypatch):
    with open(os.path.join(DATA, "gsm8k", "test.jsonl")) as handle:
        rows = [json.loads(next(handle)) for _ in range(3)]
    requested = []

    first_id = {"prompt": 1, "test": 11, "validation": 511, "train": 601}

    def load_dataset(hub_id, config=None, split=None):
        requested.append((hub_id, config, split))
        if hub_id == "openai/gsm8k":
            return rows
        if hub_id == "google-research-datasets/mbpp":
            return [{"task_id": first_id[split], "prompt": "Write f.", "code": "def f(x):\n    return x\n",
                     "test_imports": [], "test_list": ["assert f(1) == 1"], "source_file": ""}]
        return [{"id": 1, "problem": "p", "answer": "5", "url": ""}]

    _fake_datasets(monkeypatch, load_dataset)
    hub = load_tasks("gsm8k", "test", source="hub")
    local = tasks("gsm8k", "test")[:3]
    assert [(t.question, t.reference) for t in hub] == [(t.question, t.reference) for t in local]
    assert hub[0].meta["source"] == "hub"
    assert load_tasks("aime2024", source="hub")[0].reference == "5"
    mbpp = load_tasks("mbpp", "all", source="hub")
    assert [t.id for t in mbpp] == ["mbpp/601", "mbpp/11", "mbpp/511", "mbpp/1"] and mbpp[0].entry_point == "f"
    assert requested[-4:] == [("google-research-datasets/mbpp", "sanitized", s)
                              for s in ("train", "test", "validation", "prompt")]


@needs_data
def test_hub_evalplus_rows_are_written_to_a_file_for_the_verifier(monkeypatch, tmp_path):
    import gzip

    with gzip.open(os.path.join(DATA, "humanevalplus", "HumanEvalPlus-Mini.jsonl.gz"), "rt") as handle:
        rows = [json.loads(next(handle)) for _ in range(2)]
    _fake_datasets(monkeypatch, lambda *a, **k: [dict(r) for r in rows])
    monkeypatch.setenv("SELFEVO_CACHE", str(tmp_path))
    hub = load_tasks("humanevalplus", source="hub")
    path = hub[0].meta["evalplus"]["path"]
    assert path.startswith(str(tmp_path)) and os.path.exists(path)
    with gzip.open(path, "rt") as handle:
        assert [json.loads(line)["task_id"] for line in handle] == ["HumanEval/0", "HumanEval/1"]


def test_hub_evalplus_copies_with_embedded_tests(monkeypatch):
    """evalplus/mbppplus on the hub has no plus_input: its `test` loop becomes one pytest-style unit."""
    test = ("import math\n\ndef assertion(out, exp, atol):\n    assert out == exp, f'out: {out}, exp: {exp}'\n\n"
            "inputs = [[2], [3]]\nresults = [4, 9]\nfor inp, exp in zip(inputs, results):\n"
            "    assertion(square(*inp), exp, 0)\n")
    row = {"task_id": 7, "prompt": "Write a function to square a number.", "code": "def square(x):\n    return x * x\n",
           "test_imports": [], "test_list": ["assert square(2) == 4"], "test": test, "source_file": ""}
    _fake_datasets(monkeypatch, lambda *a, **k: [dict(row)])
    [task] = load_tasks("mbppplus", source="hub")
    assert (task.id, task.entry_point, task.meta.get("evalplus")) == ("Mbpp/7", "square", None)
    assert verify(_fast(task), f"```python\n{row['code']}```").score == 1.0
    assert verify(_fast(task), "```python\ndef square(x):\n    return x + x\n```").score == 0.0


# ---- GPQA (synthetic CSV) ---------------------------------------------------------------------------------------


def _write_gpqa(path, n=12):
    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=["Record ID", *GPQA_COLUMNS, "Subdomain"])
        writer.writeheader()
        for i in range(n):
            writer.writerow({"Record ID": f"rec{i}", "Question": f"Question {i}?\nSecond line.",
                             "Correct Answer": f"right {i}", "Incorrect Answer 1": f"wrong {i}a",
                             "Incorrect Answer 2": f"wrong {i}b", "Incorrect Answer 3": f" wrong {i}c ",
                             "Subdomain": "Physics"})


def test_gpqa_from_user_csv(tmp_path):
    path = tmp_path / "gpqa_diamond.csv"
    _write_gpqa(path)
    loaded = load_tasks("gpqa_diamond", path=str(path))
    assert len(loaded) == 12
    for i, task in enumerate(loaded):
        gold = task.meta["choices"][task.meta["answer_index"]]
        assert gold == f"right {i}" and f"({task.reference}) right {i}" in task.question
        assert task.meta["verifier"] == "mcq" and f"wrong {i}c" in task.meta["choices"]
        assert verify(task, f"\\boxed{{{task.reference}}}").score == 1.0
    assert len({t.reference for t in loaded}) > 1  # not always (A)
    again = load_tasks("gpqa_diamond", path=str(path))
    assert [t.question for t in again] == [t.question for t in loaded]  # fixed seed
    other = load_tasks("gpqa_diamond", path=str(path), seed=1)
    assert [t.question for t in other] != [t.question for t in loaded]
    assert [t.question for t in load_tasks("gpqa_diamond", path=str(path), limit=3)] == [t.question for t in loaded[:3]]


def test_gpqa_errors(tmp_path):
    with pytest.raises(TaskDataError, match="pass path=") as exc:
        load_tasks("gpqa_diamond", data_root=str(tmp_path))
    one_line(exc)
    bad = tmp_path / "bad.csv"
    bad.write_text("Question,Correct Answer\nq,a\n")
    with pytest.raises(TaskDataError, match="lacks column\\(s\\) Incorrect Answer 1") as exc:
        load_tasks("gpqa_diamond", path=str(bad))
    one_line(exc)


# ---- CoMAS training mixture ---------------------------------------------------------------------------------------


@needs_data
def test_comas_training_mix_local():
    mix = comas_training_mix(data_root=DATA)
    assert mix_counts(mix) == {"math": 600, "code": 109, "science": 112}  # local KodCode/SciBench samples are small
    assert {t.meta["benchmark"] for t in mix} == {"math", "kodcode", "scibench_sol"}
    assert all(t.meta["level"] in (4, 5) for t in mix if t.meta["mix_part"] == "math")
    assert len({t.id for t in mix}) == len(mix)
    assert [t.id for t in comas_training_mix(data_root=DATA)] == [t.id for t in mix]
    assert [t.id for t in comas_training_mix(seed=1, data_root=DATA)] != [t.id for t in mix]
    assert {t.meta["mix_part"] for t in mix[:60]} == {"math", "code", "science"}  # shuffled together
    small = comas_training_mix(n_math=5, n_code=3, n_science=0, data_root=DATA)
    assert mix_counts(small) == {"math": 5, "code": 3}


def test_comas_training_mix_prompts_follow_the_released_data():
    """Released CoMAS items: coding prompts carry their unit tests, science prompts end with the unit hint."""
    if not os.path.isdir(DATA):
        pytest.skip("benchmark data not found (set SELFEVO_DATA)")
    mix = comas_training_mix(n_math=2, data_root=DATA)
    code = [t for t in mix if t.meta["mix_part"] == "code"]
    assert code and all("\n\nYour code should pass the following unit tests:\n```python\n" in t.question for t in code)
    assert all("from solution import" not in t.question.split("unit tests:")[1] for t in code)
    assert all(t.question.rstrip().endswith("()\n```") and "from solution import" in t.tests
               for t in code if "from solution import" in t.tests)
    science = [t for t in mix if t.meta["mix_part"] == "science"]
    assert science and all(re.search(r'\n\nThe unit of the answer should be "[^"\n]+"\.$', t.question)
                           for t in science if t.meta["unit"])
    assert all(t.meta["unit_in_question"] for t in science if t.meta["unit"])
    plain = comas_training_mix(n_math=0, n_science=3, data_root=DATA, code_tests_in_question=False,
                               science_unit_hint=False)
    assert not any("unit tests:" in t.question or "The unit of the answer" in t.question for t in plain)


# ---- WebInstruct-verified (hand-written rows in the hub schema) ------------------------------------------------------

WEBINSTRUCT_ROWS = [  # id, question, answer, answer_type, category, difficulty: the hub dataset's fields
    {"id": "w1", "question": "A cube of aluminum has a mass of 60.00 kg. Find its side in inches.",
     "answer": "11.07 inches", "answer_type": "Float", "category": "Physics", "difficulty": "Senior High School"},
    {"id": "w2", "question": "How many moles of H2 are present at equilibrium?", "answer": "0.325 mol",
     "answer_type": "Float", "category": "Chemistry", "difficulty": "University"},
    {"id": "w3", "question": "How many chromosomes does a human somatic cell have?", "answer": "46",
     "answer_type": "Integer", "category": "biology", "difficulty": "Junior High School"},
    {"id": "w4", "question": "Find the Hall voltage.", "answer": "$1.59 \\times 10^{-3}$ V",
     "answer_type": "Float", "category": "Physics", "difficulty": "University"},
    {"id": "w5", "question": "Compute the integral of x^2 from 0 to 3.", "answer": "9",
     "answer_type": "Integer", "category": "Mathematics", "difficulty": "University"},
    {"id": "w6", "question": "Give the speed as a function of t.", "answer": "v(t) = 3t^2 m/s",
     "answer_type": "Expression", "category": "Physics", "difficulty": "University"},
    {"id": "w7", "question": "Is the reaction exothermic?", "answer": "True",
     "answer_type": "Boolean", "category": "Chemistry", "difficulty": "University"},
    {"id": "w8", "question": "Find both roots' speeds.", "answer": "10 m/s and 5 m/s",
     "answer_type": "Float", "category": "Physics", "difficulty": "University"},  # not one number: dropped
    {"id": "w9", "question": "What is the company's net income?", "answer": "5000",
     "answer_type": "Integer", "category": "Finance", "difficulty": "University"},
]


def test_webinstruct_hub_keeps_numeric_physics_chemistry_biology(monkeypatch):
    requested = []

    def load_dataset(hub_id, config=None, split=None):
        requested.append((hub_id, split))
        return [dict(r) for r in WEBINSTRUCT_ROWS]

    _fake_datasets(monkeypatch, load_dataset)
    loaded = load_tasks("webinstruct", source="hub")
    assert requested == [("TIGER-Lab/WebInstruct-verified", "train")]
    assert [t.id for t in loaded] == ["webinstruct/w1", "webinstruct/w2", "webinstruct/w3", "webinstruct/w4"]
    assert [(t.reference, t.meta["unit"]) for t in loaded] == [("11.07", "inches"), ("0.325", "mol"), ("46", ""),
                                                               ("0.00159", "V")]
    first = loaded[0]
    assert first.question.endswith('in inches.\n\nThe unit of the answer should be "inches".')
    assert (first.meta["verifier"], first.meta["prompt_format"], first.meta["answer"]) == \
        ("numeric", "numeric", "11.07 inches")
    assert format_prompt(first).count("inches") == 2  # the question's own mention + the hint, not a third
    assert verify(first, "so the side is \\boxed{11.1} inches").score == 1.0  # within 5%, as CoMAS checks
    assert verify(first, "\\boxed{12.5}").score == 0.0
    assert loaded[2].question == WEBINSTRUCT_ROWS[2]["question"]  # no unit, no hint
    # the filters are options (case-insensitive; None = all) and the raw short answer is still available
    physics = load_tasks("webinstruct", source="hub", categories="PHYSICS", unit_hint=False)
    assert [t.id for t in physics] == ["webinstruct/w1", "webinstruct/w4"]
    assert "unit of the answer" not in physics[0].question and "units of inches" in format_prompt(physics[0])
    raw = load_tasks("webinstruct", source="hub", categories=None, answer_types=None, numeric=False)
    assert len(raw) == len(WEBINSTRUCT_ROWS) and raw[5].reference == "v(t) = 3t^2 m/s"
    assert {t.meta["verifier"] for t in raw} == {"math"}


def test_split_numeric_answer():
    from selfevo.tasks.science_sets import split_numeric_answer

    assert split_numeric_answer("30,048 N") == ("30048", "N")
    assert split_numeric_answer("2.70 g/cm^3") == ("2.70", "g/cm^3")
    assert split_numeric_answer("1.8 \\times 10^{8} C") == ("180000000.0", "C")
    assert split_numeric_answer("25 ^{\\circ}C") == ("25", "°C")
    assert split_numeric_answer("$1.5 \\mathrm{~m/s}$") == ("1.5", "m/s")
    for answer in ("kg", "x = 5", "3/4", "\\frac{1}{2}", "1.2, 3.4", "10 m/s and 5 m/s"):
        assert split_numeric_answer(answer) is None, answer


def test_comas_training_mix_hub(monkeypatch):
    kod_row = {"question_id": "Kod_1", "question": "Write a function add(a, b) returning the sum.",
               "test": "from solution import add\n\ndef test_add():\n    assert add(1, 2) == 3\n",
               "solution": "def add(a, b):\n    return a + b\n", "gpt_difficulty": "medium", "subset": "Leetcode",
               "style": "instruct"}

    def load_dataset(hub_id, config=None, split=None):
        if hub_id == "KodCode/KodCode-V1":
            return [dict(kod_row), {**kod_row, "question_id": "Kod_2", "gpt_difficulty": "easy"}]
        assert hub_id == "TIGER-Lab/WebInstruct-verified", hub_id
        return [dict(r) for r in WEBINSTRUCT_ROWS]

    _fake_datasets(monkeypatch, load_dataset)
    mix = comas_training_mix(n_math=0, n_code=5, n_science=10, source="hub")
    assert mix_counts(mix) == {"code": 1, "science": 4}
    science = [t for t in mix if t.meta["mix_part"] == "science"]
    assert {t.meta["category"].lower() for t in science} <= {"physics", "chemistry", "biology"}
    assert {t.meta["answer_type"] for t in science} <= {"Float", "Integer"}
    [code] = [t for t in mix if t.meta["mix_part"] == "code"]
    assert code.question == ("Write a function add(a, b) returning the sum.\n\nYour code should pass the following "
                             "unit tests:\n```python\ndef test_add():\n    assert add(1, 2) == 3\n\ntest_add()\n```")
    assert code.tests == kod_row["test"] and code.meta["tests_in_question"]
    assert verify(_fast(code), f"```python\n{kod_row['solution']}```").score == 1.0
    assert verify(_fast(code), "```python\ndef add(a, b):\n    return a - b\n```").score == 0.0


def test_kodcode_shown_tests():
    from selfevo.tasks.code_sets import kodcode_shown_tests

    code = ("import pytest\nfrom solution import (\n    first,\n    second,\n)\n\n\ndef test_first():\n"
            "    assert first() == 1\n\n@pytest.mark.parametrize('x', [1, 2])\ndef test_param(x):\n"
            "    assert second(x)\n"
            "\ndef test_default(x=3):\n    assert second(x)\n\ndef helper():\n    return 1\n")
    shown = kodcode_shown_tests(code)
    assert "solution" not in shown and shown.startswith("import pytest\n\n\ndef test_first():")
    assert shown.endswith("    return 1\n\ntest_first()\ntest_default()")  # test_param needs x: not called
    assert kodcode_shown_tests("from solution import f\ndef test_f():\n    assert f(\n") == \
        "def test_f():\n    assert f(\n\ntest_f()"  # not Python: a line-based fallback


@needs_data
def test_kodcode_tests_in_question_is_an_option():
    plain = tasks("kodcode")
    shown = tasks("kodcode", tests_in_question=True)
    assert [t.tests for t in plain] == [t.tests for t in shown]  # the verifier runs the same tests
    for p, s in zip(plain, shown):
        assert s.question.startswith(p.question + "\n\nYour code should pass the following unit tests:\n```python\n")
        assert "unit tests" not in p.question and not p.meta["tests_in_question"] and s.meta["tests_in_question"]
    first = shown[0]
    assert first.question.endswith("test_interleave_strings()\ntest_performance()\n```")
    assert verify(_fast(first), f"```python\n{first.meta['solution']}\n```").score == 1.0
