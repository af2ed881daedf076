"""The machinery behind the benchmark registry: entry specs, where data is found, file readers, the hub, loading.

A :class:`TaskSpec` says where an entry's rows come from (local files, or a Hugging Face hub dataset) and how one
row becomes a :class:`~selfevo.types.Task`. The same ``to_task`` maps local and hub rows, so both sources give the
same tasks when the data is the same.

Local files are looked up per file in one order of places (:func:`data_places`): ``data_root=`` when given (then
the only place: a run that names its data folder reads nothing else), else ``$SELFEVO_DATA`` (when set), the cache
folder :func:`data_cache` (``$SELFEVO_CACHE/data``, default ``~/.cache/selfevo/data``, filled by ``selfevo prepare
data``) and ``../shared/data`` relative to the working directory. When no place has an entry's files and the entry
has a hub source (and no ``data_root=`` was given), loading goes to the hub with a one-line notice. Hub rows that
``selfevo prepare data NAME`` stored in the cache (``data/hub/...``) are read instead of the hub.

Every error a user can cause (no data, a missing file, a malformed JSON line, an unreachable hub, an unknown
option) is a :class:`TaskDataError` with a one-line message; one that finds no data names ``selfevo prepare data``.
"""
from __future__ import annotations

import gzip
import json
import logging
import os
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

from selfevo.errors import SelfevoError
from selfevo.models import cache_root
from selfevo.registry import Registry
from selfevo.types import Task

log = logging.getLogger(__name__)

DATA_ENV = "SELFEVO_DATA"
DEFAULT_RELATIVE_ROOT = os.path.join("..", "shared", "data")  # relative to the current working directory
SOURCES = ("local", "hub")


class TaskDataError(SelfevoError, ValueError):
    """A benchmark could not be loaded; the message is one line saying what and where (``core``: the message
    without the advice at its end, for an error that joins two)."""

    def __init__(self, message: str, core: str | None = None):
        super().__init__(message)
        self.core = core or message


class HubUnavailableError(TaskDataError):
    """The Hugging Face hub (or the ``datasets`` package) could not provide a dataset."""


class MissingDataError(TaskDataError):
    """No place holds a file an entry's local reader needs."""


class SkipItem(Exception):
    """Raised by a ``to_task`` for a broken source item (e.g. a MATH solution with an empty ``\\boxed{}``): the item
    is left out and ``load_tasks`` logs how many were."""


# ----------------------------------------------------------------------------------------------------------------
# Specs
# ----------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class HubSource:
    """A dataset on the Hugging Face hub: ``datasets.load_dataset(id, config, split=...)``.

    ``splits`` maps this registry's split names to the hub's (a tuple means: concatenate those hub splits); a split
    not in the map has the same name on the hub.
    """

    id: str
    config: str | None = None
    splits: Mapping[str, str | tuple[str, ...]] = field(default_factory=dict)

    def hub_splits(self, split: str) -> tuple[str, ...]:
        mapped = self.splits.get(split, split)
        return (mapped,) if isinstance(mapped, str) else tuple(mapped)

    def describe(self) -> str:
        return self.id + (f" ({self.config})" if self.config else "")


@dataclass
class LoadContext:
    """What a reader and ``to_task`` know about the current load. ``source`` is where the rows come from
    ("local" or "hub"); ``touched`` lists the files and folders found for it (``selfevo prepare data --from``
    copies their top folders)."""

    spec: "TaskSpec"
    split: str
    source: str
    options: dict[str, Any]
    data_root: str | None = None  # as the caller gave it
    cache: dict[str, Any] = field(default_factory=dict)  # per-load scratch space for readers/converters
    touched: list[str] = field(default_factory=list)  # found files/folders, relative to their place
    _places: list[Place] | None = None

    @property
    def places(self) -> list["Place"]:
        """Where files are looked for, in order (resolved on first use: a reader that needs no file, e.g. GPQA
        with path=, never asks)."""
        if self._places is None:
            self._places = data_places(self.data_root)
        return self._places

    def find(self, *parts: str) -> str | None:
        """The file or folder ``parts`` in the first place that has it, else None."""
        for place in self.places:
            path = os.path.join(place.path, *parts)
            if os.path.exists(path):
                self.touched.append(os.path.join(*parts))
                return path
        return None

    def path(self, *parts: str) -> str:
        """:meth:`find`, or a one-line :class:`MissingDataError` saying where it looked and how to get the data."""
        path = self.find(*parts)
        if path is None:
            core = f"{self.spec.name}: {missing_text(os.path.join(*parts), self.places)}"
            raise MissingDataError(f"{core}; {prepare_hint(self.spec)}", core)
        return path


@dataclass(frozen=True)
class Place:
    """A folder that may hold benchmark files, and why it is looked at (``data_root=``, ``$SELFEVO_DATA``,
    ``cache``, ``../shared/data``)."""

    path: str
    origin: str

    def describe(self) -> str:
        return f"{self.path} ({self.origin})"


def missing_text(relative: str, places: list[Place]) -> str:
    """``no local copy of REL; looked in A (origin), B (origin)`` (plus ``$SELFEVO_DATA is unset`` where so); with
    ``data_root=`` the full path of the missing file."""
    if len(places) == 1 and places[0].origin == "data_root=":
        return f"missing data file {os.path.join(places[0].path, relative)} (data_root= is the only place looked in)"
    looked = ", ".join(p.describe() for p in places)
    unset = "" if places and places[0].origin != "cache" else f"; ${DATA_ENV} is unset"
    return f"no local copy of {relative}; looked in {looked}{unset}"


def prepare_hint(spec: "TaskSpec") -> str:
    """The way forward when no data is found: the ``selfevo prepare data`` commands (the hub one where the entry
    has a hub source)."""
    hub = (f", or `selfevo prepare data {spec.name}` where the Hugging Face hub is reachable" if spec.hub is not None
           else "")
    return (f"get it with `selfevo prepare data {spec.name} --from DIR` (DIR: a copy of the benchmark data folder)"
            f"{hub}, or set ${DATA_ENV} / pass data_root=")


Reader = Callable[[LoadContext], Iterable[dict]]
Converter = Callable[[dict, int, LoadContext], "Task | None"]


@dataclass(frozen=True)
class TaskSpec:
    """One registry entry.

    ``read_local(ctx)`` yields the rows of ``ctx.split`` from files found with ``ctx.path(...)``; ``hub`` names the hub
    dataset (``read_hub`` overrides the default hub reader); ``to_task(row, index, ctx)`` maps a row of either
    source to a Task, or None to drop it (a filter option). ``prompt_format`` names an entry of
    :data:`selfevo.tasks.prompts.PROMPT_FORMATS`; ``verifier`` a verifier of :mod:`selfevo.verifiers` (written to
    every task's ``meta["verifier"]``). ``options`` are the extra keyword arguments ``load_tasks`` accepts for this
    entry, with their defaults. ``counts`` are the local item counts per split (as SOURCES.md lists them).
    """

    name: str
    description: str
    domain: str
    verifier: str
    prompt_format: str
    splits: tuple[str, ...]
    default_split: str
    to_task: Converter
    read_local: Reader | None = None
    hub: HubSource | None = None
    read_hub: Reader | None = None
    options: Mapping[str, Any] = field(default_factory=dict)
    counts: Mapping[str, int] = field(default_factory=dict)
    local_note: str = ""  # why there is no local copy (when read_local is None)
    hub_note: str = ""  # why there is no hub copy (when hub is None)


TASKS: Registry[TaskSpec] = Registry("benchmark")


def register_task(spec: TaskSpec) -> TaskSpec:
    """Add an entry to :data:`TASKS` (its default split must be one of its splits)."""
    if spec.default_split not in spec.splits:
        raise ValueError(f"{spec.name}: default split {spec.default_split!r} is not one of {spec.splits}")
    TASKS.register(spec.name)(spec)
    return spec


def task_names() -> list[str]:
    """The names of all registered benchmarks, sorted."""
    return TASKS.names()


def get_task_spec(name: str) -> TaskSpec:
    """The entry called ``name`` (one-line error with the closest name and the known ones otherwise)."""
    return TASKS.get(name)


# ----------------------------------------------------------------------------------------------------------------
# Places to look for local files
# ----------------------------------------------------------------------------------------------------------------


def data_cache() -> Path:
    """The benchmark-data cache: ``data/`` of selfevo's cache folder (``$SELFEVO_CACHE``, default
    ``~/.cache/selfevo``), filled by ``selfevo prepare data``."""
    return cache_root() / "data"


def data_places(data_root: str | None = None) -> list[Place]:
    """Where local files are looked for, in order. ``data_root`` given: only it (it must be a folder). Else
    ``$SELFEVO_DATA`` (must be a folder when set), the cache folder, ``../shared/data`` from the working directory
    (these two are listed even when absent, so that an error can say where it looked)."""
    if data_root is not None:
        if not os.path.isdir(data_root):
            raise TaskDataError(f"data root {os.path.abspath(data_root)} is not a directory (from data_root=); "
                                f"pass the folder that holds gsm8k/, math/, ... or set {DATA_ENV}")
        return [Place(os.path.abspath(data_root), "data_root=")]
    places = []
    env = os.environ.get(DATA_ENV)
    if env:
        if not os.path.isdir(env):
            raise TaskDataError(f"data root {os.path.abspath(env)} is not a directory (from ${DATA_ENV}); "
                                f"set {DATA_ENV} to the folder that holds gsm8k/, math/, ... or pass data_root=")
        places.append(Place(os.path.abspath(env), f"${DATA_ENV}"))
    places.append(Place(str(data_cache()), "cache"))
    places.append(Place(os.path.abspath(DEFAULT_RELATIVE_ROOT), "../shared/data"))
    return places


# ----------------------------------------------------------------------------------------------------------------
# File readers (one-line errors naming the file and line)
# ----------------------------------------------------------------------------------------------------------------


def open_text(path: str):
    return gzip.open(path, "rt", encoding="utf-8") if path.endswith(".gz") else open(path, encoding="utf-8")


def jsonl_records(lines: Iterable[str], where: str) -> list[tuple[int, dict]]:
    """(line number, record) of every non-blank JSON-object line; a malformed line is a one-line TaskDataError
    naming ``where`` and the line."""
    rows = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise TaskDataError(f"malformed JSON in {where} line {number}: {exc.msg} (column {exc.colno})") from None
        if not isinstance(row, dict):
            raise TaskDataError(f"malformed record in {where} line {number}: expected a JSON object, "
                                f"got {type(row).__name__}")
        rows.append((number, row))
    return rows


def read_jsonl_records(path: str) -> list[tuple[int, dict]]:
    """:func:`jsonl_records` of a JSON-lines file (``.gz`` allowed)."""
    try:
        with open_text(path) as handle:
            return jsonl_records(handle, path)
    except (OSError, EOFError, UnicodeDecodeError) as exc:
        raise TaskDataError(f"cannot read {path}: {type(exc).__name__}: {_first_line(exc)}") from None


def read_jsonl(path: str) -> list[dict]:
    """The records of a JSON-lines file (``.gz`` allowed); blank lines are skipped."""
    return [row for _, row in read_jsonl_records(path)]


def read_json_list(path: str) -> list[dict]:
    """A JSON file holding a list of objects."""
    try:
        with open_text(path) as handle:
            text = handle.read()
    except (OSError, EOFError, UnicodeDecodeError) as exc:
        raise TaskDataError(f"cannot read {path}: {type(exc).__name__}: {_first_line(exc)}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise TaskDataError(f"malformed JSON in {path} line {exc.lineno}: {exc.msg} (column {exc.colno})") from None
    if not isinstance(data, list) or not all(isinstance(r, dict) for r in data):
        raise TaskDataError(f"malformed data in {path}: expected a JSON list of objects")
    return data


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:300] if text else ""


# ----------------------------------------------------------------------------------------------------------------
# Hub
# ----------------------------------------------------------------------------------------------------------------


def hub_rows(ctx: LoadContext) -> list[dict]:
    """Rows of ``ctx.split`` from the entry's hub dataset: per hub split, the copy ``selfevo prepare data`` stored
    in the cache (:func:`hub_cache_file`) if there is one, else ``datasets.load_dataset`` with a one-line notice
    (one-line :class:`HubUnavailableError` if that fails)."""
    spec = ctx.spec
    if spec.hub is None:
        raise HubUnavailableError(f"{spec.name} has no Hugging Face hub source"
                                  + (f" ({spec.hub_note})" if spec.hub_note else "") + "; use source='local'")
    rows: list[dict] = []
    for hub_split in spec.hub.hub_splits(ctx.split):
        cached = hub_cache_file(spec.hub, hub_split)
        if cached.exists():
            log.info("%s: hub rows of %s split %r from %s", spec.name, spec.hub.describe(), hub_split, cached)
            rows.extend(read_jsonl(str(cached)))
            continue
        log.warning("%s: %sloading %s split %r from the Hugging Face hub (`selfevo prepare data %s` keeps a copy)",
                    spec.name, ctx.cache.get("hub_reason", ""), spec.hub.describe(), hub_split, spec.name)
        rows.extend(download_hub_split(spec, hub_split))
    return rows


def download_hub_split(spec: "TaskSpec", hub_split: str) -> list[dict]:
    """The rows of one hub split through ``datasets.load_dataset`` (one-line HubUnavailableError if not)."""
    assert spec.hub is not None
    try:
        import datasets  # the Hugging Face library, imported only for the hub path
    except ImportError as exc:
        core = f"{spec.name}: the hub path needs the 'datasets' package ({type(exc).__name__}: {_first_line(exc)})"
        raise HubUnavailableError(f"{core}; pip install datasets, or `selfevo prepare data {spec.name} --from DIR` "
                                  f"(DIR: a copy of the benchmark data folder)", core) from None
    try:
        if spec.hub.config is None:
            dataset = datasets.load_dataset(spec.hub.id, split=hub_split)
        else:
            dataset = datasets.load_dataset(spec.hub.id, spec.hub.config, split=hub_split)
        return [dict(row) for row in dataset]
    except Exception as exc:  # noqa: BLE001 - network, auth, missing split: all become one line
        core = (f"{spec.name}: cannot load {spec.hub.describe()} split {hub_split!r} from the Hugging Face hub: "
                f"{type(exc).__name__}: {_first_line(exc)}")
        raise HubUnavailableError(f"{core}; without the hub: `selfevo prepare data {spec.name} --from DIR` (DIR: a "
                                  f"copy of the benchmark data folder) or source='local' with ${DATA_ENV} / "
                                  f"data_root=", core) from None


def hub_cache_file(hub: HubSource, hub_split: str) -> Path:
    """Where ``selfevo prepare data`` keeps one hub split's rows (JSON lines): ``data/hub/ID/CONFIG/SPLIT.jsonl``
    under the cache (``_`` for no config)."""
    return data_cache() / "hub" / _safe_name(hub.id) / _safe_name(hub.config or "_") / f"{_safe_name(hub_split)}.jsonl"


def _safe_name(text: str) -> str:
    """A hub id, config or split as one folder name (``openai/gsm8k`` -> ``openai__gsm8k``)."""
    return re.sub(r"[^A-Za-z0-9._-]+", "__", text).strip("_") or "_"


# ----------------------------------------------------------------------------------------------------------------
# Loading
# ----------------------------------------------------------------------------------------------------------------


def load_tasks(name: str, split: str | None = None, data_root: str | None = None, limit: int | None = None,
               source: str = "local", **options: Any) -> list[Task]:
    """The tasks of benchmark ``name`` (see ``task_names()``), split ``split`` (default: the entry's).

    ``source="local"`` reads the entry's files from the first place that has each (``data_root=`` alone when
    given; else ``$SELFEVO_DATA``, the cache ``$SELFEVO_CACHE/data``, ``../shared/data``: see the module doc); when
    none has them (and no ``data_root=`` was given), or the entry has no local copy, it goes to the hub with a
    one-line notice. ``source="hub"`` reads hub rows only (the copy ``selfevo prepare data`` stored, else
    ``datasets.load_dataset`` on the entry's hub id). ``limit`` keeps the first ``limit`` tasks (after any filter
    option). ``options`` are the entry's own keyword options (e.g. ``levels=[4, 5]`` for ``math``, ``path=`` for
    ``gpqa_diamond``). Every task gets ``meta`` keys ``benchmark``, ``split``, ``source`` (where its rows came
    from: local or hub), ``verifier`` and ``prompt_format``.
    """
    ctx = load_context(name, split, data_root, source, options)
    if limit is not None and limit < 0:
        raise TaskDataError(f"limit must be >= 0, got {limit}")
    return tasks_from_rows(ctx, read_rows(ctx), limit)


def load_context(name: str, split: str | None, data_root: str | None, source: str,
                 options: Mapping[str, Any]) -> LoadContext:
    """A checked :class:`LoadContext` (known entry, split, source and options; one-line errors otherwise)."""
    spec = get_task_spec(name)
    split = spec.default_split if split is None else split
    if split not in spec.splits:
        raise TaskDataError(f"{name} has no split {split!r}; known: {', '.join(spec.splits)}")
    if source not in SOURCES:
        raise TaskDataError(f"unknown source {source!r}; known: {', '.join(SOURCES)}")
    unknown = sorted(set(options) - set(spec.options))
    if unknown:
        known = ", ".join(f"{k}={v!r}" for k, v in spec.options.items()) or "none"
        raise TaskDataError(f"{name} takes no option(s) {', '.join(unknown)}; its options: {known}")
    return LoadContext(spec=spec, split=split, source=source, options={**spec.options, **options},
                       data_root=data_root)


def read_rows(ctx: LoadContext) -> list[dict]:
    """The rows for ``ctx`` (see :func:`load_tasks` for the order); sets ``ctx.source`` to where they came from."""
    spec = ctx.spec
    has_hub = spec.hub is not None or spec.read_hub is not None
    if ctx.source == "hub":
        return list((spec.read_hub or hub_rows)(ctx))
    if spec.read_local is None:
        if ctx.data_root is not None or not has_hub:  # data_root= means local files from that folder only
            raise TaskDataError(f"{spec.name} has no local copy" + (f" ({spec.local_note})" if spec.local_note
                                                                     else "") + "; use source='hub'")
        ctx.source, ctx.cache["hub_reason"] = "hub", "hub only; "
        return list((spec.read_hub or hub_rows)(ctx))
    try:
        return list(spec.read_local(ctx))
    except MissingDataError as missing:
        if ctx.data_root is not None or not has_hub:
            raise
        local_miss = missing
    ctx.source, ctx.cache["hub_reason"] = "hub", "no local copy; "
    try:
        return list((spec.read_hub or hub_rows)(ctx))
    except HubUnavailableError as exc:
        core = f"{local_miss.core}, and the hub failed ({exc.core})"
        raise HubUnavailableError(f"{core}; {prepare_hint(spec)}", core) from None


def tasks_from_rows(ctx: LoadContext, rows: Iterable[dict], limit: int | None = None) -> list[Task]:
    """``to_task`` over ``rows`` (first ``limit`` tasks): meta keys, unique ids, broken items left out (logged)."""
    spec, name, split, source = ctx.spec, ctx.spec.name, ctx.split, ctx.source
    tasks: list[Task] = []
    skipped: list[str] = []
    seen: Counter[str] = Counter()
    for index, row in enumerate(rows):
        if limit is not None and len(tasks) >= limit:
            break
        try:
            task = spec.to_task(row, index, ctx)
        except SkipItem as exc:
            skipped.append(f"item {index}: {exc}")
            continue
        except TaskDataError:
            raise
        except (KeyError, TypeError, ValueError, SyntaxError) as exc:
            raise TaskDataError(f"{name}: cannot map {source} item {index} of split {split!r}: "
                                f"{type(exc).__name__}: {_first_line(exc)}") from None
        if task is None:
            continue
        task.meta.setdefault("verifier", spec.verifier)
        task.meta.setdefault("prompt_format", spec.prompt_format)
        task.meta.update(benchmark=name, split=split, source=source)
        seen[task.id] += 1
        if seen[task.id] > 1:  # a few sources repeat a native id (e.g. SciBench problemid): keep ids unique
            task.id = f"{task.id}#{seen[task.id]}"
        tasks.append(task)
    if skipped:
        log.warning("%s %s (%s): left out %d broken item(s): %s", name, split, source, len(skipped),
                    "; ".join(skipped[:3]))
    return tasks
