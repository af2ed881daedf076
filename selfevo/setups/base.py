"""What every inference setup shares: result records, options, step-batched generation, seeds, voting.

A setup turns a list of tasks into one :class:`TaskResult` per task (the final response, its extracted answer and
every intermediate response as :class:`Turn`\\ s). It works in *steps*: all generations of one step, across all
tasks, go to the engine in a single ``engine.generate`` call (:meth:`Setup.generate`), so ``run.steps`` equals the
number of engine calls. Request seeds are derived from ``(seed, task id, step, slot)``, so results do not depend on
how an engine batches or orders requests.

Agents: ``agents`` is a list of adapter names (``None`` = the bare backbone). A setup with several roles maps its
i-th participant to ``agents[i % len(agents)]``; each setup documents its own mapping.
"""
from __future__ import annotations

import abc
import dataclasses
import difflib
import hashlib
import re
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar, Sequence

from selfevo.registry import Registry
from selfevo.types import Completion, Request, SamplingParams, Task
from selfevo.verifiers.base import Verdict

SETUPS: Registry[type["Setup"]] = Registry("setup")


class SetupError(ValueError):
    """A bad setup option or argument, said in one line."""


@dataclass
class Turn:
    """One generated response inside a setup run."""

    step: int  # 1-based engine call that produced it
    role: str  # "answer", "sample", "aggregate", "assistant", "user_proxy", "debater", "execution", "central"
    agent: str | None  # adapter name (None = base model)
    text: str
    slot: int = 0  # sample / agent index within the step (per task)
    round: int | None = None
    finish_reason: str = ""
    n_tokens: int = 0
    meta: dict[str, Any] = field(default_factory=dict)


@dataclass
class TaskResult:
    task_id: str
    final_response: str
    extracted: str | None  # the verifier's extraction from final_response
    turns: list[Turn] = field(default_factory=list)
    info: dict[str, Any] = field(default_factory=dict)  # setup-specific per-task details (votes, choices, ...)

    @property
    def responses(self) -> list[str]:
        return [t.text for t in self.turns]


@dataclass
class SetupRun:
    setup: str
    results: list[TaskResult]
    metrics: dict[str, Any]  # setup-level metrics (e.g. coverage/identification for maestro_select)
    steps: int  # engine.generate calls made
    generations: int  # requests sent in total
    options: dict[str, Any]
    sampling: dict[str, Any]


def request_seed(seed: int, task_id: str, step: int, slot: int) -> int:
    """A stable 63-bit seed for one request (independent of batching and order)."""
    digest = hashlib.blake2b(f"{seed}|{task_id}|{step}|{slot}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") & ((1 << 63) - 1)


def user(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


# ----------------------------------------------------------------------------------------------------------------
# Majority vote
# ----------------------------------------------------------------------------------------------------------------

_NUM = re.compile(r"-?\d+(?:\.\d+)?")


def normalize_answer(answer: str | None) -> str | None:
    """A comparison key for an extracted answer: spacing, ``$``, ``\\!``/``\\,``, ``\\left/\\right``, thousands
    separators, a trailing period and ``\\text{...}`` wrappers are dropped; numbers are written canonically
    (``18.00`` → ``18``). None/empty stays None."""
    if answer is None:
        return None
    text = answer.strip().strip("$").strip()
    text = re.sub(r"\\text\{([^{}]*)\}", r"\1", text)
    text = re.sub(r"\\[!,;]|\\left|\\right|\s+", "", text).rstrip(".")
    text = re.sub(r"(?<=\d),(?=\d{3}\b)", "", text)
    if not text:
        return None
    if _NUM.fullmatch(text):
        value = float(text)
        text = str(int(value)) if value.is_integer() else repr(value)
    return text


@dataclass
class Vote:
    index: int | None  # first response carrying the winning answer; None when no response had an answer
    answer: str | None  # the winning (raw extracted) answer
    count: int  # votes for it
    total: int  # responses with an answer
    groups: list[list[int]] = field(default_factory=list)  # response indices per answer group, in first-seen order


def majority_vote(answers: Sequence[str | None], same: Callable[[str, str], bool] | None = None) -> Vote:
    """Group answers by :func:`normalize_answer` (and ``same(a, b)``, e.g. math equivalence, between groups);
    the largest group wins, ties go to the group seen first. Missing answers (None) do not vote."""
    groups: list[list[int]] = []
    keys: list[str] = []
    for i, raw in enumerate(answers):
        key = normalize_answer(raw)
        if key is None:
            continue
        for g, k in enumerate(keys):
            if key == k or (same is not None and _safe_same(same, answers[groups[g][0]], raw)):
                groups[g].append(i)
                break
        else:
            groups.append([i])
            keys.append(key)
    if not groups:
        return Vote(None, None, 0, 0, [])
    best = max(range(len(groups)), key=lambda g: (len(groups[g]), -g))
    first = groups[best][0]
    return Vote(first, answers[first], len(groups[best]), sum(len(g) for g in groups), groups)


def _safe_same(same: Callable[[str, str], bool], a: str, b: str) -> bool:
    try:
        return bool(same(a, b))
    except Exception:  # noqa: BLE001 - an equivalence checker that fails means "not shown equal"
        return False


def answer_equivalence(task: Task) -> Callable[[str, str], bool] | None:
    """Extra equivalence for voting: math-verify for math tasks (``1/2`` = ``0.5``), none otherwise."""
    name = str(task.meta.get("verifier") or task.domain)
    if name != "math":
        return None
    from selfevo.verifiers.math import equivalent

    return lambda a, b: equivalent(a, b)[0]


# ----------------------------------------------------------------------------------------------------------------
# Options
# ----------------------------------------------------------------------------------------------------------------


def option_names(options_cls: type) -> list[str]:
    return [f.name for f in dataclasses.fields(options_cls)]


def coerce_option(options_cls: type, name: str, value: Any, setup: str = "") -> Any:
    """Turn a (possibly string, from the command line) value into the declared type of option ``name``.

    Unknown names and values that do not fit are one-line :class:`SetupError`\\ s.
    """
    fields = {f.name: f for f in dataclasses.fields(options_cls)}
    if name not in fields:
        close = difflib.get_close_matches(name, list(fields), n=1)
        hint = f" (did you mean '{close[0]}'?)" if close else ""
        known = ", ".join(fields) or "none"
        raise SetupError(f"setup '{setup}' has no option '{name}'{hint}; its options: {known}")
    declared = str(fields[name].type)
    kind = declared.split("|")[0].strip()
    optional = "None" in declared
    where = f"option '{name}' of setup '{setup}'"
    if value is None or (optional and isinstance(value, str) and value.strip().lower() in ("none", "null", "")):
        if optional:
            return None
        raise SetupError(f"{where} must be set (a {kind})")
    if kind == "bool":
        if isinstance(value, bool):
            return value
        text = str(value).strip().lower()
        if text in ("true", "1", "yes"):
            return True
        if text in ("false", "0", "no"):
            return False
        raise SetupError(f"{where} must be true/false, got {value!r}")
    if kind in ("int", "float"):
        if isinstance(value, bool):
            raise SetupError(f"{where} must be a number, got {value!r}")
        try:
            number = float(value)
        except (TypeError, ValueError):
            raise SetupError(f"{where} must be {'an integer' if kind == 'int' else 'a number'}, "
                             f"got {value!r}") from None
        if kind == "int":
            if not number.is_integer():
                raise SetupError(f"{where} must be an integer, got {value!r}")
            return int(number)
        return number
    return str(value)


# ----------------------------------------------------------------------------------------------------------------
# The base class
# ----------------------------------------------------------------------------------------------------------------


@dataclass
class NoOptions:
    pass


class Setup(abc.ABC):
    """Base of every setup: ``Setup(engine, sampling, agents=None, seed=0, verifier=None, progress=None, **options)``
    then ``run(tasks) -> SetupRun``.

    ``sampling`` applies to every generation unless a setup documents otherwise (maestro_select's central agent
    runs at temperature 0). ``verifier(task, response) -> Verdict`` (default :func:`selfevo.verifiers.verify`)
    extracts answers for voting and judges candidates for coverage metrics. ``progress(label)`` is called after
    every engine call.
    """

    name: ClassVar[str] = ""
    Options: ClassVar[type] = NoOptions
    # The paper-ish sampling defaults, used by ``selfevo eval`` when the command line does not set them.
    default_temperature: ClassVar[float] = 0.5
    default_top_p: ClassVar[float] = 1.0

    def __init__(self, engine, sampling: SamplingParams, agents: Sequence[str | None] | None = None, seed: int = 0,
                 verifier: Callable[[Task, str], Verdict] | None = None,
                 progress: Callable[[str], None] | None = None, **options: Any):
        self.engine = engine
        self.sampling = sampling
        self.agents: list[str | None] = list(agents) if agents else [None]
        self.seed = seed
        if verifier is None:
            from selfevo.verifiers import verify as verifier
        self.verifier = verifier
        self.progress = progress
        values = {k: coerce_option(self.Options, k, v, self.name) for k, v in options.items()}
        self.opts = self.Options(**values)
        self.validate()
        self.steps = 0
        self.generations = 0
        self._verdicts: dict[tuple[str, str], Verdict] = {}

    # ---- to override ---------------------------------------------------------------------------------------
    def validate(self) -> None:
        """Check option values (raise SetupError)."""

    @abc.abstractmethod
    def max_steps(self) -> int:
        """Engine calls this setup makes at most (for progress bars)."""

    @abc.abstractmethod
    def solve(self, tasks: Sequence[Task]) -> list[TaskResult]:
        """Every task's result; each generation step goes to the engine as one batched call."""

    def metrics(self, tasks: Sequence[Task], results: Sequence[TaskResult]) -> dict[str, Any]:
        return {}

    # ---- shared ----------------------------------------------------------------------------------------------
    def run(self, tasks: Sequence[Task]) -> SetupRun:
        self.steps = self.generations = 0
        results = self.solve(list(tasks)) if tasks else []
        return SetupRun(self.name, results, self.metrics(tasks, results), self.steps, self.generations,
                        dataclasses.asdict(self.opts), dataclasses.asdict(self.sampling))

    def agent(self, i: int) -> str | None:
        return self.agents[i % len(self.agents)]

    def request(self, task: Task, slot: int, messages: list[dict[str, str]], agent: str | None,
                sampling: SamplingParams | None = None) -> Request:
        """A request of the *next* step (its seed depends on the step number and the slot)."""
        return Request(agent, messages, sampling or self.sampling, request_seed(self.seed, task.id, self.steps + 1,
                                                                                 slot))

    def generate(self, requests: Sequence[Request], label: str = "") -> list[Completion]:
        """One step: every request of this step in a single engine call (nothing to do: no call)."""
        if not requests:
            return []
        completions = self.engine.generate(list(requests))
        if len(completions) != len(requests):
            raise RuntimeError(f"engine returned {len(completions)} completions for {len(requests)} requests")
        self.steps += 1
        self.generations += len(requests)
        if self.progress is not None:
            self.progress(label or f"step {self.steps}")
        return completions

    def turn(self, completion: Completion, role: str, slot: int = 0, round: int | None = None, **meta: Any) -> Turn:
        return Turn(self.steps, role, completion.request.agent, completion.text, slot, round,
                    completion.finish_reason, len(completion.token_ids), dict(meta))

    def verdict(self, task: Task, response: str) -> Verdict:
        key = (task.id, response)
        if key not in self._verdicts:
            self._verdicts[key] = self.verifier(task, response)
        return self._verdicts[key]

    def extract(self, task: Task, response: str) -> str | None:
        return self.verdict(task, response).extracted

    def vote(self, task: Task, responses: Sequence[str]) -> Vote:
        return majority_vote([self.extract(task, r) for r in responses], answer_equivalence(task))

    def result(self, task: Task, final: str, turns: list[Turn], **info: Any) -> TaskResult:
        return TaskResult(task.id, final, self.extract(task, final), turns, dict(info))


def aggregation_prompt(query: str, solutions: Sequence[str], style: str = "consistency") -> str:
    """MASLab's aggregation call (self-consistency uses ``[Task]``/``[Solution i]`` headers, debate plain ones)."""
    if style == "consistency":
        body = "".join(f"\n\n[Solution {i}]:\n{s}" for i, s in enumerate(solutions, 1))
        return (f"[Task]:\n{query}{body}\n\nGiven the task and all the above solutions, reason over them carefully "
                f"and provide a final answer to the task.")
    body = "".join(f"\n\nSolution {i}:\n{s}" for i, s in enumerate(solutions, 1))
    return (f"Task:\n{query}{body}\n\nGiven all the above solutions, reason over them carefully and provide a final "
            f"answer to the task.")
