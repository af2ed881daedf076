"""A training step's parts as plain functions: roll out a step's phases (:func:`rollout`), score and assign their
rewards (:func:`assign_rewards`), make every rank train on the same rewards (:func:`agree_on_rewards`), and the
step's timing figures for ``metrics.jsonl``. :meth:`selfevo.loop.Loop.run_step` composes them with the updates.

A :class:`Phase` is one rollout of a step (an episode program on a batch of tasks, and its reward source); an
:class:`Update` is one call of the optimizer (or of the recipe's own update function).
"""
from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from typing import Any, Callable, Hashable, Sequence

from selfevo import distributed
from selfevo.interaction import Episode, Runner, Turn
from selfevo.loop.memory import release_freed_memory
from selfevo.optimizers import UpdateSpec
from selfevo.rewards import assign
from selfevo.shapes import Shapes
from selfevo.types import Task


@dataclass
class Phase:
    """One rollout phase of a step: ``program`` (an episode program) runs on one episode per task of ``tasks`` (a
    list, or a function called when the phase starts, after the phases before it and their ``after``); ``after``
    then sees the phase's episodes (recipe state that must follow the rollout before any reward: SAGE admits new
    questions to its pool there) and returns metrics; ``reward`` (a reward source, :mod:`selfevo.rewards`) scores
    the phase's episodes once every phase has run (None: no rewards)."""

    label: str  # progress bar
    tasks: Sequence[Task] | Callable[[], Sequence[Task]]
    program: Callable
    reward: Callable | None = None
    key: str = ""  # prefix of the episode keys (the keys of their request seeds): distinct per phase of a step
    after: Callable[[list[Episode]], dict] | None = None


@dataclass
class Update:
    """One optimizer call of a step: :meth:`selfevo.loop.Loop.train` of ``agents`` (default all) with ``spec``
    (:class:`~selfevo.optimizers.UpdateSpec`: groups, rows kept together, which turns train, per-row extras) and
    ``optimizer`` (default the run's), or ``fn(loop, episodes) -> stats`` for an update the kit does not run (e.g.
    a TRL trainer; ``examples/srlm.py``)."""

    agents: list[str] | None = None
    spec: UpdateSpec = UpdateSpec()
    optimizer: Callable | None = None
    fn: Callable[[Any, list[Episode]], dict] | None = None

    def run(self, loop, episodes: list[Episode]) -> dict:
        """This update's per-agent stats on ``loop`` (a :class:`~selfevo.loop.Loop`)."""
        if self.fn is not None:
            return self.fn(loop, episodes)
        return loop.train(episodes, self.spec, self.agents, self.optimizer)


def rollout(runner: Runner, phases: Sequence[Phase]) -> tuple[list[list[Episode]], dict, float]:
    """Each phase in order on ``runner`` (its episodes keyed ``{phase.key}{i}:{task id}``), then its ``after``:
    the episodes per phase, the ``after`` metrics (merged) and the rollout's wall time in seconds."""
    by_phase, out, seconds = [], {}, 0.0
    for phase in phases:
        tasks = phase.tasks() if callable(phase.tasks) else phase.tasks
        batch = [Episode(t, key=f"{phase.key}{i}:{t.id}") for i, t in enumerate(tasks)]
        episodes, took = timed(runner.run, batch, phase.program, phase.label)
        by_phase.append(episodes)
        seconds += took
        out.update(phase.after(episodes) if phase.after else {})
    return by_phase, out, seconds


def assign_rewards(phases: Sequence[Phase], by_phase: Sequence[list[Episode]]) -> dict:
    """Score each phase's episodes with its reward source and assign the rewards to their turns; the sources'
    metrics (merged)."""
    metrics: dict = {}
    for phase, episodes in zip(phases, by_phase):
        if phase.reward is not None:
            result = phase.reward(episodes)
            assign(episodes, result)
            metrics.update(result.metrics)
    return metrics


def agree_on_rewards(episodes: list[Episode]) -> None:
    """Data-parallel: every rank trains on rank 0's rewards. Rewards are computed on every rank from the same
    episodes; a reward that is not a pure function of them (a code test that times out on one rank only) would
    otherwise make the ranks take different parameter updates. A disagreement is reported once per step."""
    if not distributed.active():
        return
    turns = [t for e in episodes for t in e.turns]
    views = distributed.all_gather_object([t.reward for t in turns])
    if any(v != views[0] for v in views[1:]) and distributed.is_main():
        differ = sum(len(set(map(repr, column))) > 1 for column in zip(*views))
        print(f"selfevo: ranks disagree on {differ} of {len(turns)} rewards (a reward source that is not "
              f"deterministic?); every rank uses rank 0's", file=sys.stderr)
    for turn, reward in zip(turns, views[0]):
        turn.reward = reward


def rollout_timing(seconds: float, runner: Runner) -> dict:
    """A step's rollout figures for ``metrics.jsonl``: wall time, tokens generated by ``runner`` and the mean
    requests in flight per decode step (``concurrency``) and the prompt tokens prefilled, where the engine counts
    them, and ``rollout_shapes`` (this rank's forwards, :meth:`selfevo.shapes.Shapes.to_json`) where it counts those."""
    out = {"rollout_s": round(seconds, 2), "rollout_tokens": runner.tokens}
    if runner.concurrency is None:
        return out
    out = {**out, "concurrency": runner.concurrency, "prefill_tokens": runner.prefill_tokens}
    return {**out, "rollout_shapes": runner.shapes.to_json()} if runner.shapes else out


def update_timing(seconds: float, train: dict, shapes: Shapes | None = None) -> dict:
    """A step's update figures: wall time and the trained rows' tokens (prompt + completion, no padding) over the
    agents' stats from :meth:`Loop.train`, and ``update_shapes``: the policy store's passes on this rank
    (:meth:`selfevo.shapes.Shapes.to_json`), when it ran any."""
    out = {"update_s": seconds, "update_tokens": sum(s.get("tokens", 0) for s in train.values())}
    return {**out, "update_shapes": shapes.to_json()} if shapes else out


def deep_merge(a: dict, b: dict) -> dict:
    """``a`` updated by ``b``, where both hold a dict under the same key, merged the same way (a new dict)."""
    out = dict(a)
    for k, v in b.items():
        out[k] = deep_merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def timed(fn: Callable, *args, **kwargs) -> tuple[object, float]:
    """``fn(*args, **kwargs)`` and its wall time in seconds; freed heap returned to the OS afterwards."""
    t0 = time.perf_counter()
    out = fn(*args, **kwargs)
    release_freed_memory()
    return out, round(time.perf_counter() - t0, 2)
