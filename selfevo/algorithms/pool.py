"""The recipes' curriculum state, beside the recipes that keep it: a growing question pool (SAGE, MAE) and
:class:`ItemBuffers`, per-kind buffers of JSON items (AZR's triplet buffers).

One item per JSONL line: ``id``, ``domain``, ``question``, ``origin`` ("seed" or "step k"), ``difficulty`` (the
Solver's failure rate when the item was admitted; None for seed items), ``verifier``, and the item's verifier data —
``reference`` (math: the answer) or ``tests`` (one string of Python test code, as ``selfevo verify`` reads it) with
``reference_solution`` and ``entry_point`` (code). Questions are de-duplicated on their normalised text. A recipe
saves the pool with its checkpoint (``Loop.end_step(files={"pool.jsonl": pool.to_jsonl()})``), so the pool and the
adapters always describe the same step; a resume reads it back from the checkpoint (:func:`start_pool`).
"""
from __future__ import annotations

import json
import random
import re
from dataclasses import dataclass, field
from typing import Callable

from selfevo.loop import checkpoint
from selfevo.tasks import TaskDataError
from selfevo.tasks.base import jsonl_records
from selfevo.types import Task

ADMISSION = "admission"  # an episode's admission verdict ("admitted" or why it was refused), as its log records it
NEW_TASK = "new_task"  # an episode's generated task, as its log records it (selfevo report verifies answers to it)
FIELDS = ("id", "domain", "question", "origin", "difficulty", "verifier", "reference", "tests", "reference_solution",
          "entry_point", "prompt_format")
REQUIRED = ("id", "domain", "question", "origin")


def question_key(question: str) -> str:
    """The de-duplication key of a question: lower case, whitespace collapsed, trailing punctuation dropped."""
    return re.sub(r"\s+", " ", question.lower()).strip().rstrip(".?!:; ")


@dataclass
class QuestionPool:
    items: list[dict] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._keys = {question_key(it["question"]) for it in self.items}
        self._ids = {it["id"] for it in self.items}

    def __len__(self) -> int:
        return len(self.items)

    # ---- building ---------------------------------------------------------------------------------------------
    @classmethod
    def from_tasks(cls, tasks: list[Task], origin: str = "seed") -> "QuestionPool":
        pool = cls()
        for t in tasks:
            pool.add(t, origin)
        return pool

    def contains(self, question: str) -> bool:
        return question_key(question) in self._keys

    def add(self, task: Task, origin: str, difficulty: float | None = None) -> bool:
        """Add ``task`` unless its question is already in the pool; says whether it was added."""
        if self.contains(task.question):
            return False
        item_id = task.id if task.id not in self._ids else f"{task.id}#{len(self.items)}"
        item = {"id": item_id, "domain": task.domain, "question": task.question, "origin": origin,
                "difficulty": difficulty, "verifier": str(task.meta.get("verifier") or task.domain)}
        if task.tests:
            item.update(tests=task.tests, entry_point=task.entry_point,
                        reference_solution=task.meta.get("reference_solution", task.meta.get("solution", "")))
        else:
            item["reference"] = task.reference
        if task.meta.get("prompt_format"):
            item["prompt_format"] = task.meta["prompt_format"]
        self.items.append(item)
        self._keys.add(question_key(task.question))
        self._ids.add(item_id)
        return True

    # ---- using --------------------------------------------------------------------------------------------------
    @staticmethod
    def task(item: dict) -> Task:
        meta = {"verifier": item.get("verifier") or item["domain"], "origin": item["origin"], "pool_id": item["id"]}
        for key in ("reference_solution", "prompt_format"):
            if item.get(key):
                meta[key] = item[key]
        return Task(item["id"], item["domain"], item["question"], item.get("reference", ""),
                    item.get("tests", ""), item.get("entry_point", ""), meta)

    def sample(self, rng: random.Random, n: int) -> list[Task]:
        """``n`` items drawn uniformly (without replacement while the pool is large enough, then with)."""
        if not self.items:
            raise ValueError("the question pool is empty")
        picks = rng.sample(self.items, n) if n <= len(self.items) else [rng.choice(self.items) for _ in range(n)]
        return [self.task(it) for it in picks]

    # ---- persistence ------------------------------------------------------------------------------------------
    def to_jsonl(self) -> str:
        return "".join(json.dumps(it) + "\n" for it in self.items)

    @classmethod
    def from_jsonl(cls, text: str, where: str = "pool.jsonl") -> "QuestionPool":
        """Read a pool back; a malformed line is a one-line :class:`~selfevo.tasks.TaskDataError`."""
        items = []
        for n, item in jsonl_records(text.splitlines(), where):
            if any(not item.get(k) for k in REQUIRED):
                raise TaskDataError(f"{where} line {n}: a pool item needs {', '.join(REQUIRED)}")
            if unknown := sorted(set(item) - set(FIELDS)):
                raise TaskDataError(f"{where} line {n}: unknown pool field(s) {', '.join(unknown)}")
            items.append(item)
        pool = cls(items)
        if len(pool._ids) != len(items):
            raise TaskDataError(f"{where}: duplicate item ids")
        return pool


@dataclass
class ItemBuffers:
    """Per-kind buffers of JSON items (dicts with an ``id``), de-duplicated on the id, sampled uniformly, saved as
    one JSON object (``{kind: [items]}``) with the checkpoint (``files={"buffers.json": buffers.to_json()}``)."""

    items: dict[str, list[dict]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._ids = {k: {it["id"] for it in v} for k, v in self.items.items()}

    def __len__(self) -> int:
        return sum(len(v) for v in self.items.values())

    def sizes(self) -> dict[str, int]:
        return {k: len(v) for k, v in self.items.items()}

    def add(self, kind: str, item: dict) -> bool:
        """Add ``item`` to the ``kind`` buffer unless an item with its id is there; says whether it was added."""
        ids = self._ids.setdefault(kind, set())
        if item["id"] in ids:
            return False
        self.items.setdefault(kind, []).append(item)
        ids.add(item["id"])
        return True

    def sample(self, rng: random.Random, kinds: tuple[str, ...] | str, n: int) -> list[dict]:
        """``n`` items drawn uniformly from the union of the ``kinds`` buffers (without replacement while they hold
        enough, then with); none when they are empty."""
        pool = [it for k in ((kinds,) if isinstance(kinds, str) else kinds) for it in self.items.get(k, [])]
        if not pool or n <= 0:
            return []
        return rng.sample(pool, n) if n <= len(pool) else [rng.choice(pool) for _ in range(n)]

    def to_json(self) -> str:
        return json.dumps(self.items)

    @classmethod
    def from_json(cls, text: str, where: str = "buffers.json") -> "ItemBuffers":
        """Read buffers back; anything but ``{kind: [items with an id]}`` is a one-line :class:`TaskDataError`."""
        try:
            items = json.loads(text)
        except json.JSONDecodeError as exc:
            raise TaskDataError(f"{where}: not JSON ({exc})") from None
        if not isinstance(items, dict) or not all(isinstance(v, list) and all(isinstance(it, dict) and "id" in it
                                                                              for it in v) for v in items.values()):
            raise TaskDataError(f"{where}: expected {{kind: [items with an id]}}")
        return cls(items)


def start_pool(loop, seeds: Callable[[], list[Task]]) -> QuestionPool:
    """A recipe's pool at the start of ``loop`` (a :class:`~selfevo.loop.Loop`): as checkpointed (resume), else
    built from the training tasks (``data.tasks``, else ``seeds()``)."""
    saved = checkpoint.read_file(loop.dir, "pool.jsonl") if loop.first_step else None
    if saved is not None:
        return QuestionPool.from_jsonl(saved)
    return QuestionPool.from_tasks(loop.tasks(seeds))


def note_new_task(ep, task: Task, fields: tuple[str, ...]) -> None:
    """Record the task an episode generated (its ``fields``, e.g. id, question, reference) in the episode's log
    (``meta["new_task"]``): ``selfevo report`` verifies the turns whose label the recipe names in its
    ``NEW_TASK_LABELS`` against it."""
    ep.meta[NEW_TASK] = {name: getattr(task, name) for name in fields}


def admit_each(episodes: list, pool: QuestionPool, admit: Callable[[object], str | None]) -> dict:
    """A phase's ``after`` for self-curriculum recipes: ``admit(episode)`` (None: added to ``pool``, else the reason
    it was refused) for each episode in order, recorded in ``episode.meta["admission"]``; the step's
    :func:`pool_metrics`."""
    reasons = [admit(ep) for ep in episodes]
    for ep, reason in zip(episodes, reasons):
        ep.meta[ADMISSION] = reason or "admitted"
    return pool_metrics(reasons, pool)


def pool_metrics(reasons: list[str | None], pool: QuestionPool) -> dict:
    """A step's admission figures: pool size, items added (reason None), their rate, rejections by reason."""
    rejected: dict[str, int] = {}
    for r in reasons:
        if r is not None:
            rejected[r] = rejected.get(r, 0) + 1
    added = reasons.count(None)
    return {"pool_size": len(pool), "pool_added": added,
            "acceptance_rate": round(added / len(reasons), 4) if reasons else None, "rejected": rejected}
