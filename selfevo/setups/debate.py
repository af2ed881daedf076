"""LLM-Debate (Du et al. 2023; MASLab ``llm_debate``): ``n_agents`` agents × ``rounds`` rounds.

* Round 1: each agent gets ``"{query} Make sure to state your answer at the end of the response."``.
* Round r ≥ 2: each agent's own chat (question, its answers, earlier debate prompts) gets MASLab's debate message
  with the *other* agents' round r−1 answers (``These are the recent/updated opinions from other agents: ... One
  agent response: ```...``` ... can you provide an updated answer? ... The original problem is {query}.``); a lone
  agent is asked to verify and reiterate its answer instead. All agents of all tasks answer in one step.
* Final answer: ``aggregate="vote"`` (default; Du et al.): majority vote over the answers the verifier extracts
  from the last round (the final response is the first agent response carrying the winning answer);
  ``aggregate="llm"`` (MASLab): one aggregation call over the last-round answers.

Steps: ``rounds`` (+1 with ``aggregate="llm"``). Default sampling: temperature 0.5 (MASLab). Agents: debater i
uses ``agents[i % len(agents)]``; the aggregation call ``agents[0]``.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Sequence

from selfevo.setups.base import SETUPS, Setup, SetupError, TaskResult, Turn, aggregation_prompt, user
from selfevo.tasks import format_prompt
from selfevo.types import Task

FIRST = "{query} Make sure to state your answer at the end of the response."
DEBATE_HEAD = "These are the recent/updated opinions from other agents: "
DEBATE_ITEM = "\n\n One agent response: ```{answer}```"
DEBATE_TAIL = ("\n\n Use these opinions carefully as additional advice, can you provide an updated answer? Make sure "
               "to state your answer at the end of the response. \n The original problem is {query}")
ALONE = ("Can you verify that your answer is correct. Please reiterate your answer, making sure to state your answer "
         "at the end of the response.")


def debate_message(query: str, others: Sequence[str]) -> str:
    if not others:
        return ALONE
    query = query.rstrip()
    end = "" if query.endswith((".", "?", "!")) else "."  # MASLab appends "." to the query
    return DEBATE_HEAD + "".join(DEBATE_ITEM.format(answer=a) for a in others) + DEBATE_TAIL.format(query=query) + end


@dataclass
class DebateOptions:
    n_agents: int = 3
    rounds: int = 2
    aggregate: str = "vote"  # vote | llm


@SETUPS.register("debate")
class Debate(Setup):
    name = "debate"
    Options = DebateOptions
    default_temperature = 0.5

    def validate(self) -> None:
        if self.opts.n_agents < 1 or self.opts.rounds < 1:
            raise SetupError(f"debate: n_agents and rounds must be >= 1, got {self.opts.n_agents}, {self.opts.rounds}")
        if self.opts.aggregate not in ("vote", "llm"):
            raise SetupError(f"debate: aggregate must be 'vote' or 'llm', got {self.opts.aggregate!r}")

    def max_steps(self) -> int:
        return self.opts.rounds + (self.opts.aggregate == "llm")

    def solve(self, tasks: Sequence[Task]) -> list[TaskResult]:
        n = self.opts.n_agents
        queries = [format_prompt(t) for t in tasks]
        chats = [[user(FIRST.format(query=q)) for _ in range(n)] for q in queries]
        answers: list[list[str]] = [[""] * n for _ in tasks]
        turns: list[list[Turn]] = [[] for _ in tasks]
        for rnd in range(1, self.opts.rounds + 1):
            if rnd > 1:
                for i, q in enumerate(queries):
                    for a in range(n):
                        others = [answers[i][b] for b in range(n) if b != a]
                        chats[i][a] = chats[i][a] + user(debate_message(q, others))
            requests = [self.request(t, a, chats[i][a], self.agent(a)) for i, t in enumerate(tasks) for a in range(n)]
            comps = self.generate(requests, f"debate round {rnd}")
            for j, c in enumerate(comps):
                i, a = divmod(j, n)
                answers[i][a] = c.text
                chats[i][a] = chats[i][a] + [{"role": "assistant", "content": c.text}]
                turns[i].append(self.turn(c, "debater", slot=a, round=rnd))
        if self.opts.aggregate == "llm":
            comps = self.generate([self.request(t, 0, user(aggregation_prompt(q, answers[i], style="debate")),
                                                self.agent(0)) for i, (t, q) in enumerate(zip(tasks, queries))],
                                  "aggregate")
            return [self.result(t, c.text, turns[i] + [self.turn(c, "aggregate")])
                    for i, (t, c) in enumerate(zip(tasks, comps))]
        results = []
        for i, t in enumerate(tasks):
            vote = self.vote(t, answers[i])
            final = answers[i][vote.index if vote.index is not None else 0]
            results.append(self.result(t, final, turns[i], vote=asdict(vote)))
        return results

    def metrics(self, tasks, results) -> dict[str, Any]:
        votes = [r.info["vote"] for r in results if "vote" in r.info]
        if not votes:
            return {}
        return {"unanimous_rate": sum(v["count"] == self.opts.n_agents for v in votes) / len(votes)}
