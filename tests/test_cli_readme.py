"""Every ``selfevo`` command line in README.md's code blocks runs through ``selfevo.cli.main`` in-process.

Commands are found generically (any fenced block, ``&&``/``|``/``;`` chains split, comments and ``VAR=value``
prefixes dropped), so the README can change freely. ``run``/``eval`` lines are first resolved with ``--dry-run``
(config valid as written); those that need a hub, a GPU or vLLM stop there, the others then run for real on
``tiny-random`` with tiny limits and every output under a temporary folder. Placeholders (a ``.yaml`` preset, a
JSONL input, adapter folders that do not exist) are replaced by small files made here.
"""
from __future__ import annotations

import json
import os
import re
import shlex
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from helpers.paths import ROOT
from selfevo import cli

README = ROOT / "README.md"
HEAVY_TEXT = ("--preset paper", "engine.name=vllm", "SELFEVO_EXTRA=gpu")
SEPARATORS = {"&&", "||", "|", ";", "&"}
HUB_ID = re.compile(r"^[\w.-]+/[\w.-]+$")
TINY = "tiny-random"


# ---- finding the commands ----------------------------------------------------------------------------------------


def fenced_lines(text: str) -> list[str]:
    """The lines inside ``` fences, with ``\\``-continued lines joined and ``$ `` prompts dropped."""
    lines, inside, pending = [], False, ""
    for raw in text.splitlines():
        if raw.lstrip().startswith("```"):
            inside, pending = not inside, ""
            continue
        if not inside:
            continue
        line = pending + raw.strip()
        if line.endswith("\\"):
            pending = line[:-1] + " "
            continue
        pending = ""
        lines.append(line[2:] if line.startswith("$ ") else line)
    return lines


def strip_comment(line: str) -> str:
    """Cut a shell comment: ``#`` at the start of a word, outside quotes."""
    quote = None
    for i, ch in enumerate(line):
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i]
    return line


def _is_selfevo(word: str) -> bool:
    return word == "selfevo" or word.endswith("/selfevo")


def commands(line: str) -> list[list[str]]:
    """The selfevo argument lists of one shell line (``selfevo``, ``.venv/bin/selfevo``, ``python -m selfevo``)."""
    lexer = shlex.shlex(strip_comment(line), posix=True, punctuation_chars=True)
    lexer.whitespace_split, lexer.commenters = True, ""
    try:
        tokens = list(lexer)
    except ValueError:  # unbalanced quotes: not a command line
        return []
    parts, part = [], []
    for token in tokens + [";"]:
        if token in SEPARATORS:
            parts.append(part)
            part = []
        else:
            part.append(token)
    found = []
    for words in parts:
        while words and re.match(r"^\w+=", words[0]):  # VAR=value prefixes
            words = words[1:]
        redirect = next((i for i, w in enumerate(words) if w and set(w) <= set("<>&")), len(words))
        if 0 < redirect < len(words) and words[redirect - 1].isdigit():  # 2>&1: the descriptor goes too
            redirect -= 1
        words = words[:redirect]
        if words and _is_selfevo(words[0]):
            found.append(words[1:])
        elif len(words) > 2 and words[0].endswith("python") and words[1:3] == ["-m", "selfevo"]:
            found.append(words[3:])
    return found


def readme_cases() -> list[tuple[str, list[str]]]:
    """(line, argv) for every selfevo command of README.md, in order, without repeats."""
    cases, seen = [], set()
    for line in fenced_lines(README.read_text()):
        for argv in commands(line):
            if tuple(argv) not in seen:
                seen.add(tuple(argv))
                cases.append((line, argv))
    return cases


CASES = readme_cases()


def test_readme_commands_are_found():
    """Guards the extraction itself: an empty list would make every README check pass vacuously."""
    names = {argv[0] if argv else "" for _, argv in CASES}
    assert "run" in names and len(CASES) >= 3, f"README commands found: {CASES}"
    assert commands("a && .venv/bin/selfevo run x k=1 # note | y") == [["run", "x", "k=1"]]
    assert commands("FOO=1 selfevo ls | head; python -m selfevo eval a=b 2>&1") == [["ls"], ["eval", "a=b"]]


# ---- adapting a command ------------------------------------------------------------------------------------------


def split_overrides(argv: list[str]) -> tuple[list[str], dict[str, str]]:
    """Options and positionals (in order) apart from the ``key=value`` pairs (a dict, last one wins)."""
    rest, pairs = [], {}
    for arg in argv:
        if "=" in arg and not arg.startswith("-"):
            key, value = arg.split("=", 1)
            pairs[key] = value
        else:
            rest.append(arg)
    return rest, pairs


def as_list(value: str) -> list[str]:
    value = value.strip()
    value = value[1:-1] if value.startswith("[") and value.endswith("]") else value
    return [v.strip() for v in value.split(",") if v.strip()]


def tiny(name: str) -> str:
    return name if name.startswith(TINY) else TINY


def local(path: str, work: Path) -> str:
    """A README path, moved under the temporary folder when relative."""
    return path if os.path.isabs(path) else str(work / path)


def make_adapter(path: Path) -> None:
    from selfevo.policy import LoraSettings, PolicyStore, StoreSettings

    store = PolicyStore(StoreSettings(dtype="float32", lora=LoraSettings(r=4, alpha=8)))
    store.add_agent("a", TINY)
    store.save_adapter("a", path)


def replace_preset(rest: list[str], work: Path, source: Path | None) -> list[str]:
    """A ``--preset X.yaml`` that does not exist becomes a copy of ``source`` (or a one-key file)."""
    out = list(rest)
    for i, word in enumerate(out):
        value = word.split("=", 1)[1] if word.startswith("--preset=") else (
            out[i + 1] if word == "--preset" and i + 1 < len(out) else None)
        if value and value.endswith((".yaml", ".yml")) and not Path(value).exists():
            target = work / "presets" / Path(value).name
            target.parent.mkdir(parents=True, exist_ok=True)
            if source is not None:
                shutil.copy(source, target)
            else:
                target.write_text("seed: 0\n")
            out[i:i + (1 if word.startswith("--preset=") else 2)] = ["--preset", str(target)]
    return out


def recipe_keys(recipe: str) -> dict[str, Any]:
    from selfevo.algorithms import RECIPES
    from selfevo.config import describe

    return {key: default for key, default, _, _ in describe(RECIPES.get(recipe).config_class())}


def adapt_run(rest: list[str], pairs: dict[str, str], work: Path, case: int) -> tuple[list, dict, dict]:
    """(options, pairs as written, pairs to run for real): tiny, temporary versions of a ``run`` command's
    placeholders and sizes (only keys the recipe has)."""
    from selfevo.algorithms import RECIPES
    from selfevo.config import preset_path

    recipe = RECIPES.get(next(w for w in rest[1:] if not w.startswith("-")))
    rest = replace_preset(rest, work, preset_path(recipe.name, recipe.default_preset))
    keys = recipe_keys(recipe.name)
    real = dict(pairs)
    if "model.backbones" in keys:
        real["model.backbones"] = "[" + ",".join(tiny(b) for b in as_list(pairs.get("model.backbones", TINY))) + "]"
    if "trainer.max_steps" in keys:
        real["trainer.max_steps"] = str(min(int(pairs.get("trainer.max_steps", 1)), 3))
    if "trainer.tasks_per_step" in keys:
        real["trainer.tasks_per_step"] = "1"
    if "sampling.max_new_tokens" in keys:
        real["sampling.max_new_tokens"] = "4"
    if "output_dir" in keys:
        real["output_dir"] = local(pairs.get("output_dir", keys["output_dir"]), work)  # the recipe's own default
    return rest, pairs, real


def adapt_eval(rest: list[str], pairs: dict[str, str], work: Path, case: int) -> tuple[list, dict, dict]:
    """(options, pairs as written, pairs to run for real): tiny, temporary versions of an ``eval`` command's
    placeholders (adapter folders are made) and sizes."""
    rest = replace_preset(rest, work, None)
    if "adapters" in pairs:
        folders = [local(p, work) for p in as_list(pairs["adapters"])]
        for folder in folders:
            if not (Path(folder) / "adapter_config.json").exists():
                make_adapter(Path(folder))
        pairs = {**pairs, "adapters": "[" + ",".join(folders) + "]"}
    backbones = [tiny(b) for b in as_list(pairs.get("model.backbones", TINY))]
    real = {**pairs, "model.backbones": "[" + ",".join(backbones) + "]",
            "limit": str(min(int(pairs.get("limit", 2)), 2)), "sampling.max_new_tokens": "4"}
    real["output_dir"] = local(pairs["output_dir"], work) if "output_dir" in pairs else str(work / f"case{case}")
    return rest, pairs, real


def adapt_other(argv: list[str], work: Path) -> list[str]:
    """``verify``: a tiny input file and an output under the temporary folder; ``prepare``: tiny models;
    ``report``: the run and eval folders of earlier README lines (and the page) under the temporary folder."""
    if argv[:1] == ["prepare"]:
        return ["prepare"] + [tiny(a) for a in argv[1:]]
    if argv[:1] == ["sweep"]:  # planned and checked, nothing trained (tests/test_sweep.py runs sweeps for real)
        return argv if "--dry-run" in argv else argv + ["--dry-run"]
    if argv[:1] == ["report"]:
        return ["report"] + [a if a.startswith("-") else local(a, work) for a in argv[1:]]
    if argv[:1] != ["verify"]:
        return argv
    out = list(argv)
    for i, word in enumerate(out[:-1]):
        if word == "--input":
            path = work / "verify" / Path(out[i + 1]).name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps({"domain": "math", "response": "\\boxed{4}", "reference": "4"}) + "\n")
            out[i + 1] = str(path)
        elif word == "--output":
            out[i + 1] = str(work / "verify" / Path(out[i + 1]).name)
    return out


def check_prepare_data(argv: list[str], work: Path, monkeypatch, capsys) -> None:
    """``prepare data``: with ``--from``, run for real into a cache under the temporary folder; from the hub
    (unreachable here), checked as far as this machine can: every name is a benchmark with a hub source."""
    from selfevo.tasks import get_task_spec

    monkeypatch.setenv("SELFEVO_CACHE", str(work / "cache"))
    if "--from" not in argv:
        names = [a for a in argv[2:] if not a.startswith("-")]
        assert all(get_task_spec(name).hub is not None for name in names), argv
        return
    if not os.path.isdir(argv[argv.index("--from") + 1]):
        pytest.skip(f"benchmark data not found: {argv[argv.index('--from') + 1]}")
    run_for_real(argv, capsys)


def flat(tree: Any, prefix: str = "") -> list[tuple[str, Any]]:
    if isinstance(tree, dict):
        return [kv for k, v in tree.items() for kv in flat(v, f"{prefix}{k}.")]
    if isinstance(tree, list):
        return [kv for v in tree for kv in flat(v, prefix)]
    return [(prefix.rstrip("."), tree)]


def needs_hub_or_gpu(line: str, resolved: dict) -> bool:
    """The README line or its resolved config asks for vLLM, a GPU or the hub (models or data)."""
    from selfevo import models

    if any(marker in line for marker in HEAVY_TEXT):
        return True
    for key, value in flat(resolved):
        if not isinstance(value, str):
            continue
        if "engine" in key and value == "vllm" or key.endswith("source") and value == "hub":
            return True
        if ("model" in key or "backbones" in key) and HUB_ID.match(value) and value not in models.MODELS \
                and not os.path.exists(value):
            return True
    return False


# ---- the test ----------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    """One temporary folder for all README commands, so that a later line finds an earlier one's run (resume)."""
    return tmp_path_factory.mktemp("readme")


def call(argv: list[str], capsys) -> tuple[int, str, str]:
    rc = cli.main(argv)
    captured = capsys.readouterr()
    return rc, captured.out, captured.err


def dry_run(argv: list[str], capsys) -> dict:
    rc, out, err = call(argv + ["--dry-run"], capsys)
    assert rc == 0, f"selfevo {shlex.join(argv)} --dry-run: {err.strip()}"
    return yaml.safe_load(out) or {}


def run_for_real(argv: list[str], capsys) -> None:
    rc, out, err = call(argv, capsys)
    if rc == 2 and ("no benchmark data found" in err or "no local copy of" in err):
        pytest.skip(err.strip().splitlines()[-1])
    assert rc == 0, f"selfevo {shlex.join(argv)}: {err.strip()[-2000:]}"


def case(line: str, argv: list[str]):
    """A README command as a test case. Slow: one that trains or evaluates (``run``/``eval`` without ``--dry-run`` or
    ``--help``; it runs for real, 2-45 s each on 2 cores), and ``report``, which reads what those lines made."""
    trains = argv[:1] in (["run"], ["eval"]) and not {"--dry-run", "-h", "--help"} & set(argv)
    slow = trains or argv[:1] == ["report"]
    return pytest.param(line, argv, marks=[pytest.mark.slow] if slow else [], id=shlex.join(argv) or "(none)")


@pytest.mark.parametrize("line, argv", [case(line, argv) for line, argv in CASES])
def test_readme_command(line, argv, work, capsys, monkeypatch):
    case = CASES.index((line, argv))
    command = argv[0] if argv else ""
    if argv[:2] == ["prepare", "data"]:
        check_prepare_data(argv, work, monkeypatch, capsys)
        return
    if command not in ("run", "eval") or {"-h", "--help"} & set(argv):
        run_for_real(adapt_other(argv, work), capsys)
        return
    adapt = adapt_run if command == "run" else adapt_eval
    rest, pairs, real = adapt(*split_overrides(argv), work, case)
    as_written = rest + [f"{k}={v}" for k, v in pairs.items()]
    if needs_hub_or_gpu(line, dry_run(as_written, capsys)):
        return  # checked as far as this machine can: resolved and validated
    if real.get("resume") == "true" and "output_dir" in real and not Path(real["output_dir"]).exists():
        first = {**real, "resume": "false", **({"trainer.max_steps": "1"} if "trainer.max_steps" in real else {})}
        run_for_real(rest + [f"{k}={v}" for k, v in first.items()], capsys)  # run alone (-k): make what it resumes
    run_for_real(rest + [f"{k}={v}" for k, v in real.items()], capsys)
    assert "output_dir" not in real or any(Path(real["output_dir"]).iterdir()), "the run wrote nothing"
