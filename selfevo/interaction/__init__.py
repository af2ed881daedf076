"""Interaction: typed turns and episodes, and the runner that sends every episode's pending requests as one call.

>>> from selfevo.interaction import Runner, ask, Episode
>>> def program(ep):                       # an episode program: yields asks, receives turns
...     turn = yield ask(solver_role, "agent0", ep.task)
>>> Runner(engine, SamplingParams(64, 1.0), seed="0/step-3").run([Episode(t) for t in tasks], program)
"""
from selfevo.interaction.episodes import Episode, Turn, rewarded_turns, turns_to_batch
from selfevo.interaction.runner import Ask, Program, Runner, RunStatus, ask, request_seed, run_episodes

__all__ = ["Ask", "Episode", "Program", "RunStatus", "Runner", "Turn", "ask", "request_seed", "rewarded_turns", "run_episodes",
           "turns_to_batch"]
