"""``selfevo prepare data [NAME ...] [--from DIR]``: fill the benchmark-data cache, so that loading needs neither
``../shared/data`` nor the network.

The cache is :func:`~selfevo.tasks.base.data_cache` (``$SELFEVO_CACHE/data``, default ``~/.cache/selfevo/data``),
the third place :func:`~selfevo.tasks.base.load_tasks` looks in (after ``data_root=`` / ``$SELFEVO_DATA``).

* ``--from DIR`` (a copy of the benchmark data folder): every split of a benchmark is loaded from DIR alone, which
  says which top folders its local reader uses (``gsm8k/``; ``maslab/`` and ``humaneval/`` for
  ``maslab_humaneval``); those folders are copied into the cache, each to a temporary name and then renamed.
* without ``--from``: every hub split the benchmark uses is downloaded through ``datasets`` and stored as JSON lines
  in :func:`~selfevo.tasks.base.hub_cache_file` (a temporary file, then renamed); ``hub_rows`` reads that copy
  instead of the hub, through the same ``to_task``.

An interrupted prepare leaves at most a dot-named temporary folder or file, which loading never reads. Afterwards
every split is loaded back from the cache alone and counted: one summary line per benchmark on stdout (splits, item
counts, where written), a progress bar on stderr. No names: every benchmark that has the source (a local reader
whose files are in DIR; a hub dataset); a benchmark that fails gets a line and the others go on (exit code 1). A
named benchmark that fails, an unknown name or a missing DIR is a one-line error (exit code 2 from the CLI).
"""
from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path
from typing import Callable

from tqdm import tqdm

from selfevo.tasks.base import (HubUnavailableError, MissingDataError, Place, TaskDataError, TaskSpec, data_cache,
                                download_hub_split, get_task_spec, hub_cache_file, load_context, load_tasks,
                                read_rows, task_names, tasks_from_rows)


def prepare_data(names: list[str], from_dir: str | None = None, say: Callable[[str], None] = print) -> int:
    """Prepare the benchmarks ``names`` (none: all that have the source) from ``from_dir`` or the hub; ``say``
    gets one summary line per benchmark. Returns 0, or 1 when a benchmark of an unnamed run failed."""
    if from_dir is not None and not os.path.isdir(from_dir):
        raise TaskDataError(f"--from {os.path.abspath(from_dir)} is not a directory; pass a copy of the benchmark "
                            f"data folder (the one that holds gsm8k/, math/, ...)")
    specs = [get_task_spec(name) for name in names]  # an unknown name fails here, before anything is written
    if not names:
        specs = [get_task_spec(n) for n in task_names() if _has_source(get_task_spec(n), from_dir)]
    copied: set[str] = set()  # top folders already copied in this run (benchmarks share some)
    left_out, failed = [], []
    for spec in specs:
        try:
            line = prepare_from(spec, from_dir, copied) if from_dir is not None else prepare_hub(spec)
        except TaskDataError as exc:
            if names:
                raise
            if from_dir is not None and isinstance(exc, MissingDataError):
                left_out.append(spec.name)
            else:
                failed.append(spec.name)
                say(f"{spec.name}: failed: {exc.core}")
            continue
        say(line)
    if left_out:
        say(f"left out (no files in {os.path.abspath(from_dir or '')}): {', '.join(left_out)}")
    if failed:
        way = "" if from_dir is not None else "; without the hub: `selfevo prepare data --from DIR` (DIR: a copy of " \
                                               "the benchmark data folder)"
        say(f"{len(failed)} of {len(specs)} failed: {', '.join(failed)}{way}")
    return 1 if failed else 0


def _has_source(spec: TaskSpec, from_dir: str | None) -> bool:
    """Whether an unnamed run prepares ``spec``: a local reader (--from; generated entries need no files) or a hub
    dataset."""
    if from_dir is None:
        return spec.hub is not None
    return spec.read_local is not None and spec.local_note != "generated"


# ---- from a local folder ----------------------------------------------------------------------------------------


def prepare_from(spec: TaskSpec, from_dir: str, copied: set[str] | None = None) -> str:
    """Copy the top folders ``spec`` reads from ``from_dir`` into the cache; the summary line."""
    copied = set() if copied is None else copied
    folders = local_folders(spec, from_dir)
    if not folders:
        return f"{spec.name}: nothing to copy (its local reader reads no files)"
    cache = data_cache()
    bar = _bar(spec.name, len(folders) + len(spec.splits))
    for folder in folders:
        if folder not in copied:
            replace_atomically(Path(from_dir) / folder, cache / folder)
            copied.add(folder)
        bar.update()
    counts = _counts(spec, bar, data_root=str(cache))
    return (f"{spec.name}: {counts}; {', '.join(f + '/' for f in folders)} copied from {os.path.abspath(from_dir)} "
            f"to {cache}")


def local_folders(spec: TaskSpec, from_dir: str) -> list[str]:
    """The top folders under ``from_dir`` that loading every split of ``spec`` from there alone reads (one-line
    MissingDataError when a file is not there)."""
    if spec.read_local is None:
        raise TaskDataError(f"{spec.name} has no local copy" + (f" ({spec.local_note})" if spec.local_note else "")
                            + f"; prepare it from the hub: `selfevo prepare data {spec.name}`")
    folders: list[str] = []
    for split in spec.splits:
        ctx = load_context(spec.name, split, from_dir, "local", {})
        ctx._places = [Place(os.path.abspath(from_dir), "--from")]
        try:
            tasks_from_rows(ctx, read_rows(ctx))  # to_task may read more files (MASLab's lookups)
        except MissingDataError as exc:
            raise MissingDataError(f"{exc.core}; --from takes a copy of the benchmark data folder (the one that "
                                   f"holds gsm8k/, math/, ...)", exc.core) from None
        for relative in ctx.touched:
            top = Path(relative).parts[0]
            if top not in folders:
                folders.append(top)
    return folders


def replace_atomically(src: Path, dest: Path) -> None:
    """Copy a folder (or file) to ``dest`` through a temporary name and a rename; an older ``dest`` is replaced."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{dest.name}.tmp{os.getpid()}")
    old = dest.with_name(f".{dest.name}.old{os.getpid()}")
    for leftover in (tmp, old):
        _remove(leftover)
    try:
        if src.is_dir():
            shutil.copytree(src, tmp)
        else:
            shutil.copy2(src, tmp)
        if dest.exists():
            dest.rename(old)
        tmp.rename(dest)
    finally:
        _remove(tmp)
        _remove(old)


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()


# ---- from the hub -----------------------------------------------------------------------------------------------


def prepare_hub(spec: TaskSpec) -> str:
    """Download every hub split ``spec`` uses into the cache as JSON lines; the summary line."""
    if spec.hub is None:
        raise HubUnavailableError(f"{spec.name} has no Hugging Face hub source" + (f" ({spec.hub_note})" if
                                  spec.hub_note else "") + f"; use `selfevo prepare data {spec.name} --from DIR`")
    hub_splits = list(dict.fromkeys(h for split in spec.splits for h in spec.hub.hub_splits(split)))
    bar = _bar(spec.name, len(hub_splits) + len(spec.splits))
    for hub_split in hub_splits:
        write_jsonl_atomically(hub_cache_file(spec.hub, hub_split), download_hub_split(spec, hub_split))
        bar.update()
    counts = _counts(spec, bar, source="hub")
    return f"{spec.name}: {counts}; {spec.hub.describe()} stored in {hub_cache_file(spec.hub, hub_splits[0]).parent}"


def write_jsonl_atomically(path: Path, rows: list[dict]) -> None:
    """Rows as JSON lines (values JSON cannot hold are written as text) through a temporary file and a rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    try:
        with open(tmp, "w", encoding="utf-8") as handle:
            for row in rows:
                handle.write(json.dumps(row, ensure_ascii=False, default=str) + "\n")
        os.replace(tmp, path)
    finally:
        _remove(tmp)


# ---- shared -----------------------------------------------------------------------------------------------------


def _counts(spec: TaskSpec, bar, **where) -> str:
    """Every split loaded back from the cache, counted: ``train 7473, test 1319 items``."""
    counts = []
    for split in spec.splits:
        counts.append(f"{split} {len(load_tasks(spec.name, split, **where))}")
        bar.update()
    bar.close()
    return ", ".join(counts) + " items"


def _bar(name: str, total: int):
    return tqdm(total=total, desc=name, unit="step", file=sys.stderr, leave=False)
