"""AgentPrune (Zhang et al. 2024, arXiv 2410.02506): agents talk over a pruned spatial-temporal communication
graph, then a decision agent answers. A MAESTRO Table 1 baseline.

* Graph: spatial edges i → j (i < j: what AgentPrune's cycle check keeps of its fully connected graph) carry i's
  reply to j within a round; temporal edges i → j (all n² pairs) carry i's reply of the previous round. Once per
  run (one-shot pruning) ``round(pruning_rate · |edges|)`` edges of each kind are removed, drawn from the run's
  seed: every task runs on the same sparse graph (``info["graph"]``; metrics ``spatial_edges``, ``temporal_edges``).
* A round runs the agents in topological layers of the spatial graph (one wave per layer); an agent gets the task, its
  spatial predecessors' replies of this round and, from round 2, its temporal predecessors' replies of the last
  round (AgentPrune's ``MathSolver`` wording).
* Final answer: ``aggregate="llm"`` (``FinalRefer``, AgentPrune's GSM8K default): one decision call (``agents[0]``)
  over every agent's last reply; ``"vote"`` (``FinalMajorVote``): their majority vote (ties: the lowest agent; none
  extracted: agent 0's reply, which then has no answer).

Defaults (yanweiyue/AgentPrune ``experiments/run_gsm8k.py``, README commands): 4 agents, 1 round (only spatial
messages), ``pruning_rate`` 0.25, ``FinalRefer``. No temperature is given for their API models: 0.5 as debate.
Not reproduced: *which* edges are pruned. AgentPrune learns edge logits by policy gradient on answer correctness
(the first 10 batches of 4 of the run's queries, with their reference answers; Adam, lr 0.1), prunes the
lowest-scored 25% of the remaining edges every 5 batches and keeps the learned graph for the other queries. That
is training on labelled queries inside the evaluation, which an inference setup must not do (it would read the
references it is scored against); this setup keeps the graph's shape, message pattern, sparsity and decision step,
with a seeded random mask in place of the learned one (nearer the code's ``--mode Random`` graph than to its learned
one). The per-role system prompts and few-shot exemplars (Math Solver, Mathematical Analyst, Programming Expert,
Inspector) are not used: every agent is the same assistant on the benchmark's zero-shot prompt.

Waves: ``rounds`` × (layers of the spatial graph), + 1 with ``aggregate="llm"``. Agent i uses ``agents[i % len]``.
"""
from __future__ import annotations

import random
from dataclasses import asdict, dataclass
from functools import cached_property
from typing import Any

from selfevo.config import opt
from selfevo.interaction import request_seed
from selfevo.setups.base import SETUPS, Episode, Setup, user
from selfevo.tasks import format_prompt

SPATIAL = ("\n\nAt the same time, there are the following responses to the same question for your reference:"
           "\n\n{replies}")
TEMPORAL = ("\n\nIn the last round of dialogue, there were the following responses to the same question for your "
            "reference:\n\n{replies}")
DECISION = ("You are the top decision-maker. You will be given a problem and the answers of other agents. Please find "
            "the most reliable answer based on the analysis and results of other agents. Give reasons for making "
            "decisions.\n\nThe task is:\n\n{query}\n\nAt the same time, the output of other agents is as follows:"
            "\n\n{replies}")


def listed(replies: dict[int, str]) -> str:
    return "".join(f"Agent {a}'s answer to this question is:\n\n{text}\n\n" for a, text in replies.items())


def pruned_graph(n: int, rate: float, seed: int | str) -> dict[str, list[tuple[int, int]]]:
    """AgentPrune's potential edges for ``n`` agents with ``round(rate · count)`` of each kind removed at random
    (seeded): ``spatial`` (i < j, within a round) and ``temporal`` (every i, j, from the previous round)."""
    rng = random.Random(request_seed(seed, "agentprune-graph", 0, 0))
    edges = {"spatial": [(i, j) for i in range(n) for j in range(i + 1, n)],
             "temporal": [(i, j) for i in range(n) for j in range(n)]}
    return {kind: sorted(rng.sample(pairs, len(pairs) - round(rate * len(pairs)))) for kind, pairs in edges.items()}


def layers(n: int, spatial: list[tuple[int, int]]) -> list[list[int]]:
    """The agents in topological layers: an agent's layer is one past its latest spatial predecessor's."""
    level = [0] * n
    for i, j in sorted(spatial):
        level[j] = max(level[j], level[i] + 1)
    return [[a for a in range(n) if level[a] == w] for w in range(max(level) + 1)]


@dataclass
class AgentPruneOptions:
    n_agents: int = opt(4, "agents (agent i uses agents[i % len(agents)])", ge=1)
    rounds: int = opt(1, "dialogue rounds (temporal edges carry the previous round's replies)", ge=1)
    pruning_rate: float = opt(0.25, "share of each kind of edge removed once, at random from the run's seed",
                              ge=0, le=1)
    aggregate: str = opt("llm", "the final answer: llm (FinalRefer: one decision call) or vote (FinalMajorVote)",
                         choices=("llm", "vote"))


@SETUPS.register("agentprune")
class AgentPrune(Setup):
    name = "agentprune"
    Options = AgentPruneOptions
    default_temperature = 0.5

    @cached_property
    def graph(self) -> dict[str, list[tuple[int, int]]]:
        return pruned_graph(self.opts.n_agents, self.opts.pruning_rate, self.seed)

    @cached_property
    def layers(self) -> list[list[int]]:
        return layers(self.opts.n_agents, self.graph["spatial"])

    def max_waves(self) -> int:
        return self.opts.rounds * len(self.layers) + (self.opts.aggregate == "llm")

    def wave_label(self, wave: int) -> str:
        rnd, layer = divmod(wave - 1, len(self.layers))
        return "decision" if rnd == self.opts.rounds else f"round {rnd + 1} layer {layer + 1}"

    def message(self, query: str, a: int, now: dict[int, str], last: dict[int, str]) -> str:
        """Agent ``a``'s prompt: the task, its spatial predecessors' replies (``now``) and temporal ones' (``last``)."""
        spatial = {i: now[i] for i, j in self.graph["spatial"] if j == a}
        temporal = {i: last[i] for i, j in self.graph["temporal"] if j == a and i in last}
        return (query + (SPATIAL.format(replies=listed(spatial)) if spatial else "")
                + (TEMPORAL.format(replies=listed(temporal)) if temporal else ""))

    def solve(self, ep: Episode):
        o, query = self.opts, format_prompt(ep.task)
        last: dict[int, str] = {}
        for rnd in range(1, o.rounds + 1):
            now: dict[int, str] = {}
            for layer in self.layers:
                turns = yield [self.ask(self.agent(a), "agent", user(self.message(query, a, now, last)), round=rnd,
                                        meta={"agent_index": a}) for a in layer]
                now.update({a: t.text for a, t in zip(layer, turns)})
            last = now
        replies = [last[a] for a in range(o.n_agents)]
        if o.aggregate == "llm":
            decision = yield self.ask(self.agent(0), "decision",
                                      user(DECISION.format(query=query, replies=listed(dict(enumerate(replies))))),
                                      round=o.rounds)
            self.finish(ep, decision.text, graph=self.graph)
        else:
            vote = self.vote(ep.task, replies)
            self.finish(ep, replies[vote.index if vote.index is not None else 0], vote=asdict(vote), graph=self.graph)

    def metrics(self, tasks, results) -> dict[str, Any]:
        n = self.opts.n_agents
        return {"spatial_edges": len(self.graph["spatial"]), "spatial_potential": n * (n - 1) // 2,
                "temporal_edges": len(self.graph["temporal"]), "temporal_potential": n * n}
