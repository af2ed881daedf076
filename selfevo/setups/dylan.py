"""DyLAN (Liu et al. 2023, arXiv 2310.02170): agents in layers rate each other's replies, an LLM ranker drops
agents, a 2/3 consensus stops early. A MAESTRO Table 1 baseline.

* Layer 1: every agent answers the task. Layer t ≥ 2: every active agent gets the task and the previous layer's
  active replies (its own seeded shuffled order) and gives an updated answer and a 1-5 score of each, ``[[...]]``.
* Team reformation: before layer t ≥ 3, while more than ``top_k`` agents are active, a ranker call (``agents[0]``)
  names the best ``top_k`` replies (``[i, j]``, shown in a seeded order); the others' agents become inactive and
  their replies are no longer passed on. Any other answer is a recorded failure (``ranker_failures``); the pick is
  then a seeded random one (DyLAN's fallback).
* Early stop (DyLAN's consensus): when more than ⌊2/3·active⌋ answers of a layer agree, that answer is final;
  else a majority vote over the last layer (ties: the lowest agent; none extracted: the first active agent's
  response).
* Agent Importance Score (DyLAN's backward pass, ``info["importance"]``): the last layer's agents giving the final
  answer share 1; a reply earns, from each next-layer agent shown it, that agent's normalised score of it (s/5 for
  s in 1..5, 1 above, else 0; unparsed or miscounted scores: equal weights, counted in ``rating_failures``) times
  that agent's importance; an agent's score sums its layers. It is recorded, not used (below).

Defaults (SALT-NLP/DyLAN ``code/MMLU/LLMLP.py``, ``LLM_Neuron.py``, ``prompt_lib.py``, the MATH script
``llmlp_gen_math_listwise_deeper_markov.py``; MASLab ``methods/dylan``): 4 agents, 3 layers, the ranker keeps 2
from the third layer on, temperature 0.2 (the MATH script), DyLAN's math prompts without their few-shot exemplars.
Where selfevo differs: DyLAN asks a layer's agents one by one, checking consensus after each reply; here a layer
is one wave checked whole (the same layers stop, with the same answer). The released activation loop compares
shuffled positions with agent numbers (who runs after ranking is random) and passes on every reply; here the kept
agents run and see only the kept replies (the paper's description; the MATH script). Not reproduced: the team
optimisation that picks, before the evaluation, the role-pool candidates with the highest mean importance on a
trial set (every agent here is the same assistant).

Waves: ``rounds``, + 1 ranker call when ``rounds`` ≥ 3 and ``n_agents`` > ``top_k``; fewer on an early stop. Agent i
uses ``agents[i % len(agents)]``.
"""
from __future__ import annotations

import random
import re
from dataclasses import asdict, dataclass
from typing import Any, Sequence

from selfevo.config import opt
from selfevo.interaction import request_seed
from selfevo.setups.base import SETUPS, Episode, Setup, user
from selfevo.tasks import format_prompt

SYSTEM = ("You are a super-intelligent AI assistant capable of performing tasks more effectively than humans.\n"
          "It's a debate. Explain your reasons at each round thoroughly.")
SHOWN = "{query}\n\nThese are the solutions to the problem from other agents: {replies}"
UPDATE = ("\n\nUsing the reasoning from other agents as additional advice with critical thinking, can you give an "
          "updated answer? Examine your solution and that other agents step by step. Notice that their answers might "
          "be all wrong. Along with the answer, give a score ranged from 1 to 5 to the solutions of other agents. "
          "Put all {n} scores in the form like [[1, 5, 2, ...]].")
RANK = ("\n\nPlease choose the best {k} solutions and think step by step. Put your answer in the form like {form} at "
        "the end of your response.")


def shown(query: str, replies: Sequence[str]) -> str:
    return SHOWN.format(query=query, replies="".join(f"\n\nAgent solution {i}: ```{r}```"
                                                     for i, r in enumerate(replies, 1)))


def last_list(text: str, pattern: str) -> list[int] | None:
    """The integers of the last match of ``pattern`` (one group: comma-separated integers), or None."""
    found = re.findall(pattern, text)
    return [int(x) for x in found[-1].split(",")] if found else None


def rating_weights(text: str, n: int) -> tuple[list[float], bool]:
    """DyLAN's edge weights from a reply's ``[[s1, ..., sn]]`` scores (normalised), and whether they parsed."""
    if n == 0:
        return [], True
    scores = last_list(text, r"\[\[\s*(-?\d+(?:\s*,\s*-?\d+)*)\s*\]\]")
    if scores is None or len(scores) != n:
        return [1 / n] * n, False
    weights = [s / 5 if 0 < s <= 5 else float(s > 5) for s in scores]
    total = sum(weights)
    return ([w / total for w in weights] if total else [1 / n] * n), True


@dataclass
class DyLANOptions:
    n_agents: int = opt(4, "agents per layer (agent i uses agents[i % len(agents)])", ge=1)
    rounds: int = opt(3, "layers (time steps) at most", ge=1)
    top_k: int = opt(2, "agents the ranker keeps, from the third layer on", ge=1)


@SETUPS.register("dylan")
class DyLAN(Setup):
    name = "dylan"
    Options = DyLANOptions
    default_temperature = 0.2

    def max_waves(self) -> int:
        return self.opts.rounds + (self.opts.rounds >= 3 and self.opts.n_agents > self.opts.top_k)

    def shuffled(self, ep: Episode, items: list, layer: int, slot: int) -> list:
        order = list(items)
        random.Random(request_seed(self.seed, "dylan|" + ep.key, layer, slot)).shuffle(order)
        return order

    def rank(self, ep: Episode, query: str, replies: dict[int, str], layer: int):
        """One ranker call over ``replies`` (agent → text): the ``top_k`` agents kept, and whether it parsed."""
        k, order = self.opts.top_k, self.shuffled(ep, sorted(replies), layer, -1)
        form = "[" + ",".join(str(i) for i in range(1, k + 1)) + "]"
        turn = yield self.ask(self.agent(0), "ranker", user(shown(query, [replies[a] for a in order])
                                                           + RANK.format(k=k, form=form)), round=layer)
        picks = last_list(turn.text, r"\[\s*(\d+(?:\s*,\s*\d+)*)\s*\]")
        ok = picks is not None and len(set(picks)) == k == len(picks) and all(1 <= p <= len(order) for p in picks)
        chosen = [order[p - 1] for p in picks] if ok else random.Random(
            request_seed(self.seed, "dylan-rank|" + ep.key, layer, 0)).sample(order, k)
        return sorted(chosen), ok

    def layer_ask(self, a: int, layer: int, query: str, others: list[str]):
        """Agent ``a``'s ask in ``layer``: the task alone (layer 1), else with ``others`` (the replies it is shown)."""
        text = shown(query, others) + UPDATE.format(n=len(others)) if others else query
        return self.ask(self.agent(a), "agent", [{"role": "system", "content": SYSTEM}, *user(text)], round=layer,
                        meta={"agent_index": a})

    def solve(self, ep: Episode):
        o, query = self.opts, format_prompt(ep.task)
        active, replies, layers, ranker_failures = list(range(o.n_agents)), {}, [], 0
        for t in range(1, o.rounds + 1):
            if t >= 3 and len(active) > o.top_k:
                active, ok = yield from self.rank(ep, query, replies, t)
                ranker_failures += not ok
                replies = {a: replies[a] for a in active}
            seen = {a: self.shuffled(ep, sorted(replies), t, a) for a in active}
            turns = yield [self.layer_ask(a, t, query, [replies[b] for b in seen[a]]) for a in active]
            replies = {a: turn.text for a, turn in zip(active, turns)}
            layers.append({a: (seen[a], *rating_weights(replies[a], len(seen[a]))) for a in active})
            vote = self.vote(ep.task, [replies[a] for a in active])
            if vote.count > 2 * len(active) // 3:
                break
        texts = [replies[a] for a in active]
        winners = {active[i] for group in vote.groups if vote.index in group for i in group}
        self.finish(ep, texts[vote.index if vote.index is not None else 0], vote=asdict(vote), layers=len(layers),
                    consensus=vote.count > 2 * len(active) // 3, ranker_failures=ranker_failures,
                    rating_failures=sum(not ok for layer in layers[1:] for _, _, ok in layer.values()),
                    importance=importance(layers, winners, o.n_agents))

    def metrics(self, tasks, results) -> dict[str, Any]:
        if not results:
            return {}
        n = len(results)
        return {"mean_layers": sum(r.info["layers"] for r in results) / n,
                "early_stop_rate": sum(r.info["consensus"] and r.info["layers"] < self.opts.rounds
                                       for r in results) / n,
                "ranker_failures": sum(r.info["ranker_failures"] for r in results),
                "rating_failures": sum(r.info["rating_failures"] for r in results)}


def importance(layers: list[dict[int, tuple[list[int], list[float], bool]]], winners: set[int], n: int) -> list[float]:
    """DyLAN's Agent Importance Score per agent: ``layers[t][a] = (agents shown to a, a's weights of them, parsed)``;
    the last layer's ``winners`` (agents that gave the final answer) share 1, propagated back along the weights."""
    score = {a: 1 / len(winners) if a in winners else 0.0 for a in layers[-1]}
    total = [score.get(a, 0.0) for a in range(n)]
    for t in range(len(layers) - 1, 0, -1):
        score = {a: sum(w * score[b] for b, (seen, weights, _) in layers[t].items()
                        for f, w in zip(seen, weights) if f == a) for a in layers[t - 1]}
        for a, s in score.items():
            total[a] += s
    return total
