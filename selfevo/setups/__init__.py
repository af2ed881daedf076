"""Inference setups (MASLab-style baselines and prompt-only MAESTRO) in the ``SETUPS`` registry.

>>> from selfevo.setups import run_setup
>>> run = run_setup("debate", tasks, engine, SamplingParams(max_new_tokens=256, temperature=0.5))
>>> run.results[0].final_response, run.results[0].extracted, run.metrics, run.waves

Registered: ``vanilla``, ``consistency``, ``autogen``, ``debate``, ``maestro_select``, and MAESTRO Table 1's
multi-agent baselines ``php``, ``group_debate``, ``dylan``, ``agentprune`` (see each module). Every
setup is an episode program per task on the shared :class:`~selfevo.interaction.Runner`, which batches all
generations of one wave, across all tasks, into one ``engine.generate`` call (turns and request seeds are
:mod:`selfevo.interaction`'s).
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

from selfevo.setups.base import (SETUPS, Setup, SetupError, SetupRun, TaskResult, load_options, option_names,
                                 turn_record)
from selfevo.setups import vanilla, consistency, autogen, debate, maestro  # noqa: F401,I001  (registers)
from selfevo.setups import php, group_debate, dylan, agentprune  # noqa: F401,I001  (registers)
from selfevo.types import SamplingParams, Task


def setup_names() -> list[str]:
    return SETUPS.names()


def make_setup(name: str, engine, sampling: SamplingParams, agents: Sequence[str | None] | None = None,
               seed: int = 0, verifier: Callable | None = None, progress: Callable[[str], None] | None = None,
               **options: Any) -> Setup:
    """The setup registered as ``name`` (one-line errors for unknown names and options)."""
    return SETUPS.get(name)(engine, sampling, agents=agents, seed=seed, verifier=verifier, progress=progress,
                            **options)


def run_setup(name: str, tasks: Sequence[Task], engine, sampling: SamplingParams,
              agents: Sequence[str | None] | None = None, seed: int = 0, verifier: Callable | None = None,
              progress: Callable[[str], None] | None = None, **options: Any) -> SetupRun:
    """Run setup ``name`` on ``tasks``: per-task results, setup metrics, and the number of waves (engine calls)."""
    return make_setup(name, engine, sampling, agents, seed, verifier, progress, **options).run(tasks)


__all__ = ["SETUPS", "Setup", "SetupError", "SetupRun", "TaskResult", "load_options", "make_setup", "option_names",
           "run_setup", "setup_names", "turn_record"]
