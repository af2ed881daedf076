"""LLM-Debate (Du et al. 2023; MASLab ``llm_debate``): ``n_agents`` agents × ``rounds`` rounds.

* Round 1: each agent gets ``"{query} Make sure to state your answer at the end of the response."``.
* Round r ≥ 2: each agent's own chat (question, its answers, earlier debate prompts) gets MASLab's debate message
  with the *other* agents' round r−1 answers (``These are the recent/updated opinions from other agents: ... One
  agent response: ```...``` ... can you provide an updated answer? ... The original problem is {query}.``); a lone
  agent is asked to verify and reiterate its answer instead. All agents of all tasks answer in one wave.
* Final answer: ``aggregate="vote"`` (default; Du et al.): majority vote over the answers the verifier extracts
  from the last round (the final response is the first agent response carrying the winning answer);
  ``aggregate="llm"`` (MASLab): one aggregation call over the last-round answers.

Waves: ``rounds`` (+1 with ``aggregate="llm"``). Default sampling: temperature 0.5 (MASLab). Agents: debater i
uses ``agents[i % len(agents)]``; the aggregation call ``agents[0]``.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Sequence

from selfevo.config import opt
from selfevo.setups.base import SETUPS, Episode, Setup, aggregation_prompt, user
from selfevo.tasks import format_prompt

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
    n_agents: int = opt(3, "debaters (debater i uses agents[i % len(agents)])", ge=1)
    rounds: int = opt(2, "debate rounds", ge=1)
    aggregate: str = opt("vote", "the final answer: vote (majority of the last round's extracted answers) or llm "
                         "(one aggregation call)", choices=("vote", "llm"))


@SETUPS.register("debate")
class Debate(Setup):
    name = "debate"
    Options = DebateOptions
    default_temperature = 0.5

    def max_waves(self) -> int:
        return self.opts.rounds + (self.opts.aggregate == "llm")

    def wave_label(self, wave: int) -> str:
        return f"debate round {wave}" if wave <= self.opts.rounds else "aggregate"

    def solve(self, ep: Episode):
        n, query = self.opts.n_agents, format_prompt(ep.task)
        chats = [user(FIRST.format(query=query)) for _ in range(n)]  # each agent's own chat
        answers = [""] * n
        for rnd in range(1, self.opts.rounds + 1):
            if rnd > 1:
                chats = [chats[a] + user(debate_message(query, answers[:a] + answers[a + 1:])) for a in range(n)]
            turns = yield [self.ask(self.agent(a), "debater", chats[a], round=rnd) for a in range(n)]
            answers = [t.text for t in turns]
            chats = [chat + [{"role": "assistant", "content": text}] for chat, text in zip(chats, answers)]
        if self.opts.aggregate == "llm":
            agg = yield self.ask(self.agent(0), "aggregate", user(aggregation_prompt(query, answers, style="debate")))
            self.finish(ep, agg.text)
        else:
            vote = self.vote(ep.task, answers)
            self.finish(ep, answers[vote.index if vote.index is not None else 0], vote=asdict(vote))

    def metrics(self, tasks, results) -> dict[str, Any]:
        votes = [r.info["vote"] for r in results if "vote" in r.info]
        if not votes:
            return {}
        return {"unanimous_rate": sum(v["count"] == self.opts.n_agents for v in votes) / len(votes)}
