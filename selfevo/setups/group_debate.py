"""GroupDebate (Liu et al. 2024, arXiv 2409.14051): the agents debate within groups, the groups exchange summaries
between stages, the final answer is a majority vote. A MAESTRO Table 1 baseline.

``n_agents`` (M) agents in ``n_groups`` (N) groups debate for ``stages`` (S) stages of ``rounds`` (R) rounds each,
T = S·R debate rounds, each agent in its own chat (as in :mod:`~selfevo.setups.debate`):

* groups: contiguous, sizes differing by at most one (M = 4, N = 2: agents 0-1 and 2-3).
* stage 1, round 1 (initial thinking): every agent gets debate's first prompt.
* round r ≥ 2 of a stage (intra-group debate): debate's message with the round r−1 answers of the agent's *group
  peers* only (a group of one: debate's request to verify and reiterate).
* end of every stage but the last (inter-group exchange): one summary per group, written by its first agent from
  the group's last answers (:data:`SUMMARY`); round 1 of the next stage gives every agent all groups' summaries.
* final answer: majority vote over every agent's last answer (debate's rule: the first response carrying the
  winning answer, ties to the lowest agent; no answer extracted: agent 0's response, which then has no answer, and
  the vote's ``total`` says how many answers parsed).

Where each default comes from: the method's structure (M agents, N groups, S stages of R rounds, initial thinking,
intra-group debate, summaries shared between groups, voting) is the paper's (Sec. 3). The paper's text reachable
here does not give a default configuration, its summary prompt or its sampling temperature, so these are
selfevo's: 4 agents in 2 groups of 2 (the smallest split in which groups debate), 2 stages of 2 rounds (T = 4: one
intra-group round per stage after the first answers), the summary prompt below, temperature 0.5 as debate (the
debate prompts are Du et al.'s, as MASLab writes them).

Waves: S·R + S − 1. Agents: agent i uses ``agents[i % len(agents)]``.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Sequence

from selfevo.config import opt
from selfevo.setups.base import SETUPS, Episode, Setup, SetupError, user
from selfevo.setups.debate import FIRST, debate_message
from selfevo.tasks import format_prompt

SUMMARY = ("These are the solutions of the agents of your group to the problem below.\n\nProblem: {query}{solutions}"
           "\n\nSummarize their reasoning briefly: the key steps, where they agree or disagree, and the answer the "
           "group arrives at.")
SUMMARIES = ("These are the summaries of the discussions of all groups: {summaries}\n\n Use these summaries carefully "
             "as additional advice, can you provide an updated answer? Make sure to state your answer at the end of "
             "the response. \n The original problem is {query}")


def groups_of(n_agents: int, n_groups: int) -> list[list[int]]:
    """Agents 0..n−1 in ``n_groups`` contiguous groups whose sizes differ by at most one."""
    return [list(range(g * n_agents // n_groups, (g + 1) * n_agents // n_groups)) for g in range(n_groups)]


def summary_prompt(query: str, solutions: Sequence[str]) -> str:
    return SUMMARY.format(query=query, solutions="".join(f"\n\nSolution {i}: ```{s}```"
                                                         for i, s in enumerate(solutions, 1)))


def summaries_message(query: str, summaries: Sequence[str]) -> str:
    return SUMMARIES.format(query=query.rstrip(), summaries="".join(f"\n\n Group {g} summary: ```{s}```"
                                                                    for g, s in enumerate(summaries, 1)))


@dataclass
class GroupDebateOptions:
    n_agents: int = opt(4, "M: debaters (debater i uses agents[i % len(agents)])", ge=1)
    n_groups: int = opt(2, "N: groups (contiguous, sizes differing by at most one; at most n_agents)", ge=1)
    stages: int = opt(2, "S: stages; the groups exchange summaries between stages", ge=1)
    rounds: int = opt(2, "R: debate rounds per stage", ge=1)


@SETUPS.register("group_debate")
class GroupDebate(Setup):
    name = "group_debate"
    Options = GroupDebateOptions
    default_temperature = 0.5

    def __init__(self, *args, **kwargs):
        """As every setup; then the fact its options cannot say alone: a group has at least one agent."""
        super().__init__(*args, **kwargs)
        if self.opts.n_groups > self.opts.n_agents:
            raise SetupError(f"setup 'group_debate': n_groups {self.opts.n_groups} exceeds n_agents "
                             f"{self.opts.n_agents}")

    def max_waves(self) -> int:
        return self.opts.stages * (self.opts.rounds + 1) - 1

    def wave_label(self, wave: int) -> str:
        stage, index = divmod(wave - 1, self.opts.rounds + 1)
        return f"stage {stage + 1} summaries" if index == self.opts.rounds else f"stage {stage + 1} round {index + 1}"

    def solve(self, ep: Episode):
        o, query = self.opts, format_prompt(ep.task)
        groups = groups_of(o.n_agents, o.n_groups)
        group = {a: g for g, members in enumerate(groups) for a in members}
        chats = [user(FIRST.format(query=query)) for _ in range(o.n_agents)]
        answers, summaries = [""] * o.n_agents, []
        for stage in range(1, o.stages + 1):
            for rnd in range(1, o.rounds + 1):
                if rnd > 1:
                    chats = [chats[a] + user(debate_message(query, [answers[b] for b in groups[group[a]] if b != a]))
                             for a in range(o.n_agents)]
                elif stage > 1:
                    chats = [chat + user(summaries_message(query, summaries)) for chat in chats]
                turns = yield [self.ask(self.agent(a), "debater", chats[a], round=(stage - 1) * o.rounds + rnd,
                                        meta={"group": group[a], "stage": stage}) for a in range(o.n_agents)]
                answers = [t.text for t in turns]
                chats = [chat + [{"role": "assistant", "content": text}] for chat, text in zip(chats, answers)]
            if stage < o.stages:
                turns = yield [self.ask(self.agent(members[0]), "summary",
                                        user(summary_prompt(query, [answers[b] for b in members])),
                                        round=stage * o.rounds, meta={"group": g, "stage": stage})
                               for g, members in enumerate(groups)]
                summaries = [t.text for t in turns]
        vote = self.vote(ep.task, answers)
        self.finish(ep, answers[vote.index if vote.index is not None else 0], vote=asdict(vote), groups=groups)

    def metrics(self, tasks, results) -> dict[str, Any]:
        votes = [r.info["vote"] for r in results]
        if not votes:
            return {}
        return {"unanimous_rate": sum(v["count"] == self.opts.n_agents for v in votes) / len(votes),
                "no_answer_rate": sum(v["total"] == 0 for v in votes) / len(votes)}
