"""Vanilla: one response per task (MASLab ``vanilla``; the prompt is :func:`~selfevo.tasks.format_prompt`).

Default sampling: greedy (temperature 0), as MAESTRO App. C keeps single predictions deterministic. Agent:
``agents[0]``. Steps: 1.
"""
from __future__ import annotations

from typing import Sequence

from selfevo.setups.base import SETUPS, Setup, TaskResult, user
from selfevo.tasks import format_prompt
from selfevo.types import Task


@SETUPS.register("vanilla")
class Vanilla(Setup):
    name = "vanilla"
    default_temperature = 0.0

    def max_steps(self) -> int:
        return 1

    def solve(self, tasks: Sequence[Task]) -> list[TaskResult]:
        requests = [self.request(t, 0, user(format_prompt(t)), self.agent(0)) for t in tasks]
        completions = self.generate(requests, "vanilla")
        return [self.result(t, c.text, [self.turn(c, "answer")]) for t, c in zip(tasks, completions)]
