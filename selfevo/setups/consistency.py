"""Self-consistency: ``k`` independent samples per task, then a majority vote or an aggregation call.

* ``aggregate="vote"`` (default; Wang et al.'s original SC): the answers are extracted with the verifier
  (``verifier(task, response).extracted``) and grouped (:func:`~selfevo.verifiers.voting.majority_vote`:
  normalised text, plus math-verify equivalence for math tasks); the final response is the first sample carrying
  the winning answer (the first sample when none has an answer). Waves: 1.
* ``aggregate="llm"`` (MASLab ``self_consistency``): one more call with MASLab's prompt ``[Task]: ... [Solution i]:
  ... Given the task and all the above solutions, reason over them carefully and provide a final answer to the
  task.``; its output is the final response. Waves: 2.

Default sampling: temperature 0.5 (MASLab). Agents: sample j uses ``agents[j % len(agents)]``; the aggregation
call ``agents[0]``.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from selfevo.config import opt
from selfevo.setups.base import SETUPS, Episode, Setup, aggregation_prompt, user
from selfevo.tasks import format_prompt


@dataclass
class ConsistencyOptions:
    k: int = opt(5, "samples per task", ge=1)
    aggregate: str = opt("vote", "the final answer: vote (majority of the extracted answers) or llm (one aggregation "
                         "call)", choices=("vote", "llm"))


@SETUPS.register("consistency")
class Consistency(Setup):
    name = "consistency"
    Options = ConsistencyOptions
    default_temperature = 0.5

    def max_waves(self) -> int:
        return 1 if self.opts.aggregate == "vote" else 2

    def wave_label(self, wave: int) -> str:
        return "samples" if wave == 1 else "aggregate"

    def solve(self, ep: Episode):
        query = format_prompt(ep.task)
        samples = yield [self.ask(self.agent(j), "sample", user(query)) for j in range(self.opts.k)]
        texts = [s.text for s in samples]
        if self.opts.aggregate == "llm":
            agg = yield self.ask(self.agent(0), "aggregate", user(aggregation_prompt(query, texts)))
            self.finish(ep, agg.text)
        else:
            vote = self.vote(ep.task, texts)
            self.finish(ep, texts[vote.index if vote.index is not None else 0], vote=asdict(vote))

    def metrics(self, tasks, results) -> dict[str, Any]:
        votes = [r.info["vote"] for r in results if "vote" in r.info]
        if not votes:
            return {}
        return {"vote_agreement": sum(v["count"] / self.opts.k for v in votes) / len(votes),
                "no_answer_rate": sum(v["total"] == 0 for v in votes) / len(votes)}

