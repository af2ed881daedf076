"""Self-consistency: ``k`` independent samples per task, then a majority vote or an aggregation call.

* ``aggregate="vote"`` (default; Wang et al.'s original SC): the answers are extracted with the verifier
  (``verifier(task, response).extracted``) and grouped (:func:`~selfevo.setups.base.majority_vote`: normalised text,
  plus math-verify equivalence for math tasks); the final response is the first sample carrying the winning
  answer (the first sample when none has an answer). Steps: 1.
* ``aggregate="llm"`` (MASLab ``self_consistency``): one more call with MASLab's prompt ``[Task]: ... [Solution i]:
  ... Given the task and all the above solutions, reason over them carefully and provide a final answer to the
  task.``; its output is the final response. Steps: 2.

Default sampling: temperature 0.5 (MASLab). Agents: sample j uses ``agents[j % len(agents)]``; the aggregation
call ``agents[0]``.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Sequence

from selfevo.setups.base import SETUPS, Setup, SetupError, TaskResult, aggregation_prompt, user
from selfevo.tasks import format_prompt
from selfevo.types import Task


@dataclass
class ConsistencyOptions:
    k: int = 5
    aggregate: str = "vote"  # vote | llm


@SETUPS.register("consistency")
class Consistency(Setup):
    name = "consistency"
    Options = ConsistencyOptions
    default_temperature = 0.5

    def validate(self) -> None:
        if self.opts.k < 1:
            raise SetupError(f"consistency: k must be >= 1, got {self.opts.k}")
        if self.opts.aggregate not in ("vote", "llm"):
            raise SetupError(f"consistency: aggregate must be 'vote' or 'llm', got {self.opts.aggregate!r}")

    def max_steps(self) -> int:
        return 1 if self.opts.aggregate == "vote" else 2

    def solve(self, tasks: Sequence[Task]) -> list[TaskResult]:
        k = self.opts.k
        queries = [format_prompt(t) for t in tasks]
        requests = [self.request(t, j, user(q), self.agent(j)) for t, q in zip(tasks, queries) for j in range(k)]
        completions = self.generate(requests, "samples")
        samples = [completions[i * k:(i + 1) * k] for i in range(len(tasks))]
        turns = [[self.turn(c, "sample", slot=j) for j, c in enumerate(cs)] for cs in samples]
        if self.opts.aggregate == "llm":
            agg = self.generate([self.request(t, 0, user(aggregation_prompt(q, [c.text for c in cs])), self.agent(0))
                                 for t, q, cs in zip(tasks, queries, samples)], "aggregate")
            return [self.result(t, a.text, ts + [self.turn(a, "aggregate")])
                    for t, a, ts in zip(tasks, agg, turns)]
        results = []
        for t, cs, ts in zip(tasks, samples, turns):
            vote = self.vote(t, [c.text for c in cs])
            final = cs[vote.index if vote.index is not None else 0].text
            results.append(self.result(t, final, ts, vote=asdict(vote)))
        return results

    def metrics(self, tasks, results) -> dict[str, Any]:
        votes = [r.info["vote"] for r in results if "vote" in r.info]
        if not votes:
            return {}
        return {"vote_agreement": sum(v["count"] / self.opts.k for v in votes) / len(votes),
                "no_answer_rate": sum(v["total"] == 0 for v in votes) / len(votes)}

