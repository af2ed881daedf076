"""The interaction runner: every episode is a small program that asks for generations; the runner batches them.

An episode program is a generator function ``program(episode)`` that yields an :class:`Ask` (or a list of them,
generated in parallel) and receives the resulting :class:`~selfevo.interaction.episodes.Turn` (or list of turns)::

    def debate(ep):
        first = yield [ask(solver, a, ep.task) for a in agents]            # all agents answer
        yield [ask(solver, a, ep.task, history=peers(first, a)) for a in agents]   # then read each other

:meth:`Runner.run` starts every episode's program and serves the engine a stream of requests until every program
has finished (one path): as soon as all asks of an episode's wave are answered, its turns are appended, its program
resumes and its next asks become ready. An engine that batches continuously (``engine.stream``, the HF engine) lets
them join its running batch while other episodes' requests are still decoding; an engine that only generates is
served in waves (:func:`~selfevo.engines.base.serve_in_waves`: every ready request in ONE ``generate`` call, which
is the pending asks of *all* episodes). Either way an episode's turns, seeds and wave numbers are the same.
Recipes (CoMAS, SAGE, MAESTRO) and the inference setups (``selfevo eval``) run on it.

Seeds are keyed, never drawn from a shared stream: the ``slot``-th request of an episode's ``wave``-th engine call
gets ``request_seed(seed, episode.key, wave, slot)``, so results do not depend on how many episodes run together,
in which order the engine serves them, or how it batches them.

Data-parallel (``torchrun``, see :mod:`selfevo.distributed`): every rank calls :meth:`Runner.run` with the same
episodes, runs those at positions ``i % world == rank`` on its own engine, and gets all of them back finished, in
the given order. The seeds are keyed per episode, so with an engine whose output does not depend on what else is in
its batch (the scripted test engines) the turns are those of one process running them all; real engines (hf, vLLM)
differ from batch to batch in the last bits of a logit, which can flip a sampled token.
"""
from __future__ import annotations

import dataclasses
import hashlib
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, Generator, Iterable, Sequence

from selfevo import distributed
from selfevo.engines.base import serve_in_waves
from selfevo.interaction.episodes import Episode, Turn
from selfevo.roles.base import Parsed, Role
from selfevo.shapes import Shapes
from selfevo.types import Completion, Request, SamplingParams, Task

Program = Callable[[Episode], Generator["Ask | list[Ask]", "Turn | list[Turn]", None]]


def request_seed(seed: int | str, key: str, call: int, slot: int) -> int:
    """A stable 63-bit seed for one request (independent of batching and order)."""
    digest = hashlib.blake2b(f"{seed}|{key}|{call}|{slot}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") & ((1 << 63) - 1)


@dataclass
class Ask:
    """One generation an episode program asks for.

    ``label`` is the name its turn records ("solver", "debater", ...). ``parser(prefix + text)`` gives the turn's
    :class:`Parsed` (None: not parsed). ``prefix`` is the start of the answer, given not generated. ``sampling``
    replaces the runner's settings; else ``max_new_tokens`` / ``temperature`` (0 / None: the runner's) adjust them.
    ``refs`` names the turns this one reacts to (turns of the same episode, or their indices). ``slot`` pins the
    seed slot (default: the ask's position among the episode's asks of that call). ``stop``: extra stop strings.
    """

    agent: str | None
    label: str
    messages: list[dict[str, str]]
    parser: Callable[[str], Parsed] | None = None
    prefix: str = ""
    sampling: SamplingParams | None = None
    max_new_tokens: int = 0
    temperature: float | None = None
    round: int | None = 0
    refs: dict[str, Any] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)
    slot: int | None = None
    stop: tuple[str, ...] = ()


def ask(role: Role, agent: str | None, task: Task, *, label: str | None = None, round: int | None = 0,
        refs: dict[str, Any] | None = None, meta: dict[str, Any] | None = None, **context: Any) -> Ask:
    """An :class:`Ask` for ``role`` played by ``agent`` on ``task``: messages and parser from the role (context
    keys checked by it), the role's format options (prefix, token limit, temperature). ``label``: the turn's name
    (default: the role's kind)."""
    ctx = role.context(**context)
    return Ask(agent, label or role.kind, role.messages(task, ctx), lambda text: role.parse(text, ctx),
               role.prefix, None, role.max_new_tokens, role.temperature, round, dict(refs or {}), dict(meta or {}))


@dataclass
class RunStatus:
    """What a run is doing, for progress displays: waves counted (the runner's engine calls so far; a wave is
    counted when the first episode asks for the next one, or when the run ends), requests finished and in flight
    (by turn label: the phases in flight), tokens generated, seconds since the run started. ``wave_requests``: the
    requests of the wave this status counts, 0 when it counts none (a status between waves)."""

    label: str
    waves: int
    done: int
    in_flight: Counter
    tokens: int
    seconds: float
    wave_requests: int = 0

    def __str__(self) -> str:
        phases = " ".join(f"{label} {n}" for label, n in sorted(self.in_flight.items()))
        rate = self.tokens / self.seconds if self.seconds > 0 else 0.0
        return f"{self.label}: {self.done} done, in flight: {phases or '-'} | {rate:.0f} tok/s"


class Runner:
    """Runs episode programs over an engine (see the module doc).

    ``seed``: the base of every request seed (e.g. ``f"{run_seed}/{step}"``). ``progress(RunStatus)`` is called
    once per wave as it is counted (``wave_requests`` > 0), between waves after finished requests at most every
    ``status_every`` seconds, and once at the end. ``calls`` / ``generations`` / ``tokens`` count waves (engine
    calls), requests sent and tokens generated (in a data-parallel run: the most waves of any rank, the requests and
    tokens of all ranks; the engine's decode counters, :attr:`concurrency`, and its forward ``shapes``
    (:class:`~selfevo.shapes.Shapes`) are this rank's). ``shard=False``: every rank runs every episode itself (no
    collective calls).
    """

    def __init__(self, engine, sampling: SamplingParams, seed: int | str = 0,
                 progress: Callable[[RunStatus], None] | None = None, shard: bool = True, status_every: float = 0.5):
        self.engine, self.sampling, self.seed, self.progress = engine, sampling, seed, progress
        self.shard, self.status_every = shard, status_every
        self.serve = engine.stream if callable(getattr(engine, "stream", None)) else (
            lambda source: serve_in_waves(engine.generate, source))
        self.calls = self.generations = self.tokens = 0
        self.decode_steps = self.decode_rows = self.prefill_tokens = 0  # from the engine's counters, if it keeps them
        self.shapes = Shapes()  # the engine's forward shapes (selfevo.shapes), if it counts them

    def run(self, episodes: Sequence[Episode], program: Program, label: str = "") -> list[Episode]:
        """Run ``program`` on every episode to the end; returns the episodes (their turns appended). In a
        data-parallel run this rank runs its share and the others' finished episodes (turns and ``meta``) are
        copied in, so every rank returns the same episodes."""
        episodes = list(episodes)
        if len({e.key for e in episodes}) != len(episodes):
            raise ValueError("episodes run together need distinct keys (they key the request seeds)")
        counters = getattr(self.engine, "counters", None)
        before = dict(counters) if isinstance(counters, dict) else None
        shapes = getattr(self.engine, "shapes", None)
        shapes_before = shapes.copy() if isinstance(shapes, Shapes) else None
        try:
            return self._run_all(episodes, program, label)
        finally:
            if before is not None:
                self.decode_steps += counters.get("decode_steps", 0) - before.get("decode_steps", 0)
                self.decode_rows += counters.get("decode_rows", 0) - before.get("decode_rows", 0)
                self.prefill_tokens += counters.get("prefill_tokens", 0) - before.get("prefill_tokens", 0)
            if shapes_before is not None:
                self.shapes += shapes - shapes_before

    @property
    def concurrency(self) -> float | None:
        """Mean requests in flight per decode step of this runner's runs (None: the engine does not count)."""
        return round(self.decode_rows / self.decode_steps, 2) if self.decode_steps else None

    def _run_all(self, episodes: list[Episode], program: Program, label: str) -> list[Episode]:
        if not (self.shard and distributed.active()):
            return self._run(episodes, program, label)
        calls, generations, tokens = self.calls, self.generations, self.tokens
        mine = self._run(distributed.shard(episodes), program, label)
        done = distributed.gather_shards(len(episodes), [(e.turns, e.meta) for e in mine])
        for ep, (turns, meta) in zip(episodes, done):
            ep.turns, ep.meta = turns, meta
        counts = distributed.all_gather_object((self.calls - calls, self.generations - generations,
                                                 self.tokens - tokens))
        self.calls = calls + max(c for c, _, _ in counts)
        self.generations = generations + sum(g for _, g, _ in counts)
        self.tokens = tokens + sum(t for _, _, t in counts)
        return episodes

    def _run(self, episodes: list[Episode], program: Program, label: str) -> list[Episode]:
        feed = _Feed(self, episodes, [program(e) for e in episodes], label)
        if feed.pending:
            self.serve(feed)
        feed.finish()
        return episodes

    def request(self, a: Ask, key: str, wave: int, slot: int) -> Request:
        """The request of ask ``a``: the runner's sampling adjusted by the ask, seeded by (episode, wave, slot)."""
        sampling = a.sampling or self.sampling
        if a.max_new_tokens:
            sampling = dataclasses.replace(sampling, max_new_tokens=a.max_new_tokens)
        if a.temperature is not None:
            sampling = dataclasses.replace(sampling, temperature=a.temperature)
        if a.stop:
            sampling = dataclasses.replace(sampling, stop=tuple(sampling.stop) + tuple(a.stop))
        return Request(a.agent, a.messages, sampling, seed=request_seed(self.seed, key, wave, slot), prefix=a.prefix)


def advance(i: int, prog, value, pending: dict) -> None:
    """Resume program ``i`` with ``value`` until it asks for something (recorded in ``pending``) or ends."""
    try:
        asked = prog.send(value) if value is not None else next(prog)
        while isinstance(asked, list) and not asked:  # an empty wave: nothing to generate
            asked = prog.send([])
    except StopIteration:
        return
    if isinstance(asked, Ask):
        pending[i] = ([asked], True)
    elif isinstance(asked, list) and all(isinstance(a, Ask) for a in asked):
        pending[i] = (asked, False)
    else:
        raise TypeError(f"an episode program must yield an Ask or a list of Asks, got {type(asked).__name__}")


def make_turn(ep: Episode, a: Ask, comp: Completion, wave: int, slot: int) -> Turn:
    """The turn of ask ``a`` answered by ``comp`` in the episode's ``wave``-th engine call, refs as indices."""
    refs = {k: (v if isinstance(v, int) else ep.index(v)) for k, v in a.refs.items()}
    parsed = a.parser(a.prefix + comp.text) if a.parser is not None else None
    return Turn(a.agent, a.label, comp, parsed, round=a.round, meta=dict(a.meta), wave=wave, slot=slot, refs=refs)


class _Feed:
    """What the runner serves the engine (a :class:`~selfevo.engines.base.RequestSource`): each episode's wave of
    asks becomes ready requests; when a wave is fully answered its turns are appended (in ask order), the program
    resumes, and its next wave becomes ready at once. It counts the run (waves, requests, tokens) and reports it."""

    def __init__(self, runner: Runner, episodes: list[Episode], programs: list, label: str):
        self.runner, self.episodes, self.programs, self.label = runner, episodes, programs, label
        self.pending: dict[int, tuple[list[Ask], bool]] = {}
        self.waves = [0] * len(episodes)
        self.answers: dict[int, dict[int, Completion]] = {}
        self.ready: list[tuple[tuple[int, int], Request]] = []
        self.in_flight: Counter = Counter()
        self.wave_requests: Counter = Counter()  # requests asked in each episode's n-th wave
        self.reported = self.done_count = 0
        self.start, self.last_status = time.perf_counter(), 0.0
        self.start_calls, self.start_tokens = runner.calls, runner.tokens
        for i, prog in enumerate(programs):
            advance(i, prog, None, self.pending)
        for i in sorted(self.pending):
            self._submit(i)

    def finish(self) -> None:
        """After the engine stopped: every episode must be done; the waves counted and a last status reported."""
        if self.pending:
            raise RuntimeError(f"the engine stopped with {len(self.pending)} episodes still waiting for answers")
        waves = max(self.waves, default=0)
        self._report(waves)
        self.runner.calls = self.start_calls + waves
        if waves:
            self._status(force=True)

    def take(self) -> list[tuple[tuple[int, int], Request]]:
        ready, self.ready = self.ready, []
        return ready

    def done(self, key: tuple[int, int], completion: Completion) -> None:
        i, pos = key
        answers = self.answers.setdefault(i, {})
        if pos in answers or i not in self.pending:
            raise RuntimeError(f"the engine answered request {key} twice")
        answers[pos] = completion
        asks, single = self.pending[i]
        self.in_flight[asks[pos].label] -= 1
        self.done_count += 1
        self.runner.tokens += len(completion.token_ids)
        if len(answers) == len(asks):
            del self.pending[i], self.answers[i]
            ep, wave = self.episodes[i], self.waves[i]
            turns = [make_turn(ep, a, answers[p], wave, p if a.slot is None else a.slot) for p, a in enumerate(asks)]
            ep.turns.extend(turns)
            advance(i, self.programs[i], turns[0] if single else turns, self.pending)
            if i in self.pending:
                self._submit(i)
        self._status()

    def _submit(self, i: int) -> None:
        self.waves[i] += 1
        self._report(self.waves[i] - 1)
        asks, _ = self.pending[i]
        for pos, a in enumerate(asks):
            slot = pos if a.slot is None else a.slot
            self.ready.append(((i, pos), self.runner.request(a, self.episodes[i].key, self.waves[i], slot)))
            self.in_flight[a.label] += 1
        self.runner.generations += len(asks)
        self.wave_requests[self.waves[i]] += len(asks)

    def _report(self, waves: int) -> None:
        """``progress`` for every wave up to ``waves`` not yet counted (the first episode to start the next one)."""
        while self.reported < waves:
            self.reported += 1
            self._status(force=True, wave_requests=self.wave_requests[self.reported])

    def _status(self, force: bool = False, wave_requests: int = 0) -> None:
        now = time.perf_counter()
        if self.runner.progress is None or not (force or now - self.last_status >= self.runner.status_every):
            return
        self.last_status = now
        self.runner.progress(RunStatus(self.label, self.start_calls + self.reported, self.done_count,
                                       +self.in_flight, self.runner.tokens - self.start_tokens, now - self.start,
                                       wave_requests))


def run_episodes(engine, tasks: Iterable[Task], program: Program, sampling: SamplingParams, seed: int | str = 0,
                 keys: Sequence[str] | None = None) -> list[Episode]:
    """Convenience: one episode per task (keyed by task id, or ``keys``), run to the end with a fresh runner."""
    tasks = list(tasks)
    episodes = [Episode(t, key=k) for t, k in zip(tasks, keys or [t.id for t in tasks])]
    return Runner(engine, sampling, seed).run(episodes, program)
