"""Vanilla: one response per task (MASLab ``vanilla``; the prompt is :func:`~selfevo.tasks.format_prompt`).

Default sampling: greedy (temperature 0), as MAESTRO App. C keeps single predictions deterministic. Agent:
``agents[0]``. Waves: 1.
"""
from __future__ import annotations

from selfevo.setups.base import SETUPS, Episode, Setup, user
from selfevo.tasks import format_prompt


@SETUPS.register("vanilla")
class Vanilla(Setup):
    name = "vanilla"
    default_temperature = 0.0

    def max_waves(self) -> int:
        return 1

    def wave_label(self, wave: int) -> str:
        return "vanilla"

    def solve(self, ep: Episode):
        answer = yield self.ask(self.agent(0), "answer", user(format_prompt(ep.task)))
        self.finish(ep, answer.text)
