"""What every inference setup shares: result records, options, the episode programs' runner.

A setup turns a list of tasks into one :class:`TaskResult` per task (the final response, its extracted answer and
every intermediate response as :class:`~selfevo.interaction.Turn`\\ s). Its :meth:`Setup.solve` is an *episode
program* (see :mod:`selfevo.interaction.runner`): a generator over one task's :class:`~selfevo.interaction.Episode`
that yields :class:`~selfevo.interaction.Ask`\\ s (or lists of them, generated in parallel), receives the turns
and ends with :meth:`Setup.finish`. The shared :class:`~selfevo.interaction.Runner` runs all tasks together (a
continuously batching engine gets each task's next asks as soon as its previous ones are answered; other engines
get one ``engine.generate`` call per wave of all tasks); ``run.waves`` is the most waves any task took, and a
turn's ``wave`` is the one that produced it. Request seeds are ``request_seed(seed, task id, wave, slot)`` (:func:`selfevo.interaction.request_seed`), so results do not depend on
how an engine batches or orders requests.

Agents: ``agents`` is a list of adapter names (``None`` = the bare backbone). A setup with several roles maps its
i-th participant to ``agents[i % len(agents)]``; each setup documents its own mapping.
"""
from __future__ import annotations

import abc
import dataclasses
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar, Generator, Mapping, Sequence

from omegaconf import DictConfig, OmegaConf

from selfevo import distributed
from selfevo.config import ConfigError, load_section
from selfevo.errors import SelfevoError
from selfevo.interaction import Ask, Episode, Runner, RunStatus, Turn
from selfevo.registry import Registry
from selfevo.types import SamplingParams, Task
from selfevo.verifiers import verify
from selfevo.verifiers.base import Verdict
from selfevo.verifiers.voting import Vote, answer_equivalence, majority_vote

SETUPS: Registry[type["Setup"]] = Registry("setup")


class SetupError(SelfevoError, ValueError):
    """A bad setup option or argument, said in one line."""


def turn_record(turn: Turn) -> dict[str, Any]:
    """A JSON-able record of one response of a setup run (the ``responses`` of ``selfevo eval``'s items.jsonl);
    ``wave`` is the engine call that produced it, ``label`` the turn's name."""
    return {"wave": turn.wave, "label": turn.label, "agent": turn.agent, "text": turn.text, "slot": turn.slot,
            "round": turn.round, "finish_reason": turn.finish_reason, "n_tokens": turn.n_tokens,
            "meta": dict(turn.meta)}


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

    def turn_records(self) -> list[dict[str, Any]]:
        """Every turn as a JSON-able record (:func:`turn_record`)."""
        return [turn_record(t) for t in self.turns]


@dataclass
class SetupRun:
    setup: str
    results: list[TaskResult]
    metrics: dict[str, Any]  # setup-level metrics (e.g. coverage/identification for maestro_select)
    waves: int  # engine calls made (the most waves any task took)
    generations: int  # requests sent in total
    options: dict[str, Any]
    sampling: dict[str, Any]


def user(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


# ----------------------------------------------------------------------------------------------------------------
# Options
# ----------------------------------------------------------------------------------------------------------------


def option_names(options_cls: type) -> list[str]:
    return [f.name for f in dataclasses.fields(options_cls)]


def load_options(options_cls: type, values: Mapping[str, Any] | DictConfig, setup: str) -> DictConfig:
    """A setup's options: ``values`` (Python values, strings that read as the declared types, or parsed
    ``key=value`` overrides) over the defaults of its :func:`~selfevo.config.opt` dataclass, checked by the config
    machinery (names with did-you-mean, types, bounds, choices); any problem is a one-line :class:`SetupError`."""
    try:
        return load_section(options_cls, values, "its options")
    except ConfigError as exc:
        raise SetupError(f"setup '{setup}': {exc}") from None


# ----------------------------------------------------------------------------------------------------------------
# The base class
# ----------------------------------------------------------------------------------------------------------------


@dataclass
class NoOptions:
    """The options of a setup that has none."""


class Setup(abc.ABC):
    """Base of every setup: ``Setup(engine, sampling, agents=None, seed=0, verifier=None, progress=None,
    **options)`` then ``run(tasks) -> SetupRun``.

    ``sampling`` applies to every generation unless a setup documents otherwise (maestro_select's central agent
    runs at temperature 0). ``verifier(task, response) -> Verdict`` (default :func:`selfevo.verifiers.verify`)
    extracts answers for voting and judges candidates for coverage metrics. ``progress(label)`` is called once
    per wave (``label``: :meth:`wave_label`).

    ``Options`` declares the setup's options as a dataclass of :func:`~selfevo.config.opt` fields (meaning,
    bounds, choices): ``options`` are checked against it (:func:`load_options`) and kept as ``self.opts``, an
    instance of it; ``selfevo eval --help`` and ``selfevo ls`` list them from it.
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
        self.verifier = verify if verifier is None else verifier
        self.progress = progress
        self.opts = OmegaConf.to_object(load_options(self.Options, options, self.name))
        self.waves = 0
        self.generations = 0
        self._results: dict[str, TaskResult] = {}
        self._verdicts: dict[tuple[str, str], Verdict] = {}

    # ---- to override ---------------------------------------------------------------------------------------
    @abc.abstractmethod
    def max_waves(self) -> int:
        """Waves (engine calls) this setup makes at most (for progress bars)."""

    @abc.abstractmethod
    def solve(self, ep: Episode) -> Generator[Ask | list[Ask], Turn | list[Turn], None]:
        """The episode program of one task (``ep.task``): yields asks, receives their turns, ends with
        :meth:`finish`. The pending asks of all tasks go to the engine as one call."""

    def wave_label(self, wave: int) -> str:
        """The progress label of the ``wave``-th engine call (every setup's tasks advance in lockstep)."""
        return f"wave {wave}"

    def metrics(self, tasks: Sequence[Task], results: Sequence[TaskResult]) -> dict[str, Any]:
        return {}

    # ---- shared ----------------------------------------------------------------------------------------------
    def run(self, tasks: Sequence[Task]) -> SetupRun:
        runner = Runner(self.engine, self.sampling, seed=self.seed, progress=self._progress)
        ids = [t.id for t in tasks]
        if len(set(ids)) != len(ids):
            dup = sorted({i for i in ids if ids.count(i) > 1})
            raise SetupError(f"setup '{self.name}': task ids must be distinct (they key the request seeds); "
                             f"repeated: {', '.join(dup[:5])}")
        self._results = {}
        episodes = runner.run([Episode(t) for t in tasks], self.solve, self.name)
        self.waves, self.generations = runner.calls, runner.generations
        finished = self._every_ranks_results()
        results = [finished.pop(ep.key) for ep in episodes]
        return SetupRun(self.name, results, self.metrics(tasks, results), self.waves, self.generations,
                        dataclasses.asdict(self.opts), dataclasses.asdict(self.sampling))

    def _every_ranks_results(self) -> dict[str, TaskResult]:
        """The finished tasks' results: in a data-parallel run (the loop's held-out evaluation under torchrun) the
        runner gives each rank its share of the episodes, so each rank finished only those: every rank's are
        gathered."""
        if not distributed.active():
            return self._results
        merged: dict[str, TaskResult] = {}
        for part in distributed.all_gather_object(self._results):
            merged.update(part)
        return merged

    def _progress(self, status: RunStatus) -> None:
        """``progress`` of each wave as the runner counts it."""
        if self.progress is not None and status.wave_requests:
            self.progress(self.wave_label(status.waves))

    def agent(self, i: int) -> str | None:
        return self.agents[i % len(self.agents)]

    @staticmethod
    def ask(agent: str | None, label: str, messages: list[dict[str, str]], round: int | None = None,
            slot: int | None = None, **fields: Any) -> Ask:
        """An :class:`Ask` (no round unless given); ``slot`` pins its seed slot."""
        return Ask(agent, label, messages, round=round, slot=slot, **fields)

    def finish(self, ep: Episode, final: str, **info: Any) -> None:
        """End ``ep``: its result is ``final`` (answer extracted by the verifier), its turns and ``info``."""
        self._results[ep.key] = TaskResult(ep.task.id, final, self.extract(ep.task, final), ep.turns, dict(info))

    def verdict(self, task: Task, response: str) -> Verdict:
        key = (task.id, response)
        if key not in self._verdicts:
            self._verdicts[key] = self.verifier(task, response)
        return self._verdicts[key]

    def extract(self, task: Task, response: str) -> str | None:
        return self.verdict(task, response).extracted

    def vote(self, task: Task, responses: Sequence[str]) -> Vote:
        return majority_vote([self.extract(task, r) for r in responses], answer_equivalence(task))


def aggregation_prompt(query: str, solutions: Sequence[str], style: str = "consistency") -> str:
    """MASLab's aggregation call (self-consistency uses ``[Task]``/``[Solution i]`` headers, debate plain ones)."""
    if style == "consistency":
        body = "".join(f"\n\n[Solution {i}]:\n{s}" for i, s in enumerate(solutions, 1))
        return (f"[Task]:\n{query}{body}\n\nGiven the task and all the above solutions, reason over them carefully "
                f"and provide a final answer to the task.")
    body = "".join(f"\n\nSolution {i}:\n{s}" for i, s in enumerate(solutions, 1))
    return (f"Task:\n{query}{body}\n\nGiven all the above solutions, reason over them carefully and provide a final "
            f"answer to the task.")
