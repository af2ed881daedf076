"""Data for a user who cloned the project: the order of places, ``selfevo prepare data`` (--from a folder, and from
the hub faked by local files that ``datasets`` reads offline), the hub notice, the errors that name the way forward."""
from __future__ import annotations

import dataclasses
import json
import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from helpers.paths import DATA, needs_data
from selfevo import cli, models
from selfevo.tasks import TASKS, HubSource, HubUnavailableError, MissingDataError, load_tasks
from selfevo.tasks import base, prepare



def gsm8k_rows(tag: str, n: int = 3) -> list[dict]:
    return [{"question": f"{tag} question {i}?", "answer": f"work\n#### {i + 1}"} for i in range(n)]


def write_jsonl(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def one_line(message: str) -> str:
    assert message and "\n" not in message.strip(), message
    return message.strip()


@pytest.fixture
def user(tmp_path, monkeypatch):
    """A user who cloned the project: cwd tmp/work (no ../shared), no $SELFEVO_DATA, the cache in tmp/cache."""
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.delenv("SELFEVO_DATA", raising=False)
    monkeypatch.setenv("SELFEVO_CACHE", str(tmp_path / "cache"))
    return tmp_path


@pytest.fixture
def fake_hub(user, monkeypatch):
    """gsm8k's hub source pointed at a local folder of JSON-lines files that ``datasets`` reads offline."""
    datasets = pytest.importorskip("datasets")
    folder = user / "hub-gsm8k"
    write_jsonl(folder / "train.jsonl", gsm8k_rows("hub-train", 2))
    write_jsonl(folder / "test.jsonl", gsm8k_rows("hub-test"))
    for name in ("HF_DATASETS_OFFLINE", "HF_HUB_OFFLINE"):
        monkeypatch.setenv(name, "1")
        monkeypatch.setattr(datasets.config, name, True, raising=False)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", user / "hf-cache")
    spec = TASKS.get("gsm8k")
    monkeypatch.setitem(TASKS._items, "gsm8k", dataclasses.replace(spec, hub=HubSource(str(folder))))
    return folder


def run_cli(argv: list[str], capsys) -> tuple[int, str, str]:
    rc = cli.main(argv)
    captured = capsys.readouterr()
    return rc, captured.out, captured.err


# ---- the order of places ----------------------------------------------------------------------------------------


def test_each_place_wins_over_the_later_ones(user, monkeypatch):
    places = {"env": user / "env", "cache": user / "cache" / "data", "shared": user / "shared" / "data"}
    for tag, root in places.items():
        write_jsonl(root / "gsm8k" / "test.jsonl", gsm8k_rows(tag, 1))
    explicit = user / "explicit"
    write_jsonl(explicit / "gsm8k" / "test.jsonl", gsm8k_rows("explicit", 1))
    monkeypatch.setenv("SELFEVO_DATA", str(places["env"]))

    def first_question(**kw) -> str:
        return load_tasks("gsm8k", "test", **kw)[0].question.split()[0]

    assert first_question(data_root=str(explicit)) == "explicit"
    assert first_question() == "env"
    shutil.rmtree(places["env"] / "gsm8k")  # $SELFEVO_DATA set but without gsm8k: the search goes on
    assert first_question() == "cache"
    shutil.rmtree(places["cache"] / "gsm8k")
    assert first_question() == "shared"
    assert [p.origin for p in base.data_places()] == ["$SELFEVO_DATA", "cache", "../shared/data"]


def test_data_root_is_the_only_place_when_given(user):
    write_jsonl(user / "cache" / "data" / "gsm8k" / "test.jsonl", gsm8k_rows("cache", 1))
    empty = user / "empty"
    empty.mkdir()
    with pytest.raises(MissingDataError) as exc:  # not read from the cache, and no hub
        load_tasks("gsm8k", "test", data_root=str(empty))
    assert str(empty / "gsm8k" / "test.jsonl") in one_line(str(exc.value))
    assert "data_root= is the only place" in str(exc.value)


def test_no_local_copy_and_no_hub_says_where_it_looked(user):
    with pytest.raises(MissingDataError) as exc:
        load_tasks("maslab_gsm8k")
    message = one_line(str(exc.value))
    assert f"{user / 'cache' / 'data'} (cache)" in message and f"{user / 'shared' / 'data'} (../shared/data)" in message
    assert "$SELFEVO_DATA is unset" in message and "`selfevo prepare data maslab_gsm8k --from DIR`" in message
    assert "Hugging Face hub is reachable" not in message  # maslab has no hub source


def test_models_and_data_share_one_cache_root(user):
    assert models.models_cache() == user / "cache" / "models"
    assert base.data_cache() == user / "cache" / "data"


# ---- the hub path (local files that datasets reads offline) -----------------------------------------------------


def test_no_local_copy_goes_to_the_hub_with_a_notice(fake_hub, caplog):
    with caplog.at_level(logging.WARNING, logger="selfevo.tasks.base"):
        tasks = load_tasks("gsm8k", "test")
    assert [t.question for t in tasks] == [r["question"] for r in gsm8k_rows("hub-test")]
    assert {t.meta["source"] for t in tasks} == {"hub"}
    [notice] = [r.getMessage() for r in caplog.records]
    assert "no local copy; loading" in one_line(notice) and "from the Hugging Face hub" in notice
    assert "selfevo prepare data gsm8k" in notice


def test_unreachable_hub_error_names_prepare_data_from(fake_hub, monkeypatch):
    spec = TASKS.get("gsm8k")
    monkeypatch.setitem(TASKS._items, "gsm8k", dataclasses.replace(spec, hub=HubSource(str(fake_hub / "gone"))))
    with pytest.raises(HubUnavailableError) as exc:
        load_tasks("gsm8k", "test")
    message = one_line(str(exc.value))
    assert "no local copy of gsm8k/test.jsonl" in message and "the hub failed" in message
    assert "`selfevo prepare data gsm8k --from DIR`" in message and "`selfevo prepare data gsm8k`" in message


def test_prepare_from_the_hub_loads_back_like_the_hub(fake_hub, capsys, caplog):
    from_hub = load_tasks("gsm8k", "test")
    rc, out, _ = run_cli(["prepare", "data", "gsm8k"], capsys)
    assert rc == 0
    stored = base.hub_cache_file(TASKS.get("gsm8k").hub, "test")
    assert stored.exists() and not list(stored.parent.glob(".*"))  # no temporary file left
    assert one_line(out) == f"gsm8k: train 2, test 3 items; {fake_hub} stored in {stored.parent}"
    shutil.rmtree(fake_hub)  # the hub is gone: the cached rows answer, without a notice
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="selfevo.tasks.base"):
        again = load_tasks("gsm8k", "test")
    assert again == from_hub and not caplog.records
    assert load_tasks("gsm8k", "test", source="hub") == from_hub


def test_prepare_without_names_goes_on_past_a_failing_hub(user, monkeypatch, capsys):
    import types

    def unreachable(hub_id, *args, **kwargs):
        raise ConnectionError(f"Couldn't reach '{hub_id}' on the Hub")

    monkeypatch.setitem(sys.modules, "datasets", types.SimpleNamespace(load_dataset=unreachable))
    rc, out, _ = run_cli(["prepare", "data"], capsys)
    lines = out.splitlines()
    with_hub = [n for n in TASKS.names() if TASKS.get(n).hub is not None]
    assert rc == 1 and [line.split(":")[0] for line in lines[:-1]] == with_hub
    assert lines[0].startswith("aime2024: failed: aime2024: cannot load HuggingFaceH4/aime_2024 split 'train'")
    assert lines[-1].startswith(f"{len(with_hub)} of {len(with_hub)} failed: aime2024, ")
    assert lines[-1].endswith("without the hub: `selfevo prepare data --from DIR` (DIR: a copy of the benchmark data "
                              "folder)")
    assert not (user / "cache").exists()


# ---- prepare --from -----------------------------------------------------------------------------------------------


@needs_data
def test_prepare_from_copies_what_loads_back_identically(user, capsys):
    rc, out, _ = run_cli(["prepare", "data", "gsm8k", "maslab_humaneval", "--from", DATA], capsys)
    assert rc == 0
    cache = user / "cache" / "data"
    assert out.splitlines() == [
        f"gsm8k: train 7473, test 1319 items; gsm8k/ copied from {os.path.abspath(DATA)} to {cache}",
        f"maslab_humaneval: test 164 items; maslab/, humaneval/ copied from {os.path.abspath(DATA)} to {cache}"]
    assert sorted(p.name for p in cache.iterdir()) == ["gsm8k", "humaneval", "maslab"]
    for name, split in (("gsm8k", "test"), ("gsm8k", "train"), ("maslab_humaneval", "test")):
        assert load_tasks(name, split) == load_tasks(name, split, data_root=DATA), name


def test_prepare_without_names_takes_every_benchmark_with_files(user, capsys):
    copy = user / "copy"
    write_jsonl(copy / "gsm8k" / "test.jsonl", gsm8k_rows("copy"))
    write_jsonl(copy / "gsm8k" / "train.jsonl", gsm8k_rows("copy-train", 1))
    rc, out, _ = run_cli(["prepare", "data", "--from", str(copy)], capsys)
    first, left_out = out.splitlines()
    assert rc == 0 and first.startswith("gsm8k: train 1, test 3 items; gsm8k/ copied")
    assert left_out.startswith(f"left out (no files in {copy}): ") and "math500" in left_out
    assert "arith" not in left_out and "webinstruct" not in left_out  # generated / hub only: nothing to copy


def test_an_interrupted_copy_leaves_the_old_copy_and_no_half_folder(user, monkeypatch):
    copy = user / "copy"
    write_jsonl(copy / "gsm8k" / "test.jsonl", gsm8k_rows("new"))
    write_jsonl(copy / "gsm8k" / "train.jsonl", gsm8k_rows("new", 1))
    cache = user / "cache" / "data"
    write_jsonl(cache / "gsm8k" / "test.jsonl", gsm8k_rows("old"))

    def copy_then_fail(src, dst, **kw):
        write_jsonl(Path(dst) / "test.jsonl", gsm8k_rows("half", 1))
        raise KeyboardInterrupt

    monkeypatch.setattr(prepare.shutil, "copytree", copy_then_fail)
    with pytest.raises(KeyboardInterrupt):
        prepare.prepare_data(["gsm8k"], str(copy))
    assert sorted(p.name for p in cache.iterdir()) == ["gsm8k"]
    assert load_tasks("gsm8k", "test")[0].question.startswith("old")


def test_bad_input_is_one_line_and_exit_code_2(user, capsys):
    empty = user / "empty"
    empty.mkdir()
    missing = f"no local copy of gsm8k/train.jsonl; looked in {empty} (--from); --from takes a copy of the benchmark"
    cases = {("prepare", "data", "gsm8", "--from", str(empty)): "did you mean 'gsm8k'?",
             ("prepare", "data", "gsm8k", "--from", str(user / "nowhere")): "is not a directory",
             ("prepare", "data", "gsm8k", "--from", str(empty)): missing,
             ("prepare", "data", "webinstruct", "--from", str(empty)): "`selfevo prepare data webinstruct`",
             ("prepare", "data", "maslab_mmlu"): "has no Hugging Face hub source",
             ("prepare", "data", "--frm", "x"): "unrecognized arguments"}
    for argv, expected in cases.items():
        rc, out, err = run_cli(list(argv), capsys)
        assert rc == 2 and expected in one_line(err) and not out, argv
    assert not (user / "cache").exists()  # nothing written


def test_end_to_end_cli_in_a_folder_without_shared(user, monkeypatch):
    """As a user: ``selfevo prepare data gsm8k --from <copy>`` in a fresh process, then gsm8k loads."""
    copy = user / "copy"
    write_jsonl(copy / "gsm8k" / "test.jsonl", gsm8k_rows("copy"))
    write_jsonl(copy / "gsm8k" / "train.jsonl", gsm8k_rows("copy-train", 2))
    env = {**os.environ, "SELFEVO_CACHE": str(user / "cache"), "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-m", "selfevo", "prepare", "data", "gsm8k", "--from", str(copy)],
                          cwd=user / "work", env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("gsm8k: train 2, test 3 items; gsm8k/ copied from")
    tasks = load_tasks("gsm8k", "test", limit=2)
    assert [t.reference for t in tasks] == ["1", "2"] and tasks[0].meta["source"] == "local"
